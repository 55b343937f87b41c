"""`check lossless`: the verdicts of a finished run, recomputed from its records: greedy speculative tokens
against AR, and the T > 0 distribution check."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.analysis.summary import summarize_run
from benchmarks.cli.report import run_folder
from benchmarks.cli.run import exit_status, left_out_status
from benchmarks.core.exit_codes import worst
from benchmarks.records.store import RunStore

# It prints and writes no file (the declarations of benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("run_dir", type=Path, nargs="?", help="default: the latest run")


def main(args: argparse.Namespace) -> int:
    folder = run_folder(args.run_dir)
    summary = summarize_run(RunStore(folder))
    rows, verdicts = summary.rows, summary.verdicts
    checked = [r for r in rows if r.method != "baseline" and r.identical_frac is not None]
    for line in verdicts.lines:
        print(line)
    print(f"lossless: {len(checked) - len(verdicts.divergent)} of {len(checked)} greedy (method, dataset) rows "
          f"identical to AR or differing only at numerical ties (docs/lossless.md)")
    sampled = [r for r in rows if r.dist_verdict in ("pass", "FAIL")]
    print(f"distribution: {len(sampled) - len(verdicts.distribution_failed)} of {len(sampled)} sampled (method, "
          f"dataset) rows pass")
    return worst(exit_status(len(verdicts.failed), verdicts.violated, unchecked=bool(verdicts.unchecked)),
                 left_out_status(folder, summary.left_out))
