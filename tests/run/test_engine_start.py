"""The one engine start of the run: a started engine with its provenance, or an error unit for each pending unit
under the failure's provenance, the engine closed either way it fails."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.core.cells import Cell
from benchmarks.records.records import error_line
from benchmarks.records.store import StoreWriteError
from benchmarks.run.engine_start import start_engine

CELL = Cell("jax", "t", "baseline", None, 0, 0.0, 4, 0)


class Engine:
    def __init__(self, fail: BaseException | None = None):
        self.fail, self.loaded, self.closed = fail, None, False

    def load(self, cell: Cell) -> None:
        if self.fail:
            raise self.fail
        self.loaded = cell

    def close(self) -> None:
        self.closed = True


def context(engine: Engine, provenance_fails: bool = False) -> SimpleNamespace:
    written = []

    def provenance(cell, engine=None, failure=None):
        if provenance_fails:
            raise StoreWriteError("disk full")
        return "failed" if failure else "ok"

    store = SimpleNamespace(write_unit=lambda *unit: written.append(unit))
    return SimpleNamespace(make_engine=lambda cell: engine, plan=SimpleNamespace(target="/models/t"),
                           provenance=provenance, store=store, written=written)


def failures(exc):
    return [(CELL, key, error_line(CELL, key, exc).to_json()) for key in ("a", "b@recheck")]


def test_a_started_engine_comes_with_its_provenance_and_its_model_files():
    engine = Engine()
    assert start_engine(context(engine), CELL, failures) == (engine, "ok")
    assert engine.loaded.target == "/models/t" and not engine.closed


def test_a_start_that_fails_writes_an_error_unit_for_each_pending_unit(capsys):
    engine = Engine(RuntimeError("no memory"))
    ctx = context(engine)
    assert start_engine(ctx, CELL, failures, "drift recheck ") == 2
    assert [(cell_id, key, records[0]["error"], pid) for cell_id, key, records, pid in ctx.written] == [
        (CELL.cell_id, "a", "RuntimeError: no memory", "failed"),
        (CELL.cell_id, "b@recheck", "RuntimeError: no memory", "failed")]
    assert engine.closed
    assert "[baseline] drift recheck FAILED to start: RuntimeError: no memory" in capsys.readouterr().out


def test_a_provenance_the_disk_cannot_take_stops_the_run_and_closes_the_engine():
    engine = Engine()
    with pytest.raises(StoreWriteError):
        start_engine(context(engine, provenance_fails=True), CELL, failures)
    assert engine.closed
