"""The trend over a probe's waves (`slo.wave_trend`) and where it leaves a "meets" unread, simulated through
`judge_threshold` (seeded; docs/statistics.md, "Capacity: waves in time order", quotes `python -m
tests.decide.test_wave_trend`, 4,000 runs a setting).

Real llama-server probes showed why the rule changed: every round sends its C requests at once, so its opening wave
is prefilled together and slower (mean log TTFT 5.1–5.6 against 4.3–4.9 for the waves after it), its closing wave
drains with fewer requests, and at C = 1 the fixed order of the prompts (their lengths) is a trend of its own; the
trend test then flagged far more than its nominal 5 %, and left a load that met its thresholds many times over
"uncertain". Now the test reads only the full waves between a round's start-up and its drain, and a trend leaves a
"meets" unread only where the fitted drift, added at its slow end, could have turned it."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from benchmarks.core import metrics
from benchmarks.decide import slo
from benchmarks.decide.slo import MEETS, RequestLatency, Threshold, judge_threshold
from tests.decide.test_wave_serial import ar1

Z90 = 1.2815515655446004  # the 90th percentile of a standard normal
SIGMA = 0.3


def slow_start(c: int, n: int, rounds: int, runs: int, seed: int, opening: float = 0.8, limit: float = 1e5
               ) -> tuple[float, float]:
    """Probes of `rounds` rounds of n requests at concurrency c with no drift, each round's opening wave slower by
    e^opening (TTFT, log-sd SIGMA): how often the trend test flags, and how often a "meets" is left unread."""
    rng = np.random.default_rng(seed)
    t = Threshold("ttft", 90, limit)
    flagged = untold = 0
    for _ in range(runs):
        reqs = [RequestLatency(math.exp(4.6 + (opening if i < c else 0.0) + SIGMA * rng.standard_normal()), 1.0,
                               1.0, 1.0, 8, (r, i // c)) for r in range(rounds) for i in range(n)]
        j = judge_threshold(t, reqs, 0.975)
        flagged += j.trend_p is not None and j.trend_p < slo.TREND_ALPHA
        untold += j.drift_untold
    return flagged / runs, untold / runs


def prompt_order(runs: int, seed: int, limit: float, n: int = 18) -> tuple[float, float, float]:
    """n requests at C = 1 whose TTFT rises with the prompts' fixed order (their lengths: 0.03 a prompt in log,
    log-sd 0.1 around it): how often the trend test flags, how often it leaves a "meets" unread, and how often the
    probe reads "meets"."""
    rng = np.random.default_rng(seed)
    t = Threshold("ttft", 50, limit)
    flagged = untold = met = 0
    for _ in range(runs):
        reqs = [RequestLatency(math.exp(4.6 + 0.03 * i + 0.1 * rng.standard_normal()), 1.0, 1.0, 1.0, 8, (0, i))
                for i in range(n)]
        j = judge_threshold(t, reqs)
        flagged += j.trend_p is not None and j.trend_p < slo.TREND_ALPHA
        untold += j.drift_untold
        met += j.verdict == MEETS
    return flagged / runs, untold / runs, met / runs


def slowing(beta: float, c: int, n: int, runs: int, seed: int, limit: float = 20.0) -> float:
    """A host that slows steadily through a probe (its log latency up `beta` a wave) until, at its last wave, the
    load is at the threshold (that wave's p90 the limit): how often the probe reads "meets"."""
    rng = np.random.default_rng(seed)
    t = Threshold("tpot", 90, limit)
    last = -(-n // c) - 1
    base = math.log(limit) - SIGMA * Z90
    met = 0
    for _ in range(runs):
        reqs = [RequestLatency(1.0, math.exp(base + beta * (i // c - last) + SIGMA * rng.standard_normal()), 1.0,
                               1.0, 8, (0, i // c)) for i in range(n)]
        met += judge_threshold(t, reqs, 0.975).verdict == MEETS
    return met / runs


def without_trend(fn, *args):  # type: ignore[no-untyped-def]
    """`fn(*args)` with the trend check off (what the rule would read with no protection against a drift)."""
    kept = slo.TREND_ALPHA
    slo.TREND_ALPHA = -1.0
    try:
        return fn(*args)
    finally:
        slo.TREND_ALPHA = kept


def test_the_serial_factor_of_waves_in_time_order():
    """1 for fewer than four waves, waves alike or waves on a straight line (a trend is the trend test's); waves that
    alternate over many waves read no persistence; else 1 + 2 Σ (1 − l/k) rˡ, r the upper end of the lag-1
    autocorrelation of their departures from their line, (r̂ + 2/k + 0.84/√k) / (1 − 6/k) within [0, 0.95]."""
    assert metrics.serial_design_effect([1.0, 2.0, 3.0]) == 1.0
    assert metrics.serial_design_effect([1.0] * 5) == 1.0
    assert metrics.serial_design_effect([0.1 * i for i in range(9)]) == pytest.approx(1.0)
    assert metrics.serial_design_effect([0.0, 1.0] * 20) == 1.0
    y = np.cumsum(np.random.default_rng(2).standard_normal(30))
    x = np.arange(30) - 14.5
    d = y - y.mean() - (x @ y) / (x @ x) * x
    r = min(max((float(d[1:] @ d[:-1] / (d @ d)) + 2 / 30 + 0.8416212 / math.sqrt(30)) / (1 - 6 / 30), 0.0), 0.95)
    want = 1 + 2 * sum((1 - lag / 30) * r ** lag for lag in range(1, 30))
    assert metrics.serial_design_effect(list(y)) == pytest.approx(want) and 0 < r < 0.95


def test_a_wave_counts_as_at_most_wave_worth_requests():
    """Sixteen waves of 32 requests that agree and sit far within the limit: the interval counts at most
    WAVE_WORTH requests a wave (a stall that none of them met cannot show)."""
    rng = np.random.default_rng(0)
    reqs = [RequestLatency(1.0, float(np.exp(0.3 * rng.standard_normal())), 1.0, 1.0, 8, (0, i // 32))
            for i in range(512)]
    j = judge_threshold(Threshold("tpot", 90, 100.0), reqs)
    assert j.design_effect >= 32 / slo.WAVE_WORTH and j.verdict == MEETS


def test_a_count_short_only_by_its_waves_names_the_requests_it_needs():
    """84 single requests at C = 1 on a host that wanders (AR(1) 0.6), far within the limit: their waves count them as
    fewer than the 42 a p90's upper end needs at 97.5 %, so the probe stays uncertain and says how many requests
    would give one at this design effect; independent requests, requests without waves, or four waves of 21 (too few
    to tell their persistence: more waves, not more requests at that design effect, would tell) say nothing of it."""
    rng = np.random.default_rng(4)
    t = Threshold("tpot", 90, 1e4)
    wander = ar1(84, 0.6, rng)
    reqs = [RequestLatency(1.0, float(np.exp(0.3 * w)), 1.0, 1.0, 8, (i // 42, i % 42)) for i, w in enumerate(wander)]
    j = judge_threshold(t, reqs, 0.975)
    assert j.verdict == slo.UNCERTAIN and math.isinf(j.high) and 84 / j.design_effect < 42
    assert j.short_of == (42, math.ceil(42 * j.design_effect)) and f"about {j.short_of[1]} requests" in j.text()
    alone = judge_threshold(t, [RequestLatency(1.0, r.tpot, 1.0, 1.0, 8) for r in reqs], 0.975)
    assert alone.short_of is None and alone.verdict == MEETS
    few = judge_threshold(t, [RequestLatency(1.0, r.tpot, 1.0, 1.0, 8, (0, i // 21)) for i, r in enumerate(reqs)],
                          0.975)
    assert few.verdict == slo.UNCERTAIN and math.isinf(few.high) and few.short_of is None


def test_transient_waves_are_left_out():
    """A round's opening wave of several requests and its short closing wave are left out; a wave of one request
    opens nothing (C = 1)."""
    by = {(0, 0): [1.0, 1.0], (0, 1): [1.0, 1.0], (0, 2): [1.0, 1.0], (0, 3): [1.0], (1, 0): [1.0, 1.0],
          (1, 1): [1.0, 1.0]}
    assert slo._transients(list(by), by) == {(0, 0), (0, 3), (1, 0)}
    single = {(0, i): [1.0] for i in range(4)}
    assert slo._transients(list(single), single) == set()


def test_a_slow_start_is_no_trend():
    """No drift, each round's opening wave e^0.8 slower: the trend flags at most its nominal 5 % (1,000 runs a
    setting, a binomial sd of 0.7 points), and never leaves far-from-the-limit "meets" unread."""
    for c, n, rounds in ((8, 40, 1), (13, 42, 2), (32, 200, 2)):
        flagged, untold = slow_start(c, n, rounds, 1000, seed=c)
        assert flagged <= slo.TREND_ALPHA + 0.015, (c, n, rounds, flagged)
        assert untold == 0


def test_a_trend_far_from_the_limit_leaves_meets():
    """At C = 1 the prompts' order is a trend the test sees in most runs; with the limit far above, it never leaves
    the load unread (it was left "uncertain" whenever the trend showed), and 36 requests meet a p50 nearly always (a
    line is no persistence: `metrics.serial_design_effect` reads the departures from it; 18 requests, whose
    persistence 18 waves tell poorly, meet it about three times in four)."""
    flagged, untold, met = prompt_order(300, seed=1, limit=1e4, n=36)
    assert flagged > 0.5 and untold == 0 and met >= 0.97


def test_a_host_slowing_through_a_probe_is_not_read_met():
    """A host that slows until its last wave is at the threshold: the trend, added at its slow end, keeps "meets"
    within 2.5 % (600 runs: a binomial sd of 0.6 points); without it a probe of 25 or 50 waves reads "meets" over
    15 % of the time (at 13 waves the serial factor's reading of their persistence alone keeps it near 6 %)."""
    for beta, c, n in ((0.02, 8, 200), (0.01, 4, 200), (0.03, 16, 200)):
        assert slowing(beta, c, n, 600, seed=c) <= 0.025 + 0.015, (beta, c, n)
        assert c > 8 or without_trend(slowing, beta, c, n, 200, c) > 0.15, (beta, c, n)


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    print("| setting | rule | trend flagged (nominal 5 %) | 'meets' left unread | runs |")
    print("|---|---|---|---|---|")
    for c, n, rounds in ((8, 40, 1), (13, 42, 2), (32, 200, 1), (32, 200, 2)):
        flagged, untold = slow_start(c, n, rounds, runs, seed=c)
        print(f"| opening wave × e^0.8, {n} at C = {c}, {rounds} round(s) | now | {100 * flagged:.1f} % | "
              f"{100 * untold:.1f} % | {runs} |", flush=True)
    flagged, untold, _ = prompt_order(runs, 1, 1e4)
    print(f"| 18 at C = 1, the prompts' order a trend, limit far above | now | {100 * flagged:.1f} % | "
          f"{100 * untold:.1f} % | {runs} |")
    print("| host slowing to the threshold at its last wave | 'meets' with the trend check | without it | runs |")
    print("|---|---|---|---|")
    for beta, c, n in ((0.02, 8, 200), (0.01, 4, 200), (0.03, 16, 200), (0.05, 8, 80)):
        print(f"| {beta} a wave, {n} at C = {c} | {100 * slowing(beta, c, n, runs, c):.1f} % | "
              f"{100 * without_trend(slowing, beta, c, n, runs, c):.1f} % | {runs} |", flush=True)
