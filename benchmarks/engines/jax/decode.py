"""Decode loops at batch size 1 (`Decoder`): the AR baseline and DFlash speculative decoding, greedy or sampled.

Shapes are static: caches have a fixed length (`cache_length`), prompts are padded to bucket sizes, a step reads only
a prefix of the caches (`span_for`), and positions and temperature are traced scalars, so each (model, K, span) step
compiles once, each prefill once per bucket, and nothing recompiles within a request. Compiles run before the clock
and are reported apart; timing syncs through `jax.block_until_ready` and host reads. Measurements behind these
choices: docs/engine-findings.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.engines.jax import draft as D
from benchmarks.engines.jax import model as M


def pick(logits: jax.Array, positions: jax.Array, key: jax.Array, temperature: jax.Array) -> jax.Array:
    """Next token after each row of logits [T, V]: argmax at temperature 0, else a sample keyed by row position."""
    def sample(logits):
        keys = jax.vmap(lambda p: jax.random.fold_in(key, p))(positions)
        return jax.vmap(jax.random.categorical)(keys, logits / temperature).astype(jnp.int32)

    return jax.lax.cond(temperature > 0, sample, lambda x: jnp.argmax(x, axis=-1).astype(jnp.int32), logits)


@partial(jax.jit, static_argnames=("cfg",), donate_argnames=("cache",))
def prefill_step(params, tokens, length, cache, key, temperature, *, cfg):
    """AR prefill of a prompt padded to a bucket: the first generated token and the cache."""
    logits, _, cache = M.prefill(params, tokens, length, cache, cfg=cfg)
    return pick(logits[None], (length - 1)[None], key, temperature)[0], cache


@partial(jax.jit, static_argnames=("cfg", "span"), donate_argnames=("cache",))
def ar_step(params, token, pos, cache, key, temperature, *, cfg, span):
    """One AR step: the token at position pos in, the token at pos+1 out."""
    logits, _, cache = M.forward(params, token[None], pos, cache, cfg=cfg, span=span)
    return pick(logits, pos[None], key, temperature)[0], cache


@partial(jax.jit, static_argnames=("tcfg", "dcfg"), donate_argnames=("tcache", "dcache"))
def dflash_prefill_step(tparams, dparams, tokens, length, tcache, dcache, key, temperature, *, tcfg, dcfg):
    """Target prefill with taps, then the prompt's context K/V into the draft cache: the first token and caches."""
    logits, taps, tcache = M.prefill(tparams, tokens, length, tcache, cfg=tcfg, tap_ids=dcfg.target_layer_ids)
    dcache = D.prefill_context(dparams, taps, dcache, dcfg)
    return pick(logits[None], (length - 1)[None], key, temperature)[0], tcache, dcache


def _draft(dparams, tparams, pending, pending_start, anchor, s, dcache, dcfg, tcfg, k, num_queries, span):
    drafts, dcache = D.propose(dparams, tparams, dcache, pending, pending_start, anchor, s, dcfg, tcfg, num_queries,
                               span)
    return drafts[:k], dcache


def _verify(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    tokens = jnp.concatenate([anchor[None], drafts])
    logits, taps, tcache = M.forward(tparams, tokens, s, tcache, cfg=tcfg, tap_ids=tap_ids, span=span)
    picked = pick(logits, s + jnp.arange(tokens.shape[0], dtype=jnp.int32), key, temperature)
    n = jnp.sum(jnp.cumprod(drafts == picked[:-1]))
    return n, picked, taps, tcache


draft_step = jax.jit(_draft, static_argnames=("dcfg", "tcfg", "k", "num_queries", "span"),
                     donate_argnames=("dcache",))
verify_step = jax.jit(_verify, static_argnames=("tcfg", "tap_ids", "span"), donate_argnames=("tcache",))


@partial(jax.jit, static_argnames=("dcfg", "tcfg", "k", "num_queries", "span"), donate_argnames=("tcache", "dcache"))
def spec_step(tparams, dparams, pending, pending_start, anchor, s, tcache, dcache, key, temperature, *,
              dcfg, tcfg, k, num_queries, span):
    """Draft + verify + accept fused in one call: (n accepted, picked [K+1], taps [K+1, n*H], caches)."""
    drafts, dcache = _draft(dparams, tparams, pending, pending_start, anchor, s, dcache, dcfg, tcfg, k, num_queries,
                            span)
    n, picked, taps, tcache = _verify(tparams, anchor, drafts, s, tcache, key, temperature, tcfg,
                                      dcfg.target_layer_ids, span)
    return n, picked, taps, tcache, dcache


@partial(jax.jit, static_argnames=("tcfg", "dcfg"))
def _prefill_batch(tparams, dparams, tokens, length, tcache, dcache, keys, temperature, *, tcfg, dcfg):
    """One prefill shared by a batch of samples: the first token of each (one key each) and the caches."""
    tap_ids = dcfg.target_layer_ids if dcfg is not None else ()
    logits, taps, tcache = M.prefill(tparams, tokens, length, tcache, cfg=tcfg, tap_ids=tap_ids)
    if dcfg is not None:
        dcache = D.prefill_context(dparams, taps, dcache, dcfg)
    first = jax.vmap(lambda key: pick(logits[None], (length - 1)[None], key, temperature)[0])(keys)
    return first, tcache, dcache


@partial(jax.jit, static_argnames=("tcfg", "dcfg", "k", "num_queries", "length"))
def _sample_batch(tparams, dparams, tcache, dcache, first, start, keys, temperature, *, tcfg, dcfg, k, num_queries,
                  length):
    """Decode every sample (vmapped over keys) to `length` tokens: AR when dcfg is None, else DFlash through the same
    _draft/_verify as the per-request loop, length - 1 steps (a step commits at least one token), a finished sample
    frozen (a while loop under vmap selects over its whole state, caches too, at every step). The caches are this
    batch's own, read whole.
    Returns tokens [B, length + K] and committed counts [B] (a verify step may commit past `length`)."""
    width = length + k

    def one(key, token):
        out = jnp.zeros(width, jnp.int32).at[0].set(token)
        if dcfg is None:
            def ar_body(i, st):
                out, tc = st
                logits, _, tc = M.forward(tparams, out[i][None], start + i, tc, cfg=tcfg)
                return out.at[i + 1].set(pick(logits, (start + i)[None], key, temperature)[0]), tc

            out, _ = jax.lax.fori_loop(0, length - 1, ar_body, (out, tcache))
            return out, jnp.int32(length)
        pending = jnp.zeros((k + 1, len(dcfg.target_layer_ids) * tcfg.hidden_size), tcache["k"][0].dtype)
        span = tcache["k"][0].shape[1]

        def spec_body(_, st):
            out, count, s, anchor, pending, pending_start, tc, dc = st
            drafts, dc = _draft(dparams, tparams, pending, pending_start, anchor, s, dc, dcfg, tcfg, k, num_queries,
                                span)
            n, picked, taps, tc = _verify(tparams, anchor, drafts, s, tc, key, temperature, tcfg,
                                          dcfg.target_layer_ids, span)
            # a sample that holds `length` tokens stays as it is: its later steps redo the same rows, never read
            live = count < length
            out = jnp.where(live, jax.lax.dynamic_update_slice(out, picked, (count,)), out)
            grow = jnp.where(live, n + 1, 0)
            pending, pending_start = jnp.where(live, taps, pending), jnp.where(live, s, pending_start)
            return out, count + grow, s + grow, jnp.where(live, picked[n], anchor), pending, pending_start, tc, dc

        state = (out, jnp.int32(1), start, token, pending, start, tcache, dcache)
        out, count, *_ = jax.lax.fori_loop(0, length - 1, spec_body, state)
        return out, count

    return jax.vmap(one)(keys, first)


def sample_rows(bucket: int, prompt_len: int, length: int, k: int) -> int:
    """Cache rows of a sampling batch: the padded prompt, and every position a sample of `length` tokens writes (a
    last verify step starting before `length` writes K + 1 rows), rounded up to a multiple of 128."""
    return -(-max(bucket, prompt_len + length + k) // 128) * 128


SAMPLE_CHUNK = 200  # samples decoded side by side by Decoder.sample_batch


def cache_length(max_model_len: int, slack: int) -> int:
    """Cache rows: the token budget plus slack for the last verify, rounded up to a multiple of 128."""
    return -(-(max_model_len + slack) // 128) * 128


def buckets(cache_len: int, smallest: int = 32) -> list[int]:
    """Prefill lengths: powers of two below the cache length, then the cache length."""
    out = [smallest]
    while out[-1] * 2 < cache_len:
        out.append(out[-1] * 2)
    return [b for b in out if b < cache_len] + [cache_len]


def span_for(spans: list[int], start: int) -> int:
    """The cache rows a step at position `start` reads: the smallest span holding rows 0..start-1."""
    return next(x for x in spans if x >= start)


@dataclass(frozen=True)
class Request:
    tokens: jax.Array  # the prompt padded to a bucket
    length: jax.Array
    key: jax.Array
    temperature: jax.Array


@dataclass
class Generation:
    """One request's result. Its clock starts once the padded prompt is on the device and every function it needs
    is compiled; ttft_s and last_token_s are the times the first and last tokens reached the host."""

    tokens: list[int]
    ttft_s: float
    last_token_s: float
    accept_lengths: list[int] | None
    compile_s: float  # compiles triggered by this request, run before its clock started
    bucket: int
    breakdown: dict[str, float] = field(default_factory=dict)


class Decoder:
    """Owns the parameters and preallocated caches of one loaded (target[, draft], K) and runs requests.

    max_model_len bounds prompt + output tokens; the caches hold one draft block more, for the last verify.
    """

    def __init__(self, tcfg: M.ModelConfig, tparams: M.Params, max_model_len: int, dtype: Any,
                 dcfg: D.DraftConfig | None = None, dparams: M.Params | None = None, k: int = 0,
                 num_queries: int | None = None) -> None:
        self.tcfg, self.tparams, self.dcfg, self.dparams = tcfg, tparams, dcfg, dparams
        self.max_model_len, self.k = max_model_len, k
        if dcfg is not None:
            if not 1 <= k <= dcfg.block_size - 1:
                raise ValueError(f"K={k} must be in 1..block_size-1 = {dcfg.block_size - 1}")
            if max(dcfg.target_layer_ids) >= tcfg.num_layers:
                raise ValueError(f"target_layer_ids {dcfg.target_layer_ids} exceed the target's "
                                 f"{tcfg.num_layers} layers")
            self.num_queries = num_queries or dcfg.block_size
            if not k + 1 <= self.num_queries <= dcfg.block_size:
                raise ValueError(f"draft queries {self.num_queries} must be in K+1..block_size")
        cache_len = cache_length(max_model_len, dcfg.block_size if dcfg else 1)
        self.tcache = M.init_cache(tcfg, cache_len, dtype)
        self.dcache = M.init_cache(dcfg.layers, cache_len, dtype) if dcfg else None
        self.buckets = buckets(cache_len)
        self.spans = buckets(cache_len, smallest=256)
        self._warm: set[tuple] = set()

    @property
    def speculative(self) -> bool:
        return self.dcfg is not None

    def generate(self, prompt: list[int], max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
                 eos_ids: tuple[int, ...] = (), breakdown: bool = False) -> Generation:
        p = len(prompt)
        if not 0 < p < self.max_model_len:
            raise ValueError(f"prompt of {p} tokens does not fit max_model_len={self.max_model_len}")
        limit = min(max_new_tokens, self.max_model_len - p)
        bucket = next(b for b in self.buckets if b >= p)
        tokens = np.zeros(bucket, np.int32)
        tokens[:p] = prompt
        req = Request(jnp.asarray(tokens), jnp.int32(p), jax.random.key(seed), jnp.float32(temperature))
        compile_s = self._compile(req, breakdown, limit)
        if self.speculative:
            return self._dflash(req, limit, set(eos_ids), breakdown, compile_s)
        return self._ar(req, limit, set(eos_ids), compile_s)

    def sample_batch(self, prompt: list[int], max_new_tokens: int, temperature: float, seeds: list[int],
                     eos_ids: tuple[int, ...] = ()) -> list[list[int]]:
        """Independent samples of one prompt, one per seed, decoded side by side (vmapped) with the same sampling
        functions and keys as `generate`, so each equals `generate(prompt, max_new_tokens, temperature, seed)`'s
        tokens. For the distribution check's many samples: no timing; the batch has caches of its own, sized to the
        sample (`sample_rows`), and the live caches are left untouched."""
        p = len(prompt)
        if not 0 < p or p + max_new_tokens > self.max_model_len or max_new_tokens < 1:
            raise ValueError(f"a {p}-token prompt and {max_new_tokens} sampled tokens do not fit "
                             f"max_model_len={self.max_model_len}")
        bucket = next(b for b in self.buckets if b >= p)
        tokens = np.zeros(bucket, np.int32)
        tokens[:p] = prompt
        temp = np.float32(temperature)
        rows = sample_rows(bucket, p, max_new_tokens, self.k)
        dtype = self.tcache["k"][0].dtype
        out, counts = [], []
        for i in range(0, len(seeds), SAMPLE_CHUNK):  # one batch shape: bounded memory, one compile
            chunk = seeds[i: i + SAMPLE_CHUNK]
            keys = jax.vmap(jax.random.key)(jnp.asarray(chunk + [0] * (SAMPLE_CHUNK - len(chunk)), jnp.uint32))
            tcache = M.init_cache(self.tcfg, rows, dtype)
            dcache = M.init_cache(self.dcfg.layers, rows, dtype) if self.speculative else None
            first, tcache, dcache = _prefill_batch(self.tparams, self.dparams, jnp.asarray(tokens), np.int32(p),
                                                   tcache, dcache, keys, temp, tcfg=self.tcfg, dcfg=self.dcfg)
            got, count = jax.device_get(_sample_batch(
                self.tparams, self.dparams, tcache, dcache, first, np.int32(p), keys, temp, tcfg=self.tcfg,
                dcfg=self.dcfg, k=self.k, num_queries=self.num_queries if self.speculative else 0,
                length=max_new_tokens))
            out += list(got[: len(chunk)])
            counts += list(count[: len(chunk)])
        return [_truncate(list(map(int, row[:c])), max_new_tokens, set(eos_ids)) for row, c in zip(out, counts)]

    def _prefill(self, req: Request) -> jax.Array:
        """Prefill the target (and, for DFlash, the draft's context); returns the first token, on device."""
        if self.speculative:
            first, self.tcache, self.dcache = dflash_prefill_step(
                self.tparams, self.dparams, req.tokens, req.length, self.tcache, self.dcache, req.key,
                req.temperature, tcfg=self.tcfg, dcfg=self.dcfg)
        else:
            first, self.tcache = prefill_step(self.tparams, req.tokens, req.length, self.tcache, req.key,
                                              req.temperature, cfg=self.tcfg)
        return first

    def _ar(self, req: Request, limit: int, eos: set[int], compile_s: float) -> Generation:
        t0 = time.perf_counter()
        token = self._prefill(req)
        out = [int(token)]
        ttft = time.perf_counter() - t0
        pos = int(req.length)
        while len(out) < limit and out[-1] not in eos:
            token, self.tcache = ar_step(self.tparams, token, np.int32(pos), self.tcache, req.key, req.temperature,
                                         cfg=self.tcfg, span=self._span(pos))
            out.append(int(token))
            pos += 1
        return Generation(out, ttft, time.perf_counter() - t0, None, compile_s, len(req.tokens))

    def _dflash(self, req: Request, limit: int, eos: set[int], breakdown: bool, compile_s: float) -> Generation:
        """DFlash decoding, one step per loop:

        draft   write the pending context K/V (taps of the tokens committed last step), propose d1..dK from the
                block [anchor, MASK...] at positions s..
        verify  the target runs [anchor, d1..dK] at positions s..s+K and picks t_i at each row (argmax, or a sample)
        accept  n = leading i with d_i == t_{i-1}; commit t_0..t_n (= d1..dn and the bonus t_n); s += n+1; the new
                anchor is t_n; the new pending context is the K+1 verify taps (rows > n are never read)

        Sampling keeps argmax drafts (a one-hot proposal), so "d_i == sampled t_{i-1}" is the exact acceptance rule.
        The token at position p+1 is drawn with the key fold_in(seed, p) in both loops, so DFlash and AR draw the
        same samples from (numerically) the same distributions. Host scalars enter the steps as numpy values.
        """
        t0 = time.perf_counter()
        first = self._prefill(req)
        out = [int(first)]
        ttft = time.perf_counter() - t0
        s = int(req.length)  # position of the anchor: the last committed token, not yet seen by the target
        anchor, pending, pending_start = first, self._no_context(), s
        accepted: list[int] = []
        times = dict.fromkeys(("draft_s", "verify_s", "host_s"), 0.0)
        done = out[-1] in eos
        while len(out) < limit and not done:
            if breakdown:
                n, picked, pending = self._step_timed(req, pending, pending_start, anchor, s, self._span(s), times)
            else:
                n, picked, pending, self.tcache, self.dcache = spec_step(
                    self.tparams, self.dparams, pending, np.int32(pending_start), anchor, np.int32(s), self.tcache,
                    self.dcache, req.key, req.temperature, dcfg=self.dcfg, tcfg=self.tcfg, k=self.k,
                    num_queries=self.num_queries, span=self._span(s))
            t_host = time.perf_counter()
            n, committed = jax.device_get((n, picked))
            n = int(n)
            accepted.append(n)
            new = [int(x) for x in committed[: n + 1]]
            out.extend(new)
            done = not eos.isdisjoint(new)
            anchor, pending_start, s = np.int32(new[-1]), s, s + n + 1
            times["host_s"] += time.perf_counter() - t_host
        return Generation(_truncate(out, limit, eos), ttft, time.perf_counter() - t0, accepted, compile_s,
                          len(req.tokens), times if breakdown else {})

    def _span(self, start: int) -> int:
        """Cache rows a step reads: the smallest of 256, 512, ... rows that holds the context."""
        return span_for(self.spans, start)

    def _no_context(self) -> jax.Array:
        """Pending taps for the first step: zeros at positions >= the anchor's, which the draft never reads."""
        width = len(self.dcfg.target_layer_ids) * self.tcfg.hidden_size
        return jnp.zeros((self.k + 1, width), self.tcache["k"][0].dtype)

    def _step_timed(self, req: Request, pending: jax.Array, pending_start: int, anchor: jax.Array, s: int,
                    span: int, times: dict[str, float]) -> tuple[jax.Array, jax.Array, jax.Array]:
        """One DFlash step as two synchronised calls, adding their times into `times`."""
        t = time.perf_counter()
        drafts, self.dcache = jax.block_until_ready(draft_step(
            self.dparams, self.tparams, pending, np.int32(pending_start), anchor, np.int32(s), self.dcache,
            dcfg=self.dcfg, tcfg=self.tcfg, k=self.k, num_queries=self.num_queries, span=span))
        t_draft = time.perf_counter()
        n, picked, pending, self.tcache = jax.block_until_ready(verify_step(
            self.tparams, anchor, drafts, np.int32(s), self.tcache, req.key, req.temperature, tcfg=self.tcfg,
            tap_ids=self.dcfg.target_layer_ids, span=span))
        times["draft_s"] += t_draft - t
        times["verify_s"] += time.perf_counter() - t_draft
        return n, picked, pending

    def _compile(self, req: Request, breakdown: bool, limit: int) -> float:
        """Run each function this request needs once on its shapes, unless done before; returns the seconds spent.

        Warm-up writes land at positions that a request rewrites before reading them (see model.py), so the live
        caches serve as scratch.
        """
        p = int(req.length)
        steps = [("step", breakdown, span) for span in self.spans if self._span(p) <= span <= self._span(p + limit)]
        todo = [key for key in [("prefill", len(req.tokens)), *steps] if key not in self._warm]
        t = time.perf_counter()
        for key in todo:
            kind, span = key[0], key[-1]  # a "prefill" key ends with its bucket, which _prefill takes from req
            if kind == "prefill":
                jax.block_until_ready(self._prefill(req))
            elif not self.speculative:
                _, self.tcache = jax.block_until_ready(ar_step(
                    self.tparams, jnp.int32(0), jnp.int32(0), self.tcache, req.key, req.temperature, cfg=self.tcfg,
                    span=span))
            elif breakdown:
                self._step_timed(req, self._no_context(), 0, jnp.int32(0), 0, span, dict.fromkeys(
                    ("draft_s", "verify_s"), 0.0))
            else:
                out = spec_step(self.tparams, self.dparams, self._no_context(), jnp.int32(0), jnp.int32(0),
                                jnp.int32(0), self.tcache, self.dcache, req.key, req.temperature, dcfg=self.dcfg,
                                tcfg=self.tcfg, k=self.k, num_queries=self.num_queries, span=span)
                _, _, _, self.tcache, self.dcache = jax.block_until_ready(out)
            self._warm.add(key)
        return time.perf_counter() - t if todo else 0.0


def _truncate(tokens: list[int], limit: int, eos: set[int]) -> list[int]:
    """Cut at the first EOS (kept) and at the token limit: a verify step can commit past either."""
    for i, t in enumerate(tokens[:limit]):
        if t in eos:
            return tokens[: i + 1]
    return tokens[:limit]
