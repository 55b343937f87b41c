"""`check published`: a run's summary against the published DFlash and draft-tree (DDTree) numbers, compared only
under the same conditions (verification/published.py, benchmarks/report/published_report.py), recomputed from its
records; a run whose tree rows match nothing gets the published tree table at its datasets."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.analysis.summary import summarize_run
from benchmarks.cli.report import run_folder
from benchmarks.cli.run import left_out_status
from benchmarks.records.store import RunStore

# It prints and writes no file (the declarations of benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("run_dir", type=Path, help="results/runs/<run_id> (its records and manifest.json)")


def main(args: argparse.Namespace) -> int:
    from benchmarks.analysis.summary_csv import summary_frame  # lazy: imports pandas
    from benchmarks.report.published_report import comparison_markdown  # lazy: imports pandas

    folder = run_folder(args.run_dir)
    summary = summarize_run(RunStore(folder))
    print(f"# Published numbers vs run {summary.manifest.run_id or folder.name}\n")
    print(comparison_markdown(summary_frame(summary.rows), summary.manifest))
    return left_out_status(folder, summary.left_out)
