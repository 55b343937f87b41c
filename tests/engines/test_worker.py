"""Engine workers: a cell's engine in a child process. Crashes, hangs and exceptions in the child fail that cell's
units with the cause while the other cells complete, and no process of the worker's tree outlives it."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.config.matrix_parse import parse_matrix
from benchmarks.engines.worker import WorkerEngine
from benchmarks.records.store import RunStore
from tests.run_helpers import host_everywhere, run_matrix

psutil = pytest.importorskip("psutil", reason="psutil is not installed")

SPEC = "scripted_workers:FaultyEngine"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone_soon(pids, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def stopped_soon(pid: int, within_s: float = 2.0) -> bool:
    """SIGSTOP takes effect asynchronously."""
    deadline = time.monotonic() + within_s
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def matrix(random_pair, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question number {i}"}) + "\n" for i in range(10)))
    return parse_matrix({
        "name": "workers", "target": str(random_pair["target"]), "drafts": {"dflash": str(random_pair["dflash"])},
        "methods": ["baseline", "dflash"], "k": [3], "num_prompts": 3, "warmup_prompts": 2, "max_new_tokens": 8,
        "datasets": [{"name": "local", "path": str(prompts)}], "workers": True, "interleave": True,
        "request_timeout_s": 2,
    })


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """Every cell's worker hosts the scripted engine; returns the folder where each cell writes its pids."""
    host_everywhere(monkeypatch, SPEC)
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("SCRIPTED_PIDS", str(pids))
    return pids


def run(matrix, tmp_path):
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    records = RunStore(run_dir).record_objects()
    return failed, [r for r in records if r["kind"] == "error"], [r for r in records if r["kind"] == "request"]


def tree(pids_dir, label):
    return [int(p) for p in (pids_dir / label).read_text().split()]


def test_worker_crash_fails_its_unit_with_the_exit_status_and_the_other_cell_completes(matrix, scripted, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setenv("SCRIPTED_FAULT", "dflash:crash:3")  # after its 2 warm-ups, at the first measured prompt
    failed, errors, requests = run(matrix, tmp_path)
    assert failed == 1 and [e["label"] for e in errors] == ["dflash-k3"]
    assert "died during generate: exited with status 7" in errors[0]["error"]
    assert "about to crash" in errors[0]["traceback"]  # the child's last stderr lines
    assert [r["label"] for r in requests] == ["baseline"] * 3
    assert gone_soon(tree(scripted, "dflash-k3") + tree(scripted, "baseline"))


def test_worker_hang_hits_the_time_limit_and_its_whole_tree_is_killed(matrix, scripted, tmp_path, monkeypatch):
    monkeypatch.setenv("SCRIPTED_FAULT", "dflash:hang:4")
    t0 = time.monotonic()
    failed, errors, requests = run(matrix, tmp_path)
    assert time.monotonic() - t0 < 60
    assert failed == 1 and "generate timed out after 2 s" in errors[0]["error"]
    worker, grandchild = tree(scripted, "dflash-k3")
    assert gone_soon([worker, grandchild], within_s=1.0)  # killed with the group, not left to close()
    assert [r["label"] for r in requests] == ["baseline"] * 3


def test_every_call_after_a_timeout_kill_names_the_timeout_as_the_cause(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRIPTED_PIDS", str(tmp_path))
    monkeypatch.setenv("SCRIPTED_FAULT", "baseline:hang:1")
    from benchmarks.core.cells import Cell
    from benchmarks.core.engine_io import SamplingParams
    from benchmarks.engines.host import WorkerError

    w = WorkerEngine(SPEC, request_timeout_s=1, load_timeout_s=10)
    try:
        w.load(Cell("vllm", "t", "baseline", None, 0, 0.0, 4, 0))
        with pytest.raises(WorkerError, match="generate timed out after 1 s"):
            w.generate([1, 2], SamplingParams(0.0, 3))
        with pytest.raises(WorkerError, match=r"is gone: killed by signal SIGKILL, by the harness after generate "
                                              r"timed out after 1 s \(request_timeout_s\)"):
            w.generate([1, 2], SamplingParams(0.0, 3))
    finally:
        w.close()


def test_exception_in_the_worker_comes_back_with_its_own_traceback(matrix, scripted, tmp_path, monkeypatch):
    monkeypatch.setenv("SCRIPTED_FAULT", "baseline:raise:1")
    failed, errors, requests = run(matrix, tmp_path)
    assert failed == 1 and errors[0]["label"] == "baseline"
    assert errors[0]["error"] == "WorkerError: ValueError: scripted failure at call 1"
    trace = errors[0]["traceback"]
    assert "in _deep_failure" in trace and "scripted_workers.py" in trace and "WorkerEngine" not in trace
    assert [r["label"] for r in requests] == ["dflash-k3"] * 3


def test_proxy_mirrors_sample_many_and_generate_batch_and_close_leaves_no_process(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRIPTED_PIDS", str(tmp_path))
    from benchmarks.core.cells import Cell
    from benchmarks.core.engine_io import SamplingParams

    with_samples = WorkerEngine(SPEC, request_timeout_s=10, load_timeout_s=10)
    without = WorkerEngine("scripted_workers:PlainEngine", request_timeout_s=10, load_timeout_s=10)
    for method in ("sample_many", "generate_batch"):
        assert hasattr(with_samples, method) and not hasattr(without, method)
    with_samples.load(Cell("vllm", "t", "baseline", None, 0, 1.0, 4, 0))
    assert with_samples.sample_many([1], SamplingParams(1.0, 3), [5, 6]) == [[5, 6, 7], [6, 7, 8]]
    batch = with_samples.generate_batch([[1], [2, 3]], SamplingParams(0.0, 3))
    assert [r.output_ids for r in batch] == [[1, 2, 3], [5, 6, 7]]
    pids = tree(tmp_path, "baseline") + [without.pid]
    with_samples.close()
    without.close()
    assert gone_soon(pids, within_s=1.0)


def test_paused_worker_stops_its_engine_processes_between_calls(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRIPTED_PIDS", str(tmp_path))
    from benchmarks.core.cells import Cell
    from benchmarks.core.engine_io import SamplingParams

    w = WorkerEngine(SPEC, request_timeout_s=10, load_timeout_s=10, pause_idle=True)
    try:
        w.load(Cell("vllm", "t", "baseline", None, 0, 0.0, 4, 0))
        worker, grandchild = tree(tmp_path, "baseline")
        assert stopped_soon(grandchild)
        assert psutil.Process(worker).status() != psutil.STATUS_STOPPED  # it still watches its parent
        assert w.generate([1, 2], SamplingParams(0.0, 3)).output_ids == [3, 4, 5]
        assert stopped_soon(grandchild)
    finally:
        w.close()
    assert gone_soon([worker, grandchild], within_s=1.0)


@pytest.mark.parametrize("pause_idle", [False, True])
def test_worker_tree_dies_with_a_killed_harness(tmp_path, pause_idle):
    """kill -9 of the process that started the worker: the worker and its grandchild go too (no orphans), also
    while the grandchild is stopped between calls."""
    script = (f"import sys, time\nfrom benchmarks.engines.worker import WorkerEngine\n"
              f"from benchmarks.core.cells import Cell\n"
              f"w = WorkerEngine({SPEC!r}, request_timeout_s=10, load_timeout_s=10, pause_idle={pause_idle})\n"
              f"w.load(Cell('vllm', 't', 'baseline', None, 0, 0.0, 4, 0))\n"
              f"print('ready', flush=True)\ntime.sleep(600)\n")
    env = {**os.environ, "SCRIPTED_PIDS": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    harness = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert harness.stdout.readline().strip() == "ready"
        pids = tree(tmp_path, "baseline")
        assert all(alive(p) for p in pids)
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait()
        assert gone_soon(pids)
    finally:
        harness.kill()
        harness.wait()
