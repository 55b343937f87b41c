"""Qwen3 / Llama-3 decoder in JAX: one static-shape forward over a preallocated KV cache, with tapped hidden states.

Batch size is 1 throughout, so arrays carry no batch axis. Measurements behind the layout: docs/engine-findings.md.
The model's shape (ModelConfig, the named SHAPES, reading config.json) is benchmarks.core.shapes'.

    cfg = ModelConfig.from_hf(json.load(open("config.json")))         # or core.shapes.SHAPES["qwen3-4b"]
    params = init_random_params(cfg, jax.random.key(0), jnp.bfloat16)  # same pytree as loader.load_target
    cache = init_cache(cfg, max_len=4096, dtype=jnp.bfloat16)
    logits, taps, cache = forward(params, tokens, start, cache, cfg=cfg, tap_ids=(1, 9))
    last_logits, taps, cache = prefill(params, tokens, length, cache, cfg=cfg, tap_ids=())
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import partial, reduce
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.core.shapes import ModelConfig
from benchmarks.engines.jax.jax_options import ATTENTION
from benchmarks.engines.jax.pallas_attention import cache_attention

# Params: one dict per layer. The layer loop is unrolled, as in gpt-fast, so that every weight is read in place, never
# sliced out of a stacked array (XLA's CPU backend copies a slice before a matmul reads it); q/k/v and gate/up are
# stacked into one matmul each. The KV cache is one array per K and V, every layer's rows in it, so that a step writes
# it once (write_after). Matrices are stored in the config's `weight_layout`: "oi" is HF's
# [out, in], "io" is [in, out] (what XLA's CPU matmuls of 2-16 rows read fastest; platform_layout). Shapes in "oi"
# (docs/engine-findings.md):
#   {"embed": [V, H], "norm": [H], "lm_head": [V, H] (untied, or in "io" a transposed copy of a tied embedding),
#    "layers": [{"qkv_proj": [(NH+2*KVH)*D, H] (HF's q_proj, k_proj, v_proj stacked), "o_proj",
#                "gate_up_proj": [2F, H] (gate_proj, up_proj stacked), "down_proj",
#                "input_norm", "post_norm", "q_norm", "k_norm" (Qwen3 only)}, ...]}
Params = dict[str, Any]
Cache = dict[str, jax.Array]  # {"k", "v"}: [L, KVH, max_len, D], every layer's rows in one array
CACHE_AXIS = 1  # the batch axis of a batch's caches, [L, B, KVH, S, D]; every other batched array has it first


@dataclass(frozen=True)
class TargetConfig(ModelConfig):
    """A target's shape with how the decoder computes its attention over the cache: "xla" (`attend` over the cache's
    slice, one fused XLA op) or "pallas" (pallas_attention.cache_attention, reading the layer from the whole cache)."""

    attention: str = "xla"


def with_attention(cfg: ModelConfig, attention: str) -> ModelConfig:
    """cfg with the decoder's attention set; "xla" gives back a plain ModelConfig (the default path's cfg)."""
    if attention not in ATTENTION:
        raise ValueError(f"attention {attention!r}: one of {ATTENTION}")
    base = {f.name: getattr(cfg, f.name) for f in fields(ModelConfig)}
    return ModelConfig(**base) if attention == "xla" else TargetConfig(**base, attention=attention)


def attention_of(cfg: ModelConfig) -> str:
    """The decoder's attention for cfg: "xla" unless cfg is a TargetConfig that says otherwise."""
    return cfg.attention if isinstance(cfg, TargetConfig) else "xla"


# ---------------------------------------------------------------------------------------------------------------
# Building blocks (shared with the DFlash draft)

def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """RMSNorm over the last axis, computed in float32 and cast back before the weight (as HF does)."""
    xf = x.astype(jnp.float32)
    xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return weight * xf.astype(x.dtype)


def platform_layout(platform: str | None = None) -> str:
    """The weight layout for JAX's default (or the named) platform: [in, out] on CPU, where XLA's matmuls of 2-16
    rows read it 1.3-1.6x faster (docs/engine-findings.md); HF's [out, in] on accelerators."""
    return "io" if (platform or jax.default_backend()) == "cpu" else "oi"


def linear(x: jax.Array, w: jax.Array, layout: str) -> jax.Array:
    """x times a weight stored [out, in] ("oi") or [in, out] ("io")."""
    return jnp.einsum("...i,oi->...o" if layout == "oi" else "...i,io->...o", x, w)


def inv_freq(cfg: ModelConfig) -> np.ndarray:
    """RoPE inverse frequencies [D/2], with Llama-3 scaling when configured."""
    d = cfg.head_dim
    freq = 1.0 / (cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    if cfg.rope_scaling:
        s = dict(cfg.rope_scaling)
        factor, low, high, old_len = (s["factor"], s["low_freq_factor"], s["high_freq_factor"],
                                      s["original_max_position_embeddings"])
        wavelen = 2 * math.pi / freq
        scaled = np.where(wavelen > old_len / low, freq / factor, freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        freq = np.where(medium, smoothed, scaled)
    return freq.astype(np.float32)


def rope(x: jax.Array, positions: jax.Array, freq: np.ndarray) -> jax.Array:
    """Rotate-half RoPE of x [T, heads, D] at integer positions [T]."""
    angles = positions.astype(jnp.float32)[:, None] * freq[None, :]
    cos, sin = jnp.cos(angles)[:, None, :], jnp.sin(angles)[:, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def project(lp: Params, x: jax.Array, cfg: ModelConfig) -> tuple[jax.Array, jax.Array, jax.Array]:
    """q [T, NH, D], k and v [T, KVH, D] of x [T, H] through the stacked qkv_proj: one matmul."""
    t, d = x.shape[0], cfg.head_dim
    split = [cfg.num_heads * d, (cfg.num_heads + cfg.num_kv_heads) * d]
    q, k, v = jnp.split(linear(x, lp["qkv_proj"], cfg.weight_layout), split, -1)
    return (q.reshape(t, cfg.num_heads, d), k.reshape(t, cfg.num_kv_heads, d), v.reshape(t, cfg.num_kv_heads, d))


def qkv(lp: Params, x: jax.Array, cfg: ModelConfig, positions: jax.Array) -> tuple[jax.Array, ...]:
    """q [T, NH, D] and head-major k, v [KVH, T, D] of normed input x: projected, q/k-normed (Qwen3), rotated."""
    q, k, v = project(lp, x, cfg)
    if cfg.qk_norm:
        q = rms_norm(q, lp["q_norm"], cfg.rms_norm_eps)
        k = rms_norm(k, lp["k_norm"], cfg.rms_norm_eps)
    freq = inv_freq(cfg)
    return rope(q, positions, freq), rope(k, positions, freq).transpose(1, 0, 2), v.transpose(1, 0, 2)


def group_queries(q: jax.Array, kvh: int) -> jax.Array:
    """q [T, NH, D] as each KV head's group of query rows, [KVH, G*T, D] (row g*T + t: head g of the group, token t)."""
    t, nh, d = q.shape
    return q.reshape(t, kvh, nh // kvh, d).transpose(1, 2, 0, 3).reshape(kvh, nh // kvh * t, d)


def attend(q: jax.Array, parts: list[tuple[jax.Array, jax.Array, jax.Array]],
           computed: tuple[jax.Array, jax.Array, jax.Array] | None = None) -> jax.Array:
    """Grouped-query attention of q [T, NH, D] over several key/value sets at once, -> [T, NH*D].

    parts: (k [KVH, S_i, D], v [KVH, S_i, D], visible [T, S_i] or [S_i]) — e.g. the cache and the new tokens. One
    softmax spans all parts (one max, one sum), so this equals attention over their concatenation without copying
    the cache, or the scores: a row of span + T scores is not a multiple of a TPU's 128-wide tiles, and XLA copied
    the concatenated scores twice per layer (docs/engine-findings.md). computed (optional): one more part already
    reduced over its keys, as (max [KVH, G*T, 1], sum [KVH, G*T, 1], unnormalised output [KVH, G*T, D]) in float32 —
    the cache's part from pallas_attention.cache_attention.
    """
    t, nh, d = q.shape
    kvh = parts[0][0].shape[0]
    g = nh // kvh
    q = group_queries(q, kvh)
    scores = []
    for k, _, visible in parts:
        s = jnp.einsum("kqd,ksd->kqs", q, k, preferred_element_type=jnp.float32).reshape(kvh, g, t, -1)
        scores.append(jnp.where(visible, s / math.sqrt(d), jnp.finfo(jnp.float32).min))
    top = reduce(jnp.maximum, [s.max(axis=-1, keepdims=True) for s in scores])
    if computed is not None:
        top = jnp.maximum(top, computed[0].reshape(kvh, g, t, 1))
    weights = [jnp.exp(s - top) for s in scores]
    total = reduce(jnp.add, [w.sum(axis=-1, keepdims=True) for w in weights])
    out = jnp.zeros((kvh, g * t, d), jnp.float32)
    if computed is not None:
        scale = jnp.exp(computed[0].reshape(kvh, g, t, 1) - top)
        total = total + computed[1].reshape(kvh, g, t, 1) * scale
        out = computed[2] * (scale / total).reshape(kvh, g * t, 1)
    for (_, v, _), w in zip(parts, weights):
        p = (w / total).reshape(kvh, g * t, -1).astype(v.dtype)
        out = out + jnp.einsum("kqs,ksd->kqd", p, v, preferred_element_type=jnp.float32)
    return out.reshape(kvh, g, t, d).transpose(2, 0, 1, 3).reshape(t, nh * d).astype(q.dtype)


@jax.custom_batching.custom_vmap
def write_rows(cache: jax.Array, rows: jax.Array, start: jax.Array) -> jax.Array:
    """cache [L, KVH, S, D] with rows [L, KVH, T, D] written at start."""
    return jax.lax.dynamic_update_slice(cache, rows, (0, 0, start, 0))


@write_rows.def_vmap
def _write_rows_per_request(size: int, batched: list[bool], cache: jax.Array, rows: jax.Array,
                            start: jax.Array) -> tuple[jax.Array, bool]:
    """A batch's write: each request's rows at its own position, one in-place update per request, into the cache as
    a batch keeps it, [L, B, KVH, S, D] (CACHE_AXIS; vmap hands it here with the batch axis first). vmap's
    own rule makes the write a scatter, which XLA's TPU backend ran with a copy of the whole cache
    (docs/engine-findings.md)."""
    cache, rows, start = (x if b else jnp.broadcast_to(x, (size, *jnp.shape(x)))
                          for x, b in zip((cache, rows, start), batched))
    cache, rows = jnp.moveaxis(cache, 0, 1), jnp.moveaxis(rows, 0, 1)
    for i in range(size):
        cache = jax.lax.dynamic_update_slice(cache, rows[:, i:i + 1], (0, i, 0, start[i], 0))
    return jnp.moveaxis(cache, 1, 0), True


def write_after(cache: Cache, rows: dict[str, list[jax.Array]], start: jax.Array, read: jax.Array) -> Cache:
    """Write every layer's new rows [KVH, T, D] into the cache [L, KVH, S, D] at start, ordered after `read` (a
    result of every read of the cache): one write per array and request, not one per layer (under a batch's vmap,
    one per layer made 2 * L ops per request and step; docs/engine-findings.md).

    The zero term makes the write data-depend on the reads, which lets XLA update the donated cache in place;
    without it XLA copies the whole cache on every call (measured on CPU: 10x slower at 4k rows).
    """
    after = jnp.zeros((), cache["k"].dtype) * read.ravel()[0].astype(cache["k"].dtype)
    return {name: write_rows(cache[name], jnp.stack(rows[name]).astype(cache[name].dtype) + after, start)
            for name in ("k", "v")}


def mlp(lp: Params, x: jax.Array, cfg: ModelConfig) -> jax.Array:
    """SwiGLU through the stacked gate_up_proj: one matmul, then down_proj."""
    gate, up = jnp.split(linear(x, lp["gate_up_proj"], cfg.weight_layout), 2, axis=-1)
    return linear(jax.nn.silu(gate) * up, lp["down_proj"], cfg.weight_layout)


def lm_head(params: Params, h: jax.Array, cfg: ModelConfig) -> jax.Array:
    """float32 logits of final-normed hidden states h [..., H]."""
    if cfg.weight_layout == "io":
        return jnp.einsum("...h,hv->...v", h, params["lm_head"], preferred_element_type=jnp.float32)
    w = params["embed"] if cfg.tie_word_embeddings else params["lm_head"]
    return jnp.einsum("...h,vh->...v", h, w, preferred_element_type=jnp.float32)


# ---------------------------------------------------------------------------------------------------------------
# The decoder

def decoder(params: Params, tokens: jax.Array, start: jax.Array, cache: Cache, cfg: ModelConfig,
            tap_ids: tuple[int, ...] = (), span: int | None = None, positions: jax.Array | None = None,
            mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array, Cache]:
    """Final-normed hidden states [T, H], taps [T, n*H] and the cache with the new tokens' K/V in rows
    start..start+T-1 (the unjitted core of forward): `decoder_rows`, then one write per array."""
    h, tapped, rows = decoder_rows(params, tokens, start, cache, cfg, tap_ids, span, positions, mask)
    return h, tapped, write_after(cache, rows, start, h)


def decoder_rows(params: Params, tokens: jax.Array, start: jax.Array, cache: Cache, cfg: ModelConfig,
                 tap_ids: tuple[int, ...] = (), span: int | None = None, positions: jax.Array | None = None,
                 mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array, dict[str, list[jax.Array]]]:
    """Final-normed hidden states [T, H], taps [T, n*H] and the new tokens' K/V rows, per layer [KVH, T, D]; the
    cache is read, not written.

    Queries read only the first `span` cache rows (default: all; 0: none), so `start` must be <= span. By default
    the new tokens sit at positions start..start+T-1 and see each other causally; a draft tree's verify gives each
    token its own position [T] and the mask [T, T] of the new tokens it sees (tree.ancestors).
    """
    t = tokens.shape[0]
    span = cache["k"].shape[2] if span is None else span
    positions = start + jnp.arange(t, dtype=jnp.int32) if positions is None else positions
    earlier = jnp.arange(span) < start
    causal = jnp.tril(jnp.ones((t, t), bool)) if mask is None else mask
    h = params["embed"][tokens]
    taps: dict[int, jax.Array] = {}
    rows: dict[str, list[jax.Array]] = {"k": [], "v": []}
    for i, lp in enumerate(params["layers"]):
        q, k, v = qkv(lp, rms_norm(h, lp["input_norm"], cfg.rms_norm_eps), cfg, positions)
        if span and attention_of(cfg) == "pallas":
            cached = cache_attention(group_queries(q, cfg.num_kv_heads), cache["k"], cache["v"], i, start, span)
            attn = attend(q, [(k, v, causal)], cached)
        else:
            past = [(cache["k"][i, :, :span], cache["v"][i, :, :span], earlier)] if span else []
            attn = attend(q, past + [(k, v, causal)])
        rows["k"].append(k)
        rows["v"].append(v)
        h = h + linear(attn, lp["o_proj"], cfg.weight_layout)
        h = h + mlp(lp, rms_norm(h, lp["post_norm"], cfg.rms_norm_eps), cfg)
        if i in tap_ids:
            taps[i] = h
    tapped = jnp.concatenate([taps[i] for i in tap_ids], axis=-1) if tap_ids else jnp.zeros((t, 0), h.dtype)
    return rms_norm(h, params["norm"], cfg.rms_norm_eps), tapped, rows


@partial(jax.jit, static_argnames=("cfg", "tap_ids", "span"), donate_argnames=("cache",))
def forward(params: Params, tokens: jax.Array, start: jax.Array, cache: Cache, *, cfg: ModelConfig,
            tap_ids: tuple[int, ...] = (), span: int | None = None, positions: jax.Array | None = None,
            mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array, Cache]:
    """Logits [T, V] (float32), taps [T, n*H] and the cache, for tokens [T] int32 at positions start..start+T-1.

    start is a traced scalar (no recompile as it moves). Each query attends to the cache rows at positions < start
    and causally to the T new tokens; the new K/V are then written at rows start..start+T-1. Rows at or past start
    are never read, so stale rows (rejected drafts, prefill padding) need no clearing: "cropping" the cache is just
    choosing the next start. Tap id k is the output of layer k (0-based), i.e. HF hidden_states[k+1], concatenated
    in tap order. One compile per (cfg, T, tap_ids, cache length, span): verifying K+1 tokens is T = K+1. span
    (static, optional): read only cache rows < span (needs start <= span), so attention costs what the live context
    needs; callers round it up to a few sizes to bound compiles. The cache is donated: use the returned one.
    positions [T] and mask [T, T] (optional; both or neither): a draft tree's verify (`decoder`).
    """
    h, taps, cache = decoder(params, tokens, start, cache, cfg, tap_ids, span, positions, mask)
    return lm_head(params, h, cfg), taps, cache


@partial(jax.jit, static_argnames=("cfg", "tap_ids", "span"))
def forward_rows(params: Params, tokens: jax.Array, start: jax.Array, cache: Cache, *, cfg: ModelConfig,
                 tap_ids: tuple[int, ...] = (), span: int | None = None, positions: jax.Array | None = None,
                 mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array, dict[str, list[jax.Array]]]:
    """forward without its write: logits [T, V] (float32), taps [T, n*H] and the new tokens' K/V rows per layer
    [KVH, T, D], the cache left as it was. A draft tree's verify writes only the path it accepts (decode.tree_body):
    writing every node and then moving the path's rows made a batch's loop copy its caches on the v5e
    (docs/engine-findings.md)."""
    h, taps, rows = decoder_rows(params, tokens, start, cache, cfg, tap_ids, span, positions, mask)
    return lm_head(params, h, cfg), taps, rows


@partial(jax.jit, static_argnames=("cfg", "tap_ids"), donate_argnames=("cache",))
def prefill(params: Params, tokens: jax.Array, length: jax.Array, cache: Cache, *, cfg: ModelConfig,
            tap_ids: tuple[int, ...] = ()) -> tuple[jax.Array, jax.Array, Cache]:
    """A padded prompt from position 0: logits [V] of row length-1, taps [T, n*H] (rows >= length are padding).

    Tokens are padded to a bucket size; the cache is donated: use the returned one.
    """
    h, taps, cache = decoder(params, tokens, jnp.int32(0), cache, cfg, tap_ids, span=0)
    return lm_head(params, h[length - 1], cfg), taps, cache


def full_precision(dtype: Any) -> None:
    """Where `dtype` is float32, JAX's default matmul precision (process-wide) set to highest: GPUs and TPUs otherwise
    multiply float32 in TF32 or bf16 passes."""
    if jnp.dtype(dtype) == jnp.float32:
        jax.config.update("jax_default_matmul_precision", "highest")


# ---------------------------------------------------------------------------------------------------------------
# Allocation

def init_cache(cfg: ModelConfig, max_len: int, dtype: Any = jnp.bfloat16) -> Cache:
    """A zeroed KV cache of static length max_len: {"k", "v"}, each [L, KVH, max_len, D]."""
    shape = (cfg.num_layers, cfg.num_kv_heads, max_len, cfg.head_dim)
    return {name: jnp.zeros(shape, dtype) for name in ("k", "v")}


def layer_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Weight shapes of one layer, by our key, in the config's layout."""
    h, f, d = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "qkv_proj": ((cfg.num_heads + 2 * cfg.num_kv_heads) * d, h), "o_proj": (h, cfg.num_heads * d),
        "gate_up_proj": (2 * f, h), "down_proj": (h, f),
    }
    if cfg.weight_layout == "io":
        shapes = {name: shape[::-1] for name, shape in shapes.items()}
    shapes |= {"input_norm": (h,), "post_norm": (h,)}
    if cfg.qk_norm:
        shapes |= {"q_norm": (d,), "k_norm": (d,)}
    return shapes


def random_layers(cfg: ModelConfig, key: jax.Array, dtype: Any, scale: float = 0.02) -> list[Params]:
    """Random layer weights (norm weights 1) in the loader's layout."""
    out = []
    for layer_key in jax.random.split(key, cfg.num_layers):
        keys = iter(jax.random.split(layer_key, 16))
        out.append({name: jnp.ones(s, dtype) if len(s) == 1 else
                    jax.random.normal(next(keys), s, dtype) * jnp.asarray(scale, dtype)
                    for name, s in layer_shapes(cfg).items()})
    return out


def init_random_params(cfg: ModelConfig, key: jax.Array, dtype: Any = jnp.bfloat16, scale: float = 0.02) -> Params:
    """Random weights in the loader's layout: for timing a named shape without a checkpoint."""
    k_layers, k_embed, k_head = jax.random.split(key, 3)
    shape = (cfg.vocab_size, cfg.hidden_size)
    params: Params = {"embed": jax.random.normal(k_embed, shape, dtype) * jnp.asarray(scale, dtype),
                      "norm": jnp.ones(cfg.hidden_size, dtype), "layers": random_layers(cfg, k_layers, dtype, scale)}
    if not cfg.tie_word_embeddings:
        params["lm_head"] = jax.random.normal(k_head, shape, dtype) * jnp.asarray(scale, dtype)
    return head_in_layout(params, cfg)


def head_in_layout(params: Params, cfg: ModelConfig) -> Params:
    """In "io", the LM head stored [H, V]: a tied embedding's transposed copy (the embedding itself stays [V, H] for
    the token gather), an untied head transposed."""
    if cfg.weight_layout != "io":
        return params
    head = params["embed"] if cfg.tie_word_embeddings else params["lm_head"]
    return {**params, "lm_head": jnp.transpose(head)}
