"""`study first-table`: a fresh clone's `make bench DATASET=humaneval`, timed phase by phase.

Clones this repository (at `--ref`, default HEAD) into a temporary folder, runs `make bench` there with `--venv` as
its VENV (an environment already set up for that commit makes set-up a no-op; a new path builds one), and times each
line of its output on one clock. Phases: set-up (until the bench command starts), the plan (until the first engine
starts loading), each engine's start (as the harness reports it: "engine ready in"), until the last engine is ready,
the measurement, and the report (from "summary" onwards). The host's load average is printed before and after: the
figures are only as quiet as the host. Every option is checked first (the dataset against the registry, the venv, the
output's folder, the ref), before anything is cloned or built: a bad one ends the study in one line, exit 2.

    python -m benchmarks study first-table [--ref HEAD] [--venv .venv] [--dataset humaneval] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.core.atomic import atomic_write_text
from benchmarks.core.environment import shown
from benchmarks.core.exit_codes import BadInput, Exit
from benchmarks.core.guarded import output_folder_problem
from benchmarks.core.paths import ROOT
from benchmarks.data.dataset_registry import DATASETS

READY = re.compile(r"\[(?P<label>[^\]]+)\] \S+ engine ready in (?P<s>[\d.]+) s")
BENCH = re.compile(r"-m benchmarks bench ")
MEASURED = re.compile(r"cells: 100%")  # the run's progress bar over cells, complete: what remains is the report


def clone(ref: str, into: Path) -> None:
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "--quiet", ref], check=True)


def timed_make(folder: Path, venv: Path, dataset: str) -> tuple[int, list[tuple[float, str]]]:
    """`make bench` in `folder`; its exit status and each output line with the seconds since it started."""
    lines: list[tuple[float, str]] = []
    t0 = time.monotonic()
    proc = subprocess.Popen(["make", "bench", f"DATASET={dataset}", f"VENV={venv}"], cwd=folder, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
    return proc.wait(), lines


def _first(lines: list[tuple[float, str]], pattern: re.Pattern[str], after: float = 0.0) -> float | None:
    return next((t for t, line in lines if t >= after and pattern.search(line)), None)


def phases(lines: list[tuple[float, str]], total: float) -> list[tuple[str, float | None]]:
    """Set-up, the plan, each engine's start, the measurement and the report, in seconds. An engine's start ends at
    its "ready" line and began the seconds it reports before; the plan is what precedes the first of them."""
    bench = _first(lines, BENCH) or 0.0
    ready = [(t, m["label"], float(m["s"])) for t, line in lines if (m := READY.search(line))]
    loading = min((t - s for t, _, s in ready), default=None)
    last_ready = max((t for t, _, _ in ready), default=None)
    measured = _first(lines, MEASURED, last_ready or bench)
    out: list[tuple[str, float | None]] = [("set-up (make setup)", bench),
                                           ("plan, until the engines start", None if loading is None else
                                            loading - bench)]
    out += [(f"engine start: {label} (the harness's own count)", s) for _, label, s in ready]
    out.append(("measurement, engines closed", None if measured is None or last_ready is None else
                measured - last_ready))
    out.append(("report", None if measured is None else total - measured))
    out.append(("total", total))
    return out


OUTPUT_ARGS: tuple[str, ...] = ()  # --out is a file: checked before any work (benchmarks/cli/__init__.py)
OUTPUT_FILE_ARGS = ("out",)
OUTPUTS: tuple[str, ...] = ()  # no output folder


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--ref", default="HEAD", help="the commit to clone (default HEAD)")
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv",
                    help="the clone's VENV (default this checkout's .venv: set-up is then a no-op when it is current)")
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--out", type=Path, help="write the phases and the timed output as JSON here too")
    ap.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")


def venv_problem(venv: Path) -> str | None:
    """Why `--venv` cannot be the clone's VENV (phrased to follow its name), or None: a file, FIFO or link loop in
    its place, a folder this user may not write, or a folder holding files that is not a venv (bootstrap would
    install into it)."""
    problem = output_folder_problem(venv)
    if problem:
        return problem
    if venv.is_dir() and not (venv / "pyvenv.cfg").is_file() and any(venv.iterdir()):
        return "is a folder that is not a venv (no pyvenv.cfg), and set-up would install into it"
    return None


def input_problems(args: argparse.Namespace) -> list[str]:
    """Every option's problem, one line each, checked before any set-up work (no clone, no venv): the dataset against
    the registry, the venv, the output file's folder, the ref against this repository."""
    problems = []
    if args.dataset not in DATASETS:
        problems.append(f"--dataset {shown(args.dataset)}: not a dataset of the registry; choose from "
                        f"{', '.join(sorted(DATASETS))}")
    venv = venv_problem(args.venv)
    if venv:
        problems.append(f"--venv {shown(str(args.venv))} {venv}; give a venv, or a new path to build one in")
    if args.out is not None and not args.out.parent.is_dir():
        problems.append(f"--out {shown(str(args.out))}: its folder does not exist")
    known = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", "--end-of-options",
                            f"{args.ref}^{{commit}}"], capture_output=True)
    if not args.ref or args.ref.startswith("-") or known.returncode != 0:
        problems.append(f"--ref {shown(args.ref)}: no commit of this repository has that name; give a branch, tag or "
                        "commit (e.g. --ref HEAD)")
    return problems


def main(args: argparse.Namespace) -> int:
    problems = input_problems(args)
    if problems:
        raise BadInput(problems)
    folder = Path(tempfile.mkdtemp(prefix="first-table-"))
    try:
        clone(args.ref, folder / "repo")
        load_before = os.getloadavg()
        t0 = time.monotonic()
        status, lines = timed_make(folder / "repo", args.venv.resolve(), args.dataset)
        total = time.monotonic() - t0
        load_after = os.getloadavg()
    finally:
        if args.keep:
            print(f"clone kept in {folder / 'repo'}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    result = phases(lines, total)
    print(f"make bench DATASET={args.dataset} in a fresh clone of {args.ref}, VENV={args.venv}: exit {status}")
    print("| phase | s |\n|---|---|")
    for name, seconds in result:
        print(f"| {name} | {'–' if seconds is None else f'{seconds:.1f}'} |")
    print(f"load average (1, 5, 15 min) before: {', '.join(f'{x:.1f}' for x in load_before)}; after: "
          f"{', '.join(f'{x:.1f}' for x in load_after)} ({os.cpu_count()} CPUs)")
    if args.out is not None:
        atomic_write_text(args.out, json.dumps({"ref": args.ref, "venv": str(args.venv), "status": status,
                                                "phases": result, "load_before": load_before,
                                                "load_after": load_after, "lines": lines}, indent=1))
    return Exit.OK if status == 0 else Exit.FAILED
