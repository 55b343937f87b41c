"""What `bench` and `matrix` share, in the order a run goes: options → plan → execute → report → exit status."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.config.matrix_parse import Matrix
from benchmarks.config.placement_keys import EXECUTORS, check_executor
from benchmarks.core.exit_codes import Exit, worst
from benchmarks.records.records import rerun_may_help
from benchmarks.records.store import RunStore, latest_link
from benchmarks.records.summary_row import SummaryRow
from benchmarks.report.capacity_report import capacity_lines
from benchmarks.report.tables import results_table


def add_run_args(ap: argparse.ArgumentParser) -> None:
    ap.epilog = ("exit status: 0 ran and every due check passed, 1 a unit failed, 2 bad input, 3 a check failed, 4 a "
                 "due check could not run, 5 this machine lacks a model, draft or dataset the input names (each "
                 "'lacking:' line names the command that fetches it); `python -m benchmarks --help` says more")
    ap.add_argument("--run-dir", type=Path, help="default: results/runs/<name>-<config hash>")
    ap.add_argument("--plan", action="store_true",
                    help="print what would run and what is already done in the run folder, and stop")
    ap.add_argument("--allow-divergence", action="store_true",
                    help="do not fail when greedy speculative tokens differ from AR (still reported)")
    ap.add_argument("--allow-unchecked", action="store_true",
                    help="do not fail (exit 4) when a due check could not run: greedy identity without its baseline, "
                         "a T > 0 cell without distribution samples (still reported, with the reason)")
    ap.add_argument("--fresh", action="store_true",
                    help="measure every unit again, into a new run folder (default: resume the matrix's run)")
    ap.add_argument("--reuse-run-dir", action="store_true",
                    help="measure into a --run-dir that holds a run of another matrix (its units of cells not in "
                         "this matrix move to units/superseded/); refused without it")
    ap.add_argument("--executor", choices=list(EXECUTORS),
                    help="where engines run: local (default) or ray (the cluster at RAY_ADDRESS, else a local Ray)")


def exit_status(failed: int, divergent: bool, allow_divergence: bool = False, unchecked: bool = False,
                allow_unchecked: bool = False) -> int:
    """VIOLATION for a divergence (unless allowed), NOT_CHECKED for a due check that could not run (unless
    allowed), FAILED for failed units, else OK: the worst code wins."""
    return worst(Exit.VIOLATION if divergent and not allow_divergence else Exit.OK,
                 Exit.NOT_CHECKED if unchecked and not allow_unchecked else Exit.OK,
                 Exit.FAILED if failed else Exit.OK)


def verdict_status(report: Any, allow_divergence: bool = False, allow_unchecked: bool = False) -> int:
    """The exit status a written report's verdicts give (`report`, `check lossless`): a failed unit is FAILED, a
    due check with no rows NOT_CHECKED, a violation VIOLATION."""
    v = report.verdicts
    return exit_status(len(v.failed), v.violated, allow_divergence, bool(v.unchecked), allow_unchecked)


def left_out_status(run_dir: Path, left_out: Sequence[str]) -> int:
    """NOT_CHECKED, with a line on stderr, when unit files of a run's own cells were left out of its records
    (`left_out`: damaged, each named above as it was read): what a command shows of the run lacks them. OK
    otherwise."""
    if left_out:
        print(f"{len(left_out)} unit file(s) of {run_dir} left out of the records (named above): what is shown lacks "
              f"them (exit {int(Exit.NOT_CHECKED)})", file=sys.stderr)
    return Exit.NOT_CHECKED if left_out else Exit.OK


def rendering_status(failed: Sequence[tuple[str, str]]) -> int:
    """FAILED, with a line on stderr per output whose rendering raised (a figure, a group of figures, report.md);
    OK when every output was written."""
    for name, error in failed:
        print(f"error: {name} could not be rendered ({error}); the run's other outputs were written (exit "
              f"{int(Exit.FAILED)})", file=sys.stderr)
    return Exit.FAILED if failed else Exit.OK


def latest_note(run_dir: Path) -> str:
    """Where `latest` stands with respect to a finished run, as it is now: here, at another run that moved it since
    (two runs at once in one runs folder), not a link the harness made, or not moved (the run holds no unit)."""

    latest = latest_link()
    target = latest.resolve() if latest.is_symlink() else None
    if target == run_dir.resolve():
        return f"{latest} points here"
    if not RunStore(run_dir).safe_units():
        return f"{latest} not moved: the run holds no unit"
    if target is None:
        return f"{latest} not moved: it is {'not a link the harness made' if latest.exists() else 'missing'}"
    return f"{latest} points at {target}: another run moved it since this one wrote its first unit"


def retry_advice(failed_rows: list[SummaryRow]) -> str:
    """Whether rerunning the command would help the failed units (`records.rerun_may_help`): only those whose
    cause may pass on a retry are offered one; the rest are named as failing the same way again."""

    lasting = [r for r in failed_rows if not rerun_may_help(r.error or "")]
    if not lasting:
        return "Rerun the same command to retry them."
    names = ", ".join(sorted({f"{r.label} on {r.dataset}" for r in lasting}))
    again = (f"{names} failed on their input or set-up and would fail the same way on a rerun: fix the cause "
             f"report.md gives, then rerun")
    return again + ("; the others may pass on a rerun of the same command." if len(lasting) < len(failed_rows)
                    else ".")


def run_and_report(matrix: Matrix, args: argparse.Namespace) -> int:
    """Plan the matrix (its executor overridden by --executor), run it, write its reports, print the table and
    verdicts, and map them to the exit status."""
    from benchmarks.report.report_write import write_reports  # lazy: imports matplotlib, pandas
    from benchmarks.run.execute import execute  # lazy: imports tqdm
    from benchmarks.run.plan import build_plan  # lazy: imports tqdm

    if args.executor:
        matrix = dataclasses.replace(matrix, executor=check_executor("--executor", args.executor, matrix.engines))
    plan = build_plan(matrix, args.run_dir, fresh=args.fresh, reuse=args.reuse_run_dir)
    if args.plan:
        print(plan.describe())
        return Exit.OK
    result = execute(plan)
    if result.stopped:
        print(f"error: {result.stopped}", file=sys.stderr)
    try:
        written = write_reports(result.run_dir)
    except OSError as exc:
        print(f"error: the report of {result.run_dir} could not be written ({exc}); `python -m benchmarks report "
              f"{result.run_dir}` writes it once there is room", file=sys.stderr)
        return Exit.FAILED
    report = written.summary
    verdicts = report.verdicts
    if report.rows or not report.capacities:
        print(results_table(report.rows))
    for line in capacity_lines(report.capacities):
        print(line)
    for line in verdicts.lines:
        print(line, file=sys.stderr)
    print(f"\nrun folder: {result.run_dir}\n  summary.csv, speculation_profile.json, report.md, figures/"
          + (", capacity.json" if report.capacities else "") + f" ({latest_note(result.run_dir)})")
    if result.failed:
        print(f"{result.failed} (cell, dataset) unit(s) failed; see report.md. {retry_advice(verdicts.failed)}",
              file=sys.stderr)
    if verdicts.violated:
        print("speculative outputs differed from AR: greedy tokens or the sampled distribution (LOSSLESS VIOLATION "
              "or DISTRIBUTION CHECK FAILED above)" + ("; accepted by --allow-divergence" if args.allow_divergence
                                                      else ""), file=sys.stderr)
    if verdicts.unchecked:
        print(f"{verdicts.unchecked_cells} due check(s) could not run (NOT CHECKED above, and in summary.csv "
              f"`not_checked` and report.md)" + ("; accepted by --allow-unchecked" if args.allow_unchecked
                                                 else "; --allow-unchecked accepts this (exit 4 otherwise)"),
              file=sys.stderr)
    # a run that stopped failed; the checks its missing units were due follow from that, not from the method
    return worst(exit_status(result.failed, verdicts.violated, args.allow_divergence,
                             bool(verdicts.unchecked) and not result.stopped, args.allow_unchecked),
                 rendering_status(written.failed))
