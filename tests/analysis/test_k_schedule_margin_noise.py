"""The K margin (`k_schedule_compute.choose` on a `TauCurve`) under the noise few Ks and a drifting host make,
simulated through the harness's own functions: τ from each prompt's accepted lengths (its own acceptance rate, drawn
from a Beta(7, 3), accepted positions chained), and the steps exact or measured over 3 batches whose host drifts
(AR(1), r = 0.7, in time order). With 2, 3 and 6 Ks priced, a true tie between the two best is "decided" at most
2.5 % of the time, and the margin's interval covers the chosen K's true margin at least 95 % of the time. Seeded;
docs/statistics.md quotes `python -m tests.analysis.test_k_schedule_margin_noise` (2,000 runs a setting)."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from benchmarks.analysis import k_schedule_compute as ksd
from benchmarks.core import metrics
from benchmarks.core.metrics import exact

ALPHA, BETA = 7.0, 3.0  # each prompt's acceptance rate: Beta(7, 3), mean 0.7
K_MAX, PROMPTS, STEPS, BATCHES = 15, 32, 40, 3


def moment(i: int) -> float:
    """E[α^i] for α ~ Beta(ALPHA, BETA): the chance that a step accepts i drafted tokens or more."""
    return math.exp(math.lgamma(ALPHA + i) + math.lgamma(ALPHA + BETA) - math.lgamma(ALPHA)
                    - math.lgamma(ALPHA + BETA + i))


TRUE_TAU = {k: 1.0 + sum(moment(i) for i in range(1, k + 1)) for k in range(K_MAX + 1)}


def truth(ks: tuple[int, ...]) -> dict[int, float]:
    """K -> true step ms: the two largest Ks tie (equal τ / step), the others 15 % behind them."""
    top = ks[-2:]
    rate = {k: (1.0 if k in top else 0.85) for k in ks}
    return {k: 10.0 * TRUE_TAU[k] / rate[k] for k in ks}


def tau_curve(rng: np.random.Generator) -> ksd.TauCurve:
    """One run's τ: per prompt, the tokens its steps commit at each K (1 + accepted tokens, at most K)."""
    alpha = rng.beta(ALPHA, BETA, PROMPTS)
    accepted = np.cumprod(rng.random((PROMPTS, STEPS, K_MAX)) < alpha[:, None, None], axis=2).sum(axis=2)
    counts = {k: [float(x) for x in (1 + np.minimum(accepted, k)).sum(axis=1)] for k in range(K_MAX + 1)}
    return ksd.TauCurve(counts, [float(STEPS)] * PROMPTS, {})


def drifting(rng: np.random.Generator, n: int, sd: float, r: float) -> np.ndarray:
    """n batches' log noise in time order: AR(1) with correlation r and marginal sd `sd`."""
    x = np.empty(n)
    x[0] = rng.standard_normal()
    for i in range(1, n):
        x[i] = r * x[i - 1] + math.sqrt(1 - r * r) * rng.standard_normal()
    return sd * x


def step_costs(steps: dict[int, float], rng: np.random.Generator, sd: float, r: float) -> ksd.StepCost:
    """Exact steps (sd 0), or each K's measured over BATCHES batches of log-sd `sd` drifting at `r`."""
    if not sd:
        return lambda b, k: exact(steps[k]) if k in steps else None
    got = {k: metrics.mean_interval(list(s * np.exp(drifting(rng, BATCHES, sd, r)))) for k, s in steps.items()}
    return lambda b, k: got.get(k)


def simulate(ks: tuple[int, ...], sd: float, r: float, runs: int, seed: int, ahead: float = 0.0
             ) -> dict[str, float]:
    """How often the margin is decided and how often it covers the chosen K's true margin; `ahead`: the largest K's
    true lead over the next (0: a tie)."""
    rng = np.random.default_rng(seed)
    steps = truth(ks)
    steps[ks[-1]] /= 1 + ahead
    rate = {k: TRUE_TAU[k] / s for k, s in steps.items()}
    decided = covered = 0
    for _ in range(runs):
        tau = tau_curve(rng)
        taus = {k: (tau.at(k) if k else exact(1.0)) for k in ks}
        c = ksd.choose(1, taus, step_costs(steps, rng, sd, r), tau_ratio=tau.ratio)
        assert c is not None
        true = rate[c.best.k] / max(v for k, v in rate.items() if k != c.best.k) - 1
        decided += c.margin.low > 0
        covered += c.margin.low <= true <= c.margin.high
    return {"decided": decided / runs, "covered": covered / runs}


SETTINGS = {  # name -> (Ks priced, steps' log-sd, their batches' serial correlation)
    "2 Ks, exact steps": ((0, 4), 0.0, 0.0),
    "3 Ks, exact steps": ((0, 4, 7), 0.0, 0.0),
    "6 Ks, exact steps": ((0, 1, 2, 3, 4, 7), 0.0, 0.0),
    "2 Ks, 3 batches": ((0, 4), 0.05, 0.0),
    "3 Ks, 3 batches": ((0, 4, 7), 0.05, 0.0),
    "3 Ks, 3 batches AR(1) 0.7": ((0, 4, 7), 0.05, 0.7),
    "6 Ks, 3 batches AR(1) 0.7": ((0, 1, 2, 3, 4, 7), 0.05, 0.7),
}


@pytest.mark.parametrize("name", ["2 Ks, exact steps", "3 Ks, 3 batches AR(1) 0.7"])
def test_a_tie_is_seldom_decided_and_the_margin_covers(name):
    ks, sd, r = SETTINGS[name]
    got = simulate(ks, sd, r, 400, seed=3)
    assert got["decided"] <= 0.025 + 0.02  # 400 runs: a binomial sd of 0.8 points at 2.5 %
    assert got["covered"] >= 0.95 - 0.02


@pytest.mark.heavy
@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_setting_keeps_its_level(name):
    ks, sd, r = SETTINGS[name]
    got = simulate(ks, sd, r, 1000, seed=4)
    assert got["decided"] <= 0.025 + 0.015  # 1,000 runs: a binomial sd of 0.5 points
    assert got["covered"] >= 0.95 - 0.015


def test_a_clear_lead_on_exact_steps_is_decided():
    got = simulate((0, 4, 7), 0.0, 0.0, 200, seed=5, ahead=0.15)
    assert got["decided"] >= 0.8
    assert got["covered"] >= 0.95 - 0.03


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    print("| setting | tie decided | coverage | decided with K 15 % ahead | runs |")
    print("|---|---|---|---|---|")
    for name, (ks, sd, r) in SETTINGS.items():
        tie = simulate(ks, sd, r, runs, seed=7)
        lead = simulate(ks, sd, r, runs, seed=8, ahead=0.15)
        print(f"| {name} | {100 * tie['decided']:.1f} % | {100 * tie['covered']:.1f} % | "
              f"{100 * lead['decided']:.1f} % | {runs} |", flush=True)
