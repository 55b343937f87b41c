"""The budget to run at each batch size (analysis/budget_schedule.py): the verify priced by its rows B · (b + 1), the
choice by hand on a linear cost, and on a chip's roofline a large budget at B = 1 (below the ridge) that falls as B
grows."""

from benchmarks.analysis import budget_schedule, tree_curve
from benchmarks.analysis.cost_model_compute import Engine
from benchmarks.core import metrics
from benchmarks.core.shapes import SHAPES
from benchmarks.hardware import roofline
from tests.analysis.test_tree_curve import tree_request


def engine() -> Engine:
    qwen = SHAPES["qwen3-4b"]
    layers = qwen.__class__(qwen.vocab_size, qwen.hidden_size, qwen.intermediate_size, 1, qwen.num_heads,
                            qwen.num_kv_heads, qwen.head_dim)
    return Engine(qwen, layers, 5, 15, 16, 1024, 2)


def curve():
    """Eight prompts whose steps accept depths that grow with the budget: paths at node indices 1, 3, 9, 40."""
    paths = [[1, 3, 9, 40], [1, 3, 9], [1, 3], [1]]
    return tree_curve.tree_curve([tree_request(i, paths[i % 4:] + paths[:i % 4]) for i in range(8)], 64)


def test_the_verify_is_priced_by_its_rows():
    step = budget_schedule.tree_step(engine(), 4, 63)
    assert {m.rows for m in step.passes[-1].matmuls} == {budget_schedule.rows(4, 63)} == {256}
    ar = budget_schedule.tree_step(engine(), 4, 0)
    assert len(ar.passes) == 1 and {m.rows for m in ar.passes[0].matmuls} == {4}


def test_the_choice_by_hand_on_a_cost_linear_in_the_rows():
    """τ(b) = 1, 2, 3, 4, 5 at b = 0, 1, 3, 9, 40 (every step the same path); the step 10 ms + 0.05 ms a row:
    throughput ∝ τ(b) / (10 + 0.05 · B · (b + 1)). At B = 1 budget 40 (5 / 12.05) beats 9 (4 / 10.5); at B = 8,
    9 (4 / 14) beats 3 (3 / 11.6) and 40 (5 / 26.4); at B = 64, 3 (3 / 22.8) beats 1 (2 / 16.4) and 9 (4 / 42); at
    B = 512, 1 (2 / 61.2) beats no tree (1 / 35.6) and 3 (3 / 112.4)."""
    c = tree_curve.tree_curve([tree_request(i, [[1, 3, 9, 40]] * 4) for i in range(4)], 64)
    assert [c.at(b).value for b in (0, 1, 3, 9, 40)] == [1, 2, 3, 4, 5]

    def cost(batch, budget):
        return metrics.exact(10 + 0.05 * budget_schedule.rows(batch, budget))
    choices = budget_schedule.derive([1, 8, 64, 512], c, cost, [1, 3, 9, 40, 64])
    assert budget_schedule.schedule(choices) == {1: 40, 8: 9, 64: 3, 512: 1}
    assert [p.k for p in choices[0].points] == [0, 1, 3, 9, 40, 64]


def test_on_a_chip_a_large_budget_is_nearly_free_at_b1_and_falls_with_the_batch():
    chip = roofline.Device("chip", 819e9, 197e12, "a datasheet")
    cost = budget_schedule.chip_cost(engine(), chip)
    one, wide = cost(1, 63).value, cost(64, 63).value
    assert one < 1.25 * cost(1, 0).value  # 64 rows, below the ridge: the verify costs about an AR step
    assert wide > 3 * cost(64, 0).value  # 4096 rows: compute-bound
    choices = budget_schedule.derive([1, 4, 16, 64], curve(), cost, tree_curve.ladder(64, 1))
    budgets = [c.best.k for c in choices]
    assert budgets[0] >= 40 and budgets == sorted(budgets, reverse=True) and budgets[-1] < budgets[0]


def test_a_budget_the_curve_does_not_reach_is_not_priced():
    assert budget_schedule.candidates(curve(), [16, 64, 128]) == [0, 16, 64]
