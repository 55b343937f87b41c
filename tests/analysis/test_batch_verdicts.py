"""At B > 1 a static batch is measured, not checked: its greedy identity and its T > 0 distribution check are the
batch-1 cell's verdicts. A row whose matrix has that cell says so (dist_verdict 'at B=1'); one without it is NOT
CHECKED with the reason, which makes the run exit 4; and the plan promises exactly that, never samples it will not
draw."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from benchmarks.analysis.columns import BATCH_ONE, _dist_verdict
from benchmarks.analysis.row_records import RowRecords
from benchmarks.core.cells import Cell
from benchmarks.records.records import ByKind, RequestLine
from benchmarks.run.plan import RunPlan
from tests.typed_runs import manifest, summary_row
from verification.lossless import unchecked_rows


def cell(method: str, batch: int, t: float) -> Cell:
    return Cell("jax", "t", method, None if method == "baseline" else "d", 0 if method == "baseline" else 7, t, 16, 0,
                batch_size=batch)


def batched_row(t: float, sizes: list[int]) -> RowRecords:
    cells = [cell(m, b, t) for b in sizes for m in ("baseline", "dflash")]
    meth, base = cell("dflash", max(sizes), t), cell("baseline", max(sizes), t)
    req = RequestLine(cell_id=meth.cell_id, label=meth.label, workload="w", engine="jax", method="dflash", k=7,
                      prompt_index=0, prompt_sha256="p0", n_prompt_tokens=9, n_out=16, ttft_ms=10.0, tpot_ms=5.0,
                      decode_s=0.1, output_ids=[0] * 16, accept_lengths=None, batch_index=0)
    m = manifest({"cells": {c.cell_id: dataclasses.asdict(c) for c in cells}})
    return RowRecords((meth.cell_id, "w", None), ByKind(requests=[req]), meth, m, base.cell_id, ByKind(), {}, [None])


@pytest.mark.parametrize("t", [0.0, 0.7])
def test_a_batch_row_with_its_batch_one_cell_takes_that_cells_verdict(t):
    row = batched_row(t, [1, 2])
    assert row.batch_one and row.not_checked() is None
    assert _dist_verdict(row) == (BATCH_ONE if t > 0 else None)


@pytest.mark.parametrize("t, check", [(0.0, "greedy identity"), (0.7, "the distribution check")])
def test_a_batch_row_without_a_batch_one_cell_is_not_checked_with_the_reason(t, check):
    row = batched_row(t, [2])
    why = row.not_checked()
    assert why == (f"{check} is a verdict at batch size 1 only, and the matrix has no batch-1 cell of this method at "
                   f"T={t:g}: add 1 to 'batch_size'")
    if t > 0:
        assert _dist_verdict(row) == "unchecked"
    row = summary_row(method="dflash", not_checked=why)
    assert unchecked_rows([row]) == [row]  # counted: NOT CHECKED, exit 4 unless --allow-unchecked


PLAIN_K = SimpleNamespace(k={})  # a matrix whose Ks are lists, no schedule


def test_the_plan_promises_samples_only_where_they_are_drawn():
    both = [cell(m, b, 0.7) for b in (1, 2) for m in ("baseline", "dflash")]
    lines = RunPlan.sampling_lines(SimpleNamespace(matrix=PLAIN_K, cells=both))  # type: ignore[arg-type]
    assert lines == ["- distribution samples drawn by 2 cell(s) at T > 0 and batch size 1",
                     "- 1 speculative cell(s) at T > 0 and B > 1 draw none: a static batch's distribution verdict is "
                     "its batch-1 cell's (dist_verdict 'at B=1')"]
    batch_2 = [cell(m, 2, 0.7) for m in ("baseline", "dflash")]
    alone = RunPlan.sampling_lines(SimpleNamespace(matrix=PLAIN_K, cells=batch_2))  # type: ignore[arg-type]
    assert len(alone) == 1 and alone[0].startswith("- NOT CHECKED: 1 speculative cell(s) at T > 0 and B > 1")
    assert "the run exits 4 unless --allow-unchecked" in alone[0]
    assert RunPlan.sampling_lines(SimpleNamespace(matrix=PLAIN_K, cells=[cell("dflash", 2, 0.0)])) == []  # type: ignore[arg-type]


def test_validate_warns_of_batch_sizes_without_1():
    from benchmarks.config.matrix_expand import matrix_warnings
    from benchmarks.config.matrix_parse import parse_matrix

    base = {"target": "t", "drafts": {"dflash": "d"}, "block_size": 16, "methods": ["baseline", "dflash"], "k": 7,
            "datasets": ["humaneval"], "engine": "jax", "num_prompts": 16}
    without = matrix_warnings(parse_matrix({**base, "batch_size": [2, 4]}))
    assert len(without) == 1 and "has no 1" in without[0] and "exits 4" in without[0]
    assert matrix_warnings(parse_matrix({**base, "batch_size": [1, 4]})) == []


def test_the_plan_promises_no_tie_pass_at_t_above_0(tmp_path, monkeypatch):
    from benchmarks.config.matrix_parse import parse_matrix
    from benchmarks.run.plan import build_plan

    monkeypatch.setenv("DFLASH_RUNS_DIR", str(tmp_path))
    tiny = {"preset": "tiny", "engine": "jax", "methods": ["baseline", "dflash"], "k": {"dflash": 7},
            "datasets": ["humaneval"], "max_new_tokens": 8, "num_prompts": 2, "warmup_prompts": 0}
    sampled = build_plan(parse_matrix({**tiny, "temperature": 0.7}, "m.yaml"), progress=False).describe()
    assert "- no tie pass (no greedy speculative cell)" in sampled
    greedy = build_plan(parse_matrix({**tiny, "temperature": [0.0, 0.7]}, "m.yaml"), progress=False).describe()
    assert "- greedy divergences scored by 1 baseline engine(s) (tie pass)" in greedy
