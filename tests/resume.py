"""A pytest plugin (`-p tests.resume`) for a suite run that must survive its end, as on a lent machine whose calls
are minutes long (preparation/chip_test.sh):

- DFLASH_TEST_RESUME=FILE: each finished test appends `nodeid<TAB>outcome<TAB>seconds` to FILE (outcome: the worst
  of its set-up, call and tear-down: failed, skipped or passed; seconds: the three together, for planning the calls),
  and a test FILE already names is left out, so a second run goes on where the first one stopped. A failure's report
  goes to FILE with the suffix .failures as it happens: a run stopped at its time limit prints no summary.
- DFLASH_TEST_SHARD=I/N: only the tests of every N-th file, starting at the I-th (0-based), in collection order, so
  that N processes share the suite by files.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

RANK = {"passed": 0, "skipped": 1, "failed": 2}
_OUTCOMES: dict[str, tuple[str, float]] = {}  # a running test's worst outcome and its seconds so far, by node id


def finished(path: Path) -> dict[str, str]:
    """The tests a resume file names as finished, with their outcomes (a torn last line is ignored)."""
    if not path.is_file():
        return {}
    rows = (line.split("\t") for line in path.read_text().splitlines())
    return {r[0]: r[1] for r in rows if len(r) == 3 and r[1] in RANK}


def failures(path: Path) -> Path:
    """Where a run recording to `path` writes its failures' reports."""
    return path.with_suffix(".failures")


def _shard(spec: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"DFLASH_TEST_SHARD={spec!r}: give I/N, for example 0/4") from None
    if not 0 <= index < count:
        raise pytest.UsageError(f"DFLASH_TEST_SHARD={spec!r}: I runs from 0 to N - 1")
    return index, count


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    drop: list[pytest.Item] = []
    if spec := os.environ.get("DFLASH_TEST_SHARD"):
        index, count = _shard(spec)
        files = list(dict.fromkeys(item.path for item in items))
        mine = {path for i, path in enumerate(files) if i % count == index}
        drop += [item for item in items if item.path not in mine]
    if resume := os.environ.get("DFLASH_TEST_RESUME"):
        done = finished(Path(resume))
        drop += [item for item in items if item.nodeid in done]
        print(f"resume: {sum(item.nodeid in done for item in items)} test(s) finished in an earlier run left out "
              f"({resume})")
    if drop:
        gone = set(map(id, drop))
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if id(item) not in gone]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    resume = os.environ.get("DFLASH_TEST_RESUME")
    if not resume:
        return
    outcome, seconds = _OUTCOMES.get(report.nodeid, ("passed", 0.0))
    _OUTCOMES[report.nodeid] = (max(outcome, report.outcome, key=RANK.__getitem__), seconds + report.duration)
    if report.failed:
        with open(failures(Path(resume)), "a") as out:
            out.write(f"{'=' * 20} {report.nodeid} ({report.when})\n{report.longreprtext}\n")
    if report.when == "teardown":
        outcome, seconds = _OUTCOMES.pop(report.nodeid)
        with open(resume, "a") as out:
            out.write(f"{report.nodeid}\t{outcome}\t{seconds:.2f}\n")
