"""`bench`: one dataset with a preset, expressed as a matrix over the same machinery (`make bench DATASET=...`)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from benchmarks.cli import shown
from benchmarks.cli.run import add_run_args, run_and_report
from benchmarks.config.matrix_parse import Matrix, parse_matrix
from benchmarks.config.matrix_schema import KEYS
from benchmarks.config.run_keys import MAX_SEED
from benchmarks.core.numbers import Bounded
from benchmarks.engines import catalog
from benchmarks.hardware.provenance import detect_platform
from benchmarks.records.store import RUN_OUTPUTS

# The keys whose `bench` option bench_matrix reads itself; every other one's option given (its value under the key's
# name) is the key's value. --executor is the run's (`run_and_report`).
READ_HERE = ("datasets", "preset", "methods", "executor")


OUTPUT_ARGS = ("run_dir",)  # checked before any work (benchmarks/cli/__init__.py)
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS = RUN_OUTPUTS  # what it writes into the run folder


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """`bench`'s options: one per matrix key it sets (the key's declared `bench` option, read into the key's name
    but for --dataset), then the run's."""
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--preset", help="configs/presets/<name>.yaml (default: tiny on CPU, qwen3-4b elsewhere)")
    ap.add_argument("--engine", choices=catalog.batch())
    ap.add_argument("--methods", help="comma-separated, e.g. baseline,dflash,eagle3")
    ap.add_argument("--k", type=Bounded(int, 0, 1024, many=True), help="comma-separated K values")
    ap.add_argument("--n", dest="num_prompts", type=Bounded(int, 1, 1_000_000))
    ap.add_argument("--max-new-tokens", type=Bounded(int, 1, 10_000_000))
    ap.add_argument("--temperature", type=Bounded(float, 0, 100))
    ap.add_argument("--seed", type=Bounded(int, 0, MAX_SEED))
    add_run_args(ap)


def default_preset() -> str:
    return "tiny" if detect_platform() == "cpu" else "qwen3-4b"


def bench_interleaves(engine: str) -> bool:
    """Whether `make bench` loads its cells side by side: always for JAX (one process), for vLLM on CPU (one worker
    per cell); vLLM on a TPU cannot (one process owns the chip), on a GPU only with gpu_memory_utilization split."""

    return not catalog.engine(engine).worker or detect_platform() == "cpu"


def bench_matrix(args: argparse.Namespace) -> Matrix:
    """The one-dataset shortcut as a matrix."""
    raw: dict[str, Any] = {"name": f"bench-{args.dataset}", "preset": args.preset or default_preset(),
                           "datasets": [args.dataset]}
    raw["interleave"] = bench_interleaves(args.engine or catalog.DEFAULT_ENGINE)
    if args.methods is not None:
        raw["methods"] = [m.strip() for m in args.methods.split(",") if m.strip()]
    given = {name: value for name, value in vars(args).items() if value is not None}
    raw |= {k.name: given[k.name] for k in KEYS if k.bench and k.name not in READ_HERE and k.name in given}
    return parse_matrix(raw, source=f"bench --dataset {shown(args.dataset)}")


def main(args: argparse.Namespace) -> int:
    absent = catalog.vllm_absence()
    if absent is not None and args.engine is None:
        print(f"bench: {catalog.absent_default(absent)}", flush=True)
        args.engine = catalog.ABSENT_DEFAULT
    elif absent is not None and args.engine in catalog.VLLM_ENGINES:
        print(f"error: --engine {args.engine} (ENGINE={args.engine}): {absent}. Use the JAX engine "
              f"(ENGINE={catalog.ABSENT_DEFAULT}, the default here).", file=sys.stderr)
        return 2
    return run_and_report(bench_matrix(args), args)
