"""`check published`: a run's summary against the published DFlash numbers, compared only under the same
conditions (verification/published.py, benchmarks/analysis/published_report.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.core.config import ConfigError
from benchmarks.core.exit_codes import Exit
from benchmarks.core.store import read_manifest


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("run_dir", type=Path, help="results/runs/<run_id> (summary.csv and manifest.json)")


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    from benchmarks.analysis.published_report import comparison_markdown

    summary_path, manifest_path = args.run_dir / "summary.csv", args.run_dir / "manifest.json"
    for path in (summary_path, manifest_path):
        if not path.is_file():
            raise ConfigError(f"{path} does not exist; give a run folder that `make bench` or `make matrix` wrote")
    manifest = read_manifest(manifest_path, need=())
    try:
        table = comparison_markdown(pd.read_csv(summary_path), manifest)
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{summary_path} is not a summary.csv of this harness ({type(exc).__name__}: {exc}); give "
                          f"a run folder that `make bench` or `make matrix` wrote") from None
    print(f"# Published numbers vs run {manifest.get('run_id', args.run_dir.name)}\n")
    print(table)
    return Exit.OK
