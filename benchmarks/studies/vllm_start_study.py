"""`study vllm-start`: where a vLLM engine's start goes on CPU, phase by phase.

Starts the preset's cell (default: tiny's DFlash cell) in a fresh interpreter as an engine worker does (the harness's
`VllmEngine.load`), sends it one request, and times each phase on one clock, this process's: the child's own markers,
the arrival of vLLM's log lines, and when each of vLLM's processes appears (the engine core, spawned by the
frontend, and the worker, spawned by the engine core; with an in-process engine core the worker comes first), with
vLLM's log at INFO (the lines that mark its phases).

    python -m benchmarks study vllm-start [--preset tiny] [--method dflash] [--runs 1] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.core.atomic import atomic_write_text
from benchmarks.core.exit_codes import Exit
from benchmarks.core.numbers import Bounded
from benchmarks.core.paths import ROOT

MARK = "@@vllm-start "
CHILD = f"""
import json, sys
print({MARK!r} + "python", flush=True)
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams
from benchmarks.engines.vllm.vllm_engine import VllmEngine
import vllm.entrypoints.llm
print({MARK!r} + "imported", flush=True)
cell = Cell.from_json(json.loads(sys.argv[1]), "the cell argument")
engine = VllmEngine()
engine.load(cell)
print({MARK!r} + "loaded", flush=True)
engine.generate(list(range(10, 60)), SamplingParams(0.0, 32))
print({MARK!r} + "generated", flush=True)
engine.close()
"""
# (phase, where it starts, where it ends): marks are the child's, "core"/"worker" when that process appeared, the
# rest the first log line matching after the start.
PHASES = (
    ("interpreter and imports (torch, vLLM, the harness)", "start", "imported"),
    ("configuration, until vLLM's first process", "imported", "first_process"),
    ("engine core: spawn and imports", "core", r"Initializing a V1 LLM engine"),
    ("executor, until the worker is spawned", r"Initializing a V1 LLM engine", "worker"),
    ("worker: spawn and imports", "worker", r"Starting to load model"),
    ("model load (target, draft)", r"Starting to load model", r"KV cache layout|for KV cache"),
    ("KV cache and warm-up", r"KV cache layout|for KV cache", r"init engine \(profile"),
    ("frontend until ready", r"init engine \(profile", "loaded"),
    ("first request (32 tokens)", "loaded", "generated"),
)


class Timeline:
    """Lines of the child's output and vLLM's processes, each with the time (s since the child started) it was
    seen."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []
        self.processes: dict[int, tuple[float, int, str]] = {}  # pid: (first seen, depth below the child, cmdline)

    def first(self, pattern: str, after: float = 0.0) -> float | None:
        found = re.compile(pattern)
        return next((t for t, line in self.lines if t >= after and found.search(line)), None)

    def mark(self, name: str) -> float | None:
        return next((t for t, line in self.lines if line.startswith(MARK) and line[len(MARK):] == name), None)

    def spawned(self, depth: int | None = None) -> float | None:
        """When the first of vLLM's processes at `depth` below the child (any depth: None) appeared."""
        times = [t for t, d, cmd in self.processes.values() if ("spawn_main" in cmd or "VLLM::" in cmd)
                 and (depth is None or d == depth)]
        return min(times, default=None)


def _processes() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (parent pid, command line), from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            found[int(entry)] = (int(stat[1]), cmd)
    return found


def _watch(proc: subprocess.Popen[str], timeline: Timeline, t0: float) -> None:
    """Record each process below the child when first seen, with its depth below the child."""
    while proc.poll() is None:
        table = _processes()
        for pid, (parent, cmd) in table.items():
            depth = 1
            while parent != proc.pid and parent in table and depth < 8:
                parent, depth = table[parent][0], depth + 1
            if parent == proc.pid and pid not in timeline.processes:
                timeline.processes[pid] = (time.monotonic() - t0, depth, cmd)
        time.sleep(0.05)


def start_once(cell: dict[str, Any], env: dict[str, str]) -> Timeline:
    """One engine start in a fresh interpreter, with `env` added to its environment."""
    timeline = Timeline()
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cell)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "VLLM_LOGGING_LEVEL": "INFO", **env, "PYTHONUNBUFFERED": "1"})
    watcher = threading.Thread(target=_watch, args=(proc, timeline, t0), daemon=True)
    watcher.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        timeline.lines.append((time.monotonic() - t0, line.rstrip("\n")))
    if proc.wait() != 0:
        tail = "\n".join(line for _, line in timeline.lines[-20:])
        raise RuntimeError(f"study vllm-start: the engine did not start (exit {proc.returncode}):\n{tail}")
    return timeline


def phases(t: Timeline) -> list[tuple[str, float | None]]:
    """Each phase's seconds (None where it did not happen: no engine-core process of its own)."""
    inproc = t.spawned(depth=2) is None  # one vLLM process only: the worker, the engine core runs in the frontend
    at: dict[str, float | None] = {
        "start": 0.0, "imported": t.mark("imported"), "loaded": t.mark("loaded"), "generated": t.mark("generated"),
        "first_process": t.spawned(), "core": None if inproc else t.spawned(depth=1),
        "worker": t.spawned(depth=1 if inproc else 2)}
    out: list[tuple[str, float | None]] = []
    for name, begin, end in PHASES:
        a = at[begin] if begin in at else t.first(begin)
        b = at[end] if end in at else t.first(end, after=a or 0.0)
        out.append((name, None if a is None or b is None else b - a))
    out.append(("ready (start to loaded)", at["loaded"]))
    return out


def table(runs: list[list[tuple[str, float | None]]], label: str) -> str:
    head = f"| phase ({label}) | " + " | ".join(f"run {i + 1} s" for i in range(len(runs))) + " |"
    out = [head, "|---|" + "---|" * len(runs)]
    for i, (name, _) in enumerate(runs[0]):
        cells = ["–" if r[i][1] is None else f"{r[i][1]:.1f}" for r in runs]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


OUTPUT_ARGS: tuple[str, ...] = ()  # --out is a file: checked before any work (benchmarks/cli/__init__.py)
OUTPUT_FILE_ARGS = ("out",)
OUTPUTS: tuple[str, ...] = ()  # no output folder


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--preset", default="tiny", help="configs/presets/<name>.yaml (default tiny)")
    ap.add_argument("--method", default="dflash", choices=("baseline", "dflash", "eagle3"))
    ap.add_argument("--runs", type=Bounded(int, 1, 100), default=1)
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="added to the engine's environment (repeatable)")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="an engine option of the cell, its value read as YAML (repeatable; e.g. preload=false)")
    ap.add_argument("--out", type=Path, help="write the phases and the timed log as JSON here too")


def main(args: argparse.Namespace) -> int:
    import yaml  # lazy: yaml

    from benchmarks.config.matrix_expand import expand  # lazy: imports numpy, packaging, scipy
    from benchmarks.config.matrix_parse import parse_matrix  # lazy: imports numpy, packaging, scipy, yaml

    env = dict(item.split("=", 1) for item in args.env if "=" in item)
    options = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.option if "=" in item)}
    if len(env) != len(args.env) or len(options) != len(args.option):
        print("study vllm-start: error: give --env and --option as KEY=VALUE")
        return Exit.BAD_INPUT
    if args.out is not None and not args.out.parent.is_dir():
        print(f"study vllm-start: error: --out {args.out}: its folder does not exist")
        return Exit.BAD_INPUT
    matrix = parse_matrix({"name": "vllm-start", "preset": args.preset, "engine": "vllm", "datasets": ["humaneval"],
                           "methods": sorted({"baseline", args.method}),
                           **({"engine_options": {"vllm": options}} if options else {})}, source="study vllm-start")
    [cell] = [c for c in expand(matrix) if c.method == args.method]
    timelines = [start_once(asdict(cell), env) for _ in range(args.runs)]
    runs = [phases(t) for t in timelines]
    print(table(runs, f"{args.preset} {args.method}" + "".join(f", {k}={v}" for k, v in {**env, **options}.items())))
    if args.out is not None:
        atomic_write_text(args.out, json.dumps({"env": env, "cell": asdict(cell), "phases": runs,
                                                "timelines": [{"lines": t.lines, "processes": t.processes}
                                                              for t in timelines]}, indent=1))
    return Exit.OK
