"""`figures`: the figures of the published numbers (results/reference/) and of a run.

With no option: the published figures and those of results/runs/latest. --published alone: only the published
ones; --run alone: only that run's. Published figures go to OUT (default results/figures), a run's figures to
OUT/runs/<run_id>/. A missing run is reported and the published figures are still made.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.core.exit_codes import Exit
from benchmarks.core.paths import FIGURES_DIR, RUNS_DIR


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--run", type=Path, help="run directory (default results/runs/latest when neither --run nor "
                                             "--published is given)")
    ap.add_argument("--out", type=Path, default=FIGURES_DIR,
                    help="output folder (default results/figures); a run's figures go to OUT/runs/<run_id>/")
    ap.add_argument("--published", action="store_true", help="make the figures of the published numbers")


def _run_id(run_dir: Path) -> str:
    manifest = run_dir / "manifest.json"
    if manifest.is_file():
        return str(json.loads(manifest.read_text(encoding="utf-8")).get("run_id") or run_dir.resolve().name)
    return run_dir.resolve().name


def main(args: argparse.Namespace) -> int:
    from benchmarks.analysis.figures import run_figures
    from benchmarks.analysis.published_figures import published_figures

    default_run = RUNS_DIR / "latest"
    want_published = args.published or args.run is None
    run_dir = args.run if args.run is not None else None if args.published else default_run
    status = Exit.OK
    if want_published:
        for path in published_figures(args.out):
            print(path)
    if run_dir is not None:
        if not (run_dir / "summary.csv").is_file():
            made = "made only the published figures" if want_published else "no figures made"
            print(f"figures: no summarised run at {run_dir} (no summary.csv); {made}.", file=sys.stderr)
            status = Exit.OK if run_dir.absolute() == default_run.absolute() else Exit.BAD_INPUT
        else:
            for path in run_figures(run_dir, args.out / "runs" / _run_id(run_dir)):
                print(path)
    return status
