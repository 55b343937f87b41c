"""The capacity verdict with the wave as its unit, simulated through the search's own functions (`read_load`,
`replay`) under the wave effects shared machines and servers make: every request of a wave shifted alike (log-normal),
a wave that stalls (probability 0.15, × e^0.5), a slowdown that persists from wave to wave (AR(1), r = 0.8, carried
over every wave the search sends), and waves of unequal spread. In each, the requests' p90 over all waves is the
threshold exactly where a load is "at the threshold". Targets: "meets" there at most 2.5 %, and a capacity above the
truth at most 2.5 %, bisect and sweep; the power at 0.8 × the limit is reported beside each. The tests assert the
settings that meet them; docs/serving.md states those that do not (a drift; a stall in rounds of 7 waves). Seeded;
docs/serving.md quotes `python -m tests.decide.test_capacity_waves` (2,000 runs a setting)."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import ndtr

from benchmarks.decide.capacity import BISECT, SWEEP, Round, Space, grid_of, read_load, replay
from benchmarks.decide.slo import FAILS, MEETS, UNCERTAIN, RequestLatency, Slo

SLO = Slo.of({"p90_tpot_ms": 20.0})
LIMIT, SIGMA, SHARED, Q = 20.0, 0.3, 0.2, 0.9
LEVEL = 0.025


@dataclass
class Host:
    """What one wave of requests meets on the host: a log shift per wave, and the log-sd of its requests' own noise.
    `kind`: shift, stall, drift or spread; `state` carries a drift from wave to wave."""

    kind: str
    rng: np.random.Generator
    state: float = field(default=0.0)

    def wave(self) -> tuple[float, float]:
        own = math.sqrt(SIGMA ** 2 - SHARED ** 2)
        if self.kind == "shift":
            return SHARED * self.rng.standard_normal(), own
        if self.kind == "stall":
            return (0.5 if self.rng.random() < 0.15 else 0.0), SIGMA
        if self.kind == "drift":
            self.state = 0.8 * self.state + math.sqrt(1 - 0.8 ** 2) * self.rng.standard_normal()
            return SHARED * self.state, own
        if self.kind == "spread":
            return 0.0, (0.15 if self.rng.random() < 0.5 else 0.45)
        return 0.0, SIGMA  # none


def below(kind: str, log_x: float) -> float:
    """P(a request's log latency, its p90 at 0, is below log_x) over every wave (the mixture of the waves)."""
    if kind == "stall":
        return 0.85 * float(ndtr(log_x / SIGMA)) + 0.15 * float(ndtr((log_x - 0.5) / SIGMA))
    if kind == "spread":
        return 0.5 * float(ndtr(log_x / 0.15)) + 0.5 * float(ndtr(log_x / 0.45))
    return float(ndtr(log_x / SIGMA))


def p90_offset(kind: str) -> float:
    """The log latency at which the mixture's p90 lies (the requests' medians sit this far below their p90)."""
    return brentq(lambda x: below(kind, x) - Q, -5.0, 5.0)


def round_of(host: Host, load: int, r: int, n: int, p90: float) -> Round:
    """One round of n requests at concurrency `load` (waves of `load` in order), their p90 over every wave `p90`."""
    base = math.log(p90) - p90_offset(host.kind)
    tpot = []
    for _ in range(-(-n // load)):
        shift, own = host.wave()
        tpot += list(np.exp(base + shift + own * host.rng.standard_normal(load)))
    reqs = tuple(RequestLatency(ttft=5.0, tpot=float(t), itl=float(t), e2el=5 + 10 * float(t), n_out=11,
                                wave=(r, i // load)) for i, t in enumerate(tpot[:n]))
    return Round(load, r, reqs, 1.0, 0)


def met(kind: str, n: int, load: int, rounds: int, runs: int, seed: int, p90: float = LIMIT) -> float:
    """How often a load whose p90 is `p90` is read "meets", its rounds pooled as the search pools them."""
    rng = np.random.default_rng(seed)
    space = Space("concurrency", (load,), n, rounds, BISECT)
    hits = 0
    for _ in range(runs):
        host, taken = Host(kind, rng), []
        while True:
            taken.append(round_of(host, load, len(taken), n, p90))
            reading = read_load(space, SLO, taken)
            if reading.more is None:
                break
        hits += reading.verdict == MEETS
    return hits / runs


def above_truth(kind: str, mode: str, runs: int, seed: int, n: int = 40, slope: float = 0.05, top: int = 16,
                truth: int = 8) -> float:
    """How often a search (rounds of n, 2 a load) reports a capacity above the truth on a curve whose p90 crosses
    the threshold between `truth` and `truth` + 1, the host's waves carried over the whole search."""
    rng = np.random.default_rng(seed)
    space = Space("concurrency", grid_of(1, top, 1, "concurrency"), n, 2, mode)
    above = 0
    for _ in range(runs):
        host: Host = Host(kind, rng)
        stored: dict[float, list[Round]] = {}
        while (path := replay(space, SLO, stored)).pending is not None:
            step = path.pending
            p90 = LIMIT * math.exp(slope * (step.load - truth - 0.5))
            stored.setdefault(step.load, []).append(round_of(host, int(step.load), step.round, n, p90))
        above += path.capacity.low is not None and path.capacity.low > truth
    return above / runs


KINDS = ("shift", "stall", "drift", "spread")
LOADS = {"40 requests at C = 8 (5 waves)": (40, 8), "42 at C = 13 (tiny-slo's rounds, 4 waves)": (42, 13),
         "200 at C = 32 (7 waves)": (200, 32)}


@pytest.mark.parametrize("kind", ("shift", "stall", "spread"))
def test_a_load_at_the_threshold_is_seldom_read_met(kind):
    assert met(kind, 40, 8, 2, 300, seed=len(kind)) <= LEVEL + 0.02  # 300 runs: a binomial sd of 0.9 points


def test_two_waves_a_round_are_read_once_pooled_to_four():
    """42 requests at C = 21, every one far beyond the limit: a round of two waves is not read; two rounds pooled
    (four waves) are."""
    space = Space("concurrency", (21,), 42, 2, BISECT)
    host = Host("none", np.random.default_rng(1))
    first = read_load(space, SLO, [round_of(host, 21, 0, 42, 3 * LIMIT)])
    assert first.verdict == UNCERTAIN and first.more == 1 and "not read" in first.judgment.text()
    assert read_load(space, SLO, [*first.rounds, round_of(host, 21, 1, 42, 3 * LIMIT)]).verdict == FAILS


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ("shift", "stall", "spread"))
def test_rounds_of_a_few_waves_keep_their_level(kind):
    """Rounds of 40 at C = 8 and of 42 at C = 13; 200 at C = 32 keeps it only for shifts and spreads (a stall that
    none of a round's 7 waves met passes unseen), and a drift keeps it nowhere (docs/serving.md)."""
    for n, load in ((40, 8), (42, 13)):
        assert met(kind, n, load, 2, 600, seed=load) <= LEVEL + 0.015  # 600 runs: a binomial sd of 0.65 points
    assert above_truth(kind, BISECT, 120, seed=3) <= LEVEL + 0.03
    assert above_truth(kind, SWEEP, 40, seed=3) <= LEVEL + 0.05  # a sweep reads 16 loads a run: fewer runs


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    print("| wave effect | requests, load | 'meets' at the threshold | 'meets' at 0.8 × it | runs |")
    print("|---|---|---|---|---|")
    for kind in KINDS:
        for name, (n, load) in LOADS.items():
            at, power = met(kind, n, load, 2, runs, seed=1), met(kind, n, load, 2, runs // 4, 2, 0.8 * LIMIT)
            print(f"| {kind} | {name} | {100 * at:.1f} % | {100 * power:.0f} % | {runs}, {runs // 4} |", flush=True)
    print("| wave effect | search | capacity above the truth | runs |")
    print("|---|---|---|---|")
    for kind in KINDS:
        for mode in (BISECT, SWEEP):
            print(f"| {kind} | {mode} | {100 * above_truth(kind, mode, runs // 4, seed=4):.1f} % | {runs // 4} |",
                  flush=True)
