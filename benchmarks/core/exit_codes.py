"""The exit status of every command of the harness, defined once."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from enum import IntEnum
from typing import NoReturn


class Exit(IntEnum):
    """What a command's exit status means; when several apply, the most serious wins (`worst`)."""

    OK = 0  # everything asked for ran and every due check passed
    FAILED = 1  # a unit or step failed to run (the others still ran); the run says whether a rerun may fix it
    BAD_INPUT = 2  # an argument, matrix, dataset or model that cannot run, one line per problem
    VIOLATION = 3  # a check failed: greedy tokens differ from AR, the T > 0 distribution check rejected, a study's
    #                criterion failed (--allow-divergence accepts a run's violations; they are still reported)
    NOT_CHECKED = 4  # a check the run was due could not run (the reason is printed and in report.md);
    #                  --allow-unchecked accepts it
    LACKING = 5  # the input is right as far as this machine can tell, but a model, draft or dataset it names is not
    #              here and the hub is out of reach; each line names the command that fetches it


class BadInput(ValueError):
    """Input a command cannot run (exit BAD_INPUT): each problem is one line of the message."""

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class Lacking(BadInput):
    """Input that this machine lacks what it names for (exit LACKING): each line says what, and how to fetch it."""


def run_alone(prog: str, add_cli_args: Callable[[argparse.ArgumentParser], None],
              main: Callable[[argparse.Namespace], int]) -> NoReturn:
    """A study run as `python -m <module>` where the CLI's own imports are missing: its options, its exit status,
    bad input as one error line."""
    parser = argparse.ArgumentParser(prog=prog)
    add_cli_args(parser)
    try:
        sys.exit(main(parser.parse_args()))
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(Exit.BAD_INPUT)


def worst(*codes: int) -> int:
    """The status of a command that met several outcomes: BAD_INPUT > LACKING > VIOLATION > NOT_CHECKED > FAILED >
    OK (BAD_INPUT and LACKING stop a run before it measures anything; `validate` meets them side by side)."""
    order = [Exit.OK, Exit.FAILED, Exit.NOT_CHECKED, Exit.VIOLATION, Exit.LACKING, Exit.BAD_INPUT]
    return max(codes, key=lambda c: order.index(Exit(c)), default=Exit.OK)


TABLE = "\n".join(f"  {e.value}  {line}" for e, line in (
    (Exit.OK, "success: everything ran, every due check passed"),
    (Exit.FAILED, "a unit or step failed to run (the others ran); the run says whether rerunning it may help"),
    (Exit.BAD_INPUT, "bad input (argument, matrix, dataset, model), one line per problem"),
    (Exit.VIOLATION, "a check failed: lossless/distribution violation, or a study's criterion (--allow-divergence)"),
    (Exit.NOT_CHECKED, "a due check could not run, with the reason (--allow-unchecked)"),
    (Exit.LACKING, "this machine lacks a model, draft or dataset the input names (not cached, hub out of reach); "
                   "each line names the command that fetches it"),
))
