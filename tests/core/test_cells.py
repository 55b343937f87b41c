"""Cells (benchmarks.core.cells): ids that stay stable, the speculation shape, manifests old and new read back."""
from __future__ import annotations

import dataclasses
import json
import pickle

import pytest

from benchmarks.core.cells import (
    LEGACY_SCHEDULE_OPTION,
    MAX_TREE_BUDGET,
    METHODS,
    Cell,
    KSchedule,
    TreeBudget,
    has_batch_one,
)

BASE = dict(engine="vllm", target="/m/qwen3-4b", temperature=0.0, max_new_tokens=128, seed=0)
DFLASH = dict(BASE, method="dflash", draft="/m/d")
SCHEDULE = ((1, 3, 7), (4, 4, 3))

# The ids these cells had before cells carried a shape (a vLLM schedule lay in engine_options then); never change them
GOLDEN = [
    (Cell(**BASE, method="baseline", draft=None, k=0), "5f9002f33d5a"),
    (Cell(**BASE, method="baseline", draft=None, k=0, batch_size=4, weights="w123"), "de7c4eba6bf3"),
    (Cell(**DFLASH, k=15), "2a3c3e349b85"),
    (Cell(**{**DFLASH, "temperature": 0.7}, k=15, engine_options={"enforce_eager": True}), "ccf10f9fae8b"),
    (Cell(**BASE, method="ngram", draft=None, k=4, batch_size=8), "3d4f2786af26"),
    (Cell(**DFLASH, k=3, batch_size=4, engine_options={"enforce_eager": True}, shape=KSchedule(SCHEDULE, whole=True)),
     "af086f868f6a"),
    (Cell(**DFLASH, k=7, shape=KSchedule(((1, 1, 7),), whole=True)), "c8df2848261a"),
    (Cell(**{**DFLASH, "engine": "jax"}, k=3, batch_size=4, shape=KSchedule(SCHEDULE)), "edb0ee6194ec"),
]
TREE = Cell(**{**DFLASH, "engine": "jax", "method": "ddtree"}, k=0, shape=TreeBudget(64))


@pytest.mark.parametrize("cell, golden", GOLDEN, ids=lambda x: x.label if isinstance(x, Cell) else x)
def test_cell_ids_are_the_ones_written_before_shapes(cell, golden):
    assert cell.cell_id == golden
    assert Cell.from_json(json.loads(json.dumps(dataclasses.asdict(cell))), "new") == cell


def test_an_old_manifests_schedule_among_the_options_reads_as_the_shape():
    written = {**DFLASH, "k": 3, "batch_size": 4,
               "engine_options": {"enforce_eager": True, LEGACY_SCHEDULE_OPTION: [list(r) for r in SCHEDULE]}}
    cell = Cell.from_json(written, "old")
    assert cell.engine_options == {"enforce_eager": True} and cell.shape == KSchedule(SCHEDULE, whole=True)
    assert cell.cell_id == "af086f868f6a" and cell.scheduled and cell.whole_schedule == SCHEDULE
    assert Cell.from_json({**DFLASH, "k": 15}, "old") == GOLDEN[2][0]


def test_a_tree_cell_names_its_budget_and_has_an_id_of_its_own():
    assert (TREE.label, TREE.tree_budget, TREE.k, TREE.scheduled) == ("ddtree-b64", 64, 0, False)
    assert [c.label for c, _ in GOLDEN[:3]] == ["baseline", "baseline", "dflash-k15"]
    assert all(c.tree_budget == 0 for c, _ in GOLDEN)
    ids = {TREE.cell_id, dataclasses.replace(TREE, shape=TreeBudget(32)).cell_id,
           dataclasses.replace(TREE, batch_size=4).cell_id}
    assert len(ids) == 3 and TREE.cell_id == dataclasses.replace(TREE, shape=TreeBudget(64, scheduled=True)).cell_id
    assert Cell.from_json(json.loads(json.dumps(dataclasses.asdict(TREE))), "new") == TREE
    assert pickle.loads(pickle.dumps(TREE)) == TREE  # as it travels to a worker process
    assert METHODS[-1] == "ddtree"  # appended: the existing methods' positions (engine seeds) stay


@pytest.mark.parametrize("patch, fragment", [
    ({"method": "ddtree", "k": 0}, "method ddtree needs a tree budget"),
    ({"shape": {"budget": 8, "scheduled": False}}, "method dflash takes no tree budget"),
    ({"method": "ddtree", "k": 0, "shape": {"budget": MAX_TREE_BUDGET + 1, "scheduled": False}}, "budget in 1..1024"),
    ({"method": "ddtree", "k": 3, "shape": {"budget": 8, "scheduled": False}}, "has k 0"),
    ({"shape": {"budget": 8}}, "is not a K schedule {ranges, whole} or a tree budget"),
    ({"shape": {"ranges": [[1, 2]], "whole": True}}, "is not a K schedule"),
    ({"method": "baseline", "shape": {"ranges": [[1, 1, 3]], "whole": True}}, "baseline takes no K schedule"),
])
def test_a_bad_shape_in_a_file_is_named(patch, fragment):
    with pytest.raises(ValueError, match="^m: ") as err:
        Cell.from_json({**DFLASH, "k": 3, **patch}, "m")
    assert fragment in str(err.value)


def test_the_batch_one_cell_of_a_scheduled_cell_is_found_whatever_it_runs():
    one = [Cell(**DFLASH, k=7, shape=KSchedule(((1, 1, 7),))), dataclasses.replace(TREE, shape=TreeBudget(128, True))]
    k3 = Cell(**DFLASH, k=3, batch_size=4, shape=KSchedule(SCHEDULE))
    assert has_batch_one(k3, one) and not has_batch_one(dataclasses.replace(k3, shape=None), one)
    tree = dataclasses.replace(TREE, batch_size=4, shape=TreeBudget(64, scheduled=True))
    assert has_batch_one(tree, one) and not has_batch_one(dataclasses.replace(tree, shape=TreeBudget(64)), one)
    assert has_batch_one(dataclasses.replace(tree, shape=TreeBudget(128)), one)
