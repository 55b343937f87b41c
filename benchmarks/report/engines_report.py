"""report.md's "Engines side by side": for each workload and temperature on which two or more engines measured a
baseline at batch 1, every cell's speedup over its own engine's AR beside its speedup over the strongest baseline
(analysis/strongest.py), with 95 % CIs; a cell shown slower than the strongest baseline is marked so, and one that ran
apart from it (another engine, not interleaved) is marked as such.
Then the engines' AR tokens against each other on the same ids: identical prompts and the first divergence."""
from __future__ import annotations

import math

from benchmarks.analysis.row_records import no_interval
from benchmarks.analysis.side_by_side import AcrossEngines
from benchmarks.analysis.summary import Summary
from benchmarks.core import metrics
from benchmarks.core.markdown import fmt
from benchmarks.report.shown import with_interval


def _with_ci(s: metrics.Speedup | None) -> str:
    if s is None or not s.n or math.isnan(s.geomean):
        return "–"
    return with_interval(s.geomean, s.ci_low, s.ci_high, no_interval(s, "prompts"))


def engines_markdown(s: Summary) -> str | None:
    """The section's Markdown; None when no workload has baselines on two engines."""
    if not s.side_by_side:
        return None
    lines = ["Each engine's AR baseline and methods on the same prompt ids. **over own AR**: speedup over the same "
             "engine's baseline; **over strongest**: over the fastest baseline of the run on this dataset (lowest "
             "geometric-mean AR TPOT), chosen on every third prompt that all its candidates measured and compared on "
             "the rest (so the choice does not favour itself), paired on the same prompts, 95 % CI; **slower** marks "
             "a cell shown slower than that baseline (one-sided p < 0.025 on those other prompts: the choice saw none "
             "of them, so no correction for the candidates); **apart** marks a cell of another engine that did not "
             "run interleaved with it: a change of the host's speed between the two is not seen by the comparison "
             "(run the matrix with `interleave: true` to see it), with the change between the two cells that would "
             "flip its verdict (a host that much slower during a cell shown slower explains it; that much faster "
             "during a cell not shown slower would hide a slowdown).", "",
             "| dataset | T | engine | method | AR TPOT ms | TPOT ms | τ | over own AR | over strongest | |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in s.side_by_side:
        apart = ["apart" + (f": flips at a {100 * c.flip_shift:.1f} % host shift" if c.flip_shift is not None
                            and c.flip_shift > 0 else "")] if c.apart else []
        marks = ["strongest baseline" if c.strongest else "slower" if c.slower else ""] + apart
        mark = ", ".join(m for m in marks if m)
        lines.append(f"| {c.workload} | {c.temperature:g} | {c.engine} | {c.label} | {fmt(c.own_ar_tpot_ms, 3)} | "
                     f"{fmt(c.tpot_ms, 3)} | {fmt(c.tau, 2)} | {_with_ci(c.over_own)} | "
                     f"{'1.00' if c.strongest else _with_ci(c.over_strongest)} | {mark} |")
    lines += ["", *identity_lines(s.across_engines)]
    return "\n".join(lines)


def identity_lines(pairs: list[AcrossEngines]) -> list[str]:
    """The engines' greedy AR tokens against each other on the same prompt ids: prompts identical, first
    divergence (token index) where they differ."""
    out = ["| dataset | AR of | against AR of | identical | first divergence |", "|---|---|---|---|---|"]
    out += [f"| {p.workload} | {p.engine_a} | {p.engine_b} | {p.identical}/{p.prompts} | "
            f"{'–' if p.first_divergence is None else p.first_divergence} |" for p in pairs]
    return ["Greedy AR tokens across engines, on the same prompt ids:", "", *out] if pairs else []
