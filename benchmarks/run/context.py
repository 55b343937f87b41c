"""What every group of cells of one run shares (`RunContext`): the plan, the store, how engines are made."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from benchmarks.core.cells import Cell
from benchmarks.core.records import cause
from benchmarks.core.store import RunStore
from benchmarks.engines import Engine
from benchmarks.run.plan import RunPlan
from benchmarks.run.unit_provenance import describe_engine, unit_provenance


@dataclasses.dataclass
class RunContext:
    """What every group of cells of one run shares: the plan, the store (its only writer is this process), and how
    engines are made."""

    plan: RunPlan
    store: RunStore
    make_engine: Callable[[Cell], Engine]

    def provenance(self, cell: Cell, engine: Any = None, failure: BaseException | None = None) -> str:
        """Store what a load of `cell` measures with (the loaded engine's description, or the failure that stopped
        it) and return its id; a remote worker's own machine is its environment."""
        env = getattr(engine, "environment", None) or self.plan.env
        describe = describe_engine(engine) if engine is not None and failure is None else None
        error = cause(failure) if failure is not None else None
        return self.store.write_provenance(unit_provenance(env, cell, self.plan.models, describe, error))
