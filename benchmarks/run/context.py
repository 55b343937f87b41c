"""What every group of cells of one run shares (`RunContext`): the plan, the store, how engines are made, and what the
plan's stages handed over to the units that wait on them (`StageOutput`)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable

from benchmarks.core.cells import Cell
from benchmarks.data.datasets import Workload
from benchmarks.data.prompts import SkippedRows
from benchmarks.engines import Engine
from benchmarks.records.records import cause
from benchmarks.records.store import RunStore
from benchmarks.run.capacity_search import Search, paths
from benchmarks.run.plan import Prompts, RunPlan, Unit
from benchmarks.run.unit_provenance import describe_engine, unit_provenance

if TYPE_CHECKING:
    from benchmarks.engines.server import Server


@dataclasses.dataclass(frozen=True)
class StageOutput:
    """What a stage (`plan.Stage`) hands the units of the workload it feeds: their (measured, warm-up) prompts, the
    rows passed over as too long (None where none were), and which of them were measured on other prompt ids (they
    are measured again)."""

    prompts: Prompts
    skipped: SkippedRows | None = None
    redo: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass
class RunContext:
    """What every group of cells of one run shares: the plan, the store (its only writer is this process), how
    engines are made, and the outputs of the plan's stages by the key of the workload each feeds (None where the
    stage failed). Units read their prompts, and which of them are still to measure, from here."""

    plan: RunPlan
    store: RunStore
    make_engine: Callable[[Cell], Engine]
    staged: dict[str, StageOutput | None] = dataclasses.field(default_factory=dict)

    @property
    def prompts(self) -> dict[str, Prompts]:
        """Each workload's (measured, warm-up) prompts: the plan's, then those its stage handed over."""
        return {**self.plan.prompts, **{key: out.prompts for key, out in self.staged.items() if out}}

    @property
    def skipped(self) -> dict[str, SkippedRows]:
        """The rows passed over as too long (`RunPlan.skipped`), then those of each stage's output."""
        return {**self.plan.skipped, **{key: out.skipped for key, out in self.staged.items() if out and out.skipped}}

    def workloads(self) -> list[Workload]:
        """The plan's workloads that have prompts: not one whose stage has not handed any over (or failed)."""
        prompts = self.prompts
        return [w for w in self.plan.workloads if w.key in prompts]

    def pending(self, cell: Cell) -> list[Unit]:
        """The cell's units still to measure: those the plan found not done, and those a stage found measured on
        other prompt ids; none of a workload without prompts."""
        keys = {w.key for w in self.workloads()}
        redo = {unit for out in self.staged.values() if out for unit in out.redo}
        return [u for u in self.plan.units if u.cell == cell and u.workload_key in keys
                and ((cell.cell_id, u.store_key) not in self.plan.done or (cell.cell_id, u.store_key) in redo)]

    def pending_searches(self, cell: Cell) -> list[Search]:
        """The cell's capacity searches that still ask for a probe (each SLO's path replayed over the stored rounds)."""
        return [s for s in self.plan.searches if s.cell == cell and s.workload.key in self.prompts
                and any(p.pending is not None for p in paths(self.store, s))]

    def provenance(self, cell: Cell, engine: Engine | Server | None = None,
                   failure: BaseException | None = None) -> str:
        """Store what a load of `cell` measures with (the loaded engine's description, or the failure that stopped
        it) and return its id; a remote worker's own machine is its environment."""
        env = getattr(engine, "environment", None) or self.plan.env
        describe = describe_engine(engine) if engine is not None and failure is None else None
        error = cause(failure) if failure is not None else None
        return self.store.write_provenance(unit_provenance(env, cell, self.plan.models, describe, error))
