"""The serial factor's reading of persistence across waves in time order (`metrics.serial_r_upper`), simulated on
stationary AR(1) series: the lag-1 autocorrelation about the series' line is biased down by (2 + 6r)/k with sd about
1/√k, and the upper end of its one-sided 80 % interval lies at or above the true r in at least 80 % of series where
k > 6 waves can tell r at all (at k ≤ 6 it is the most a factor allows). Seeded; docs/statistics.md quotes `python -m
tests.decide.test_wave_serial` (4,000 series a setting)."""
from __future__ import annotations

import math
import sys

import numpy as np

from benchmarks.core import metrics

RS = (0.0, 0.5, 0.8)


def ar1(k: int, r: float, rng: np.random.Generator) -> np.ndarray:
    """k values of a stationary AR(1) at r (unit variance)."""
    y = np.empty(k)
    y[0] = rng.standard_normal()
    for i in range(1, k):
        y[i] = r * y[i - 1] + math.sqrt(1 - r * r) * rng.standard_normal()
    return y


def reading(k: int, r: float, runs: int, seed: int) -> tuple[float, float, float]:
    """Over `runs` series of k at r: the estimate's mean and sd, and how often the upper end covers r."""
    rng = np.random.default_rng(seed)
    est = np.array([metrics.lag1_about_line(list(ar1(k, r, rng))) for _ in range(runs)])
    covered = np.mean([metrics.serial_r_upper(e, k) >= r for e in est])
    return float(est.mean()), float(est.std()), float(covered)


def test_the_estimate_s_bias_and_spread():
    """The estimate's mean within 0.04 of r (1 − 6/k) − 2/k and its sd within 1/√k + 0.01, at 14 to 84 waves (1,000
    series a setting: the mean's Monte-Carlo sd below 0.01)."""
    for k in (14, 42, 84):
        for r in RS:
            mean, sd, _ = reading(k, r, 1000, seed=k)
            assert abs(mean - (r * (1 - 6 / k) - 2 / k)) <= 0.04, (k, r, mean)
            assert sd <= 1 / math.sqrt(k) + 0.01, (k, r, sd)


def test_the_upper_end_covers_r():
    """At least 80 % less 3 Monte-Carlo sd (1,000 series: 0.013) at 7 to 84 waves; the most a factor allows at six
    waves or fewer, and never below 0."""
    for k in (7, 14, 42, 84):
        for r in RS:
            assert reading(k, r, 1000, seed=k)[2] >= 0.8 - 0.04, (k, r)
    assert metrics.serial_r_upper(-0.9, 6) == metrics.SERIAL_R_MAX
    assert metrics.serial_r_upper(-0.9, 84) == 0.0


def test_serial_factor_of_independent_waves_stays_small_with_many():
    """84 independent waves (C = 1, two rounds of 42): the factor's median below 1.3, its 90th percentile below 2."""
    rng = np.random.default_rng(3)
    factors = [metrics.serial_design_effect(list(rng.standard_normal(84))) for _ in range(500)]
    assert np.median(factors) < 1.3 and np.quantile(factors, 0.9) < 2.0


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    print("| waves k | r | estimate's mean | model r (1 − 6/k) − 2/k | sd | 1/√k | upper end ≥ r (nominal ≥ 80 %) "
          "| runs |")
    print("|---|---|---|---|---|---|---|---|")
    for k in (7, 8, 14, 21, 42, 84):
        for r in RS:
            mean, sd, covered = reading(k, r, runs, seed=k)
            print(f"| {k} | {r} | {mean:+.2f} | {r * (1 - 6 / k) - 2 / k:+.2f} | {sd:.2f} | {1 / math.sqrt(k):.2f} "
                  f"| {100 * covered:.1f} % | {runs} |", flush=True)
