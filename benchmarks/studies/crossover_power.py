"""`study crossover-power`: how often a batch matrix finds a crossover that is there, by simulation through the
harness's own throughput speedup (`metrics.ratio_of_sums`) and crossover rule (`metrics.crossover`).

Each batch size B of the matrix has num_prompts // B paired batches (a short last batch is left out, as it is
smaller). A batch's decode span is its true span times a log-normal factor (log-sd `--sd`, independent per batch and
per arm: batch-to-batch noise); its tokens are fixed. The method's true throughput speedups along the B levels are
`--speedups` (default: 1.3, 1.1, 0.85, 0.7, …: a true crossover at the third B). Power is the fraction of runs whose
crossover is the true one; the table also gives the runs that found none and those that found one too early (a false
"below 1")."""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.core import metrics
from benchmarks.core.exit_codes import BadInput, Exit
from benchmarks.core.markdown import table
from benchmarks.core.numbers import Bounded

DEFAULT_SPEEDUPS = (1.3, 1.1, 0.85, 0.7, 0.6, 0.5)
MAX_RUNS = 200_000  # bounded before it is spent: ~50 s on one core
TOKENS = 64.0  # tokens of a batch's decode span (its value cancels: only the spans' noise matters)


@dataclass(frozen=True)
class Power:
    """What the crossover rule found over simulated runs: the true crossover, found too early, or not at all."""

    levels: list[int]
    batches: list[int]
    true_level: int | None
    found_true: float
    found_early: float
    found_later: float
    found_none: float


def simulate(levels: list[int], batches: list[int], speedups: list[float], sd: float, runs: int, seed: int
             ) -> Power:
    """The crossover rule over `runs` simulated runs of len(levels) batch sizes with `batches` paired batches each."""
    rng = np.random.default_rng(seed)
    truth = next((b for b, s in zip(levels, speedups) if s < 1), None)
    found = {"true": 0, "early": 0, "later": 0, "none": 0}
    for _ in range(runs):
        points = []
        for b, n, s in zip(levels, batches, speedups):
            base = np.exp(rng.normal(0.0, sd, n))
            meth = np.exp(rng.normal(-math.log(s), sd, n))
            tokens = [TOKENS] * n
            points.append((b, metrics.ratio_of_sums(tokens, list(meth), tokens, list(base))))
        level = metrics.crossover(points).level
        key = ("none" if level is None else "true" if level == truth
               else "early" if truth is None or level < truth else "later")
        found[key] += 1
    return Power(levels, batches, truth, found["true"] / runs, found["early"] / runs, found["later"] / runs,
                 found["none"] / runs)


def matrix_power(path: Path, speedups: list[float] | None, sd: float, runs: int, seed: int) -> Power:
    """The power of a matrix file's batch axis."""
    from benchmarks.config.matrix_parse import load_matrix  # lazy: imports packaging, yaml

    matrix = load_matrix(path)
    levels = matrix.batch_size or [1]
    if len(levels) < 2:
        raise BadInput(f"{path}: no batch axis (batch_size lists one size); a crossover needs two or more")
    true = list(speedups or DEFAULT_SPEEDUPS)[:len(levels)]
    if len(true) < len(levels):
        raise BadInput(f"--speedups gives {len(true)} values for {len(levels)} batch sizes ({levels})")
    return simulate(levels, [matrix.num_prompts // b for b in levels], true, sd, runs, seed)


def describe(p: Power, speedups: list[float], sd: float, runs: int) -> str:
    rows = [[str(b), str(n), f"{s:g}"] for b, n, s in zip(p.levels, p.batches, speedups)]
    return "\n".join([
        table(["B", "paired batches", "true throughput speedup"], rows), "",
        f"Over {runs} simulated runs (batch-to-batch log-sd {sd:g}): the true crossover "
        f"(B = {p.true_level}) found in {100 * p.found_true:.1f} %, none found in {100 * p.found_none:.1f} %, "
        f"one found too early in {100 * p.found_early:.1f} %, later in {100 * p.found_later:.1f} %."])


# It prints and writes no file (the declarations of benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("config", type=Path, help="a matrix with a batch axis, e.g. configs/matrices/tiny-batch.yaml")
    ap.add_argument("--speedups", type=Bounded(float, 0.001, 1000, many=True),
                    help="the true throughput speedup at each B, comma-separated (default 1.3,1.1,0.85,0.7,...)")
    ap.add_argument("--sd", type=Bounded(float, 1e-9, 10), default=0.1,
                    help="batch-to-batch log-sd of a decode span (default 0.1)")
    ap.add_argument("--runs", type=Bounded(int, 1, MAX_RUNS), default=4000, help="simulated runs (default 4000)")
    ap.add_argument("--seed", type=Bounded(int, 0, 2**32 - 1), default=0)


def main(args: argparse.Namespace) -> int:
    p = matrix_power(args.config, args.speedups, args.sd, args.runs, args.seed)
    print(describe(p, list(args.speedups or DEFAULT_SPEEDUPS)[:len(p.levels)], args.sd, args.runs))
    return Exit.OK
