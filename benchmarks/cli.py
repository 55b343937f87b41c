"""One entry point: `python -m benchmarks {bench,matrix,report,validate}`.

Exit codes: 0 success; 1 a (cell, dataset) unit failed; 2 bad input (an argument, config, dataset or model; one
line naming what is wrong and what is allowed); 3 a greedy speculative output diverged from AR, or a sampled one
failed the distribution check (pass --allow-divergence to accept, e.g. bf16 on accelerators). A run with both failed
units and a divergence says both and exits 3: a wrong output is a correctness fault of a finished measurement, a
failed unit is retried by rerunning.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

from benchmarks.config import EXECUTORS, ConfigError, Matrix, check_executor, load_matrix, parse_matrix
from benchmarks.datasets import DatasetUnavailable
from benchmarks.records import Cell


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments end in one line on stderr and exit status 2 (argparse would print the usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def k_list(text: str) -> list[int]:
    """--k: comma-separated K values (each checked against the matrix rules afterwards)."""
    try:
        return [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 3,7,15, got {text!r}") from None


def default_preset() -> str:
    from benchmarks.provenance import detect_platform

    return "tiny" if detect_platform() == "cpu" else "qwen3-4b"


def bench_interleaves(engine: str) -> bool:
    """Whether `make bench` loads its cells side by side: always for JAX (one process), for vLLM on CPU (one worker
    per cell); vLLM on a TPU cannot (one process owns the chip), on a GPU only with gpu_memory_utilization split."""
    from benchmarks.provenance import detect_platform

    return engine == "jax" or detect_platform() == "cpu"


def bench_matrix(args: argparse.Namespace) -> Matrix:
    """The one-dataset shortcut, expressed as a matrix over the same machinery."""
    raw: dict[str, Any] = {"name": f"bench-{args.dataset}", "preset": args.preset or default_preset(),
                           "datasets": [args.dataset]}
    if args.engine:
        raw["engine"] = args.engine
    raw["interleave"] = bench_interleaves(args.engine or "vllm")
    if args.methods is not None:
        raw["methods"] = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.k is not None:
        raw["k"] = args.k
    for key in ("num_prompts", "max_new_tokens", "temperature", "seed"):
        if getattr(args, key) is not None:
            raw[key] = getattr(args, key)
    return parse_matrix(raw, source=f"make bench DATASET={args.dataset}")


def choose_run_dir(matrix: Matrix, cells: list[Cell], run_dir: Path | None, fresh: bool) -> Path:
    """The run folder, and what a rerun will do there: resume (say how much is done already) or measure afresh."""
    from benchmarks.runner import run_id_for
    from benchmarks.store import RUNS_DIR, RunStore

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


def exit_status(failed: int, divergent: bool, allow_divergence: bool) -> int:
    """3 for a divergence (unless allowed), else 1 for failed units, else 0: the more serious code wins."""
    if divergent and not allow_divergence:
        return 3
    return 1 if failed else 0


def run_and_report(matrix: Matrix, run_dir: Path | None, allow_divergence: bool, fresh: bool = False) -> int:
    from benchmarks.report import results_table, write_reports
    from benchmarks.runner import matrix_cells, run_matrix
    from benchmarks.store import latest_link
    from verification.lossless import distribution_failures, divergent_rows, verdict_lines

    resolved = matrix_cells(matrix)  # once: fingerprinting reads every model file
    run_dir, failed = run_matrix(matrix, choose_run_dir(matrix, resolved[0], run_dir, fresh), resolved=resolved)
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
              "or DISTRIBUTION CHECK FAILED above)" + ("; accepted by --allow-divergence" if allow_divergence else ""),
              file=sys.stderr)
    return exit_status(failed, divergent, allow_divergence)


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m benchmarks", description="DFlash speculative decoding benchmarks")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=OneLineParser)

    b = sub.add_parser("bench", help="one dataset with a preset (make bench DATASET=...)")
    b.add_argument("--dataset", required=True)
    b.add_argument("--preset", help="configs/presets/<name>.yaml (default: tiny on CPU, qwen3-4b elsewhere)")
    b.add_argument("--engine", choices=["vllm", "jax"])
    b.add_argument("--methods", help="comma-separated, e.g. baseline,dflash,eagle3")
    b.add_argument("--k", type=k_list, help="comma-separated K values")
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
        p.add_argument("--fresh", action="store_true",
                       help="measure every unit again, into a new run folder (default: resume the matrix's run)")
        p.add_argument("--executor", choices=list(EXECUTORS),
                       help="where engines run: local (default) or ray (the cluster at RAY_ADDRESS, else a local Ray)")

    r = sub.add_parser("report", help="recompute summary.csv, report.md and figures from a run's records")
    r.add_argument("run_dir", type=Path, nargs="?", help="default: the latest run")

    v = sub.add_parser("validate", help="validate matrix files without running anything")
    v.add_argument("configs", type=Path, nargs="+")

    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # keep progress bars and tables readable
    try:
        if args.cmd == "validate":
            from benchmarks.config import interleave_problem
            from benchmarks.matrix import expand
            from benchmarks.provenance import detect_platform

            for path in args.configs:
                matrix = load_matrix(path)
                cells = expand(matrix)
                problem = interleave_problem(matrix, [c.engine for c in cells], detect_platform())
                if problem:
                    raise ConfigError(f"{problem} (on this {detect_platform()} machine)")
                print(f"{path}: ok, {len(cells)} cells")
            return 0
        if args.cmd == "report":
            from benchmarks.report import results_table, write_reports
            from benchmarks.store import RUNS_DIR

            run_dir = (args.run_dir or RUNS_DIR / "latest").resolve()
            if not (run_dir / "manifest.json").is_file():
                raise ConfigError(f"{run_dir}: not a run folder (no manifest.json); give a folder under "
                                  f"{RUNS_DIR} made by `make bench` or `make matrix`")
            print(results_table(write_reports(run_dir)))
            return 0
        matrix = bench_matrix(args) if args.cmd == "bench" else load_matrix(args.config)
        if args.executor:
            matrix = dataclasses.replace(matrix, executor=check_executor("--executor", args.executor, matrix.engines))
        return run_and_report(matrix, args.run_dir, args.allow_divergence, args.fresh)
    except (ConfigError, DatasetUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
