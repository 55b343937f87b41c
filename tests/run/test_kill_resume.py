"""A run killed with SIGKILL mid-way resumes to a complete, duplicate-free result (real JAX engine; the killed run in a
subprocess, the rerun in this process)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from benchmarks.cli import main
from benchmarks.core.exit_codes import Exit
from benchmarks.core.paths import ROOT
from tests.machine import mt_bench


@pytest.mark.slow
@mt_bench  # one of its two datasets
def test_kill_9_then_rerun_completes_without_duplicates(random_pair, tmp_path, capsys):
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump({
        "name": "killed", "engine": "jax", "target": str(random_pair["target"]),
        "drafts": {"dflash": str(random_pair["dflash"])}, "methods": ["baseline", "dflash"], "k": [4],
        "datasets": ["humaneval", "mt-bench"], "num_prompts": 2, "warmup_prompts": 1, "max_new_tokens": 16,
        "engine_options": {"max_model_len": 1024, "dtype": "float32"},
    }))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "benchmarks", "matrix", str(matrix), "--run-dir", str(run_dir)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not list((run_dir / "units").glob("*.jsonl")):
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    units_after_kill = list((run_dir / "units").glob("*.jsonl"))
    assert 1 <= len(units_after_kill) < 4, "the kill should land mid-run"
    for unit in units_after_kill:  # every file on disk is whole JSON lines
        assert all(json.loads(line) for line in unit.read_text().splitlines())

    # the rerun in this process: the same command line as the killed one, without a second interpreter's start
    assert main(cmd[3:]) == Exit.OK, capsys.readouterr().err[-2000:]
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    keys = [(r["cell_id"], r["dataset"], r["prompt_index"]) for r in records if r["kind"] == "request"]
    assert len(keys) == len(set(keys)) == 2 * 2 * 2
    assert not list(run_dir.rglob("*.tmp"))
    summary = (run_dir / "summary.csv").read_text()
    assert summary.count("\n") == 1 + 4 and "dflash-k4" in summary
