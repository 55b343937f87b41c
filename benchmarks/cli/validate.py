"""`validate`: check matrix files against the schema, the engines' options and this machine, without running."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.core.config import ConfigError, interleave_problem, load_matrix
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
        print(f"{path}: ok, {len(cells)} cells")
    return Exit.OK
