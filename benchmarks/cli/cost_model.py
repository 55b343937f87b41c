"""`cost-model`: DFlash's predicted speedup against K from a run's per-position acceptance and step times, beside
the measured one (benchmarks/analysis/cost_model.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.cli.report import run_folder
from benchmarks.core.exit_codes import Exit


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--kflat", type=Path,
                    help="a kflat.csv (python -m benchmarks study kflat): the shape of t_verify(K) at the Ks not run")


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    from benchmarks.analysis.cost_model import cost_model_markdown
    from benchmarks.analysis.summary import summarize
    from benchmarks.core.store import RunStore

    store = RunStore(run_folder(args.run_dir))
    manifest, records = store.manifest(), store.records()
    kflat = pd.read_csv(args.kflat) if args.kflat else None
    print(cost_model_markdown(summarize(records, manifest), records, manifest, kflat))
    return Exit.OK
