"""Batch sizes in the run path, without an engine: each batch size's units are keyed apart in the store (so a run
resumes per B), and a cell of batch size B takes consecutive prompts B at a time through generate_batch, the same
batches for every cell, its warm-up one batch of its size."""
from __future__ import annotations

import dataclasses

from benchmarks.config.matrix_expand import expand
from benchmarks.config.matrix_parse import parse_matrix
from benchmarks.core.engine_io import RequestRecord, SamplingParams
from benchmarks.data.prompts import Prompt, ids_sha256
from benchmarks.records.store import RunStore
from benchmarks.run.groups import batches, run_dataset
from benchmarks.run.plan import units_of, workloads_of

MATRIX = {"target": "Qwen/Qwen3-4B", "drafts": {"dflash": "z-lab/Qwen3-4B-DFlash-b16"}, "block_size": 16,
          "methods": ["baseline", "dflash"], "k": 7, "datasets": ["humaneval"], "engine": "jax"}


def test_each_batch_size_has_its_own_units_and_batch_1_keeps_its_keys(tmp_path):
    plain = parse_matrix(MATRIX)
    m = parse_matrix({**MATRIX, "batch_size": [1, 4]})
    units = units_of(m, expand(m), workloads_of(m))
    keys = [(u.cell.cell_id, u.store_key) for u in units]
    assert len(set(keys)) == len(keys) == 4
    old = [(u.cell.cell_id, u.store_key) for u in units_of(plain, expand(plain), workloads_of(plain))]
    assert [k for u, k in zip(units, keys) if u.cell.batch_size == 1] == old  # batch 1: the same ids and keys
    assert all(u.store_key == "humaneval" for u in units)
    store = RunStore(tmp_path)
    done = next(u for u in units if u.cell.batch_size == 4 and u.cell.method == "baseline")
    store.write_unit_json(done.cell.cell_id, done.store_key, [{"kind": "spec", "cell_id": done.cell.cell_id,
                                                          "label": "baseline", "dataset": "humaneval",
                                                          "num_drafts": 0, "num_draft_tokens": 0,
                                                          "num_accepted_tokens": 0, "accepted_per_pos": []}])
    resumed = [k for k in keys if store.is_done(*k)]
    assert resumed == [(done.cell.cell_id, done.store_key)]


class Batching:
    """An engine that answers each prompt with its own ids and remembers what it was sent, one call at a time."""

    name = "jax"

    def __init__(self) -> None:
        self.calls: list[list[list[int]]] = []

    def generate(self, ids: list[int], params: SamplingParams) -> RequestRecord:
        self.calls.append([ids])
        return RequestRecord(list(ids), 0.01, 0.05)

    def generate_batch(self, prompts: list[list[int]], params: SamplingParams) -> list[RequestRecord]:
        self.calls.append(prompts)
        return [RequestRecord(list(p), 0.01, 0.05, extra={"batch_size": len(prompts)}) for p in prompts]

    def spec_counters(self) -> None:
        return None


def prompt(i: int) -> Prompt:
    ids = [i, i + 1]
    return Prompt("humaneval", i, f"p{i}", ids, ids_sha256(ids))


def test_cells_take_consecutive_prompts_b_at_a_time_and_warm_up_with_one_batch():
    cells = expand(parse_matrix({**MATRIX, "methods": ["baseline"], "batch_size": [1, 3]}))
    one, three = cells
    measured, warmup = [prompt(i) for i in range(7)], [prompt(100)]
    engines = {c.cell_id: Batching() for c in cells}
    out = run_dataset([(engines[c.cell_id], c) for c in cells], "humaneval", measured, warmup, progress=False)
    assert engines[three.cell_id].calls == [[[100, 101]] * 3, [[0, 1], [1, 2], [2, 3]], [[3, 4], [4, 5], [5, 6]],
                                            [[6, 7]]]
    assert engines[one.cell_id].calls == [[[100, 101]]] + [[p.ids] for p in measured]
    assert [r.batch_index for r in out[three.cell_id]] == [0, 0, 0, 1, 1, 1, 2]
    assert all("batch_index" not in r.to_json() for r in out[one.cell_id])
    assert [r.prompt_index for r in out[three.cell_id]] == list(range(7))
    assert [[p.index for p in b] for b in batches(measured, 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert dataclasses.replace(three, batch_size=1).cell_id == one.cell_id
