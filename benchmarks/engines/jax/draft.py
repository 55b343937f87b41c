"""The DFlash block-diffusion draft in JAX (z-lab checkpoint format).

    ctx = hidden_norm(fc(concat of target taps))           one context feature per committed token
    per layer: K/V = concat(ctx, block) through the same k_proj/v_proj (+k_norm, RoPE at absolute positions);
               ctx skips input_layernorm; queries come from the block only; attention is non-causal.
    proposals = argmax(lm_head(norm(out[1:])))             the target's embed_tokens and lm_head are borrowed

The draft cache keeps only context K/V (model.init_cache's layout): `prefill_context` writes the prompt's, and each
`propose` writes the pending context (the taps of the tokens the last verify committed) after attending to it.
Block K/V are transient.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from benchmarks.core.shapes import DraftConfig, ModelConfig
from benchmarks.engines.jax.model import (
    Cache,
    Params,
    attend,
    inv_freq,
    linear,
    lm_head,
    mlp,
    project,
    qkv,
    random_layers,
    rms_norm,
    rope,
    write_after,
)


def init_draft_params(dcfg: DraftConfig, key: jax.Array, dtype: Any = jnp.bfloat16, scale: float = 0.02) -> Params:
    """Random weights in the loader's layout, for timing a named shape without a checkpoint."""
    k_layers, k_fc = jax.random.split(key)
    h = dcfg.layers.hidden_size
    shape = (h, len(dcfg.target_layer_ids) * h)
    fc = jax.random.normal(k_fc, shape[::-1] if dcfg.layers.weight_layout == "io" else shape, dtype) \
        * jnp.asarray(scale, dtype)
    return {"fc": fc, "hidden_norm": jnp.ones(h, dtype), "norm": jnp.ones(h, dtype),
            "layers": random_layers(dcfg.layers, k_layers, dtype, scale)}


def context_kv(dparams: Params, taps: jax.Array, start: jax.Array, dcfg: DraftConfig) -> list[tuple[jax.Array, ...]]:
    """Per layer, the context K and V [KVH, T, D] of taps [T, n*H] for tokens at positions start..start+T-1."""
    cfg = dcfg.layers
    t = taps.shape[0]
    ctx = rms_norm(linear(taps, dparams["fc"], cfg.weight_layout), dparams["hidden_norm"], cfg.rms_norm_eps)
    positions = start + jnp.arange(t, dtype=jnp.int32)
    out = []
    for lp in dparams["layers"]:
        _, k, v = project(lp, ctx, cfg)  # one matmul; the q columns are cheaper to drop than to slice out of the weight
        k = rope(rms_norm(k, lp["k_norm"], cfg.rms_norm_eps), positions, inv_freq(cfg))
        out.append((k.transpose(1, 0, 2), v.transpose(1, 0, 2)))
    return out


def prefill_context(dparams: Params, taps: jax.Array, dcache: Cache, dcfg: DraftConfig) -> Cache:
    """Write the prompt's context K/V (taps [T, n*H] of positions 0..T-1) into the draft cache."""
    kv = context_kv(dparams, taps, jnp.int32(0), dcfg)
    return {name: jax.lax.dynamic_update_slice(dcache[name], jnp.stack([layer[j] for layer in kv]).astype(
        dcache[name].dtype), (0, 0, 0, 0)) for j, name in enumerate(("k", "v"))}


def draft_logits(dparams: Params, tparams: Params, dcache: Cache, pending: jax.Array, pending_start: jax.Array,
                 anchor: jax.Array, start: jax.Array, dcfg: DraftConfig, tcfg: ModelConfig,
                 num_queries: int, span: int | None = None) -> tuple[jax.Array, Cache]:
    """Logits [num_queries-1, V] of the block [anchor, MASK...] at positions start.., and the cache with the pending
    context written in. Only the first `span` cache rows are read (default: all), so pending_start must be <= span.

    The context is the cache rows before pending_start plus the pending taps [P, n*H] (positions pending_start..;
    the rows at positions >= start are rejected tokens and stay unseen). The anchor is not yet verified.
    The released drafts run num_queries = block_size; vLLM runs num_queries = K+1 (docs/engine-findings.md).
    """
    cfg = dcfg.layers
    tokens = jnp.full((num_queries,), dcfg.mask_token_id, jnp.int32).at[0].set(anchor)
    positions = start + jnp.arange(num_queries, dtype=jnp.int32)
    span = dcache["k"].shape[2] if span is None else span
    cached = jnp.arange(span) < pending_start
    fresh = pending_start + jnp.arange(pending.shape[0]) < start
    block = jnp.ones((num_queries, num_queries), bool)  # non-causal
    h = tparams["embed"][tokens]
    rows: dict[str, list[jax.Array]] = {"k": [], "v": []}
    for i, (lp, (pk, pv)) in enumerate(zip(dparams["layers"], context_kv(dparams, pending, pending_start, dcfg))):
        q, k, v = qkv(lp, rms_norm(h, lp["input_norm"], cfg.rms_norm_eps), cfg, positions)
        ck, cv = dcache["k"][i, :, :span], dcache["v"][i, :, :span]
        attn = attend(q, [(ck, cv, cached), (pk.astype(ck.dtype), pv.astype(cv.dtype), fresh),
                          (k.astype(ck.dtype), v.astype(cv.dtype), block)])
        rows["k"].append(pk)
        rows["v"].append(pv)
        h = h + linear(attn, lp["o_proj"], cfg.weight_layout)
        h = h + mlp(lp, rms_norm(h, lp["post_norm"], cfg.rms_norm_eps), cfg)
    h = rms_norm(h[1:], dparams["norm"], cfg.rms_norm_eps)
    return lm_head(tparams, h, tcfg), write_after(dcache, rows, pending_start, h)


def propose(dparams: Params, tparams: Params, dcache: Cache, pending: jax.Array, pending_start: jax.Array,
            anchor: jax.Array, start: jax.Array, dcfg: DraftConfig, tcfg: ModelConfig,
            num_queries: int, span: int | None = None) -> tuple[jax.Array, Cache]:
    """Draft tokens [num_queries-1] (argmax of draft_logits) and the updated draft cache."""
    logits, dcache = draft_logits(dparams, tparams, dcache, pending, pending_start, anchor, start, dcfg, tcfg,
                                  num_queries, span)
    return jnp.argmax(logits, axis=-1).astype(jnp.int32), dcache
