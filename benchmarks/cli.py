"""One entry point: `python -m benchmarks {bench,matrix,report,validate}`.

Exit codes: 0 success; 1 a (cell, dataset) unit failed; 2 bad input (config, dataset, model);
3 a greedy speculative output diverged from AR, or a sampled one failed the distribution check (pass
--allow-divergence to accept, e.g. bf16 on accelerators).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.config import ConfigError, Matrix, load_matrix, parse_matrix
from benchmarks.datasets import DatasetUnavailable
from benchmarks.records import SHARED_PROCESS_ENGINES


def default_preset() -> str:
    from benchmarks.provenance import detect_platform

    return "tiny" if detect_platform() == "cpu" else "qwen3-4b"


def bench_matrix(args: argparse.Namespace) -> Matrix:
    """The one-dataset shortcut, expressed as a matrix over the same machinery."""
    raw: dict[str, Any] = {"name": f"bench-{args.dataset}", "preset": args.preset or default_preset(),
                           "datasets": [args.dataset]}
    if args.engine:
        raw["engine"] = args.engine
        raw["interleave"] = args.engine in SHARED_PROCESS_ENGINES  # cells side by side wherever the engine allows
    if args.methods:
        raw["methods"] = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.k:
        raw["k"] = [int(k) for k in args.k.split(",")]
    for key in ("num_prompts", "max_new_tokens", "temperature", "seed"):
        if getattr(args, key) is not None:
            raw[key] = getattr(args, key)
    return parse_matrix(raw, source=f"make bench DATASET={args.dataset}")


def run_and_report(matrix: Matrix, run_dir: Path | None, allow_divergence: bool) -> int:
    from benchmarks.report import results_table, write_reports
    from benchmarks.runner import run_matrix
    from verification.lossless import distribution_failures, divergent_rows, verdict_lines

    run_dir, failed = run_matrix(matrix, run_dir)
    rows = write_reports(run_dir)
    print(results_table(rows))
    for line in verdict_lines(rows):
        print(line, file=sys.stderr)
    print(f"\nrun folder: {run_dir}\n  summary.csv, report.md, figures/ (results/runs/latest points here)")
    if failed:
        print(f"{failed} (cell, dataset) unit(s) failed; see report.md. Rerun the same command to retry them.",
              file=sys.stderr)
        return 1
    if (divergent_rows(rows) or distribution_failures(rows)) and not allow_divergence:
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description="DFlash speculative decoding benchmarks")
    sub = ap.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("bench", help="one dataset with a preset (make bench DATASET=...)")
    b.add_argument("--dataset", required=True)
    b.add_argument("--preset", help="configs/presets/<name>.yaml (default: tiny on CPU, qwen3-4b elsewhere)")
    b.add_argument("--engine", choices=["vllm", "jax"])
    b.add_argument("--methods", help="comma-separated, e.g. baseline,dflash,eagle3")
    b.add_argument("--k", help="comma-separated K values")
    b.add_argument("--n", dest="num_prompts", type=int)
    b.add_argument("--max-new-tokens", type=int)
    b.add_argument("--temperature", type=float)
    b.add_argument("--seed", type=int)

    m = sub.add_parser("matrix", help="run a whole YAML matrix (resumes a previous run of it)")
    m.add_argument("config", type=Path)

    for p in (b, m):
        p.add_argument("--run-dir", type=Path, help="default: results/runs/<name>-<config hash>")
        p.add_argument("--allow-divergence", action="store_true",
                       help="do not fail when greedy speculative tokens differ from AR (still reported)")

    r = sub.add_parser("report", help="recompute summary.csv, report.md and figures from a run's records")
    r.add_argument("run_dir", type=Path, nargs="?", default=Path("results/runs/latest"))

    v = sub.add_parser("validate", help="validate matrix files without running anything")
    v.add_argument("configs", type=Path, nargs="+")

    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # keep progress bars and tables readable
    try:
        if args.cmd == "validate":
            from benchmarks.matrix import expand

            for path in args.configs:
                print(f"{path}: ok, {len(expand(load_matrix(path)))} cells")
            return 0
        if args.cmd == "report":
            from benchmarks.report import results_table, write_reports

            print(results_table(write_reports(args.run_dir.resolve())))
            return 0
        matrix = bench_matrix(args) if args.cmd == "bench" else load_matrix(args.config)
        return run_and_report(matrix, args.run_dir, args.allow_divergence)
    except (ConfigError, DatasetUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
