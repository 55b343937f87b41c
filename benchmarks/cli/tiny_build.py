"""`tiny build`: random or oracle tiny checkpoints in the engines' formats, no training (seconds)."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.core.exit_codes import Exit
from benchmarks.core.tiny_checkpoints import build_pair


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--oracle", action="store_true", help="target and draft always emit the same token")


def main(args: argparse.Namespace) -> int:
    for name, path in build_pair(args.out_dir, args.seed, args.oracle).items():
        print(f"{name}: {path}")
    return Exit.OK
