"""Decode loops at batch size 1 (`Decoder`): the AR baseline, DFlash speculative decoding and DFlash draft trees
(DDTree, `tree_body`), greedy or sampled.

After prefill a request runs on the device: `ar_steps` / `spec_steps` run step after step in one `lax.while_loop`
whose state (tokens, count, accept lengths, the stop condition) stays on the device, one call per cache span, all
dispatched back to back; the host reads the first token as soon as it exists and everything else once, at the end.
Greedy and sampling are chosen at trace time (`pick`: temperature None is greedy). Shapes are static: caches of
fixed length (`cache_length`), prompts padded to buckets, a step reads only a prefix of the caches (`span_for`), so
each (model, K, span) loop compiles once and nothing recompiles within a request. Compiles run before the clock and
are reported apart (`compile_log`). Measurements behind these choices: docs/engine-findings.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.core.metrics import accepted_within
from benchmarks.engines.jax import draft as D
from benchmarks.engines.jax import model as M
from benchmarks.engines.jax import tree as T
from benchmarks.hardware import step_cost

State = dict[str, jax.Array]
EOS_SLOTS = 8  # EOS ids a request can stop at (padded with -1, which no token equals)


def pick(logits: jax.Array, positions: jax.Array, key: jax.Array, temperature: jax.Array | None) -> jax.Array:
    """Next token after each row of logits [T, V]: argmax when temperature is None (greedy, fixed when tracing),
    else a sample at that temperature keyed by row position."""
    if temperature is None:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    keys = jax.vmap(lambda p: jax.random.fold_in(key, p))(positions)
    return jax.vmap(jax.random.categorical)(keys, logits / temperature).astype(jnp.int32)


def temperature_arg(temperature: float) -> np.float32 | None:
    """A temperature as the loops take it: None (greedy, chosen when tracing) at 0, else a float32."""
    return np.float32(temperature) if temperature > 0 else None


def eos_array(eos_ids: tuple[int, ...] | set[int]) -> np.ndarray:
    """EOS ids as the loops take them: int32 [EOS_SLOTS], padded with -1."""
    ids = sorted(eos_ids)
    if len(ids) > EOS_SLOTS:
        raise ValueError(f"{len(ids)} EOS ids; the decode loops stop at most {EOS_SLOTS}")
    return np.asarray(ids + [-1] * (EOS_SLOTS - len(ids)), np.int32)


def start_state(first: jax.Array, length: jax.Array, limit: jax.Array, eos: jax.Array, width: int,
                pending: jax.Array | None = None, tree: bool = False) -> State:
    """The loop state after prefill: `first` committed at out[0]. DFlash (pending given) adds the pending context
    (taps of the tokens the last verify committed; none yet) and its start, and the accept lengths; a draft tree
    adds each step's accepted path (`tree_body`), [width, depth limit]."""
    state = {"out": jnp.zeros(width, jnp.int32).at[0].set(first), "count": jnp.int32(1), "length": length,
             "limit": limit, "eos": eos, "done": (limit <= 1) | jnp.any(first == eos)}
    if pending is not None:
        state |= {"pending": pending, "pending_start": length, "accepts": jnp.zeros(width, jnp.int32),
                  "steps": jnp.int32(0)}
    if tree:
        assert pending is not None  # a tree drafts with DFlash
        state["paths"] = jnp.zeros((width, pending.shape[0] - 1), jnp.int32)
    return state


def position(state: State) -> jax.Array:
    """Position of the last committed token: the input of the next step (its anchor, for DFlash)."""
    return state["length"] + state["count"] - 1


@partial(jax.jit, static_argnames=("cfg", "width"), donate_argnames=("cache",))
def prefill_step(params, tokens, length, limit, eos, cache, key, temperature, *, cfg, width):
    """AR prefill of a prompt padded to a bucket: the first generated token, the loop state and the cache."""
    logits, _, cache = M.prefill(params, tokens, length, cache, cfg=cfg)
    first = pick(logits[None], (length - 1)[None], key, temperature)[0]
    return first, start_state(first, length, limit, eos, width), cache


@partial(jax.jit, static_argnames=("tcfg", "dcfg", "k", "width", "tree"), donate_argnames=("tcache", "dcache"))
def dflash_prefill_step(tparams, dparams, tokens, length, limit, eos, tcache, dcache, key, temperature, *, tcfg, dcfg,
                        k, width, tree=False):
    """Target prefill with taps, then the prompt's context K/V into the draft cache: the first token, the loop state
    and the caches (a draft tree's state when `tree`, K its depth limit)."""
    logits, taps, tcache = M.prefill(tparams, tokens, length, tcache, cfg=tcfg, tap_ids=dcfg.target_layer_ids)
    dcache = D.prefill_context(dparams, taps, dcache, dcfg)
    first = pick(logits[None], (length - 1)[None], key, temperature)[0]
    pending = jnp.zeros((k + 1, taps.shape[1]), tcache["k"][0].dtype)
    return first, start_state(first, length, limit, eos, width, pending, tree), tcache, dcache


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


def ar_body(tparams, state, tcache, key, temperature, tcfg, span):
    """One AR step: the last committed token in, the next one committed."""
    pos = position(state)
    logits, _, tcache = M.forward(tparams, state["out"][state["count"] - 1][None], pos, tcache, cfg=tcfg, span=span)
    token = pick(logits, pos[None], key, temperature)[0]
    count = state["count"] + 1
    done = (count >= state["limit"]) | jnp.any(token == state["eos"])
    return {**state, "out": state["out"].at[state["count"]].set(token), "count": count, "done": done}, tcache


def spec_body(tparams, dparams, state, tcache, dcache, key, temperature, dcfg, tcfg, k, num_queries, span):
    """One DFlash step:

    draft   write the pending context K/V (taps of the tokens committed last step), propose d1..dK from the block
            [anchor, MASK...] at positions s..
    verify  the target runs [anchor, d1..dK] at positions s..s+K and picks t_i at each row (argmax, or a sample)
    accept  n = leading i with d_i == t_{i-1}; commit t_0..t_n (= d1..dn and the bonus t_n); the new anchor is t_n
            at s+n+1; the new pending context is the K+1 verify taps (rows > n are never read); the accept length
            recorded is n, which the host cuts at the request's output (EOS or the limit: metrics.accepted_within)

    Sampling keeps argmax drafts (a one-hot proposal), so "d_i == sampled t_{i-1}" is the exact acceptance rule. The
    token at position p+1 is drawn with the key fold_in(seed, p) in both loops, so DFlash and AR draw the same samples
    from (numerically) the same distributions.
    """
    s, count = position(state), state["count"]
    anchor = state["out"][count - 1]
    drafts, dcache = _draft(dparams, tparams, state["pending"], state["pending_start"], anchor, s, dcache, dcfg, tcfg,
                            k, num_queries, span)
    n, picked, taps, tcache = _verify(tparams, anchor, drafts, s, tcache, key, temperature, tcfg,
                                      dcfg.target_layer_ids, span)
    committed = jnp.arange(k + 1) <= n
    hit_eos = jnp.any(committed[:, None] & (picked[:, None] == state["eos"][None, :]))
    count = count + n + 1
    state = {**state, "out": jax.lax.dynamic_update_slice(state["out"], picked, (state["count"],)), "count": count,
             "pending": taps.astype(state["pending"].dtype), "pending_start": s,
             "accepts": state["accepts"].at[state["steps"]].set(n), "steps": state["steps"] + 1,
             "done": (count >= state["limit"]) | hit_eos}
    return state, tcache, dcache


def _tree_verify(tparams, anchor, tree, s, tcache, key, temperature, tcfg, tap_ids, span, depth_limit):
    """The target over [anchor, tree nodes] in one forward (positions by depth, the ancestor mask): its token at each
    verify row (argmax, or a sample keyed by position), the path it accepts, the taps and the new K/V rows (the
    cache unwritten)."""
    rows = T.positions(tree, s)
    logits, taps, new = M.forward_rows(tparams, jnp.concatenate([anchor[None], tree.tokens]), s, tcache, cfg=tcfg,
                                       tap_ids=tap_ids, span=span, positions=rows,
                                       mask=T.ancestors(tree, depth_limit))
    picked = pick(logits, rows, key, temperature)
    return picked, T.accept(tree, picked, depth_limit), taps, new


def tree_body(tparams, dparams, state, tcache, dcache, key, temperature, dcfg, tcfg, budget, span):
    """One draft-tree (DDTree) step, with depth limit D = block_size - 1:

    draft   as spec_body's, over the whole block: log-probabilities [D, V] at positions s+1..s+D
    tree    the `budget` nodes of highest cumulative log-probability (tree.build), in pop order
    verify  the target runs [anchor, nodes] in one forward, node i at position s + depth_i, each seeing the context
            and its own ancestors (tree.ancestors), the cache read, not written; it picks t_i at each row (argmax,
            or a sample keyed by position as `pick` keys the chain's)
    accept  from the root, follow the child whose token is the target's (tree.accept): n nodes; commit the target's
            tokens at the root and the n nodes (the last is the bonus); the root's and the path's K/V rows alone are
            written, at rows s..s+D (a node's position s + depth is its row; rows past s+n are never read); the
            pending context is the taps of the root and the path; the accept length is n and the path's verify rows
            are recorded per step

    At T > 0 each node's token is the target's sample at its position with the key AR uses there, and a path is
    followed only while the samples match, so the committed tokens are AR's samples: lossless.
    """
    s, count = position(state), state["count"]
    depth_limit = dcfg.block_size - 1
    anchor = state["out"][count - 1]
    logits, dcache = D.draft_logits(dparams, tparams, dcache, state["pending"], state["pending_start"], anchor, s,
                                    dcfg, tcfg, dcfg.block_size, span)
    tree = T.build(jax.nn.log_softmax(logits, axis=-1), budget)
    picked, got, taps, new = _tree_verify(tparams, anchor, tree, s, tcache, key, temperature, tcfg,
                                          dcfg.target_layer_ids, span, depth_limit)
    keep = jnp.concatenate([jnp.zeros(1, jnp.int32), got.path])  # root, then the path (rows past n are never read)
    tcache = M.write_after(tcache, {name: [r[:, keep] for r in new[name]] for name in ("k", "v")}, s, picked)
    committed = picked[keep]
    n = got.depth
    hit_eos = jnp.any((jnp.arange(depth_limit + 1) <= n)[:, None] & (committed[:, None] == state["eos"][None, :]))
    count = count + n + 1
    state = {**state, "out": jax.lax.dynamic_update_slice(state["out"], committed, (state["count"],)),
             "count": count, "pending": taps[keep].astype(state["pending"].dtype), "pending_start": s,
             "accepts": state["accepts"].at[state["steps"]].set(n),
             "paths": state["paths"].at[state["steps"]].set(got.path), "steps": state["steps"] + 1,
             "done": (count >= state["limit"]) | hit_eos}
    return state, tcache, dcache


def accepts_within(new_tokens: int, k: int) -> list[int]:
    """The accept lengths a request of `new_tokens` records when every draft is accepted: K per step, the last step
    cut at the tokens still wanted (the first token comes from prefill, each step commits accepted + 1)."""
    full, rest = divmod(new_tokens - 1, k + 1)
    return [k] * full + ([rest - 1] if rest else [])


def _loop(body: Any, carry: tuple, span: int, count: int) -> tuple:
    """Steps until the request is done or the next step's context outgrows `span` (a while loop: its stop test is
    data), or, with `count`, exactly that many (a loop of known trip count, no stop test: what a platform that reads
    a while loop's predicate back to the host between iterations is measured against, study device)."""
    if count:
        return jax.lax.fori_loop(0, count, lambda _, c: body(c), carry)
    return jax.lax.while_loop(lambda c: ~c[0]["done"] & (position(c[0]) <= span), body, carry)


@partial(jax.jit, static_argnames=("tcfg", "span", "count"), donate_argnames=("state", "tcache"))
def ar_steps(tparams, state, tcache, key, temperature, *, tcfg, span, count=0):
    """AR steps on the device until the request is done or its context outgrows `span` (`_loop`): (state, cache)."""
    return _loop(lambda c: ar_body(tparams, c[0], c[1], key, temperature, tcfg, span), (state, tcache), span, count)


@partial(jax.jit, static_argnames=("dcfg", "tcfg", "k", "num_queries", "span", "count"),
         donate_argnames=("state", "tcache", "dcache"))
def spec_steps(tparams, dparams, state, tcache, dcache, key, temperature, *, dcfg, tcfg, k, num_queries, span,
               count=0):
    """DFlash steps on the device until the request is done or its context outgrows `span` (`_loop`): (state,
    caches)."""
    return _loop(lambda c: spec_body(tparams, dparams, c[0], c[1], c[2], key, temperature, dcfg, tcfg, k,
                                     num_queries, span), (state, tcache, dcache), span, count)


@partial(jax.jit, static_argnames=("dcfg", "tcfg", "budget", "span", "count"),
         donate_argnames=("state", "tcache", "dcache"))
def tree_steps(tparams, dparams, state, tcache, dcache, key, temperature, *, dcfg, tcfg, budget, span, count=0):
    """Draft-tree steps on the device until the request is done or its context outgrows `span` (`_loop`): (state,
    caches)."""
    return _loop(lambda c: tree_body(tparams, dparams, c[0], c[1], c[2], key, temperature, dcfg, tcfg, budget, span),
                 (state, tcache, dcache), span, count)


def spec_row(tparams, dparams, state, tcache, dcache, key, temperature, dcfg, tcfg, k, num_queries, budget, span):
    """One speculative step of a request: a draft tree's (`tree_body`) when budget > 0, else DFlash's
    (`spec_body`)."""
    if budget:
        return tree_body(tparams, dparams, state, tcache, dcache, key, temperature, dcfg, tcfg, budget, span)
    return spec_body(tparams, dparams, state, tcache, dcache, key, temperature, dcfg, tcfg, k, num_queries, span)


@partial(jax.jit, static_argnames=("tcfg", "dcfg"))
def _prefill_batch(tparams, dparams, tokens, length, tcache, dcache, keys, temperature, *, tcfg, dcfg):
    """One prefill shared by a batch of samples: the first token of each (one key each) and the caches."""
    tap_ids = dcfg.target_layer_ids if dcfg is not None else ()
    logits, taps, tcache = M.prefill(tparams, tokens, length, tcache, cfg=tcfg, tap_ids=tap_ids)
    if dcfg is not None:
        dcache = D.prefill_context(dparams, taps, dcache, dcfg)
    first = jax.vmap(lambda key: pick(logits[None], (length - 1)[None], key, temperature)[0])(keys)
    return first, tcache, dcache


@partial(jax.jit, static_argnames=("tcfg", "dcfg", "k", "num_queries", "length", "budget"))
def _sample_batch(tparams, dparams, tcache, dcache, first, start, eos, keys, temperature, *, tcfg, dcfg, k,
                  num_queries, length, budget=0):
    """Decode every sample (vmapped over keys) to `length` tokens with the per-request loop's step (`ar_body` when
    dcfg is None, else `spec_row`): length - 1 steps (a step commits at least one token), a finished sample's state
    frozen (its later steps redo rows it never reads). The caches are this batch's own, read whole.
    Returns tokens [B, length + K + 1] and committed counts [B] (a verify step may commit past `length`)."""
    width, span, size = length + k + 1, tcache["k"][0].shape[1], keys.shape[0]
    width_taps = len(dcfg.target_layer_ids) * tcfg.hidden_size if dcfg is not None else 0
    pending = jnp.zeros((k + 1, width_taps), tcache["k"][0].dtype) if dcfg is not None else None
    states = jax.vmap(lambda token: start_state(token, start, jnp.int32(length), eos, width, pending, budget > 0))(
        first)
    # each sample's own copy of the prompt's caches, kept as a batch keeps them (model.CACHE_AXIS)
    caches = jax.tree.map(lambda x: jnp.repeat(jnp.expand_dims(x, M.CACHE_AXIS), size, M.CACHE_AXIS),
                          (tcache, dcache))

    def row(state, tc, dc, key):
        if dcfg is None:
            new, tc = ar_body(tparams, state, tc, key, temperature, tcfg, span)
        else:
            new, tc, dc = spec_row(tparams, dparams, state, tc, dc, key, temperature, dcfg, tcfg, k, num_queries,
                                   budget, span)
        return jax.tree.map(lambda a, b: jnp.where(state["done"], a, b), state, new), tc, dc

    axes = (0, M.CACHE_AXIS, M.CACHE_AXIS, 0)
    step = jax.vmap(row, in_axes=axes, out_axes=axes[:3])
    states, _, _ = jax.lax.fori_loop(0, length - 1, lambda _, c: step(*c, keys), (states, *caches))
    return states["out"], states["count"]


def sample_rows(bucket: int, prompt_len: int, length: int, k: int) -> int:
    """Cache rows of a sampling batch: the padded prompt, and every position a sample of `length` tokens writes (a
    last verify step starting before `length` writes k + 1 rows: K + 1, a tree's budget + 1), rounded up to a multiple
    of 128."""
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
    length: np.int32
    limit: np.int32  # tokens to generate at most
    eos: np.ndarray  # eos_array
    key: jax.Array
    temperature: np.float32 | None  # None: greedy


@dataclass
class Generation:
    """One request's result. Its clock starts once the padded prompt is on the device and every function it needs
    is compiled; ttft_s and last_token_s are the times the first and last tokens reached the host. round_trips:
    the times the host waited for the device after the first token (the old per-step loop: one per step)."""

    tokens: list[int]
    ttft_s: float
    last_token_s: float
    accept_lengths: list[int] | None
    compile_s: float  # compiles triggered by this request, run before its clock started
    bucket: int
    round_trips: int
    breakdown: dict[str, float] = field(default_factory=dict)
    tree_paths: list[list[int]] | None = None  # a draft tree's: per step, its accepted path's verify rows (1..budget)


def paths_within(paths: np.ndarray, accepts: list[int]) -> list[list[int]]:
    """Per step, the first accepts[i] verify rows of step i's path (accept lengths already cut at the output:
    metrics.accepted_within), so the paths are cut at the output as the accept lengths are."""
    return [list(map(int, paths[i, :n])) for i, n in enumerate(accepts)]


class Decoder:
    """Owns the parameters and preallocated caches of one loaded (target[, draft], K or tree budget) and runs
    requests.

    max_model_len bounds prompt + output tokens; the caches hold one draft block more (a tree's budget + 1 rows,
    when more), for the last verify. budget > 0 runs draft trees of that many nodes (DDTree, `tree_body`): K is
    then the tree's depth limit, block_size - 1, whatever is passed, and the draft runs the whole block.
    compile_log: seconds per compiled function, keyed as _compile names them.
    """

    def __init__(self, tcfg: M.ModelConfig, tparams: M.Params, max_model_len: int, dtype: Any,
                 dcfg: D.DraftConfig | None = None, dparams: M.Params | None = None, k: int = 0,
                 num_queries: int | None = None, budget: int = 0) -> None:
        self.tcfg, self.tparams, self.dcfg, self.dparams = tcfg, tparams, dcfg, dparams
        self.budget = budget
        if budget:
            if dcfg is None or budget < 0:
                raise ValueError("a draft tree needs a DFlash draft and a budget >= 1")
            if num_queries not in (None, dcfg.block_size):
                raise ValueError("a draft tree's draft runs the whole block: num_queries must be block_size")
            k = dcfg.block_size - 1
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
        cache_len = cache_length(max_model_len, max(dcfg.block_size, budget + 1) if dcfg else 1)
        self.tcache = M.init_cache(tcfg, cache_len, dtype)
        self.dcache = M.init_cache(dcfg.layers, cache_len, dtype) if dcfg else None
        self.buckets = buckets(cache_len)
        self.spans = buckets(cache_len, smallest=256)
        self.width = max_model_len + k + 1  # a last verify step writes K + 1 tokens from below max_model_len
        self.compile_log: dict[tuple, float] = {}

    @property
    def speculative(self) -> bool:
        return self.dcfg is not None

    def step_cost(self, context: int) -> step_cost.Step:
        """What one decode step of this decoder reads and computes after `context` cached positions."""
        itemsize = self.tcache["k"][0].dtype.itemsize
        if self.dcfg is None:
            return step_cost.ar_step(self.tcfg, context, itemsize)
        if self.budget:
            return step_cost.tree_step(self.tcfg, self.dcfg.layers, len(self.dcfg.target_layer_ids), self.budget,
                                       self.num_queries, context, itemsize)
        return step_cost.dflash_step(self.tcfg, self.dcfg.layers, len(self.dcfg.target_layer_ids), self.k,
                                     self.num_queries, context, itemsize)

    def span(self, start: int) -> int:
        """The cache rows a step at position `start` reads."""
        return span_for(self.spans, start)

    def cache_bytes(self) -> int:
        caches = [self.tcache] + ([self.dcache] if self.speculative else [])
        return sum(x.nbytes for x in jax.tree.leaves(caches))

    def bucket(self, prompt_len: int) -> int:
        """The prefill bucket a prompt is padded to."""
        return next(b for b in self.buckets if b >= prompt_len)

    def limit(self, prompt_len: int, max_new_tokens: int) -> np.int32:
        """The tokens a request may generate: max_new_tokens, cut to what its prompt leaves of max_model_len."""
        if not 0 < prompt_len < self.max_model_len:
            raise ValueError(f"prompt of {prompt_len} tokens does not fit max_model_len={self.max_model_len}")
        return np.int32(min(max_new_tokens, self.max_model_len - prompt_len))

    def request(self, prompt: list[int], max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
                eos_ids: tuple[int, ...] = ()) -> Request:
        """A request's device inputs: the prompt padded to its bucket, the token limit, EOS ids, key and temperature."""
        p = len(prompt)
        limit = self.limit(p, max_new_tokens)
        tokens = np.zeros(self.bucket(p), np.int32)
        tokens[:p] = prompt
        return Request(jnp.asarray(tokens), np.int32(p), limit, eos_array(eos_ids), jax.random.key(seed),
                       temperature_arg(temperature))

    def generate(self, prompt: list[int], max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
                 eos_ids: tuple[int, ...] = (), breakdown: bool = False) -> Generation:
        req = self.request(prompt, max_new_tokens, temperature, seed, eos_ids)
        timed = breakdown and self.speculative
        if timed and self.budget:
            raise ValueError("the breakdown option times DFlash's chain; a draft tree runs its steps on the device")
        compile_s = self._compile(req, timed)
        if timed:
            return self._dflash_timed(req, set(eos_ids), compile_s)
        t0 = time.perf_counter()
        first, state = self.prefill(req)
        first.copy_to_host_async()
        for span in self.request_spans(req):  # dispatched back to back: the device never waits for the host
            state = self.dispatch_steps(state, req, span)
        int(first)
        ttft = time.perf_counter() - t0
        keys = ("out", "count", "done") + (("accepts", "steps") if self.speculative else ()) \
            + (("paths",) if self.budget else ())
        got = jax.device_get({name: state[name] for name in keys})  # the one wait after the first token
        end = time.perf_counter()
        if not got["done"]:
            raise RuntimeError("the decode loops stopped before the request was done (a span was not dispatched)")
        tokens = truncate(list(map(int, got["out"][: got["count"]])), int(req.limit), set(eos_ids))
        accepts = accepted_within(list(map(int, got["accepts"][: got["steps"]])), len(tokens)) \
            if self.speculative else None
        paths = paths_within(got["paths"], accepts) if self.budget and accepts is not None else None
        return Generation(tokens, ttft, end - t0, accepts, compile_s, len(req.tokens), 1, tree_paths=paths)

    def sample_batch(self, prompt: list[int], max_new_tokens: int, temperature: float, seeds: list[int],
                     eos_ids: tuple[int, ...] = ()) -> list[list[int]]:
        """Independent samples of one prompt, one per seed, decoded side by side (vmapped) with the same step
        functions and keys as `generate`, so each equals `generate(prompt, max_new_tokens, temperature, seed)`'s
        tokens. For the distribution check's many samples: no timing; the batch has caches of its own, sized to the
        sample (`sample_rows`), and the live caches are left untouched."""
        p = len(prompt)
        if not 0 < p or p + max_new_tokens > self.max_model_len or max_new_tokens < 1:
            raise ValueError(f"a {p}-token prompt and {max_new_tokens} sampled tokens do not fit "
                             f"max_model_len={self.max_model_len}")
        bucket = self.bucket(p)
        tokens = np.zeros(bucket, np.int32)
        tokens[:p] = prompt
        temp = temperature_arg(temperature)
        rows = sample_rows(bucket, p, max_new_tokens, max(self.k, self.budget))
        dtype = self.tcache["k"][0].dtype
        out, counts = [], []
        for i in range(0, len(seeds), SAMPLE_CHUNK):  # one batch shape: bounded memory, one compile
            chunk = seeds[i: i + SAMPLE_CHUNK]
            keys = jax.vmap(jax.random.key)(jnp.asarray(chunk + [0] * (SAMPLE_CHUNK - len(chunk)), jnp.uint32))
            tcache = M.init_cache(self.tcfg, rows, dtype)
            dcache = M.init_cache(self.dcfg.layers, rows, dtype) if self.dcfg is not None else None
            first, tcache, dcache = _prefill_batch(self.tparams, self.dparams, jnp.asarray(tokens), np.int32(p),
                                                   tcache, dcache, keys, temp, tcfg=self.tcfg, dcfg=self.dcfg)
            got, count = jax.device_get(_sample_batch(
                self.tparams, self.dparams, tcache, dcache, first, np.int32(p), eos_array(eos_ids), keys, temp,
                tcfg=self.tcfg, dcfg=self.dcfg, k=self.k, num_queries=self.num_queries if self.speculative else 0,
                length=max_new_tokens, budget=self.budget))
            out += list(got[: len(chunk)])
            counts += list(count[: len(chunk)])
        return [truncate(list(map(int, row[:c])), max_new_tokens, set(eos_ids)) for row, c in zip(out, counts)]

    def request_spans(self, req: Request) -> list[int]:
        """The spans a request's steps read, in order: from its prompt's to the one its last step may need."""
        return self.spans_between(int(req.length), int(req.length + req.limit))

    def spans_between(self, first: int, last: int) -> list[int]:
        """The spans of steps at positions first..last, in order."""
        return [span for span in self.spans if self.span(first) <= span <= self.span(last)]

    def prefill(self, req: Request) -> tuple[jax.Array, State]:
        """Prefill the target (and, for DFlash, the draft's context): the first token and the loop state, on device."""
        if self.speculative:
            first, state, self.tcache, self.dcache = dflash_prefill_step(
                self.tparams, self.dparams, req.tokens, req.length, req.limit, req.eos, self.tcache, self.dcache,
                req.key, req.temperature, tcfg=self.tcfg, dcfg=self.dcfg, k=self.k, width=self.width,
                tree=self.budget > 0)
        else:
            first, state, self.tcache = prefill_step(self.tparams, req.tokens, req.length, req.limit, req.eos,
                                                     self.tcache, req.key, req.temperature, cfg=self.tcfg,
                                                     width=self.width)
        return first, state

    def dispatch_steps(self, state: State, req: Request, span: int, count: int = 0) -> State:
        """Dispatch the loop over one span (returns at once; the state stays on the device); `count`: see _loop."""
        if self.budget:
            state, self.tcache, self.dcache = tree_steps(
                self.tparams, self.dparams, state, self.tcache, self.dcache, req.key, req.temperature, dcfg=self.dcfg,
                tcfg=self.tcfg, budget=self.budget, span=span, count=count)
        elif self.speculative:
            state, self.tcache, self.dcache = spec_steps(
                self.tparams, self.dparams, state, self.tcache, self.dcache, req.key, req.temperature, dcfg=self.dcfg,
                tcfg=self.tcfg, k=self.k, num_queries=self.num_queries, span=span, count=count)
        else:
            state, self.tcache = ar_steps(self.tparams, state, self.tcache, req.key, req.temperature, tcfg=self.tcfg,
                                          span=span, count=count)
        return state

    def _dflash_timed(self, req: Request, eos: set[int], compile_s: float) -> Generation:
        """DFlash with the host in every step (the `breakdown` option): draft and verify as two synchronised calls,
        timed apart, and the host's bookkeeping between them (spec_body's rule, step by step)."""
        t0 = time.perf_counter()
        first, _ = self.prefill(req)
        out = [int(first)]
        ttft = time.perf_counter() - t0
        limit, s = int(req.limit), int(req.length)  # s: position of the anchor, not yet seen by the target
        anchor, pending, pending_start = np.int32(out[0]), self._no_context(), s
        accepted: list[int] = []
        times = dict.fromkeys(("draft_s", "verify_s", "host_s"), 0.0)
        done = out[-1] in eos
        while len(out) < limit and not done:
            n, picked, pending = self._step_timed(req, pending, pending_start, anchor, s, self.span(s), times)
            t_host = time.perf_counter()
            n, committed = jax.device_get((n, picked))
            new = [int(x) for x in committed[: int(n) + 1]]
            accepted.append(int(n))
            out.extend(new)
            done = not eos.isdisjoint(new)
            anchor, pending_start, s = np.int32(new[-1]), s, s + len(new)
            times["host_s"] += time.perf_counter() - t_host
        tokens = truncate(out, limit, eos)
        return Generation(tokens, ttft, time.perf_counter() - t0, accepted_within(accepted, len(tokens)), compile_s,
                          len(req.tokens), 2 * len(accepted), times)

    def _no_context(self) -> jax.Array:
        """Pending taps for the first step: zeros at positions >= the anchor's, which the draft never reads."""
        assert self.dcfg is not None  # a speculative decoder's
        width = len(self.dcfg.target_layer_ids) * self.tcfg.hidden_size
        return jnp.zeros((self.k + 1, width), self.tcache["k"][0].dtype)

    def _step_timed(self, req: Request, pending: jax.Array, pending_start: int, anchor: np.int32, s: int,
                    span: int, times: dict[str, float]) -> tuple[jax.Array, jax.Array, jax.Array]:
        """One DFlash step as two synchronised calls, adding their times into `times`."""
        assert self.dcfg is not None  # a speculative decoder's
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

    def _compile(self, req: Request, timed: bool) -> float:
        """Compile (and run once) each function this request needs on its shapes, unless done before; returns the
        seconds spent. A prefill at limit 1 leaves a finished state, over which each span's loop runs no step; the
        warm-up's other writes land at positions that a request rewrites before reading them (see model.py), so the
        live caches serve as scratch."""
        greedy = req.temperature is None
        prefill = ("prefill", len(req.tokens), greedy)
        steps = [key for key in [("timed" if timed else "steps", span, greedy) for span in self.request_spans(req)]
                 if key not in self.compile_log]
        if prefill in self.compile_log and not steps:
            return 0.0
        total = t = time.perf_counter()
        _, state = jax.block_until_ready(self.prefill(
            Request(req.tokens, req.length, np.int32(1), req.eos, req.key, req.temperature)))
        self.compile_log.setdefault(prefill, time.perf_counter() - t)
        for key in steps:
            t = time.perf_counter()
            if timed:
                self._step_timed(req, self._no_context(), 0, np.int32(0), 0, key[1], dict.fromkeys(
                    ("draft_s", "verify_s"), 0.0))
            else:
                state = jax.block_until_ready(self.dispatch_steps(state, req, key[1]))
            self.compile_log[key] = time.perf_counter() - t
        return time.perf_counter() - total


def truncate(tokens: list[int], limit: int, eos: set[int]) -> list[int]:
    """Cut at the first EOS (kept) and at the token limit: a verify step can commit past either."""
    for i, t in enumerate(tokens[:limit]):
        if t in eos:
            return tokens[: i + 1]
    return tokens[:limit]
