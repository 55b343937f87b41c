"""`figures`: the figures of the published numbers (results/reference/: DFlash's tables, the K-flat claim, DDTree
against DFlash at each published temperature) and of a run.

With no option: the published figures and those of results/runs/latest. --published alone: only the published
ones; --run alone: only that run's, recomputed from its records. Published figures go to OUT (default
results/figures), a run's figures to OUT/runs/<the run folder's name>/ (nothing read from the folder chooses a path).
A missing run is reported and the published figures are still made.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from benchmarks.core.exit_codes import BadInput, Exit, worst
from benchmarks.core.guarded import output_folder_problem
from benchmarks.core.paths import FIGURES_DIR, RUNS_DIR

# The published figures into --out, a run's into --out/runs/<run folder name>/ (benchmarks/cli/__init__.py)
OUTPUT_ARGS = ("out",)
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS = ("*.png", "runs/*/*.png")


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--run", type=Path, help="run directory (default results/runs/latest when neither --run nor "
                                             "--published is given)")
    ap.add_argument("--out", type=Path, default=FIGURES_DIR,
                    help="output folder (default results/figures); a run's figures go to OUT/runs/<run folder name>/")
    ap.add_argument("--published", action="store_true", help="make the figures of the published numbers")


def main(args: argparse.Namespace) -> int:
    from benchmarks.analysis.summary import summarize_run  # lazy: imports numpy, packaging, scipy
    from benchmarks.cli.report import run_folder  # lazy: imports numpy, packaging, scipy, yaml
    from benchmarks.cli.run import left_out_status, rendering_status  # lazy: imports numpy, packaging, scipy, yaml
    from benchmarks.figures.published_figures import published_figures  # lazy: imports matplotlib, numpy, pandas, scipy
    from benchmarks.figures.run_figures import run_figures  # lazy: imports matplotlib, numpy, packaging, pandas, scipy
    from benchmarks.records.store import RunStore  # lazy: imports numpy, packaging, scipy

    default_run = RUNS_DIR / "latest"
    want_published = args.published or args.run is None
    run_dir = args.run if args.run is not None else None if args.published else default_run
    status: int = Exit.OK
    latest = run_dir is not None and run_dir.absolute() == default_run.absolute()  # may not exist yet
    missing = latest and run_dir is not None and not os.path.lexists(run_dir / "manifest.json")
    folder = run_folder(run_dir) if run_dir is not None and not missing else None  # checked before any figure
    if folder is not None:  # and where its figures go, before any figure is drawn
        problem = output_folder_problem(args.out / "runs" / folder.name)
        if problem:
            raise BadInput([f"--out {args.out}: the run's figures go to {args.out / 'runs' / folder.name}, which "
                            f"{problem}; give another --out"])
    if want_published:
        for path in published_figures(args.out):
            print(path)
    if missing:
        made = "made only the published figures" if want_published else "no figures made"
        print(f"figures: no summarised run at {run_dir} (no manifest.json to read its records by); {made}.",
              file=sys.stderr)
        return status
    if folder is not None:
        summary = summarize_run(RunStore(folder))
        drawn = run_figures(summary, args.out / "runs" / folder.name)
        for path in drawn.paths:
            print(path)
        status = worst(left_out_status(folder, summary.left_out), rendering_status(drawn.failed))
    return status
