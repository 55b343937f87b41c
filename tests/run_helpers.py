"""Plan and execute a matrix in one call, as `bench` and `matrix` do (benchmarks/cli/run.py), for the tests that
drive a whole run."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks.config.matrix_parse import Matrix
from benchmarks.engines import catalog
from benchmarks.run.execute import execute
from benchmarks.run.plan import build_plan


def run_matrix(matrix: Matrix, run_dir: Path | None = None, progress: bool = False) -> tuple[Path, int]:
    """The run folder and the number of failed units."""
    result = execute(build_plan(matrix, run_dir, progress=progress))
    return result.run_dir, result.failed


def host_everywhere(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    """Every engine of the catalog hosts `spec` ("module:Class") instead, in this process or in its workers."""
    for name, row in list(catalog.ENGINES.items()):
        monkeypatch.setitem(catalog.ENGINES, name, dataclasses.replace(row, implementation=spec))
