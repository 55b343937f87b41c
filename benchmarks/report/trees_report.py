"""report.md's "Draft trees" section, for a run with draft-tree rows: per dataset and batch size, τ and speedup
against the node budget beside AR and DFlash at its best K, with the rows each step verifies per request; then τ at
every smaller budget estimated from the largest budget's run (analysis/tree_curve.py) beside the budgets measured."""
from __future__ import annotations

import math
from collections.abc import Sequence

from benchmarks.analysis.row_records import RowRecords
from benchmarks.analysis.tree_curve import ladder, row_tau, rows_per_step, tree_curve
from benchmarks.core.markdown import fmt, table
from benchmarks.core.metrics import Interval, ratio_bootstrap_t
from benchmarks.core.numbers import is_number
from benchmarks.records.summary_row import SummaryRow
from benchmarks.report.shown import row_speedup

Group = tuple[str, str, float, int]  # (engine, workload, temperature, batch size)


def _group(u: RowRecords) -> Group:
    return u.cell.engine, u.workload, u.cell.temperature, u.cell.batch_size or 1


Pair = tuple[RowRecords, SummaryRow]


def _groups(units: Sequence[RowRecords], rows: Sequence[SummaryRow]) -> dict[Group, list[Pair]]:
    """The offline rows of each (engine, workload, temperature, B) that has a tree row, in the run's order."""
    out: dict[Group, list[Pair]] = {}
    for u, r in zip(units, rows, strict=True):
        if u.level is None and not r.n_errors:
            out.setdefault(_group(u), []).append((u, r))
    return {g: pairs for g, pairs in out.items() if any(u.cell.tree_budget for u, _ in pairs)}


def _shown(pairs: list[Pair]) -> list[Pair]:
    """AR, DFlash at its best K (the largest speedup), and every tree row by budget."""
    ar = [p for p in pairs if not p[0].speculative]
    chains = [p for p in pairs if p[0].cell.method == "dflash"]
    best = [max(chains, key=lambda p: p[1].speedup if is_number(p[1].speedup) else -math.inf)] if chains else []
    trees = sorted((p for p in pairs if p[0].cell.tree_budget), key=lambda p: p[0].cell.tree_budget)
    return ar + best + trees


def budget_table(units: Sequence[RowRecords], rows: Sequence[SummaryRow]) -> str | None:
    """τ and speedup against the budget, beside AR and DFlash at its best K, per engine, dataset and B."""
    lines = []
    for (engine, workload, temperature, batch), pairs in _groups(units, rows).items():
        for u, r in _shown(pairs):
            lines.append([workload, str(batch), f"{temperature:g}", engine, r.label, fmt(row_tau(u, r.tau)),
                          row_speedup(r), fmt(rows_per_step(u), 1), fmt(batch * rows_per_step(u), 0)])
    if not lines:
        return None
    return table(["dataset", "B", "T", "engine", "method", "τ", "speedup [95% CI]", "rows/step per request",
                  "rows/step of the batch"], lines)


def _iv(x: Interval) -> str:
    return f"{x.value:.2f} [{x.low:.2f}, {x.high:.2f}]" if x.has_interval else f"{x.value:.2f}"


def curve_table(units: Sequence[RowRecords], rows: Sequence[SummaryRow]) -> str | None:
    """τ at each budget of the ladder below the largest and at each budget measured, from the largest's accepted
    paths, with its 95 % interval over the prompts (batches), beside τ measured there and whether the interval holds
    it."""
    lines = []
    for (engine, workload, temperature, batch), pairs in _groups(units, rows).items():
        trees = {u.cell.tree_budget: (u, r) for u, r in pairs if u.cell.tree_budget}
        top, _ = trees[max(trees)]
        if not any((q.extra or {}).get("tree_paths") for q in top.reqs):
            continue
        curve = tree_curve(top.reqs, top.cell.tree_budget)
        for b in sorted({*ladder(top.cell.tree_budget), *trees}):
            est = curve.at(b)
            measured = row_tau(trees[b][0], trees[b][1].tau) if b in trees else None
            holds = ("–" if measured is None or not est.has_interval
                     else "yes" if est.low <= measured <= est.high else "no")
            lines.append([workload, str(batch), f"{temperature:g}", engine, f"{b}", _iv(est), fmt(measured), holds])
    if not lines:
        return None
    return table(["dataset", "B", "T", "engine", "budget", "τ from the largest budget's run [95% CI]",
                  "τ measured", "within"], lines)


def ratio_table(units: Sequence[RowRecords], rows: Sequence[SummaryRow]) -> str | None:
    """Greedy groups only: each tree's τ over DFlash's at its best K, paired over the prompts both decoded to the same
    tokens (lossless, so the ratio of their τ is the ratio of their verify steps: Σ chain steps / Σ tree steps), with
    its studentized bootstrap interval over those prompts (`metrics.ratio_bootstrap_t`)."""
    lines = []
    for (engine, workload, temperature, batch), pairs in _groups(units, rows).items():
        chain = [u for u, _ in _shown(pairs) if u.cell.method == "dflash"]
        if temperature or not chain:
            continue
        by_prompt = {q.prompt_sha256: q for q in chain[0].reqs}
        for u, _ in _shown(pairs):
            if not u.cell.tree_budget:
                continue
            paired = [(by_prompt[q.prompt_sha256], q) for q in u.reqs if q.prompt_sha256 in by_prompt
                      and by_prompt[q.prompt_sha256].output_ids == q.output_ids]
            if not paired:
                continue
            ratio = ratio_bootstrap_t([float(len(c.accept_lengths or [])) for c, _ in paired],
                                      [float(len(t.accept_lengths or [])) for _, t in paired])
            lines.append([workload, str(batch), engine, u.cell.label, chain[0].cell.label, _iv(ratio),
                          f"{len(paired)} of {len(u.reqs)}"])
    if not lines:
        return None
    return table(["dataset", "B", "engine", "tree", "chain", "τ(tree) / τ(chain) [95% CI]", "prompts paired"], lines)


def trees_markdown(units: Sequence[RowRecords], rows: Sequence[SummaryRow]) -> str | None:
    """The section's body; None for a run without tree rows."""
    budgets = budget_table(units, rows)
    if budgets is None:
        return None
    parts = ["τ and speedup against the node budget (a tree of b nodes verifies b + 1 rows per request a step: its "
             "root and its nodes), beside AR and DFlash at its best K:", "", budgets]
    ratios = ratio_table(units, rows)
    if ratios:
        parts += ["", "τ of each tree over DFlash's at its best K, greedy, paired over the prompts both decoded to the "
                      "same tokens:", "", ratios]
    curve = curve_table(units, rows)
    if curve:
        parts += ["", "τ at each smaller budget from the largest budget's run: the tree at budget b is the first b "
                      "nodes the builder pops, so each step's accepted path at b is its path's nodes among those b "
                      "(the interval over the prompts at B = 1, the batches above):", "", curve]
    return "\n".join(parts)
