"""`study kflat`: the command of benchmarks/studies/kflat.py, its options checked before anything loads."""
from __future__ import annotations

import argparse

from benchmarks.core.exit_codes import BadInput
from benchmarks.studies import kflat
from benchmarks.studies.kflat import add_cli_args

__all__ = ["add_cli_args", "main"]


def option_problems(args: argparse.Namespace) -> list[str]:
    """The options the study would take at face value or fail on late, one line each."""
    problems = [f"--{name} {value}: expected an int >= {low}" for name, value, low in
                (("repeats", args.repeats, 1), ("warmup", args.warmup, 0)) if value is not None and value < low]
    problems += [f"--batch {b}: expected an int >= 1" for b in args.batch or () if b < 1]
    problems += [f"--{name} {value}: expected an int >= 0 (tokens{' proposed per step' if name == 'ks' else ''})"
                 for name, values in (("ks", args.ks), ("contexts", args.contexts)) for value in values or ()
                 if value < 0]
    if args.model is not None and not (args.model / "config.json").is_file():
        problems.append(f"--model {args.model}: not a model folder (no config.json); give an HF checkpoint folder")
    return problems


def main(args: argparse.Namespace) -> int:
    problems = option_problems(args)
    if problems:
        raise BadInput(problems)
    return kflat.main(args)
