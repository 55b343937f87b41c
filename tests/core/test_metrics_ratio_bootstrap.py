"""`metrics.ratio_bootstrap_t` against `metrics.rate_interval` on a skewed ratio: τ(4) / τ(15) over 32 prompts whose
acceptance rates differ (Beta(7, 3)), accepted positions chained. Seeded; docs/statistics.md quotes
`python -m tests.core.test_metrics_ratio_bootstrap` (4,000 runs)."""
from __future__ import annotations

import math
import sys

import numpy as np

from benchmarks.core import metrics

PROMPTS, STEPS, K_MAX = 32, 40, 15


def true_tau(k: int) -> float:
    """τ(K) = 1 + Σ_{i ≤ K} E[α^i], α ~ Beta(7, 3)."""
    return 1.0 + sum(math.exp(math.lgamma(7 + i) + math.lgamma(10) - math.lgamma(7) - math.lgamma(10 + i))
                     for i in range(1, k + 1))


def misses(runs: int, seed: int, level: float = 0.95) -> dict[str, tuple[float, float]]:
    """Each interval's share of runs with the true τ(4) / τ(15) below its low end and above its high end."""
    rng = np.random.default_rng(seed)
    truth = true_tau(4) / true_tau(K_MAX)
    out = {"delta": [0, 0], "bootstrap-t": [0, 0]}
    for _ in range(runs):
        alpha = rng.beta(7.0, 3.0, PROMPTS)
        accepted = np.cumprod(rng.random((PROMPTS, STEPS, K_MAX)) < alpha[:, None, None], axis=2).sum(axis=2)
        c4, c15 = ((1 + np.minimum(accepted, k)).sum(axis=1) for k in (4, K_MAX))
        for name, f in (("delta", metrics.rate_interval), ("bootstrap-t", metrics.ratio_bootstrap_t)):
            iv = f(list(c4), list(c15), level)
            out[name][0] += truth < iv.low
            out[name][1] += truth > iv.high
    return {k: (lo / runs, hi / runs) for k, (lo, hi) in out.items()}


def test_the_bootstrap_keeps_the_low_side_the_delta_method_misses():
    got = misses(600, seed=11)
    assert sum(got["bootstrap-t"]) <= 0.05 + 0.02  # 600 runs: a binomial sd of 0.9 points at 5 %
    assert got["bootstrap-t"][0] <= 0.025 + 0.015
    assert got["delta"][0] > got["bootstrap-t"][0]


def test_few_units_fall_back_to_the_delta_method():
    a, b = [16.0, 5.0, 15.0, 5.0, 15.0, 5.0], [12.0, 5.0, 12.0, 5.0, 12.0, 5.0]
    assert metrics.ratio_bootstrap_t(a, b) == metrics.rate_interval(a, b)


def test_the_interval_is_the_same_each_call():
    rng = np.random.default_rng(0)
    a, b = list(rng.random(20) + 1), list(rng.random(20) + 1)
    assert metrics.ratio_bootstrap_t(a, b, 0.99) == metrics.ratio_bootstrap_t(a, b, 0.99)


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    for level in (0.95, 0.975):
        for name, (lo, hi) in misses(runs, seed=12, level=level).items():
            print(f"| {100 * level:g} % | {name} | {100 * lo:.1f} % | {100 * hi:.1f} % | "
                  f"{100 * (1 - lo - hi):.1f} % | {runs} |")
