"""The hostile-input grid (tests/cli/hostile_grid.py): every command × every argument × every kind of bad value ends
in a clear error naming its cause, or runs; none gives a traceback, exits 0 on bad input, or changes a byte of a file
it only reads. Engine-free: a scripted engine stands in for JAX and vLLM. As root, the permission kinds run as an
unprivileged user (`hostile_grid.as_user`)."""
import pytest

from benchmarks.engines import catalog
from tests.cli.hostile_grid import GOOD, applies, as_user, cases, run_case, scripted_engine

GRID = cases()


@pytest.fixture(autouse=True)
def engines(monkeypatch):
    monkeypatch.setattr(catalog, "ENGINES", dict(catalog.ENGINES))
    scripted_engine()


def test_the_grid_walks_every_kind_of_every_slot():
    kinds = {c.kind for c in GRID}
    assert {"missing", "directory", "FIFO", "symlink loop", "unreadable", "read-only", "regular file", "truncated",
            "wrong type", "nan/inf", "negative", "zero", "huge", "deeply nested", "non-UTF-8",
            "very long path", "units unreadable", "provenance unreadable"} <= kinds
    assert {"validate", "matrix --plan", "report", "check lossless", "check published", "figures --run",
            "cost-model"} <= {c.command for c in GRID}


@pytest.mark.parametrize("case", GRID, ids=[f"{c.command}: {c.slot}: {c.kind}" for c in GRID])
def test_each_case_is_a_clear_error_or_runs(case, tmp_path):
    if not applies(case):  # as root with no interpreter open to an unprivileged user: said, not passed
        pytest.skip(f"{case.kind} cannot bite root, and {as_user()[2]}")
    kind, outcome = run_case(case, tmp_path)
    assert kind in GOOD, (kind, outcome and (outcome.rc, outcome.err[-2000:], outcome.error[-2000:]))
    assert kind == ("clear error" if case.bad else "ok")
