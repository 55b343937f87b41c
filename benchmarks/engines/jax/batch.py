"""Batched decoding (`BatchDecoder`): B requests, each with its own prompt length, limit, stop and seed, decoded
together by the AR, DFlash or draft-tree loop, greedy or sampled.

A batched step is the batch-1 step (`decode.ar_body`, `decode.spec_body`, `decode.tree_body`: B trees a step, one
budget per batch) under `jax.vmap`: each row keeps its own
positions, caches, accept lengths and stop, and computes what the request computes alone, so batch-1 tokens stay the
truth the tests compare against. Shapes stay static: a batch runs in the smallest of BATCH_SIZES that holds it
(padded with rows that start finished), its prompts padded to one prefill bucket, each cache span's loop (one
`lax.while_loop` over the whole batch, the span chosen for its longest live row) compiled once per (batch size,
span). A finished row rides along with its state frozen; every such row-step is counted (idle). After the first
tokens the host waits once per batch. What a batch can time per request: docs/engine-findings.md.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.core.metrics import accepted_within
from benchmarks.engines.jax import decode
from benchmarks.engines.jax import model as M
from benchmarks.engines.jax.jax_options import MAX_BATCH

# The batch shapes that compile, 1, 2, 4, …, 64; a batch runs in the smallest that holds it.
BATCH_SIZES = tuple(2 ** i for i in range(MAX_BATCH.bit_length()))


def batch_size_for(n: int) -> int:
    """The batch size n requests run at (padding rows fill the rest)."""
    if not 0 < n <= BATCH_SIZES[-1]:
        raise ValueError(f"{n} requests in one batch; a batch holds 1..{BATCH_SIZES[-1]}")
    return next(b for b in BATCH_SIZES if b >= n)


def batch_cache(cfg: M.ModelConfig, rows: int, dtype: Any, size: int) -> M.Cache:
    """`size` zeroed KV caches of model.init_cache's layout stacked on axis 1 (M.CACHE_AXIS), [L, B, KVH, S, D]: a
    layer's rows of the whole batch are one contiguous block, as each step reads them."""
    shapes = jax.eval_shape(partial(M.init_cache, cfg, rows, dtype))
    return jax.tree.map(lambda x: jnp.zeros((x.shape[0], size, *x.shape[1:]), x.dtype), shapes)


@partial(jax.jit, static_argnames=("tcfg", "dcfg", "k", "width", "tree"), donate_argnames=("tcache", "dcache"))
def prefill_rows(tparams, dparams, tokens, length, limit, eos, tcache, dcache, keys, temperature, *, tcfg, dcfg, k,
                 width, tree=False):
    """The batch-1 prefill of every row (DFlash's when dcfg is given, a draft tree's state when `tree`): first tokens
    [B], the batch's loop state (idle steps at 0) and the caches."""
    c = M.CACHE_AXIS
    if dcfg is None:
        first, state, tcache = jax.vmap(lambda *row: decode.prefill_step(
            tparams, *row, temperature, cfg=tcfg, width=width), in_axes=(0, 0, 0, 0, c, 0), out_axes=(0, 0, c))(
            tokens, length, limit, eos, tcache, keys)
    else:
        first, state, tcache, dcache = jax.vmap(lambda *row: decode.dflash_prefill_step(
            tparams, dparams, *row, temperature, tcfg=tcfg, dcfg=dcfg, k=k, width=width, tree=tree),
            in_axes=(0, 0, 0, 0, c, c, 0), out_axes=(0, 0, c, c))(tokens, length, limit, eos, tcache, dcache, keys)
    return first, {**state, "idle": jnp.zeros_like(length)}, tcache, dcache


def rows_step(body: Any, carry: tuple, keys: jax.Array) -> tuple:
    """One batched step: `body` (one row's step: (carry, key) -> carry) under vmap; a finished row keeps its state and
    counts an idle step (its caches take writes it never reads)."""
    axes = (0,) + (M.CACHE_AXIS,) * (len(carry) - 1)
    state, new = carry[0], jax.vmap(body, in_axes=(axes, 0), out_axes=axes)(carry, keys)
    done = state["done"]
    kept = jax.tree.map(lambda old, x: jnp.where(done.reshape(done.shape + (1,) * (x.ndim - 1)), old, x), state,
                        new[0])
    return ({**kept, "idle": state["idle"] + done.astype(jnp.int32)}, *new[1:])


def batch_loop(body: Any, carry: tuple, keys: jax.Array, span: int) -> tuple:
    """Batched steps until every row is done or a live row's next step outgrows `span` (decode._loop's rule)."""
    def going(c: tuple) -> jax.Array:
        live = ~c[0]["done"]
        return jnp.any(live) & jnp.all(~live | (decode.position(c[0]) <= span))

    return jax.lax.while_loop(going, lambda c: rows_step(body, c, keys), carry)


@partial(jax.jit, static_argnames=("tcfg", "span"), donate_argnames=("state", "tcache"))
def ar_batch_steps(tparams, state, tcache, keys, temperature, *, tcfg, span):
    """AR steps of a batch on the device over one cache span (`batch_loop`): (state, cache)."""
    return batch_loop(lambda c, key: decode.ar_body(tparams, c[0], c[1], key, temperature, tcfg, span), (state, tcache),
                      keys, span)


@partial(jax.jit, static_argnames=("dcfg", "tcfg", "k", "num_queries", "span"),
         donate_argnames=("state", "tcache", "dcache"))
def spec_batch_steps(tparams, dparams, state, tcache, dcache, keys, temperature, *, dcfg, tcfg, k, num_queries,
                     span):
    """DFlash steps of a batch on the device over one cache span (`batch_loop`): (state, caches)."""
    return batch_loop(lambda c, key: decode.spec_body(tparams, dparams, c[0], c[1], c[2], key, temperature, dcfg,
                                                      tcfg, k, num_queries, span), (state, tcache, dcache), keys, span)


@partial(jax.jit, static_argnames=("dcfg", "tcfg", "budget", "span"), donate_argnames=("state", "tcache", "dcache"))
def tree_batch_steps(tparams, dparams, state, tcache, dcache, keys, temperature, *, dcfg, tcfg, budget, span):
    """Draft-tree steps of a batch on the device over one cache span (`batch_loop`), B trees of `budget` nodes a
    step: (state, caches)."""
    return batch_loop(lambda c, key: decode.tree_body(tparams, dparams, c[0], c[1], c[2], key, temperature, dcfg,
                                                      tcfg, budget, span), (state, tcache, dcache), keys, span)


@dataclass
class BatchGeneration:
    """A batch's result, request by request (padding rows left out). The clock starts as a Generation's does;
    ttft_s and last_token_s are the batch's: when the first tokens of all, and the last tokens of all, reached the
    host. steps: the batch's steps; idle_steps: per request, the steps it rode along finished; wasted_row_steps:
    the idle steps of every row, padding rows included."""

    tokens: list[list[int]]
    accept_lengths: list[list[int]] | None
    ttft_s: float
    last_token_s: float
    steps: int
    idle_steps: list[int]
    wasted_row_steps: int
    compile_s: float  # compiles triggered by this batch, run before its clock started
    batch_size: int  # the size of BATCH_SIZES it ran at
    bucket: int  # the prefill bucket of its prompts
    round_trips: int
    tree_paths: list[list[list[int]]] | None = None  # a draft tree's, per request: decode.Generation.tree_paths


def per_request(value: int | Sequence[int], n: int, name: str) -> list[int]:
    """One value per request: a single one repeated, or a sequence of n."""
    if isinstance(value, int):
        return [value] * n
    if len(value) != n:
        raise ValueError(f"{len(value)} {name} for {n} requests")
    return list(value)


class BatchDecoder:
    """Runs batches with a Decoder's parameters and loaded (target[, draft], K), in caches of its own (the last batch
    size's kept; the Decoder's live caches stay untouched). compile_log: seconds per compiled function."""

    def __init__(self, decoder: decode.Decoder) -> None:
        self.decoder = decoder
        self.caches: tuple[int, M.Cache, M.Cache | None] | None = None
        self.compile_log: dict[tuple, float] = {}

    def generate(self, prompts: list[list[int]], max_new_tokens: int | Sequence[int], temperature: float = 0.0,
                 seeds: int | Sequence[int] = 0, eos_ids: tuple[int, ...] = ()) -> BatchGeneration:
        """Decode the prompts together; request i's tokens are what `Decoder.generate(prompts[i], max_new_tokens[i],
        temperature, seeds[i], eos_ids)` gives (same steps, same keys)."""
        d, n = self.decoder, len(prompts)
        size = batch_size_for(n)
        limits = [d.limit(len(p), m) for p, m in zip(prompts, per_request(max_new_tokens, n, "token limits"))]
        bucket = max(d.bucket(len(p)) for p in prompts)
        tokens = np.zeros((size, bucket), np.int32)
        for i, p in enumerate(prompts):
            tokens[i, : len(p)] = p
        length, limit = np.ones(size, np.int32), np.ones(size, np.int32)  # padding rows: finished at prefill
        length[:n], limit[:n] = [len(p) for p in prompts], limits
        seed_rows = per_request(seeds, n, "seeds") + [0] * (size - n)
        inputs = (jnp.asarray(tokens), length, limit, np.tile(decode.eos_array(eos_ids), (size, 1)),
                  jax.vmap(jax.random.key)(jnp.asarray(seed_rows, jnp.uint32)), decode.temperature_arg(temperature))
        spans = d.spans_between(int(length[:n].max()), int((length + limit)[:n].max()))
        compile_s = self._compile(inputs, spans)

        t0 = time.perf_counter()
        first, state = self._prefill(*inputs)
        first.copy_to_host_async()
        for span in spans:  # dispatched back to back, as a single request's
            state = self._steps(state, inputs, span)
        jax.device_get(first)
        ttft = time.perf_counter() - t0
        names = ("out", "count", "done", "idle") + (("accepts", "steps") if d.speculative else ()) \
            + (("paths",) if d.budget else ())
        got = jax.device_get({name: state[name] for name in names})  # the one wait after the first tokens
        end = time.perf_counter()
        if not got["done"].all():
            raise RuntimeError("the batch's loops stopped before every request was done (a span was not dispatched)")
        own = got["steps"] if d.speculative else got["count"] - 1
        eos = set(eos_ids)
        outs = [decode.truncate(list(map(int, got["out"][i, : got["count"][i]])), int(limits[i]), eos)
                for i in range(n)]
        accepts = [accepted_within(list(map(int, got["accepts"][i, : got["steps"][i]])), len(outs[i]))
                   for i in range(n)] if d.speculative else None
        paths = [decode.paths_within(got["paths"][i], accepts[i]) for i in range(n)] \
            if d.budget and accepts is not None else None
        return BatchGeneration(
            outs, accepts, ttft, end - t0, int((own + got["idle"]).max()), list(map(int, got["idle"][:n])),
            int(got["idle"].sum()), compile_s, size, bucket, 1, paths)

    def _prefill(self, tokens, length, limit, eos, keys, temperature) -> tuple[jax.Array, decode.State]:
        """Prefill every row into this batch size's caches (allocated when the size changes)."""
        d, size = self.decoder, len(length)
        if self.caches is None or self.caches[0] != size:
            self.caches = None  # the last size's caches go before the new ones are allocated
            rows, dtype = d.tcache["k"][0].shape[1], d.tcache["k"][0].dtype
            self.caches = (size, batch_cache(d.tcfg, rows, dtype, size),
                           batch_cache(d.dcfg.layers, rows, dtype, size) if d.dcfg is not None else None)
        first, state, tcache, dcache = prefill_rows(
            d.tparams, d.dparams, tokens, length, limit, eos, self.caches[1], self.caches[2], keys, temperature,
            tcfg=d.tcfg, dcfg=d.dcfg, k=d.k, width=d.width, tree=d.budget > 0)
        self.caches = (size, tcache, dcache)
        return first, state

    def _steps(self, state: decode.State, inputs: tuple, span: int) -> decode.State:
        """Dispatch the batch's loop over one span (returns at once; the state stays on the device)."""
        assert self.caches is not None  # allocated by _prefill
        d, (size, tcache, dcache) = self.decoder, self.caches
        keys, temperature = inputs[4], inputs[5]
        if d.budget:
            state, tcache, dcache = tree_batch_steps(
                d.tparams, d.dparams, state, tcache, dcache, keys, temperature, dcfg=d.dcfg, tcfg=d.tcfg,
                budget=d.budget, span=span)
        elif d.speculative:
            state, tcache, dcache = spec_batch_steps(
                d.tparams, d.dparams, state, tcache, dcache, keys, temperature, dcfg=d.dcfg, tcfg=d.tcfg, k=d.k,
                num_queries=d.num_queries, span=span)
        else:
            state, tcache = ar_batch_steps(d.tparams, state, tcache, keys, temperature, tcfg=d.tcfg, span=span)
        self.caches = (size, tcache, dcache)
        return state

    def _compile(self, inputs: tuple, spans: list[int]) -> float:
        """Compile (and run once) the prefill and span loops this batch needs, unless done before; returns the seconds
        spent. As Decoder._compile: a prefill at limit 1 leaves every row finished, so the loops run no step, and the
        writes land in rows a batch rewrites before reading them."""
        tokens, length = inputs[0], inputs[1]
        size, greedy = len(length), inputs[5] is None
        prefill = ("prefill", size, tokens.shape[1], greedy)
        steps = [key for key in [("steps", size, span, greedy) for span in spans] if key not in self.compile_log]
        if prefill in self.compile_log and not steps:
            return 0.0
        total = t = time.perf_counter()
        _, state = jax.block_until_ready(self._prefill(tokens, length, np.ones_like(length), *inputs[3:]))
        self.compile_log.setdefault(prefill, time.perf_counter() - t)
        for key in steps:
            t = time.perf_counter()
            state = jax.block_until_ready(self._steps(state, inputs, key[2]))
            self.compile_log[key] = time.perf_counter() - t
        return time.perf_counter() - total
