"""`tiny build`: random or oracle tiny checkpoints in the engines' formats, no training (seconds)."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.core.cells import MAX_SEED
from benchmarks.core.exit_codes import BadInput, Exit
from benchmarks.core.numbers import Bounded
from benchmarks.data.tiny_checkpoints import build_pair

# target/ (an HF checkpoint and tokenizer: transformers names its files), dflash/, eagle3/ (benchmarks/cli/__init__.py)
OUTPUT_ARGS = ("out_dir",)
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS = ("target/*", "dflash/config.json", "dflash/model.safetensors", "eagle3/config.json",
           "eagle3/model.safetensors")


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--seed", type=Bounded(int, 0, MAX_SEED), default=0)
    ap.add_argument("--oracle", action="store_true", help="target and draft always emit the same token")
    ap.add_argument("--force", action="store_true", help="write into a folder that is not empty (replacing its "
                                                         "checkpoints, trained ones included)")


def main(args: argparse.Namespace) -> int:
    out = args.out_dir
    if out.exists() and not out.is_dir():
        raise BadInput(f"{out} is a file; give a new or empty folder")
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise BadInput(f"{out} is not empty (its checkpoints would be replaced by untrained ones); give a new or "
                       f"empty folder, or --force to replace them")
    for name, path in build_pair(args.out_dir, args.seed, args.oracle).items():
        print(f"{name}: {path}")
    return Exit.OK
