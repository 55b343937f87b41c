"""A cell as an engine loads it: its model references resolved to files an engine can open."""
from __future__ import annotations

import dataclasses

from benchmarks.config.model_refs import materialize
from benchmarks.core.cells import Cell


def with_model_files(cell: Cell, target: str) -> Cell:
    """The cell with the run's resolved target and its draft as a path an engine can open (a builtin one generated
    once)."""
    return dataclasses.replace(cell, target=target, draft=materialize(cell.draft))
