""""Slower than the strongest baseline" under a host whose speed moves from cell to cell (a per-cell factor of log-sd
0.02), simulated through `strongest_baselines`, `Strongest.slower` and the paired TPOT speedup on 48 prompts where
three engines' baselines tie: cells run interleaved (the factor falls on every engine alike) keep "slower" within its
2.5 %; cells run apart call a tie slower far more often, which is why the report marks them and states the host shift
that would flip each verdict (`Strongest.flip_shift`). Seeded; docs/statistics.md quotes
`python -m tests.analysis.test_strongest_host` (2,000 runs)."""
from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import numpy as np

from benchmarks.analysis import strongest
from benchmarks.core import metrics

ENGINES, PROMPTS, HOST_SD = ("a", "b", "c"), 48, 0.02


def one_run(rng: np.random.Generator, interleaved: bool) -> tuple[int, int, list[float]]:
    """Three tied baselines: per prompt a shared TPOT (log-sd 0.3) and each request's own noise (log-sd 0.05), each
    cell's TPOTs times its host factor (one factor for all where interleaved). The candidates other than the chosen
    one, how many are called slower, and each one's flip shift."""
    prompt = np.exp(0.3 * rng.standard_normal(PROMPTS))
    shared = HOST_SD * rng.standard_normal()
    cells, reqs = {}, {}
    for e in ENGINES:
        host = math.exp(shared if interleaved else HOST_SD * rng.standard_normal())
        tpot = 10 * prompt * host * np.exp(0.05 * rng.standard_normal(PROMPTS))
        cells[e] = SimpleNamespace(method="baseline", batch_size=1, temperature=0.0)
        reqs[(e, "w")] = {f"p{i}": SimpleNamespace(tpot_ms=float(t), prompt_index=i) for i, t in enumerate(tpot)}
    best = strongest.strongest_baselines(cells, [(e, "w", None) for e in ENGINES], reqs)[("w", 0.0)]
    others = [e for e in ENGINES if e != best.cell_id]
    called, shifts = 0, []
    on = sorted(best.compared_on)
    for e in others:
        s = metrics.paired_speedup([reqs[(best.cell_id, "w")][p].tpot_ms for p in on],
                                   [reqs[(e, "w")][p].tpot_ms for p in on])
        called += bool(best.slower(s))
        shifts.append(best.flip_shift(s) or math.nan)
    return len(others), called, shifts


def slower_rate(runs: int, seed: int, interleaved: bool) -> tuple[float, float]:
    """The share of tied candidates called slower, and the median flip shift of those called slower (NaN: none)."""
    rng = np.random.default_rng(seed)
    total = called = 0
    flips: list[float] = []
    for _ in range(runs):
        n, c, shifts = one_run(rng, interleaved)
        total, called = total + n, called + c
        flips += [x for x in shifts if c and x > 0]
    return called / total, float(np.median(flips)) if flips else math.nan


def test_interleaved_cells_keep_the_level_and_apart_ones_do_not():
    inter, _ = slower_rate(300, seed=1, interleaved=True)
    apart, _ = slower_rate(300, seed=2, interleaved=False)
    assert inter <= 0.025 + 0.015  # 600 comparisons: a binomial sd of 0.6 points
    assert apart > 0.15


def test_the_flip_shift_flips_the_verdict():
    best = strongest.Strongest("a", frozenset(), frozenset({"x"}))
    slow = metrics.Speedup(0.9, 0.85, 0.95, 0.9, 48, 48, 0.001)
    shift = best.flip_shift(slow)
    assert best.slower(slow) and shift == 1 / 0.95 - 1
    undone = metrics.Speedup(0.9 * (1 + shift), 0.85 * (1 + shift), 0.95 * (1 + shift), 0.9, 48, 48, 0.03)
    assert undone.ci_high >= 1 - 1e-12  # the cell's TPOT divided by 1 + shift: its interval reaches 1
    tie = metrics.Speedup(1.0, 0.97, 1.03, 1.0, 48, 48, 0.4)
    assert not best.slower(tie) and abs(best.flip_shift(tie) - 0.03) < 1e-12


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for inter in (True, False):
        rate, flip = slower_rate(runs, seed=3, interleaved=inter)
        print(f"| {'interleaved' if inter else 'apart'} | {100 * rate:.1f} % | {100 * flip:.1f} % | {runs} |")
