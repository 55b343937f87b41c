"""Train the tiny model set shipped under models/tiny (`python -m benchmarks tiny train --out models/tiny`): its
options here, its recipe and data in benchmarks/tiny/recipe.py, its torch work in benchmarks/tiny/training.py
(imported once the options are checked).

Corpus: the running Python's standard library sources (`stdlib_corpus`), present offline on every machine.
Every function becomes one HumanEval-style chat sample: the user asks for a solution that passes the tests and
shows the function's header and docstring in a fenced block; the assistant continues the code from there.

Steps, all seeded and run with a fixed thread count (deterministic on one machine and torch build):
1. byte-level BPE tokenizer with the chat template and <|MASK|> (`build_tokenizer`);
2. the target, a Qwen3 LM trained on the packed chat samples (bf16 autocast), rounded to bf16 and saved;
3. the target regenerates greedy continuations of the first chat prompts: the drafts learn what it actually emits;
4. the DFlash draft: random anchors in the generated part, block [x_a, MASK×15] at positions a..a+15 seeing the
   context before a, labels x[a+k], CE weighted by exp(-(k-1)/γ), target embedding and LM head frozen;
5. the EAGLE-3 draft: next-next-token prediction from fc(3 taps) and the next token's embedding, unrolled over
   the K draft steps (training-time test) as vLLM chains them.
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from benchmarks.core.cells import MAX_SEED
from benchmarks.core.numbers import Bounded
from benchmarks.tiny.recipe import TrainConfig, scaled

# As `tiny build`'s, and training.json (benchmarks/cli/__init__.py)
OUTPUT_ARGS = ("out",)
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS = ("target/*", "dflash/config.json", "dflash/model.safetensors", "eagle3/config.json",
           "eagle3/model.safetensors", "training.json")


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=Bounded(int, 0, MAX_SEED), default=TrainConfig.seed)
    ap.add_argument("--threads", type=Bounded(int, 1, 1024), default=TrainConfig.threads,
                    help="torch threads; fixed for determinism (1 is also the fastest on busy shared cores)")
    ap.add_argument("--eager", action="store_true",
                    help="train without torch.compile (no C++ toolchain; slower, and other rounding)")
    ap.add_argument("--scale", type=Bounded(float, 1e-6, 100), default=1.0,
                    help="multiply every step and prompt count, and below 1 the training batches (a quick smoke run "
                         "with e.g. 0.02)")


def main(args: argparse.Namespace) -> int:
    cfg = scaled(replace(TrainConfig(), seed=args.seed, threads=args.threads, compile=not args.eager),
                 args.scale)
    from benchmarks.tiny.training import train  # lazy: torch; without it the CLI names the package after the checks

    return train(cfg, args.out)
