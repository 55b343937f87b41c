"""The phase parsers of `study vllm-start` and `study first-table`, and the summary of `study vllm-preload`, on
synthetic timelines and records (no engine)."""
from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import RequestRecord
from benchmarks.core.paths import ROOT
from benchmarks.studies import first_table, vllm_preload_study, vllm_start_study
from benchmarks.studies.vllm_start_study import MARK, Timeline

SPAWN = "python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=3) --multiprocessing-fork"


def timeline(inproc: bool) -> Timeline:
    t = Timeline()
    t.lines = [(0.1, MARK + "python"), (30.0, MARK + "imported"),
               (50.0, "(EngineCore pid=2) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config"),
               (90.0, "(Worker pid=3) INFO [cpu_model_runner.py:68] Starting to load model models/tiny/target..."),
               (93.0, "(EngineCore pid=2) INFO [utils.py:347] Using LBHNC KV cache layout."),
               (94.0, "(EngineCore pid=2) INFO [core.py:402] init engine (profile, create kv cache, warmup model)"),
               (95.0, MARK + "loaded"), (96.0, MARK + "generated")]
    t.processes = {9: (30.2, 1, "python -c from multiprocessing.resource_tracker import main;main(8)")}
    if inproc:
        t.processes[3] = (51.0, 1, SPAWN)
    else:
        t.processes |= {2: (30.5, 1, SPAWN), 3: (51.0, 2, "VLLM::Worker")}
    return t


def test_a_start_splits_into_its_processes_phases():
    got = dict(vllm_start_study.phases(timeline(inproc=False)))
    assert got["interpreter and imports (torch, vLLM, the harness)"] == 30.0
    assert got["configuration, until vLLM's first process"] == pytest.approx(0.5)
    assert got["engine core: spawn and imports"] == pytest.approx(19.5)
    assert got["executor, until the worker is spawned"] == pytest.approx(1.0)
    assert got["worker: spawn and imports"] == pytest.approx(39.0)
    assert got["model load (target, draft)"] == pytest.approx(3.0)
    assert got["ready (start to loaded)"] == 95.0


def test_an_in_process_engine_core_has_no_phase_of_its_own():
    got = dict(vllm_start_study.phases(timeline(inproc=True)))
    assert got["engine core: spawn and imports"] is None
    assert got["configuration, until vLLM's first process"] == pytest.approx(21.0)  # the worker is the first process


def test_first_table_phases_from_the_harnesss_own_ready_lines():
    lines = [(0.5, "bootstrap: cpu environment is up to date (.venv)."),
             (0.6, '"$VENV/bin/python" -m benchmarks bench --dataset "$DATASET"'),
             (150.0, "[baseline] vllm engine ready in 110.0 s (loaded beside the group's other cells)"),
             (152.0, "[dflash-k15] vllm engine ready in 112.0 s (loaded beside the group's other cells)"),
             (170.0, "cells: 100%|██████████| 2/2"), (175.0, "| dataset | engine |")]
    got = dict(first_table.phases(lines, 178.0))
    assert got["set-up (make setup)"] == 0.6
    assert got["plan, until the engines start"] == pytest.approx(39.4)
    assert got["engine start: dflash-k15 (the harness's own count)"] == 112.0
    assert got["measurement, engines closed"] == pytest.approx(18.0)
    assert got["report"] == pytest.approx(8.0) and got["total"] == 178.0


def arm(method: str, preload: bool, tpots_ms: list[float], tokens: int = 11) -> vllm_preload_study.Arm:
    cell = Cell("vllm", "t", method, "d" if method == "dflash" else None, 15 if method == "dflash" else 0, 0.0, tokens,
                0, {"preload": preload})
    records = [RequestRecord(output_ids=list(range(tokens)), ttft_s=0.0, last_token_s=t * (tokens - 1) / 1000,
                             accept_lengths=[2] * 3 if method == "dflash" else None) for t in tpots_ms]
    return vllm_preload_study.Arm(cell, records, {"preload": {"enabled": preload}})


def test_the_preload_ratio_is_without_over_with_per_prompt():
    result = vllm_preload_study.summary([arm("baseline", True, [5, 6, 7]), arm("dflash", True, [3, 3, 4]),
                                   arm("baseline", False, [5, 6, 7]), arm("dflash", False, [6, 6, 8])])
    base, spec = result["rows"]
    assert base["method"] == "baseline" and base["ratio_without_over_with"] == pytest.approx(1.0)
    assert math.isnan(base["ci_low"])  # no spread between the prompts: no interval
    assert spec["ratio_without_over_with"] == pytest.approx(2.0) and spec["identical"] == 3
    assert spec["tau_with"] == pytest.approx(3.0)
    assert result["dflash_speedup"]["with"]["geomean"] > result["dflash_speedup"]["without"]["geomean"]
    assert "without / with" in vllm_preload_study.table(result)


def test_first_table_refuses_a_ref_the_repository_lacks_before_cloning(capsys, monkeypatch):
    from benchmarks.cli import main

    monkeypatch.setattr(first_table, "clone", lambda *_: pytest.fail("cloned before the ref was checked"))
    assert main(["study", "first-table", "--ref", "no-such-ref-anywhere"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --ref no-such-ref-anywhere: no commit of this repository has that name"), err


@pytest.mark.parametrize("option, value, says", [
    ("--dataset", "no-such-dataset", "error: --dataset no-such-dataset: not a dataset of the registry; choose from "),
    ("--dataset", "x" * 5000, "error: --dataset xxxx"),
    ("--venv", "a-file", "is a file; give a venv, or a new path to build one in"),
    ("--venv", "users", "is a folder that is not a venv (no pyvenv.cfg)"),
    ("--venv", "loop", "is a link that loops back on itself"),
    ("--ref", "--help", "error: --ref --help: no commit of this repository has that name"),
])
def test_first_table_refuses_a_bad_option_in_one_line_before_any_set_up(option, value, says, tmp_path, capsys,
                                                                        monkeypatch):
    """Nothing is cloned, no make runs (which would build a venv of gigabytes) and no folder is made: the options
    are all read first."""
    from benchmarks.cli import main

    (tmp_path / "a-file").write_text("mine\n")
    (tmp_path / "users").mkdir()
    (tmp_path / "users" / "keep.txt").write_text("mine\n")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    before = sorted(tmp_path.rglob("*"))
    monkeypatch.setattr(first_table, "clone", lambda *_: pytest.fail("cloned before the options were checked"))
    monkeypatch.setattr(first_table, "timed_make", lambda *_: pytest.fail("make ran before the options were checked"))
    monkeypatch.setattr(first_table.tempfile, "mkdtemp", lambda **_: pytest.fail("a folder made before the check"))
    given = str(tmp_path / value) if option == "--venv" else value
    t0 = time.monotonic()
    assert main(["study", "first-table", f"{option}={given}" if value.startswith("-") else option,
                 *([] if value.startswith("-") else [given])]) == 2
    assert time.monotonic() - t0 < 5
    out, err = capsys.readouterr()
    assert says in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert len(err) < 1000 and out == ""
    assert sorted(tmp_path.rglob("*")) == before and (tmp_path / "users" / "keep.txt").read_text() == "mine\n"


def test_first_table_refuses_a_bad_dataset_from_the_command_line_within_a_second(tmp_path):
    """As a user runs it, in its own process: the dataset is refused before the venv the study would build appears."""
    venv = tmp_path / "venv"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "study", "first-table", "--dataset", "humaneva",
                           "--venv", str(venv)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: --dataset humaneva: not a dataset of the registry") and \
        proc.stderr.count("\n") == 1, proc.stderr
    assert time.monotonic() - t0 < 10  # the interpreter's start on a loaded 2-core host; the check itself is instant
    assert not venv.exists() and list(tmp_path.iterdir()) == []
