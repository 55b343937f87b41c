"""A run's manifest read back gives each cell its speculation shape: from the cell itself in a new run; in a run
written before cells had one, from its options (a schedule vLLM took whole) or from the matrix (a JAX schedule)."""
from __future__ import annotations

import dataclasses
import json

from benchmarks.config.matrix_expand import expand
from benchmarks.config.matrix_parse import parse_matrix
from benchmarks.core.cells import LEGACY_SCHEDULE_OPTION, KSchedule
from benchmarks.records.manifest_read import Manifest

DRAFT = "z-lab/Qwen3-4B-DFlash-b16"
MATRIX = {"target": "Qwen/Qwen3-4B", "drafts": {"dflash": DRAFT, "ddtree": DRAFT}, "block_size": 16,
          "engine": ["jax", "vllm"], "methods": ["baseline", "dflash", "ddtree"], "k": {"dflash": {1: 7, 4: 3}},
          "tree_budget": [32], "batch_size": [1, 4], "datasets": ["humaneval"], "num_prompts": 16}


def manifest(cells: dict) -> Manifest:
    matrix = parse_matrix(MATRIX)
    config = json.loads(json.dumps(dataclasses.asdict(matrix), default=str))
    return Manifest.from_json({"config": config, "cells": cells}, "manifest.json")


def test_a_new_runs_cells_read_back_as_they_were_written():
    cells = expand(parse_matrix(MATRIX))
    read = manifest({c.cell_id: json.loads(json.dumps(dataclasses.asdict(c))) for c in cells}).cells
    assert read == {c.cell_id: c for c in cells}
    assert {c.label for c in read.values() if c.tree_budget} == {"ddtree-b32"}


def test_an_old_runs_scheduled_cells_get_their_schedule_back_with_their_ids():
    cells = [c for c in expand(parse_matrix(MATRIX)) if c.method == "dflash"]
    old = {}
    for c in cells:  # as written before shapes: vLLM's schedule among the options, JAX's nowhere but the matrix
        fields = {k: v for k, v in dataclasses.asdict(c).items() if k != "shape"}
        if c.whole_schedule:
            fields["engine_options"] = {LEGACY_SCHEDULE_OPTION: [list(r) for r in c.whole_schedule]}
        old[c.cell_id] = json.loads(json.dumps(fields))
    read = manifest(old).cells
    assert read == {c.cell_id: c for c in cells} and all(cid == c.cell_id for cid, c in read.items())
    jax4 = next(c for c in read.values() if c.engine == "jax" and c.batch_size == 4)
    assert jax4.shape == KSchedule(((1, 3, 7), (4, 4, 3))) and jax4.scheduled and not jax4.whole_schedule
