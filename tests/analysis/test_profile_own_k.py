"""The speculation profile counts each step at its own K (`draft_lengths`) and a tree's per depth: a hand-computed
schedule cell, and a seeded simulation whose c_i is within Monte-Carlo error of the truth."""
import math

import numpy as np
import pytest

from benchmarks.analysis import speculation_profile
from benchmarks.core.cells import Cell, KSchedule, TreeBudget
from benchmarks.core.engine_io import SpecCounters
from benchmarks.records.records import ByKind, SpecLine
from tests.analysis.step_records import request


def schedule_cell() -> Cell:
    return Cell("vllm", "t", "dflash", "d", 3, 0.0, 64, 0, batch_size=2,
                shape=KSchedule(((1, 1, 4), (2, 2, 3)), whole=True))


def test_a_schedule_cell_counts_each_step_at_its_own_k():
    """Steps (accepted, drafted): (3, 4), (1, 3), (4, 4), (0, 2), (2, 2). At risk at i = 1..4: 5, 5, 3, 2 steps;
    with ≥ i accepted: 4, 3, 2, 1; with ≥ i − 1 accepted that drafted i: 5, 4, 2, 2."""
    lines = ByKind(requests=[request(0, [3, 1, 4], {"draft_lengths": [4, 3, 4]}),
                             request(1, [0, 2], {"draft_lengths": [2, 2]})])
    p = speculation_profile.profile(("c", "humaneval", None), schedule_cell(), lines)
    assert p is not None and p.requests is not None
    s = p.requests
    assert s.marginal == pytest.approx([4 / 5, 3 / 5, 2 / 3, 1 / 2])
    assert s.conditional == pytest.approx([4 / 5, 3 / 4, 1.0, 1 / 2])
    assert s.drafted == pytest.approx([1.0, 1.0, 3 / 5, 2 / 5])
    assert s.tau_per_step == pytest.approx(3.0) and s.shares == pytest.approx([0.8, 0.6, 0.4, 0.2])
    assert all(c.ok for c in s.checks)


def test_records_without_draft_lengths_count_every_step_at_the_largest_k():
    s = speculation_profile.from_requests([request(0, [3, 1, 4]), request(1, [0, 2])], 4)
    assert s is not None and s.drafted == [1.0] * 4
    assert s.marginal == pytest.approx([0.8, 0.6, 0.4, 0.2]) and s.conditional == pytest.approx([0.8, 0.75, 2 / 3, 0.5])


def simulate(rng: np.random.Generator, steps: int, ks: np.ndarray, rate: float) -> list[int]:
    """Accepted drafts of steps that draft ks[j] each, every position accepted at `rate` after the one before."""
    out = []
    for k in ks[:steps]:
        a = 0
        while a < k and rng.random() < rate:
            a += 1
        out.append(a)
    return out


def test_the_conditional_is_within_monte_carlo_error_of_the_truth():
    """Drafts accepted at 0.7 at every position, K drawn from 1..7 step by step: each c_i within 4 standard errors
    of 0.7 and each p_i of 0.7^i. Counted at the largest K, c_4 falls far below 0.7 (the fault this fixes)."""
    rng = np.random.default_rng(20261207)
    requests = []
    for i in range(40):
        ks = rng.integers(1, 8, size=100)
        requests.append(request(i, simulate(rng, 100, ks, 0.7), {"draft_lengths": [int(k) for k in ks]}, k=7))
    s = speculation_profile.from_requests(requests, 7)
    assert s is not None
    for i, (c, p, d) in enumerate(zip(s.conditional, s.marginal, s.drafted), 1):
        at_risk_c = s.steps * d * (0.7 ** (i - 1))  # about the steps in c_i's condition
        assert abs(c - 0.7) <= 4 * math.sqrt(0.21 / at_risk_c), (i, c)
        truth = 0.7 ** i
        assert abs(p - truth) <= 4 * math.sqrt(truth * (1 - truth) / (s.steps * d)), (i, p)
    assert all(ch.ok for ch in s.checks)
    old = speculation_profile.from_requests([request(r.prompt_index, r.accept_lengths or []) for r in requests], 7)
    assert old is not None and old.conditional[3] < 0.6


def tree_cell(budget: int) -> Cell:
    return Cell("jax", "t", "ddtree", "d", 0, 0.0, 64, 0, shape=TreeBudget(budget))


def test_a_tree_cell_is_profiled_per_depth():
    """Accepted depths 0, 2, 5, 1 under budget 8: depths 1..5, every step at risk where no step says its tree's depth;
    where `tree_depths` says it (3, 4, 6, 2), depth i counts the steps whose tree reaches it."""
    lines = ByKind(requests=[request(0, [0, 2], method="ddtree", k=0, label="ddtree-b8"),
                             request(1, [5, 1], method="ddtree", k=0, label="ddtree-b8")])
    p = speculation_profile.profile(("c", "humaneval", None), tree_cell(8), lines)
    assert p is not None and p.requests is not None
    assert p.requests.marginal == pytest.approx([0.75, 0.5, 0.25, 0.25, 0.25])
    assert p.requests.conditional == pytest.approx([0.75, 2 / 3, 0.5, 1.0, 1.0])
    for r, depths in zip(lines.requests, ([3, 4], [6, 2])):
        assert r.extra is None
        object.__setattr__(r, "extra", {"tree_depths": depths})
    p = speculation_profile.profile(("c", "humaneval", None), tree_cell(8), lines)
    assert p is not None and p.requests is not None
    assert p.requests.drafted == pytest.approx([1.0, 1.0, 0.75, 0.5, 0.25, 0.25])
    assert p.requests.marginal == pytest.approx([0.75, 0.5, 1 / 3, 0.5, 1.0, 0.0])
    assert all(c.ok for c in p.requests.checks)


def test_a_tree_cells_depths_run_to_its_longest_possible_path_where_its_counters_say_the_engines_limit():
    """The engine counts a tree's steps at its depth limit (the block less the root: 15 positions): the profile then
    covers depths 1..min(budget, 15), every step at risk, and agrees with the counters."""
    accepted = [[0, 2], [5, 1]]
    counters = SpecCounters.from_accept_lengths([a for r in accepted for a in r], 15)
    spec = SpecLine(cell_id="c", label="ddtree-b8", workload="humaneval", num_drafts=counters.num_drafts,
                    num_draft_tokens=counters.num_draft_tokens, num_accepted_tokens=counters.num_accepted_tokens,
                    accepted_per_pos=counters.accepted_per_pos)
    lines = ByKind(requests=[request(i, a, method="ddtree", k=0, label="ddtree-b8") for i, a in enumerate(accepted)],
                   specs=[spec])
    for budget, depths in ((8, 8), (32, 15)):
        p = speculation_profile.profile(("c", "humaneval", None), tree_cell(budget), lines)
        assert p is not None and p.requests is not None and p.agreement is not None
        assert len(p.requests.marginal) == depths and p.requests.marginal[5:] == [0.0] * (depths - 5)
        assert p.agreement.ok and all(c.ok for c in p.requests.checks)
