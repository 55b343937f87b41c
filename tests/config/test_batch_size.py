"""The batch_size axis: parsed and refused before anything runs, a cell per batch size (so units resume per B), batch
size 1 leaving run ids and cell ids as they were, and the memory check naming the largest batch that fits."""
import dataclasses
import hashlib
import json

import pytest

from benchmarks.config.matrix_expand import expand, run_id_for
from benchmarks.config.matrix_parse import ConfigError, parse_matrix
from benchmarks.config.pairing import baseline_cell_id, families
from benchmarks.core.cells import Cell
from benchmarks.engines.jax import jax_options
from benchmarks.hardware.batch_memory import batch_memory_problem, largest_batch

BASE = {"target": "Qwen/Qwen3-4B", "drafts": {"dflash": "z-lab/Qwen3-4B-DFlash-b16"}, "block_size": 16,
        "methods": ["baseline", "dflash"], "k": 15, "datasets": ["humaneval"], "engine": ["jax", "vllm"]}


def test_batch_size_one_leaves_the_run_id_and_the_cells_as_they_were():
    plain = parse_matrix(BASE)
    for given in (1, [1]):
        m = parse_matrix({**BASE, "batch_size": given})
        assert m.batch_size is None and run_id_for(m) == run_id_for(plain)
    assert [c.cell_id for c in expand(plain)] == [c.cell_id for c in expand(parse_matrix({**BASE, "batch_size": 1}))]
    cell = expand(plain)[0]
    before = {k: v for k, v in dataclasses.asdict(cell).items() if k not in ("batch_size", "weights", "shape")}
    assert cell.cell_id == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:12]
    assert dataclasses.replace(cell, batch_size=4).cell_id != cell.cell_id


def test_each_batch_size_is_a_cell_with_its_baseline_first_and_pairs_at_its_own_size():
    m = parse_matrix({**BASE, "batch_size": [4, 1, 2]})
    assert m.batch_size == [1, 2, 4] and run_id_for(m) != run_id_for(parse_matrix(BASE))
    cells = expand(m)
    assert [(c.engine, c.batch_size, c.label) for c in cells[:6]] == [
        ("jax", b, label) for b in (1, 2, 4) for label in ("baseline", "dflash-k15")]
    assert len({c.cell_id for c in cells}) == len(cells) == 12
    by_id = {c.cell_id: c for c in cells}
    for c in cells:
        if c.method == "dflash":
            base = by_id[baseline_cell_id(c, by_id)]
            assert (base.engine, base.batch_size) == (c.engine, c.batch_size)
    assert len(families(cells)) == 6  # one baseline per engine and batch size
    old = Cell.from_json({k: v for k, v in dataclasses.asdict(cells[1]).items() if k != "batch_size"}, "old")
    assert baseline_cell_id(old, {**by_id, "x": old}) == cells[0].cell_id  # a cell of an older run


@pytest.mark.parametrize("patch, fragment", [
    ({"batch_size": []}, "empty"),
    ({"batch_size": [0]}, "expected an int >= 1"),
    ({"batch_size": [2, 2]}, "more than once"),
    ({"batch_size": [1, 128], "num_prompts": 200}, f"exceeds the jax engine's largest batch, {jax_options.MAX_BATCH}"),
    ({"batch_size": [16]}, "needs at least 16 measured prompts"),
    ({"batch_size": 4, "engine": "vllm-serve"}, "'concurrency', not a static batch"),
    ({"batch_size": 4, "engine_options": {"vllm": {"max_num_seqs": 8}}}, "max_num_seqs: set by 'batch_size'"),
])
def test_batch_size_problems_are_named_before_anything_runs(patch, fragment):
    with pytest.raises(ConfigError, match="'batch_size'|max_num_seqs") as err:
        parse_matrix({**BASE, **patch}, source="m.yaml")
    assert fragment in str(err.value) and str(err.value).startswith("m.yaml: ")


def test_concurrency_on_a_batch_engine_points_at_batch_size():
    with pytest.raises(ConfigError, match="'batch_size'"):
        parse_matrix({**BASE, "concurrency": [1, 4]})


def test_memory_check_names_the_largest_batch_that_fits():
    cfg = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
           "hidden_size": 256, "dtype": "float32"}
    m = parse_matrix({**BASE, "engine": "jax", "methods": ["baseline"], "batch_size": [1, 8]})
    cells = expand(m)
    models = {m.target: {"config": cfg, "weight_bytes": 10 * 2**20}}
    per_request = 2 * 4 * 2 * 64 * 4 * 1024  # K and V, 4 layers, 2 heads of 64, float32, 1024 positions: 4 MiB
    assert largest_batch(10 * 2**20 + 5 * per_request, 10 * 2**20, per_request) == 5
    memory = 10 * 2**20 + 5 * per_request
    problem = batch_memory_problem(cells, models, {"jax": 1024}, memory, "the test's memory")
    assert "the largest batch that fits is 5" in problem and "'batch_size': 8" in problem
    assert batch_memory_problem(cells, models, {"jax": 1024}, memory + 3 * per_request, "x") is None
    assert batch_memory_problem(cells, models, {"jax": 1024}, None, "unknown") is None
