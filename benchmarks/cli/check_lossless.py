"""`check lossless`: the verdicts of a finished run, recomputed from its records: greedy speculative tokens
against AR, and the T > 0 distribution check."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.cli.report import run_folder
from benchmarks.core.exit_codes import Exit, worst


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("run_dir", type=Path, nargs="?", help="default: the latest run")


def main(args: argparse.Namespace) -> int:
    from benchmarks.analysis.summary import summarize
    from benchmarks.core.store import RunStore
    from verification.lossless import distribution_failures, divergent_rows, unchecked_rows, verdict_lines

    store = RunStore(run_folder(args.run_dir))
    rows = summarize(store.records(), store.manifest())
    checked = [r for r in rows if r["method"] != "baseline" and r["identical_frac"] is not None]
    for line in verdict_lines(rows):
        print(line)
    bad = divergent_rows(rows)
    print(f"lossless: {len(checked) - len(bad)} of {len(checked)} greedy (method, dataset) rows identical to AR "
          f"or differing only at numerical ties (docs/lossless.md)")
    sampled = [r for r in rows if r.get("dist_verdict") in ("pass", "FAIL")]
    failed = distribution_failures(rows)
    print(f"distribution: {len(sampled) - len(failed)} of {len(sampled)} sampled (method, dataset) rows pass")
    return worst(Exit.VIOLATION if bad or failed else Exit.OK, Exit.NOT_CHECKED if unchecked_rows(rows) else Exit.OK)
