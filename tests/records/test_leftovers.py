"""A run killed between an atomic write and its rename leaves the temporary file behind: the next run into the folder
removes its own ones, holding the lock, and leaves a report's and a user's files alone."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.records.store import RunStore


def test_the_next_run_removes_what_a_killed_run_left_and_nothing_else(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    (run / "units").mkdir(parents=True)
    removed = [run / ".records.jsonl.bub9ot7t.tmp", run / "units" / ".0a1b-humaneval.jsonl.x_1y2z3w.tmp",
               run / ".manifest.json.abcdefgh.tmp"]
    kept = [run / ".summary.csv.abcdefgh.tmp",  # a report's, which may be writing it now
            run / ".notes.txt.abcdefgh.tmp",  # not the name of a run's file
            run / ".records.jsonl.tmp",  # not an atomic write's name
            run / "units" / "0a1b-humaneval.jsonl"]
    for f in removed + kept:
        f.write_text("x")
    with RunStore(run).lock():
        assert [f for f in removed if f.exists()] == []
        assert all(f.exists() for f in kept)
    err = capsys.readouterr().err
    assert err.startswith(f"note: removed 3 temporary file(s) a killed run left in {run} (") and ".tmp" in err
    with RunStore(run).lock():  # nothing left: nothing said
        pass
    assert capsys.readouterr().err == ""
