"""report.md's account of the prompts and the workloads built on them: the chat template's keyword arguments and the
warnings about the drafts (in the header), then, when the run has workloads (a context axis, turns, local chats or
token ids), each workload's prompts and whether every cell was sent the same ids, and τ, per-position acceptance,
TPOT, the paired speedup and the step time against context length, and the same by turn."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from benchmarks.analysis.summary import PromptSets, Summary, workload_order
from benchmarks.core.markdown import fmt
from benchmarks.core.numbers import is_number
from benchmarks.records.manifest_read import Manifest
from benchmarks.records.summary_row import SummaryRow
from benchmarks.report.shown import ENGINE, METHOD, Shown, render, row_speedup, value

POSITIONS = (1, 2, 4, 8)  # per-position acceptance columns of the context table (report's table has every one)


def template_lines(manifest: Manifest) -> list[str]:
    """The chat template the prompts were rendered with, and the warnings about the drafts (report.md's header)."""
    p = manifest.prompts
    if not p.get("chat_template"):
        return []
    kwargs = ", ".join(f"{k}={v!r}" for k, v in p["chat_template"].items())
    ignored = (f" (the target's template ignores {', '.join(p['template_ignores'])})"
               if p.get("template_ignores") else "")
    return ([f"chat template: {kwargs}{ignored}; template sha256 {p.get('chat_template_sha256')}"]
            + [f"**warning**: {w}" for w in p.get("warnings") or []])


def has_workloads(rows: list[SummaryRow], manifest: Manifest) -> bool:
    forms = {q.get("form") for ps in (manifest.prompts.get("workloads") or {}).values() for q in ps}
    return (any(r.context_tokens is not None or r.turn is not None for r in rows)
            or bool(forms - {"prompt", None}))


def identity_lines(prompt_sets: dict[str, PromptSets]) -> list[str]:
    """Per workload: whether every cell was sent the same prompt ids (the set's hash), else each cell's hash."""
    out = []
    for key, sets in prompt_sets.items():
        hashes, n = sets.hashes, sets.prompts
        if len(set(hashes.values())) == 1:
            out.append(f"- {key}: all {len(hashes)} cells were sent the same {n} prompts (ids hash "
                       f"{next(iter(hashes.values()))})")
        else:
            out.append(f"- {key}: **cells were sent different prompts**, which do not pair: "
                       + ", ".join(f"{cell} {h}" for cell, h in sorted(hashes.items())))
    return out


def construction_lines(manifest: Manifest) -> list[str]:
    """Per workload: its prompts' lengths and how they were made (forms, many-shot context, first answers)."""
    p = manifest.prompts
    out = []
    for key in sorted(p.get("workloads") or {}, key=workload_order):
        ps = p["workloads"][key]
        if not ps:
            continue
        lengths = [q["tokens"] for q in ps]
        how = ", ".join(sorted({q.get("form", "prompt") for q in ps}))
        if any(q.get("shot_rows") for q in ps):
            shots = [len(q["shot_rows"]) for q in ps]
            ctx = [q["context_tokens"] for q in ps]
            how += (f"; many-shot context: {min(shots)}-{max(shots)} other rows with their reference answers, "
                    f"{min(ctx)}-{max(ctx)} tokens")
        if any("first_answer_tokens" in q for q in ps):
            by = p.get("first_answers_by") or {}
            answers = [q["first_answer_tokens"] for q in ps]
            how += (f"; first answers of {min(answers)}-{max(answers)} tokens by {by.get('engine')} "
                    f"{by.get('label')} (greedy, untimed)")
        out.append(f"- {key}: {len(ps)} prompts of {min(lengths)}-{max(lengths)} tokens ({how})")
    return out


Base = Callable[[SummaryRow], SummaryRow | None]  # a row's AR baseline row (same engine, temperature, dataset, level)


def _base(rows: list[SummaryRow]) -> Base:
    base = {(r.engine, r.temperature, r.dataset, r.concurrency): r for r in rows if r.method == "baseline"}
    return lambda r: base.get((r.engine, r.temperature, r.dataset, r.concurrency))


def _order(r: SummaryRow) -> tuple:
    return r.engine, r.temperature, r.label, workload_order(r.dataset)


def _position(i: int) -> Shown:
    def cell(r: SummaryRow) -> str:
        p = json.loads(r.per_position) if r.per_position else []
        return fmt(p[i - 1], 2) if len(p) >= i else "–"
    return Shown(f"p{i}", ("per_position",), cell)


def _of_base(base: Base, name: str) -> Callable[[SummaryRow], Any]:
    """A column of a row's AR baseline row (None without one)."""
    return lambda r: getattr(b, name) if (b := base(r)) is not None else None


def _step_ratio(base: Base) -> Callable[[SummaryRow], str]:
    def ratio(r: SummaryRow) -> str:
        ar = _of_base(base, "step_ms")(r)
        return fmt(r.step_ms / ar if is_number(ar) and ar > 0 and r.step_ms is not None else None)
    return ratio


DATASET = Shown("dataset", ("dataset",), lambda r: workload_order(r.dataset)[0])
CONTEXT, PROMPT = value("context tokens ≥", "context_tokens"), value("prompt tokens (mean)", "prompt_tokens_mean", 0)
TAU, ALPHA, TPOT = value("τ", "tau"), value("α", "acceptance_rate", 3), value("TPOT ms", "tpot_ms_mean")
SPEEDUP = Shown("speedup [95% CI]", ("speedup", "speedup_ci_low", "speedup_ci_high", "speedup_ci_note"), row_speedup)
IDENTICAL = value("identical", "identical_frac", 3)


def context_spec(base: Base) -> tuple[Shown, ...]:
    return (ENGINE, DATASET, METHOD, CONTEXT, PROMPT, TAU, ALPHA, *(_position(i) for i in POSITIONS),
            Shown("TPOT AR ms", ("tpot_ms_mean",), lambda r: fmt(_of_base(base, "tpot_ms_mean")(r))), TPOT, SPEEDUP,
            IDENTICAL)


def step_spec(base: Base) -> tuple[Shown, ...]:
    return (ENGINE, DATASET, METHOD, CONTEXT, PROMPT,
            Shown("AR step ms", ("step_ms",), lambda r: fmt(_of_base(base, "step_ms")(r))), value("step ms", "step_ms"),
            Shown("step / AR step", ("step_ms",), _step_ratio(base)), value("draft ms", "draft_step_ms"),
            value("verify ms", "verify_step_ms"), value("host ms", "host_step_ms"), TAU)


# The tables as declared (what they draw; their baselines come with the rows they render).
CONTEXT_TABLE, STEP_TABLE = context_spec(lambda r: None), step_spec(lambda r: None)
TURN_TABLE: tuple[Shown, ...] = (ENGINE, DATASET, METHOD, value("turn", "turn"), value("n", "n_prompts"), PROMPT, TAU,
                                 ALPHA, TPOT, SPEEDUP, IDENTICAL)


def context_table(rows: list[SummaryRow]) -> str | None:
    """Speculative rows against context length: prompt tokens, τ, α, p_i, TPOT of AR and of the method, speedup."""
    spec = sorted((r for r in rows if r.context_tokens is not None and r.method != "baseline"
                   and (r.concurrency or 1) == 1), key=_order)
    return render(context_spec(_base(rows)), spec) if spec else None


def step_table(rows: list[SummaryRow]) -> str | None:
    """The step time against context length: an AR step, a speculative step and (with the JAX engine's breakdown)
    its draft, verify and host parts."""
    spec = sorted((r for r in rows if r.context_tokens is not None and r.method != "baseline"
                   and is_number(r.step_ms)), key=_order)
    return render(step_spec(_base(rows)), spec) if spec else None


def turn_table(rows: list[SummaryRow]) -> str | None:
    """Rows by turn: prompts, their mean length, τ, α, TPOT, speedup and greedy identity."""
    turns = sorted((r for r in rows if r.turn is not None), key=_order)
    return render(TURN_TABLE, turns) if turns else None


def length_line(manifest: Manifest) -> str | None:
    """How far the longest prompts and their output reach against the target's max_position_embeddings and, where
    the model set records them, the sequence lengths the target and its drafts were trained on."""
    p = manifest.prompts
    longest = max((q["tokens"] for ps in (p.get("workloads") or {}).values() for q in ps), default=None)
    target = manifest.models.get(manifest.target) or {}
    positions = (target.get("config") or {}).get("max_position_embeddings")
    if not longest or not positions:
        return None
    reach = longest + manifest.config.max_new_tokens
    line = (f"The longest prompt has {longest} tokens; with max_new_tokens its sequence reaches {reach} positions, "
            f"{100 * reach / positions:.0f} % of the target's max_position_embeddings ({positions}).")
    trained = p.get("trained_lengths")
    if trained:
        line += (f" The target was trained on {trained['target']}-token sequences and the drafts on at most "
                 f"{trained['drafts']} tokens ({trained['source']}): {reach / trained['target']:.1f}× the "
                 f"target's training length, {reach / trained['drafts']:.1f}× the drafts'.")
    return line


def workload_markdown(s: Summary) -> str | None:
    """The Workloads section of report.md, or None for a run of plain prompts."""
    rows, manifest = s.rows, s.manifest
    if not has_workloads(rows, manifest):
        return None
    parts = ["How each workload's prompts were made (manifest.json `prompts` has every prompt's rows and tokens):",
             "", *construction_lines(manifest), "", "Whether every cell was sent the same prompt ids (the speedup and "
             "the lossless check pair on them):", "", *identity_lines(s.prompt_sets)]
    line = length_line(manifest)
    for title, body in (("Against context length", context_table(rows)),
                        ("Step time against context length", step_table(rows)), ("By turn", turn_table(rows))):
        if body:
            parts += ["", f"### {title}", "", body]
            if title == "Against context length" and line:
                parts += ["", line]
    return "\n".join(parts)
