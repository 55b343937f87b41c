"""A unit whose provenance file is gone is named as such: the report counts the units whose environment is not known,
never folding them into "all units were measured in one environment"."""
from __future__ import annotations

import dataclasses

from benchmarks.analysis.environments import UNKNOWN, provenance_lines
from benchmarks.analysis.summary import summarize
from benchmarks.records.store import RunStore
from tests.analysis.synthetic_run import write_run

ENV = {"git_sha": "abc", "code_sha256": "c0de", "packages": {"jax": "0.8"}, "python": "3.11", "platform": "cpu",
       "hardware": {"device": "cpu", "cores": 2}, "env": {}}


def environments(tmp_path, kept: set[str]) -> dict:
    """The synthetic run's environments with each cell's units naming provenance <cell>, and only `kept`'s files."""
    store = RunStore(write_run(tmp_path / "run"))
    records = [dataclasses.replace(r, provenance_id=r.cell_id) for r in store.records()]
    provenances = {cid: {"environment": ENV, "cell_id": cid} for cid in kept}
    return summarize(records, store.run_manifest(), provenances).environments  # type: ignore[arg-type]


def test_units_without_their_provenance_file_are_counted_and_named(tmp_path):
    envs = environments(tmp_path, {"base", "dfl"})
    lost = envs[UNKNOWN][1]
    assert "eagle3-k2 on humaneval" in lost and "dflash-k3 @C=4 on humaneval" in lost  # cells eag and D
    lines = provenance_lines(envs)
    known = len(next(names for env_id, (_, names) in envs.items() if env_id != UNKNOWN))
    assert lines[0] == f"The other {known} units were measured in one environment: git abc (code c0de), cpu · cpu."
    assert lines[1].startswith(f"**{len(lost)} units have no provenance file; their environment is not known**: ")
    assert not any(line.startswith("All ") for line in lines)


def test_a_run_whose_every_provenance_file_is_gone_says_so(tmp_path):
    envs = environments(tmp_path, set())
    (line,) = provenance_lines(envs)
    assert line.startswith(f"**{len(envs[UNKNOWN][1])} units have no provenance file")


def test_a_run_with_every_file_is_one_environment(tmp_path):
    store = RunStore(write_run(tmp_path / "run"))
    envs = environments(tmp_path / "again", {r.cell_id for r in store.records()})
    assert UNKNOWN not in envs
    (line,) = provenance_lines(envs)
    assert line.startswith("All ") and "units were measured in one environment: git abc" in line
