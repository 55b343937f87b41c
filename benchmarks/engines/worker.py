"""An engine in a child process behind the Engine protocol: `WorkerEngine` forwards each call over a pipe to an
`EngineHost` that `serve` runs in a fresh interpreter (`python -m benchmarks.engines.worker`; not a multiprocessing
daemon, so the engine may start processes of its own, and nothing heavy is imported before the engine is named).

The child leads its own process group, so a timeout, a crash or `close()` ends the whole tree (vLLM's engine core is
a grandchild), and it kills its group when this process dies, even by SIGKILL. A failure comes back as `WorkerError`
with the child's traceback, exit status or time limit, and its last stderr lines. `pause_idle` stops the engine's own
processes (SIGSTOP) between calls, so a waiting engine takes no CPU from a busy one (docs/engine-findings.md).
"""
from __future__ import annotations

import argparse
import collections
import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters
from benchmarks.engines.host import EngineHost, WorkerError

CLOSE_GRACE_S = 30.0
STDERR_LINES = 40


def _group_members(pgid: int) -> list[int]:
    """The pids of the live processes of group `pgid` (from /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in "ZX":  # exited ones wait for init to reap them
                members.append(int(entry))
    return members


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class WorkerEngine:
    """The Engine protocol over an engine hosted in a child process.

    `spec` is a registry name ("vllm", "jax") or "module:Class". `load_timeout_s` bounds starting the child and
    `load`; `request_timeout_s` every other call. Each of the engine's OPTIONAL_METHODS (and `samples_seeded`) exists
    on the proxy only when the hosted engine has it, so callers treat the proxy as they would the engine.
    """

    def __init__(self, spec: str, *, request_timeout_s: float, load_timeout_s: float, pause_idle: bool = False):
        self.spec = spec
        self.name = spec
        self.request_timeout_s = request_timeout_s
        self.load_timeout_s = load_timeout_s
        self.pause_idle = pause_idle
        self._paused = False
        self._killed_for = ""  # why the harness killed the worker (a timeout), named by every later call's error
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        ours, theirs = socket.socketpair()
        child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # tests' modules too
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.engines.worker", "--fd", str(theirs.fileno()),
                 "--parent", str(os.getpid())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                start_new_session=True, env=child_env)
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        threading.Thread(target=self._copy_stderr, daemon=True).start()
        try:
            info = self._call("init", (spec,), timeout_s=self.load_timeout_s)
        except BaseException:
            self.close()  # nobody else holds the proxy yet
            raise
        self.name = info["name"]
        self.samples_seeded = info["samples_seeded"]
        for method in info["optional"]:
            setattr(self, method, functools.partial(self._optional, method))

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _copy_stderr(self) -> None:
        """Pass the child's stderr through to ours, keeping its last lines for a crash report."""
        assert self._proc.stderr is not None
        for raw in iter(self._proc.stderr.readline, b""):
            line = raw.decode(errors="replace")
            self._stderr.append(line.rstrip("\n"))
            try:
                sys.stderr.write(line)
            except (OSError, ValueError):
                pass

    def _stderr_tail(self) -> str:
        time.sleep(0.2)  # let the copier catch the child's last words
        return "\n".join(self._stderr)

    def _kill_tree(self) -> None:
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)  # the child leads its group: engine-core grandchildren too
        except ProcessLookupError:
            pass
        self._proc.wait()

    def _signal_engine(self, sig: int) -> None:
        """Send `sig` to the worker's group but the worker itself: the engine's own processes."""
        for pid in _group_members(self._proc.pid):
            if pid != self._proc.pid:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def _call(self, method: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        if self._paused:
            self._signal_engine(signal.SIGCONT)
            self._paused = False
        try:
            return self._call_running(method, args, timeout_s)
        finally:
            if self.pause_idle and method != "close" and self._proc.poll() is None:
                self._signal_engine(signal.SIGSTOP)
                self._paused = True

    def _call_running(self, method: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        if self._proc.poll() is not None:
            self._kill_tree()
            raise WorkerError(f"engine worker ({self.spec}) is gone: {_describe_exit(self._proc.returncode)}"
                              + (f", by the harness after {self._killed_for}" if self._killed_for else ""),
                              self._stderr_tail())
        try:
            self._conn.send((method, args))
            deadline = time.monotonic() + timeout_s
            while not self._conn.poll(min(1.0, max(0.0, deadline - time.monotonic()))):
                if self._proc.poll() is not None:
                    raise EOFError
                if time.monotonic() >= deadline:
                    limit = "load_timeout_s" if timeout_s == self.load_timeout_s else "request_timeout_s"
                    self._killed_for = f"{method} timed out after {timeout_s:g} s ({limit})"
                    self._kill_tree()
                    raise WorkerError(f"engine worker ({self.spec}) {method} timed out after {timeout_s:g} s; "
                                      f"its process tree was killed (raise request_timeout_s or load_timeout_s "
                                      f"in the matrix if the engine is just slow)", self._stderr_tail())
            ok, value = self._conn.recv()
        except (EOFError, OSError):
            self._kill_tree()
            raise WorkerError(f"engine worker ({self.spec}) died during {method}: "
                              f"{_describe_exit(self._proc.returncode)}", self._stderr_tail()) from None
        if not ok:
            raise value
        return value

    def load(self, cell: Cell) -> None:
        self._call("load", (cell,), self.load_timeout_s)

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord:
        return self._call("generate", (list(prompt_ids), params), self.request_timeout_s)

    def _optional(self, method: str, *args: Any) -> Any:
        return self._call("optional", (method, *args), self.request_timeout_s)

    def spec_counters(self) -> SpecCounters | None:
        return self._call("spec_counters", (), self.request_timeout_s)

    def describe(self) -> Mapping[str, object]:
        return {**self._call("describe", (), self.request_timeout_s), "worker_pid": self._proc.pid}

    def close(self) -> None:
        """Close the engine in the child (bounded wait), then make sure the child's whole group is gone."""
        if self._proc.poll() is None:
            try:
                self._call("close", (), CLOSE_GRACE_S)
                self._conn.send(("exit", ()))
                self._proc.wait(timeout=CLOSE_GRACE_S)
            except (WorkerError, OSError, subprocess.TimeoutExpired):
                pass
        self._kill_tree()  # stragglers of the group, if any
        self._conn.close()


def _watch_parent(parent: int) -> None:
    """Kill this worker's whole process group once the process that started it is gone (even by SIGKILL)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def serve(conn: Connection) -> None:
    """The child's loop: build the engine on "init", then answer one call at a time until "exit" or EOF."""
    host: EngineHost | None = None
    while True:
        try:
            method, args = conn.recv()
        except EOFError:
            return
        if method == "exit":
            return
        try:
            if method == "init":
                host = EngineHost(*args)
                value: Any = host.capabilities()
            else:
                assert host is not None, "init first"
                value = getattr(host, method)(*args)
            reply = (True, value)
        except WorkerError as exc:
            reply = (False, exc)
        except Exception as exc:  # building the host, or a method the host does not have
            reply = (False, WorkerError(f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        conn.send(reply)


def main() -> None:
    ap = argparse.ArgumentParser(description="engine worker child (started by WorkerEngine)")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--parent", type=int, required=True)
    args = ap.parse_args()
    threading.Thread(target=_watch_parent, args=(args.parent,), daemon=True).start()
    serve(Connection(args.fd))  # returns on "exit", or on EOF when the parent is gone
    sys.stdout.flush()
    sys.stderr.flush()
    os.killpg(os.getpgrp(), signal.SIGKILL)  # this worker and whatever its engine left behind


if __name__ == "__main__":
    main()
