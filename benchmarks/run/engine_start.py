"""How the run starts a cell's engine: the factory (in this process or a worker), and the start that, when it fails,
writes an error unit for each unit that was waiting for it (`fail_units`, also for failures of other starts)."""
from __future__ import annotations

import threading
import time
from typing import Callable

from tqdm import tqdm

from benchmarks.config.matrix_parse import Matrix
from benchmarks.config.placement import in_worker
from benchmarks.core.cells import Cell
from benchmarks.engines import Engine, create_engine, implementation
from benchmarks.engines.worker import WorkerEngine
from benchmarks.records.records import Line, cause
from benchmarks.records.store import StoreWriteError
from benchmarks.run.cell_files import with_model_files
from benchmarks.run.context import RunContext

FailedUnit = tuple[Cell, str, Line]  # (the unit's cell, its store key, its error line)


def engine_factory(matrix: Matrix) -> Callable[[Cell], Engine]:
    """How the run makes a cell's engine: in a worker process where `placement.in_worker` says so, else in this one."""
    def make(cell: Cell) -> Engine:
        if not in_worker(matrix, cell.engine):
            return create_engine(cell.engine)

        # Interleaved, a loaded engine waits between its turns: its processes are stopped meanwhile, because vLLM's
        # CPU worker spins on its shared-memory queue for 1 s after each read (SpinCondition). Measured on 2 shared
        # cores, tiny pair, 128 tokens: the idle worker tree took 68-87 % of a core while the other cell decoded, and
        # the busy cell's TPOT was 14.7-17.4 ms (baseline) / 22-26 ms (DFlash); stopped: 0 %, 5.0-5.4 / 11.0 ms.
        # OMP_WAIT_POLICY=PASSIVE did not change it (the spin is vLLM's, not OpenMP's).
        return WorkerEngine(implementation(cell.engine), request_timeout_s=matrix.request_timeout_s,
                            load_timeout_s=matrix.load_timeout_s, pause_idle=matrix.interleave)
    return make


class Loading:
    """A cell's engine made and loaded in a thread of its own, while the run starts others (each in its worker
    process, so the threads only wait); `result()` waits for it. A daemon thread: Ctrl-C is never held up by it."""

    def __init__(self, ctx: RunContext, cell: Cell):
        self.engine: Engine | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._load, args=(ctx, cell), daemon=True)
        self._thread.start()

    def _load(self, ctx: RunContext, cell: Cell) -> None:
        t0 = time.perf_counter()
        try:
            self.engine = ctx.make_engine(cell)
            self.engine.load(with_model_files(cell, ctx.plan.target))
        except BaseException as exc:  # handed to the run's thread by result()
            if self.engine is not None:
                self.engine.close()
            self.engine, self.error = None, exc
        self.seconds = time.perf_counter() - t0

    def result(self) -> tuple[Engine, float]:
        """The loaded engine and its load's seconds; raises what the load raised."""
        self._thread.join()
        if self.error is not None:
            raise self.error
        assert self.engine is not None
        return self.engine, self.seconds


def fail_units(ctx: RunContext, cell: Cell, exc: BaseException, units: list[FailedUnit], line: str) -> int:
    """Write each unit with its error record under the provenance of `cell`'s failure, print `line`; return how many
    units failed."""
    pid = ctx.provenance(cell, failure=exc)
    for owner, key, record in units:
        ctx.store.write_unit(owner.cell_id, key, [record], pid)
    tqdm.write(line)
    return len(units)


def start_engine(ctx: RunContext, cell: Cell, failures: Callable[[BaseException], list[FailedUnit]],
                 what: str = "", say_ready: bool = False, loading: Loading | None = None) -> tuple[Engine, str] | int:
    """Make and load `cell`'s engine (or take it from `loading`, started beside others) and store its provenance:
    (engine, provenance id). When it does not start, each unit of `failures(exc)` (called in the except block) is
    written with its error record: the number of failed units. `what` names the start in the failure's line ("drift
    recheck "); a unit that cannot be written stops the run (StoreWriteError)."""
    engine = None
    try:
        if loading is None:
            engine = ctx.make_engine(cell)
            t0 = time.perf_counter()
            engine.load(with_model_files(cell, ctx.plan.target))
            seconds = time.perf_counter() - t0
        else:
            engine, seconds = loading.result()
        if say_ready:
            tqdm.write(f"[{cell.label}] {cell.engine} engine ready in {seconds:.1f} s"
                       + (" (loaded beside the group's other cells)" if loading else ""))
        return engine, ctx.provenance(cell, engine)
    except BaseException as exc:
        if engine is not None:
            engine.close()
        if isinstance(exc, StoreWriteError) or not isinstance(exc, Exception):
            raise
        return fail_units(ctx, cell, exc, failures(exc), f"[{cell.label}] {what}FAILED to start: {cause(exc)}")
