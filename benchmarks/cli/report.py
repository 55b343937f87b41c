"""`report`: recompute a run's summary.csv, speculation_profile.json, report.md and figures from its records (any
old run)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from benchmarks.cli import shown
from benchmarks.cli.run import left_out_status, rendering_status, verdict_status
from benchmarks.config.matrix_parse import ConfigError
from benchmarks.core.exit_codes import worst
from benchmarks.core.guarded import file_problem
from benchmarks.core.paths import RUNS_DIR
from benchmarks.records.store import REPORT_OUTPUTS
from benchmarks.report.tables import results_table

# It writes into the run folder it reads (checked as a run, its outputs by report_write.check_outputs before any is
# written), not into an output folder of its own (benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS = REPORT_OUTPUTS


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("run_dir", type=Path, nargs="?", help="default: the latest run")


def run_folder(run_dir: Path | None) -> Path:
    """A run folder given on the command line (default the latest), resolved, or a one-line error naming what
    stands there instead (`guarded.file_problem` of the folder and of its manifest.json)."""
    given = run_dir or RUNS_DIR / "latest"
    fix = f"give a folder under {RUNS_DIR} made by `make bench` or `make matrix`"
    problem = file_problem(given)
    if problem is None:
        raise ConfigError(f"{shown(given)} is a file, not a run folder; {fix}")
    if not problem.startswith("is a folder"):
        raise ConfigError(f"{shown(given)} {problem}; {fix}")
    manifest = given / "manifest.json"
    problem = file_problem(manifest)
    if problem:
        raise ConfigError(f"{shown(manifest)} {problem}{': not a run folder' * (problem == 'does not exist')}; {fix}")
    return Path(os.path.realpath(given))


def main(args: argparse.Namespace) -> int:
    from benchmarks.report.report_write import write_reports  # lazy: imports matplotlib, pandas

    folder = run_folder(args.run_dir)
    written = write_reports(folder)
    report = written.summary
    print(results_table(report.rows))
    for line in report.verdicts.lines:
        print(line, file=sys.stderr)
    return worst(verdict_status(report), left_out_status(folder, report.left_out), rendering_status(written.failed))
