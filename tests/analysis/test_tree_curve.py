"""τ at every smaller budget from one tree run (analysis/tree_curve.py), on hand-made records."""
import pytest

from benchmarks.analysis import tree_curve
from tests.analysis.step_records import request


def tree_request(index: int, paths: list[list[int]], batch_index: int | None = None):
    return request(index, [len(p) for p in paths], {"tree_paths": paths, "tree_rows": [9] * len(paths)},
                   method="ddtree", k=0, label="ddtree-b8", batch_index=batch_index)


PROMPTS = [[[1, 2, 5], [], [3]], [[1, 4, 6, 8], [2]], [[1], [1, 2]]]


def test_a_step_accepts_at_a_smaller_budget_the_prefix_of_its_path_within_it():
    assert tree_curve.depths_at([[1, 2, 5], [], [3], [2, 7]], 4) == [2, 0, 1, 1]
    assert tree_curve.depths_at([[1, 2, 5], [2, 7]], 8) == [3, 2]


def test_tau_at_each_budget_pools_the_steps_cut_at_it():
    curve = tree_curve.tree_curve([tree_request(i, p) for i, p in enumerate(PROMPTS)], 8)
    steps = 7
    # accepted nodes within b' per prompt: b' = 1: 1 + 1 + 2; b' = 2: 2 + 2 + 3; b' = 4: 3 + 3 + 3; b' = 8: 4 + 5 + 3
    for b, accepted in ((0, 0), (1, 4), (2, 7), (4, 9), (5, 10), (8, 12)):
        assert curve.at(b).value == pytest.approx(1 + accepted / steps), b
    assert curve.at(8).value == pytest.approx(1 + sum(len(p) for q in PROMPTS for p in q) / steps)  # the run's τ
    assert curve.taus()[0].value == 1.0 and curve.at(4).units == 3
    low, high = curve.at(4).low, curve.at(4).high
    assert low < curve.at(4).value < high
    ratio = curve.ratio(8, 2)
    assert ratio.value == pytest.approx((7 + 12) / (7 + 7)) and ratio.low < ratio.value < ratio.high


def test_a_static_batch_is_one_unit():
    curve = tree_curve.tree_curve([tree_request(i, p, batch_index=i // 2) for i, p in enumerate(PROMPTS)], 8)
    assert curve.at(8).units == 2 and curve.steps == [5.0, 2.0]


@pytest.mark.parametrize("paths, why", [
    ([[2, 1]], "must increase"), ([[1, 9]], "within 1..8"), ([[1, 1]], "must increase")])
def test_paths_that_cannot_be_a_best_first_tree_are_refused(paths, why):
    with pytest.raises(ValueError, match=why):
        tree_curve.tree_curve([tree_request(0, paths)], 8)


def test_paths_that_contradict_the_accept_lengths_are_refused():
    r = request(0, [2], {"tree_paths": [[1]]}, method="ddtree", k=0)
    with pytest.raises(ValueError, match="a path of 2 nodes"):
        tree_curve.tree_curve([r], 8)


def test_the_ladder_doubles_up_to_the_budget():
    assert tree_curve.ladder(64) == [16, 32, 64] and tree_curve.ladder(100) == [16, 32, 64, 100]
    assert tree_curve.ladder(8) == [8]
