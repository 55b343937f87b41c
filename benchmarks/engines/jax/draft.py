"""The DFlash block-diffusion draft in JAX (z-lab checkpoint format).

    ctx = hidden_norm(fc(concat of target taps))           one context feature per committed token
    per layer: K/V = concat(ctx, block) through the same k_proj/v_proj (+k_norm, RoPE at absolute positions);
               ctx skips input_layernorm; queries come from the block only; attention is non-causal.
    proposals = argmax(lm_head(norm(out[1:])))             the target's embed_tokens and lm_head are borrowed

The draft cache keeps only context K/V ({"k","v"}: [L, S, KVH, D], as model.init_cache). `context_kv` writes rows,
`propose` reads the rows at positions < start (the anchor's position) and never writes: block K/V are transient.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from benchmarks.engines.jax.model import (Cache, ModelConfig, Params, attend, inv_freq, layer_shapes, linear, lm_head,
                                          mlp, qkv, rms_norm, rope)


def default_target_layer_ids(num_target_layers: int, num_taps: int) -> tuple[int, ...]:
    """The reference rule when a checkpoint names no taps: round(1 + i*(L-4)/(n-1)), or [L//2] for one tap."""
    if num_taps == 1:
        return (num_target_layers // 2,)
    return tuple(round(1 + i * (num_target_layers - 4) / (num_taps - 1)) for i in range(num_taps))


@dataclass(frozen=True)
class DraftConfig:
    layers: ModelConfig  # shapes of the draft's decoder layers (Qwen3: q/k norm); vocab and head are the target's
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "DraftConfig":
        dflash = hf.get("dflash_config") or {}
        mask = dflash.get("mask_token_id", hf.get("mask_token_id"))
        if mask is None:
            raise ValueError("DFlash config names no mask_token_id")
        ids = dflash.get("target_layer_ids") or hf.get("target_layer_ids")
        if not ids:
            ids = default_target_layer_ids(hf["num_target_layers"], hf["num_hidden_layers"])  # reference: one tap per layer
        return cls(ModelConfig.from_hf({**hf, "model_type": "qwen3"}), int(hf["block_size"]), int(mask),
                   tuple(int(i) for i in ids))


def init_draft_params(dcfg: DraftConfig, key: jax.Array, dtype: Any = jnp.bfloat16, scale: float = 0.02) -> Params:
    """Random weights in the loader's layout, for timing a named shape without a checkpoint."""
    cfg = dcfg.layers
    keys = iter(jax.random.split(key, 16))
    h = cfg.hidden_size
    layers = {name: (jnp.ones((cfg.num_layers, *s), dtype) if len(s) == 1 else
                     jax.random.normal(next(keys), (cfg.num_layers, *s), dtype) * jnp.asarray(scale, dtype))
              for name, s in layer_shapes(cfg).items()}
    fc = jax.random.normal(next(keys), (h, len(dcfg.target_layer_ids) * h), dtype) * jnp.asarray(scale, dtype)
    return {"fc": fc, "hidden_norm": jnp.ones(h, dtype), "norm": jnp.ones(h, dtype), "layers": layers}


def context_kv(dparams: Params, taps: jax.Array, start: jax.Array, dcache: Cache, dcfg: DraftConfig) -> Cache:
    """Write the context K/V of taps [T, n*H] (tokens at positions start..start+T-1) into every layer's cache."""
    cfg = dcfg.layers
    t, lp = taps.shape[0], dparams["layers"]
    ctx = rms_norm(linear(taps, dparams["fc"]), dparams["hidden_norm"], cfg.rms_norm_eps)
    k = jnp.einsum("th,loh->lto", ctx, lp["k_proj"]).reshape(cfg.num_layers, t, cfg.num_kv_heads, cfg.head_dim)
    v = jnp.einsum("th,loh->lto", ctx, lp["v_proj"]).reshape(cfg.num_layers, t, cfg.num_kv_heads, cfg.head_dim)
    k = rms_norm(k, lp["k_norm"][:, None, None, :], cfg.rms_norm_eps)
    positions = start + jnp.arange(t, dtype=jnp.int32)
    k = jax.vmap(rope, in_axes=(0, None, None))(k, positions, inv_freq(cfg))
    at = (0, start, 0, 0)
    return {"k": jax.lax.dynamic_update_slice(dcache["k"], k.astype(dcache["k"].dtype), at),
            "v": jax.lax.dynamic_update_slice(dcache["v"], v.astype(dcache["v"].dtype), at)}


def propose(dparams: Params, tparams: Params, anchor: jax.Array, start: jax.Array, dcache: Cache,
            dcfg: DraftConfig, tcfg: ModelConfig, num_queries: int) -> jax.Array:
    """Draft tokens [num_queries-1] for the block [anchor, MASK...] at positions start.., anchor not yet verified.

    The released drafts run num_queries = block_size; vLLM runs num_queries = K+1 (see verification/parity.py).
    """
    cfg = dcfg.layers
    tokens = jnp.full((num_queries,), dcfg.mask_token_id, jnp.int32).at[0].set(anchor)
    positions = start + jnp.arange(num_queries, dtype=jnp.int32)
    context_visible = jnp.arange(dcache["k"].shape[1]) < start
    visible = jnp.concatenate([jnp.broadcast_to(context_visible, (num_queries, context_visible.shape[0])),
                               jnp.ones((num_queries, num_queries), bool)], axis=1)
    h = tparams["embed"][tokens]

    def layer(h, xs):
        lp, ck, cv = xs
        q, k, v = qkv(lp, rms_norm(h, lp["input_norm"], cfg.rms_norm_eps), cfg, positions)
        k = jnp.concatenate([ck, k.astype(ck.dtype)])
        v = jnp.concatenate([cv, v.astype(cv.dtype)])
        h = h + linear(attend(q, k, v, visible), lp["o_proj"])
        return h + mlp(lp, rms_norm(h, lp["post_norm"], cfg.rms_norm_eps)), None

    h, _ = jax.lax.scan(layer, h, (dparams["layers"], dcache["k"], dcache["v"]))
    logits = lm_head(tparams, rms_norm(h[1:], dparams["norm"], cfg.rms_norm_eps), tcfg)
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
