"""`matrix`: run a whole YAML matrix; rerunning it resumes its run folder. Where vLLM is absent
(`catalog.vllm_absence`), a matrix that names no engine runs the JAX engine, and the first line says so; one that names
an engine needing vLLM is refused before any work, with the reason (`benchmarks.config.run_keys.engines`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.cli.run import add_run_args, run_and_report
from benchmarks.config.matrix_parse import absent_default_note, load_matrix
from benchmarks.engines import catalog
from benchmarks.records.store import RUN_OUTPUTS

OUTPUT_ARGS = ("run_dir",)  # checked before any work (benchmarks/cli/__init__.py)
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS = RUN_OUTPUTS  # what it writes into the run folder


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("config", type=Path, help="a matrix file, e.g. configs/matrices/smoke.yaml")
    add_run_args(ap)


def main(args: argparse.Namespace) -> int:
    absent = catalog.vllm_absence()
    matrix = load_matrix(args.config, absent)
    note = absent_default_note(matrix, absent)
    if note is not None:
        print(f"matrix: {note}", flush=True)
    return run_and_report(matrix, args)
