"""Teacher-forced log-likelihood of continuations under a loaded target, batched: the JAX engine's `score_many`.

The statistic of the distribution check's sequence-level test: log p_target(continuation | prompt) at temperature 1
(raw logits), computed from the parameters the engine already holds, never from a second copy of the model. The
prompt is prefilled once; every continuation then runs over that prompt cache (vmapped), so a long prompt is not
recomputed per sample.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.engines.jax import model as M

MAX_ROWS = 256  # continuations per forward
ROW_BUDGET_BYTES = 1 << 30  # each row's copy of the cache, activations and logits, over a forward's rows


@partial(jax.jit, static_argnames=("cfg", "span"))
def _continuation_logprobs(params: M.Params, cache: M.Cache, last: jax.Array, conts: jax.Array, start: jax.Array, *,
                           cfg: M.ModelConfig, span: int) -> jax.Array:
    """log p(conts[:, t] | prompt, conts[:, :t]) [B, W] from the raw logits: the prompt's K/V in `cache` (rows <
    start), its last row's logits `last` [V] for t = 0, each continuation forwarded at positions start.. for t > 0."""
    first = jax.nn.log_softmax(last)[conts[:, 0]]

    def one(seq: jax.Array) -> jax.Array:
        h, _, _ = M.decoder(params, seq, start, cache, cfg, span=span)
        logp = jax.nn.log_softmax(M.lm_head(params, h[:-1], cfg), axis=-1)
        return jnp.take_along_axis(logp, seq[1:, None], axis=-1)[:, 0]

    return jnp.concatenate([first[:, None], jax.vmap(one)(conts)], axis=1)


def rows_per_forward(cfg: M.ModelConfig, cache_rows: int, width: int, itemsize: int) -> int:
    """Continuations per forward: as many as ROW_BUDGET_BYTES holds (at most MAX_ROWS), a power of two (few
    compiles). Each row writes its own copy of the cache."""
    per_row = (2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * cache_rows * itemsize
               + 4 * width * (cfg.hidden_size + 2 * cfg.intermediate_size + cfg.vocab_size))
    n = max(1, min(MAX_ROWS, ROW_BUDGET_BYTES // per_row))
    return 1 << (n.bit_length() - 1)


def logliks(cfg: M.ModelConfig, params: M.Params, prompt: list[int], continuations: list[list[int]]) -> list[float]:
    """Sum over each continuation's tokens of log p(token | prompt, earlier tokens), at temperature 1."""
    width = max((len(s) for s in continuations), default=0)
    if width == 0:
        return [0.0] * len(continuations)
    p = len(prompt)
    bucket = -(-p // 32) * 32  # a few static shapes only
    rows = -(-(bucket + width) // 32) * 32
    dtype = params["embed"].dtype
    tokens = np.zeros(bucket, np.int32)
    tokens[:p] = prompt
    last, _, cache = M.prefill(params, jnp.asarray(tokens), np.int32(p), M.init_cache(cfg, rows, dtype), cfg=cfg)
    chunk = rows_per_forward(cfg, rows, width, jnp.dtype(dtype).itemsize)
    n = -(-len(continuations) // chunk) * chunk
    conts = np.zeros((n, width), np.int32)
    mask = np.zeros((n, width), bool)
    for i, s in enumerate(continuations):
        conts[i, : len(s)] = s
        mask[i, : len(s)] = True
    logp = np.concatenate([np.asarray(_continuation_logprobs(params, cache, last, jnp.asarray(conts[i: i + chunk]),
                                                             np.int32(p), cfg=cfg, span=bucket))
                           for i in range(0, n, chunk)])
    return [float(x) for x in np.where(mask, logp.astype(np.float64), 0.0).sum(axis=1)[: len(continuations)]]
