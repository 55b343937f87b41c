"""The interface of a serving engine (`Server`), what it is driven with (`Load`) and reads back (`ServerCounters`),
and `ServerProcess`: the life of a local HTTP server process that a serving engine's class builds on.

A serving engine is one catalog row (`serves=<batch engine>`) and one module whose class implements `Server`; the
run (benchmarks/run/serving.py) builds it as `cls(cell, log_path, sequences=n)` and names no engine. The server runs
on 127.0.0.1 and a free port, in its own process group, which `stop()` ends on a normal end, an exception or Ctrl-C;
on Linux it also gets SIGTERM when the harness dies (PR_SET_PDEATHSIG, which fires when the thread that started it
ends: start servers from the main thread).
"""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import LoadResult, SpecCounters
from benchmarks.engines import catalog

PR_SET_PDEATHSIG = 1


class ServerStartError(RuntimeError):
    """The server exited or never became healthy; the message ends with the last lines of its log."""


@dataclass(frozen=True)
class Load:
    """One pass of the load generator: the prompts (already chat-templated text) and how they arrive."""

    prompts: list[str]
    max_new_tokens: int
    temperature: float
    concurrency: int
    request_rate: float | None  # requests per second (Poisson arrivals); None: all at once, bounded by concurrency
    seed: int


@dataclass(frozen=True)
class ServerCounters:
    """A server's cumulative counters: its speculative-decoding counters and the (sum s, count) of its per-request
    TPOT (engine-core clock); each None where the server does not export it. `after - before` is a level's diff."""

    spec: SpecCounters | None
    tpot: tuple[float, float] | None

    def __sub__(self, before: ServerCounters) -> ServerCounters:
        spec = self.spec - before.spec if self.spec is not None and before.spec is not None else None
        tpot = ((self.tpot[0] - before.tpot[0], self.tpot[1] - before.tpot[1])
                if self.tpot is not None and before.tpot is not None else None)
        return ServerCounters(spec, tpot)


class Server(Protocol):
    """A serving engine: one server for one cell, a context manager that starts it healthy and always stops it.
    Built as `cls(cell, log_path, sequences=n)`: `sequences`, the most requests it will have in flight. Its optional
    capabilities (`sample_many`, `score_many`) are those of the Engine protocol, declared in its catalog row."""

    port: int

    def __enter__(self) -> Server: ...

    def __exit__(self, *exc: Any) -> None: ...

    def prompt_ids(self, text: str) -> list[int]:
        """The token ids the server makes of a text prompt (what the load's requests are prefilled with)."""
        ...

    def counters(self) -> ServerCounters:
        """Its cumulative counters now."""
        ...

    def run_load(self, load: Load, workdir: Path, tag: str) -> LoadResult:
        """Drive the server with `load`; the load generator's result, request by request."""
        ...

    def explain(self, exc: BaseException) -> BaseException:
        """A failure during a load, with the server's log tail when the server is no longer running."""
        ...

    def describe(self) -> Mapping[str, object]:
        """What the unit is measured with, for the run manifest."""
        ...


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: Path, lines: int = 30) -> str:
    if not path.is_file():
        return "(no log)"
    with open(path, errors="replace") as f:
        return "".join(deque(f, maxlen=lines)).rstrip()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux); elsewhere `stop()` alone ends the server."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """Wait until no process of the group is left (an engine core may exit after the server); raise on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise subprocess.TimeoutExpired(f"process group {pgid}", timeout_s)


class ServerProcess:
    """A local HTTP server process for one cell, healthy when GET `health_path` answers 200. A subclass gives its
    `command()` (on `self.port`) and the rest of `Server`; `self.env` is the server's environment. Messages name the
    engine its catalog row serves ("vllm server")."""

    health_path = "/health"

    def __init__(self, cell: Cell, log_path: Path, startup_timeout_s: float = 600.0, sequences: int = 1):
        self.cell, self.log_path, self.startup_timeout_s = cell, Path(log_path), startup_timeout_s
        self.sequences = sequences
        self.who = f"{catalog.engine(cell.engine).base} server"
        self.env = dict(os.environ)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def launch_line(self) -> str:
        """The line the log starts with: the command, as a shell would show it."""
        return " ".join(self.command())

    def start(self) -> None:
        """Start the server and wait until it is healthy; raise ServerStartError (with its log tail) otherwise."""
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {self.launch_line()}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True, env=self.env,
                                         preexec_fn=_die_with_parent)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(f"{self.who} exited with code {self.proc.returncode} before becoming "
                                       f"healthy; last log lines ({self.log_path.name}):\n{log_tail(self.log_path)}")
            if self.healthy():
                return
            time.sleep(0.5)
        self.stop()
        raise ServerStartError(f"{self.who} not healthy after {self.startup_timeout_s:.0f} s; last log lines "
                               f"({self.log_path.name}):\n{log_tail(self.log_path)}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}{self.health_path}", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def explain(self, exc: BaseException) -> BaseException:
        """A failure during a load, with the server's log tail when the server is no longer running."""
        if self.proc is not None and self.proc.poll() is not None:
            return ServerStartError(f"{type(exc).__name__}: {exc}; the {self.who} exited with code "
                                    f"{self.proc.returncode}; last log lines:\n{log_tail(self.log_path)}")
        return exc

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

    def __enter__(self) -> ServerProcess:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
