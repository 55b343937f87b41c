"""`validate`: check matrix files against the schema, the engines' options and this machine, without running.

vLLM's option names are data (benchmarks/core/engine_options.py), so they are checked whether or not vLLM imports
here; each line says which vLLM release's arguments a matrix with a vLLM engine was checked against."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.core import catalog
from benchmarks.core.config import ConfigError, interleave_problem, load_matrix
from benchmarks.core.engine_options import vllm_release_checked
from benchmarks.core.exit_codes import Exit
from benchmarks.core.matrix import expand
from benchmarks.core.provenance import detect_platform


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("configs", type=Path, nargs="+", help="matrix files, e.g. configs/matrices/*.yaml")


def main(args: argparse.Namespace) -> int:
    platform = detect_platform()
    for path in args.configs:
        matrix = load_matrix(path)
        cells = expand(matrix)
        problem = interleave_problem(matrix, [c.engine for c in cells], platform)
        if problem:
            raise ConfigError(f"{problem} (on this {platform} machine)")
        against = ""
        if any(catalog.engine(e).base == "vllm" for e in matrix.engines):
            release, why = vllm_release_checked()
            against = f"; vLLM options checked against vLLM {release}'s engine arguments ({why})"
        print(f"{path}: ok, {len(cells)} cells{against}")
    return Exit.OK
