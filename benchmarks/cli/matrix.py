"""`matrix`: run a whole YAML matrix; rerunning it resumes its run folder."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.cli.run import add_run_args, run_and_report
from benchmarks.config.matrix_parse import load_matrix

OUTPUT_ARGS = ("run_dir",)  # checked before any work (benchmarks/cli/__init__.py)

def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("config", type=Path, help="a matrix file, e.g. configs/matrices/smoke.yaml")
    add_run_args(ap)


def main(args: argparse.Namespace) -> int:
    return run_and_report(load_matrix(args.config), args)
