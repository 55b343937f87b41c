"""The `tree_budget` key of the draft-tree method ddtree: its cells (a list, or a schedule over batch sizes), its
refusals with the fix, and what it leaves as it was."""
from __future__ import annotations

import dataclasses

import pytest

from benchmarks.config.matrix_expand import expand, identity, matrix_warnings, run_id_for
from benchmarks.config.matrix_parse import ConfigError, parse_matrix
from benchmarks.config.matrix_schema import matrix_of_manifest
from benchmarks.config.pairing import baseline_cell_id
from benchmarks.core.cells import MAX_TREE_BUDGET, TreeBudget
from benchmarks.decide.k_schedules import Schedule

DRAFT = "z-lab/Qwen3-4B-DFlash-b16"
BASE = {"target": "Qwen/Qwen3-4B", "drafts": {"dflash": DRAFT, "ddtree": DRAFT}, "block_size": 16, "engine": "jax",
        "methods": ["baseline", "dflash", "ddtree"], "k": 15, "tree_budget": [16, 64], "datasets": ["humaneval"]}


def test_each_budget_is_a_tree_cell_beside_dflash_and_paired_with_the_baseline():
    m = parse_matrix(BASE)
    cells = expand(m)
    assert [c.label for c in cells] == ["baseline", "dflash-k15", "ddtree-b16", "ddtree-b64"]
    tree = cells[-1]
    assert (tree.k, tree.tree_budget, tree.shape, tree.draft) == (0, 64, TreeBudget(64), DRAFT)
    by_id = {c.cell_id: c for c in cells}
    assert baseline_cell_id(tree, by_id) == cells[0].cell_id
    plain = {**BASE, "methods": ["baseline", "dflash"], "drafts": {"dflash": DRAFT}}
    del plain["tree_budget"]
    assert parse_matrix(plain).tree_budget is None
    assert "tree_budget" not in identity(dataclasses.asdict(parse_matrix(plain)))  # run ids as they were
    assert run_id_for(m) != run_id_for(parse_matrix({**BASE, "tree_budget": [16, 32]}))


def test_a_budget_schedule_gives_each_batch_size_its_budget_and_b1_the_largest():
    m = parse_matrix({**BASE, "methods": ["baseline", "ddtree"], "tree_budget": {1: 0, 4: 32, 16: 0},
                      "batch_size": [1, 4, 16], "num_prompts": 64})
    assert isinstance(m.tree_budget, Schedule)
    assert matrix_of_manifest(dataclasses.asdict(m)).tree_budget == m.tree_budget  # a run's manifest reads it back
    trees = [(c.label, c.batch_size, c.scheduled) for c in expand(m) if c.method == "ddtree"]
    assert trees == [("ddtree-b32", 1, True), ("ddtree-b32", 4, True)]  # none at B = 16, where the budget is 0
    written = parse_matrix({**BASE, "methods": ["baseline", "ddtree"], "tree_budget": [[1, 3, 64], [4, 16, 32]],
                            "batch_size": [1, 4], "num_prompts": 64})
    assert [c.label for c in expand(written) if c.method == "ddtree"] == ["ddtree-b64", "ddtree-b32"]
    short = parse_matrix({**BASE, "methods": ["baseline", "ddtree"], "tree_budget": [[1, 1, 64], [2, 2, 32]],
                          "batch_size": [1, 2, 4], "num_prompts": 64})
    assert matrix_warnings(short) == ["tree_budget: the ranges end at B = 2, so batch_size 4 runs the last range's "
                                      "budget = 32 (the last range holds upwards); add a range to run another budget "
                                      "there"]


@pytest.mark.parametrize("patch, fragment", [
    ({"tree_budget": None}, "method ddtree needs a node budget: add 'tree_budget: 64'"),
    ({"methods": ["baseline", "dflash"]}, "sets the node budget of ddtree, which 'methods' lacks; add ddtree"),
    ({"tree_budget": 0}, f"expected an int in 1..{MAX_TREE_BUDGET}"),
    ({"tree_budget": [64, MAX_TREE_BUDGET + 1]}, f"expected an int in 1..{MAX_TREE_BUDGET}"),
    ({"tree_budget": [64, 64]}, "lists 64 more than once"),
    ({"tree_budget": {2: 64}}, "the schedule: the schedule must start at batch size 1 (give a budget for 1)"),
    ({"tree_budget": {1: 2048}}, f"budget 2048 is above {MAX_TREE_BUDGET}"),
    ({"tree_budget": {1: 0}}, "a budget of 0 at every batch size"),
    ({"k": {"ddtree": 15}}, "'k': unknown method 'ddtree' in the K mapping; allowed: dflash, eagle3, ngram (ddtree "
                            "takes 'tree_budget')"),
    ({"engine": "vllm"}, "'ddtree' runs on no engine of the matrix (vllm); engines that run it: jax; add one to "
                         "'engine', or drop ddtree"),
    ({"drafts": {"dflash": DRAFT}}, "method 'ddtree' needs a draft model"),
])
def test_a_tree_budget_problem_is_one_line_naming_the_fix(patch, fragment):
    raw = {**BASE, **patch}
    if raw["tree_budget"] is None:
        del raw["tree_budget"]
    with pytest.raises(ConfigError) as err:
        parse_matrix(raw, source="m.yaml")
    assert fragment in str(err.value) and str(err.value).startswith("m.yaml: ") and "\n" not in str(err.value)


def test_a_matrix_over_engines_gives_the_trees_to_the_engine_that_runs_them():
    cells = expand(parse_matrix({**BASE, "engine": ["jax", "vllm"]}))
    assert {c.engine for c in cells if c.method == "ddtree"} == {"jax"}
    assert [c.label for c in cells if c.engine == "vllm"] == ["baseline", "dflash-k15"]


def test_the_ddtree_draft_is_checked_as_a_dflash_draft():
    from benchmarks.config.model_checks import draft_problems

    m = parse_matrix(BASE)
    dflash = {"architectures": ["DFlashDraftModel"], "block_size": 16}
    assert draft_problems(m, {"dflash": dflash, "ddtree": dflash}) == []
    [line] = draft_problems(m, {"dflash": dflash, "ddtree": {"architectures": ["Qwen3ForCausalLM"]}})
    assert f"ddtree draft {DRAFT!r} is not a DFlash draft" in line
