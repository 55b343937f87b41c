"""`report`: recompute a run's summary.csv, speculation_profile.json, report.md and figures from its records (any
old run)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.core.config import ConfigError
from benchmarks.core.paths import RUNS_DIR


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("run_dir", type=Path, nargs="?", help="default: the latest run")


def run_folder(run_dir: Path | None) -> Path:
    """A run folder given on the command line (default the latest), or a one-line error."""
    try:
        run_dir = (run_dir or RUNS_DIR / "latest").resolve()
    except (RuntimeError, OSError):  # a link loop
        raise ConfigError(f"{run_dir}: a link that loops back on itself; give a run folder") from None
    if not (run_dir / "manifest.json").is_file():
        raise ConfigError(f"{run_dir}: not a run folder (no manifest.json); give a folder under {RUNS_DIR} made by "
                          f"`make bench` or `make matrix`")
    return run_dir


def main(args: argparse.Namespace) -> int:
    from benchmarks.analysis.report import write_reports
    from benchmarks.analysis.tables import results_table
    from benchmarks.cli.run import verdict_status

    report = write_reports(run_folder(args.run_dir))
    print(results_table(report.rows))
    for line in report.verdicts.lines:
        print(line, file=sys.stderr)
    return verdict_status(report)
