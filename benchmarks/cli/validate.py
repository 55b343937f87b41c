"""`validate`: check matrix files against the schema, the engines' options, this machine and the files and models
they name (benchmarks/core/inputs.py: the same checks the run plan makes before it writes anything), without
running; every file is checked, one line per problem.

vLLM's option names are data (benchmarks/core/engine_options.py), so they are checked whether or not vLLM imports
here; each line says which vLLM release's arguments a matrix with a vLLM engine was checked against."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.core import catalog
from benchmarks.core.config import load_matrix
from benchmarks.core.engine_options import vllm_release_checked
from benchmarks.core.exit_codes import BadInput, Exit
from benchmarks.core.inputs import check_inputs
from benchmarks.core.matrix import expand, matrix_warnings
from benchmarks.core.placement import interleave_problem
from benchmarks.core.provenance import detect_platform


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("configs", type=Path, nargs="+", help="matrix files, e.g. configs/matrices/*.yaml")


def main(args: argparse.Namespace) -> int:
    platform = detect_platform()
    bad = False
    for path in args.configs:
        try:
            matrix = load_matrix(path)
            cells = expand(matrix)
            problem = interleave_problem(matrix, [c.engine for c in cells], platform)
            problems = ([f"{problem} (on this {platform} machine)"] if problem else []) + check_inputs(matrix)
        except BadInput as exc:
            problems = exc.problems
        if problems:
            bad = True
            for line in problems:
                print(f"error: {line}", file=sys.stderr)
            continue
        against = ""
        if any(catalog.engine(e).base == "vllm" for e in matrix.engines):
            release, why = vllm_release_checked()
            against = f"; vLLM options checked against vLLM {release}'s engine arguments ({why})"
        print(f"{path}: ok, {len(cells)} cells{against}")
        for line in matrix_warnings(matrix):
            print(f"warning: {path}: {line}", file=sys.stderr)
    return Exit.BAD_INPUT if bad else Exit.OK
