"""Teacher-forced log-likelihood of sampled continuations under the target, in one batched forward.

The statistic of the sequence-level distribution check: log p_T(continuation | prompt), each token's probability
taken from the target's logits divided by the sampling temperature. Any checkpoint the engines run loads here.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.engines.jax import model as M
from benchmarks.engines.jax.loader import load_target

CHUNK = 128  # sequences per forward


@partial(jax.jit, static_argnames=("cfg", "width"))
def _token_logprobs(params: M.Params, tokens: jax.Array, start: jax.Array, temperature: jax.Array, *,
                    cfg: M.ModelConfig, width: int) -> jax.Array:
    """log p(tokens[:, start+t] | tokens[:, :start+t]) at temperature for t < width, [B, width]: sequences from
    position 0, logits only where they are read."""
    cache = M.init_cache(cfg, tokens.shape[1], params["embed"].dtype)

    def one(seq: jax.Array) -> jax.Array:
        h, _, _ = M.decoder(params, seq, jnp.int32(0), cache, cfg, span=0)
        rows = jax.lax.dynamic_slice_in_dim(h, start - 1, width)
        logp = jax.nn.log_softmax(M.lm_head(params, rows, cfg) / temperature, axis=-1)
        return jnp.take_along_axis(logp, jax.lax.dynamic_slice_in_dim(seq, start, width)[:, None], axis=-1)[:, 0]

    return jax.vmap(one)(tokens)


class Scorer:
    """A loaded target that scores continuations of a prompt."""

    def __init__(self, target: str | Path, dtype: str = "float32") -> None:
        self.cfg, self.params = load_target(target, dtype)

    def logliks(self, prompt: list[int], samples: list[list[int]], temperature: float) -> list[float]:
        """Sum over each sample's tokens of log p(token | prompt, earlier tokens) at `temperature`."""
        width = max((len(s) for s in samples), default=0)
        if width == 0:
            return [0.0] * len(samples)
        p = len(prompt)
        length = -(-(p + width) // 32) * 32  # a few static shapes only
        rows = -(-len(samples) // CHUNK) * CHUNK
        tokens = np.zeros((rows, length), np.int32)
        mask = np.zeros((rows, width), bool)
        for i, s in enumerate(samples):
            tokens[i, :p] = prompt
            tokens[i, p: p + len(s)] = s
            mask[i, : len(s)] = True
        logp = np.concatenate([np.asarray(_token_logprobs(
            self.params, jnp.asarray(tokens[i: i + CHUNK]), np.int32(p), np.float32(temperature), cfg=self.cfg,
            width=width)) for i in range(0, rows, CHUNK)])
        return [float(x) for x in np.where(mask, logp, 0.0).sum(axis=1)[: len(samples)]]
