"""What `bench` and `matrix` share: run options, the run folder (resume or fresh), running and reporting a matrix,
and the exit status of a run."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.core.config import EXECUTORS, ConfigError, Matrix, check_executor
from benchmarks.core.exit_codes import Exit, worst
from benchmarks.core.records import Cell


def add_run_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--run-dir", type=Path, help="default: results/runs/<name>-<config hash>")
    ap.add_argument("--allow-divergence", action="store_true",
                    help="do not fail when greedy speculative tokens differ from AR (still reported)")
    ap.add_argument("--allow-unchecked", action="store_true",
                    help="do not fail (exit 4) when a due check could not run: greedy identity without its baseline, "
                         "a T > 0 cell without distribution samples (still reported, with the reason)")
    ap.add_argument("--fresh", action="store_true",
                    help="measure every unit again, into a new run folder (default: resume the matrix's run)")
    ap.add_argument("--executor", choices=list(EXECUTORS),
                    help="where engines run: local (default) or ray (the cluster at RAY_ADDRESS, else a local Ray)")


def choose_run_dir(matrix: Matrix, cells: list[Cell], run_dir: Path | None, fresh: bool) -> Path:
    """The run folder, and what a rerun will do there: resume (say how much is done already) or measure afresh."""
    from benchmarks.core.matrix import run_id_for
    from benchmarks.core.paths import RUNS_DIR
    from benchmarks.core.store import RunStore

    if run_dir is None:
        run_dir = RUNS_DIR / run_id_for(matrix)
        if fresh:  # a new folder: the earlier run stays as it was
            run_dir = run_dir.with_name(f"{run_dir.name}-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}")
    store = RunStore(run_dir)
    units = [(c.cell_id, d.name) for c in cells for d in matrix.datasets]
    done = sum(store.is_done(*u) for u in units)
    if done and fresh:
        raise ConfigError(f"--fresh: {run_dir} already holds {done} measured unit(s); give a new --run-dir, or "
                          f"drop --run-dir to get a new folder")
    if done:
        print(f"resuming {run_dir}: {done} of {len(units)} (cell, dataset) units already done, not measured again "
              f"({len(units) - done} to run); FRESH=1 (--fresh) measures everything again into a new run folder",
              file=sys.stderr)
    return run_dir


def exit_status(failed: int, divergent: bool, allow_divergence: bool, unchecked: bool = False,
                allow_unchecked: bool = False) -> int:
    """VIOLATION for a divergence (unless allowed), NOT_CHECKED for a due check that could not run (unless
    allowed), FAILED for failed units, else OK: the worst code wins."""
    return worst(Exit.VIOLATION if divergent and not allow_divergence else Exit.OK,
                 Exit.NOT_CHECKED if unchecked and not allow_unchecked else Exit.OK,
                 Exit.FAILED if failed else Exit.OK)


def run_and_report(matrix: Matrix, args: argparse.Namespace) -> int:
    """Run a matrix (its executor overridden by --executor), write its reports, print the table and verdicts."""
    from benchmarks.analysis.report import results_table, write_reports
    from benchmarks.core.models import matrix_cells
    from benchmarks.core.store import latest_link
    from benchmarks.run.dispatch import run_matrix
    from verification.lossless import distribution_failures, divergent_rows, unchecked_rows, verdict_lines

    if args.executor:
        matrix = dataclasses.replace(matrix, executor=check_executor("--executor", args.executor, matrix.engines))
    resolved = matrix_cells(matrix)  # once: fingerprinting reads every model file
    run_dir, failed = run_matrix(matrix, choose_run_dir(matrix, resolved[0], args.run_dir, args.fresh),
                                 resolved=resolved)
    rows = write_reports(run_dir)
    print(results_table(rows))
    for line in verdict_lines(rows):
        print(line, file=sys.stderr)
    print(f"\nrun folder: {run_dir}\n  summary.csv, report.md, figures/ ({latest_link(run_dir)} points here)")
    divergent = bool(divergent_rows(rows) or distribution_failures(rows))
    if failed:
        print(f"{failed} (cell, dataset) unit(s) failed; see report.md. Rerun the same command to retry them.",
              file=sys.stderr)
    if divergent:
        print("speculative outputs differed from AR: greedy tokens or the sampled distribution (LOSSLESS VIOLATION "
              "or DISTRIBUTION CHECK FAILED above)" + ("; accepted by --allow-divergence" if args.allow_divergence
                                                      else ""), file=sys.stderr)
    unchecked = len({(r["engine"], r["label"], r["dataset"]) for r in unchecked_rows(rows)})
    if unchecked:
        print(f"{unchecked} due check(s) could not run (NOT CHECKED above, and in summary.csv `not_checked` and "
              f"report.md)" + ("; accepted by --allow-unchecked" if args.allow_unchecked
                               else "; --allow-unchecked accepts this (exit 4 otherwise)"), file=sys.stderr)
    return exit_status(failed, divergent, args.allow_divergence, bool(unchecked), args.allow_unchecked)
