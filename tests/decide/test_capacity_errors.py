"""The capacity search's stated error, simulated through its own functions (`capacity.replay`, `read_load`) on
log-normal request latencies: a load at the threshold read after up to 4 rounds is called "meets" at most 2.5 % of
the time, and neither bisect nor sweep reports a capacity above the truth more often, on steep to nearly flat latency
curves. Seeded; docs/serving.md quotes the figures of `python -m tests.decide.test_capacity_errors` (1,000 each)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.decide.capacity import BISECT, SWEEP, Round, Space, grid_of, read_load, replay
from benchmarks.decide.slo import MEETS, RequestLatency, Slo

SLO = Slo.of({"p90_tpot_ms": 20.0})
LIMIT, SIGMA, TRUTH = 20.0, 0.3, 8  # the threshold, the requests' log-sd, and the true capacity of every curve
Z90 = 1.2815515655446004  # the 90th percentile of a standard normal
CURVES = {"steep": (0.3, 16), "shallow": (0.05, 16), "flat": (0.01, 32), "nearly flat": (0.003, 32)}  # slope, loads
LEVEL = 0.025


def requests(p90: float, n: int, rng: np.random.Generator) -> tuple[RequestLatency, ...]:
    """n requests whose TPOT is log-normal with the given 90th percentile."""
    tpot = p90 / math.exp(Z90 * SIGMA) * np.exp(SIGMA * rng.standard_normal(n))
    return tuple(RequestLatency(ttft=5.0, tpot=float(t), itl=float(t), e2el=5 + 10 * float(t), n_out=11) for t in tpot)


def met_at_the_threshold(rounds: int, runs: int, rng: np.random.Generator, n: int = 40) -> float:
    """How often a load whose true p90 is the threshold is read "meets", rounds pooled as the search pools them."""
    space = Space("concurrency", (8,), n, rounds, BISECT)
    met = 0
    for _ in range(runs):
        taken: list[Round] = []
        while True:
            taken.append(Round(8, len(taken), requests(LIMIT, n, rng), 1.0, 0))
            reading = read_load(space, SLO, taken)
            if reading.more is None:
                break
        met += reading.verdict == MEETS
    return met / runs


def searches(mode: str, curve: str, runs: int, rng: np.random.Generator, n: int = 40) -> tuple[float, float]:
    """How often a search reports a capacity above the truth, and its mean capacity (0 below the range), on a curve
    whose p90 crosses the threshold between TRUTH and TRUTH + 1: p90(load) = LIMIT · exp(slope · (load − TRUTH − ½))."""
    slope, loads = CURVES[curve]
    space = Space("concurrency", grid_of(1, loads, 1, "concurrency"), n, 1, mode)
    above, found = 0, []
    for _ in range(runs):
        stored: dict[float, list[Round]] = {}
        while (path := replay(space, SLO, stored)).pending is not None:
            step = path.pending
            p90 = LIMIT * math.exp(slope * (step.load - TRUTH - 0.5))
            stored.setdefault(step.load, []).append(Round(step.load, step.round, requests(p90, n, rng), 1.0, 0))
        low = path.capacity.low
        above += low is not None and low > TRUTH
        found.append(low or 0)
    return above / runs, float(np.mean(found))


@pytest.mark.parametrize("rounds", [1, 2, 4])
def test_a_load_at_the_threshold_is_called_met_within_the_level_however_many_rounds(rounds):
    assert met_at_the_threshold(rounds, 1000, np.random.default_rng(rounds)) <= LEVEL


@pytest.mark.parametrize("mode", [BISECT, SWEEP])
def test_a_capacity_above_the_truth_stays_within_the_level_on_every_curve(mode):
    rng = np.random.default_rng(len(mode))
    for curve in CURVES:
        above, mean = searches(mode, curve, 150, rng)
        assert above <= LEVEL, (mode, curve, above)
    steep_above, steep_mean = searches(mode, "steep", 100, rng)
    assert steep_above == 0 and steep_mean > TRUTH - 1.5  # where the curve is steep, the search finds the truth


if __name__ == "__main__":  # the figures of docs/serving.md
    gen = np.random.default_rng(0)
    for r in (1, 2, 4):
        print(f"a load at the threshold read 'meets', {r} round(s): {met_at_the_threshold(r, 1000, gen):.2%}")
    for m in (BISECT, SWEEP):
        for c in CURVES:
            share, mean_found = searches(m, c, 1000, gen)
            print(f"{m} on a {c} curve: above the truth {share:.2%}, mean capacity {mean_found:.2f} (truth {TRUTH})")
