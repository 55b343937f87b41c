"""Why a vLLM engine did not start. Its engine core runs in a subprocess whose exception reaches only its own output,
while the frontend raises "Engine core initialization failed. See root cause above.": the process's stdout and
stderr (which the subprocesses inherit) are copied through a bounded tail (`OutputTail`), and `start_error` raises
`EngineStartError` carrying the subprocess's last exception, with its traceback tail as a note."""
from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections import deque


class EngineStartError(RuntimeError):
    """vLLM could not start its engine; the message carries the engine-core subprocess's own exception."""


class OutputTail:
    """Copy file descriptors 1 and 2 through pipes, keeping the last `max_lines` lines written to each.

    Subprocesses started while `start()` is in effect inherit the pipes, so their output is kept too and keeps
    reaching the terminal through this process for as long as they live; `restore()` puts this process's own
    descriptors back, and the copying threads end when the last subprocess holding a pipe exits.
    """

    def __init__(self, max_lines: int = 400, max_line_chars: int = 2000) -> None:
        self.lines: dict[int, deque[str]] = {fd: deque(maxlen=max_lines) for fd in (1, 2)}
        self._max_chars = max_line_chars
        self._saved: dict[int, int] = {}
        self._threads: list[threading.Thread] = []
        self._received = 0  # bytes read so far, over all pipes

    def start(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in self.lines:
            try:
                saved = os.dup(fd)
            except OSError:
                continue  # not open in this process: nothing to copy
            read, write = os.pipe()
            os.dup2(write, fd)
            os.close(write)
            self._saved[fd] = saved
            thread = threading.Thread(target=self._copy, args=(read, os.dup(saved), self.lines[fd]), daemon=True)
            thread.start()
            self._threads.append(thread)

    def restore(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)
            os.close(saved)
        self._saved = {}

    def settle(self, quiet_s: float = 1.0, timeout_s: float = 10.0) -> None:
        """Wait until the pipes end or stay quiet for `quiet_s` (at most `timeout_s`): the last output is in.

        A pipe may never end while some long-lived helper (multiprocessing's resource tracker) holds it.
        """
        deadline, seen, quiet_since = time.monotonic() + timeout_s, -1, time.monotonic()
        while time.monotonic() < deadline and any(t.is_alive() for t in self._threads):
            count = self._received
            if count != seen:
                seen, quiet_since = count, time.monotonic()
            elif time.monotonic() - quiet_since >= quiet_s:
                return
            time.sleep(0.05)

    def _copy(self, read: int, out: int, lines: deque[str]) -> None:
        pending = b""
        try:
            while chunk := os.read(read, 65536):
                self._received += len(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
                *done, pending = (pending + chunk).split(b"\n")
                lines.extend(line.decode(errors="replace")[: self._max_chars] for line in done)
                pending = pending[-self._max_chars:]
        except OSError:
            pass  # the terminal went away; stop copying
        finally:
            if pending:
                lines.append(pending.decode(errors="replace"))
            os.close(read)
            os.close(out)


# vLLM's log-line decorations: ANSI colours, "(EngineCore pid=1) " and "ERROR 11-30 19:18:58 [core.py:1510] ".
_DECORATION = re.compile(r"\x1b\[[0-9;]*m|^\(\w+ pid=\d+\) |"
                         r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:.]+ \[[^\]]*\] ")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')


def start_failure(lines: list[str], tail: int = 20) -> tuple[str, str] | None:
    """The last exception in captured output, as ("Type: message [at file:line in fn]", traceback tail).

    A traceback's exception line is the first unindented line after its frames; only its first line is kept.
    None when the output holds no traceback.
    """
    clean = [_DECORATION.sub("", _DECORATION.sub("", line.rstrip("\r"))) for line in lines]
    starts = [i for i, line in enumerate(clean) if line.startswith("Traceback (most recent call last):")]
    for start in reversed(starts):
        frames = None
        for end in range(start + 1, len(clean)):
            line = clean[end]
            if match := _FRAME.match(line):
                frames = match
            elif line.strip() and not line[0].isspace():
                if frames is None:
                    break
                path = re.sub(r"^.*/(?:site-packages|dist-packages)/", "", frames["file"])
                cause = f"{line.strip()} [at {path}:{frames['line']} in {frames['fn']}]"
                return cause, "\n".join(clean[max(start, end - tail): end + 1])
    return None


def start_error(exc: Exception, output: OutputTail) -> Exception:
    """EngineStartError with the subprocess's own exception when its output holds one, else `exc` unchanged."""
    found = start_failure(list(output.lines[2])) or start_failure(list(output.lines[1]))
    if found is None:
        return exc
    cause, trace = found
    said = re.sub(r"\s*See root cause above\.", "", (str(exc).splitlines() or [""])[0])
    error = EngineStartError(f"vllm engine failed to start: {cause} (vLLM reported {type(exc).__name__}: {said})")
    error.add_note("engine-core traceback (tail):\n" + trace)
    return error
