"""report.md's "Engines side by side": for each workload and temperature on which two or more engines measured a
baseline at batch 1, every cell's speedup over its own engine's AR beside its speedup over the strongest baseline
(analysis/strongest.py), with 95 % CIs; a cell whose speedup over the strongest baseline is below 1 is marked slower.
Then the engines' AR tokens against each other on the same ids: identical prompts and the first divergence."""
from __future__ import annotations

import math

from benchmarks.analysis.strongest import AcrossEngines
from benchmarks.analysis.summary import Summary
from benchmarks.core import metrics
from benchmarks.core.markdown import fmt


def _with_ci(s: metrics.Speedup | None) -> str:
    if s is None or not s.n or math.isnan(s.geomean):
        return "–"
    ci = "" if math.isnan(s.ci_low) else f" [{s.ci_low:.2f}, {s.ci_high:.2f}]"
    return f"{s.geomean:.2f}{ci}"


def engines_markdown(s: Summary) -> str | None:
    """The section's Markdown; None when no workload has baselines on two engines."""
    if not s.side_by_side:
        return None
    lines = ["Each engine's AR baseline and methods on the same prompt ids. **over own AR**: speedup over the same "
             "engine's baseline; **over strongest**: over the fastest baseline of the run on this dataset (lowest "
             "geometric-mean AR TPOT), paired on the same prompts, 95 % CI; **slower** marks a cell slower than "
             "that baseline.", "",
             "| dataset | T | engine | method | AR TPOT ms | TPOT ms | τ | over own AR | over strongest | |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in s.side_by_side:
        mark = "strongest baseline" if c.strongest else ("slower" if c.slower else "")
        lines.append(f"| {c.workload} | {c.temperature:g} | {c.engine} | {c.label} | {fmt(c.own_ar_tpot_ms, 3)} | "
                     f"{fmt(c.tpot_ms, 3)} | {fmt(c.tau, 2)} | {_with_ci(c.over_own)} | "
                     f"{_with_ci(c.over_strongest)} | {mark} |")
    lines += ["", *identity_lines(s.across_engines)]
    return "\n".join(lines)


def identity_lines(pairs: list[AcrossEngines]) -> list[str]:
    """The engines' greedy AR tokens against each other on the same prompt ids: prompts identical, first
    divergence (token index) where they differ."""
    out = ["| dataset | AR of | against AR of | identical | first divergence |", "|---|---|---|---|---|"]
    out += [f"| {p.workload} | {p.engine_a} | {p.engine_b} | {p.identical}/{p.prompts} | "
            f"{'–' if p.first_divergence is None else p.first_divergence} |" for p in pairs]
    return ["Greedy AR tokens across engines, on the same prompt ids:", "", *out] if pairs else []
