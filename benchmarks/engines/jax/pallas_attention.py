"""The verify's attention over the cache as a Pallas kernel that reads each layer in place from the whole cache.

`cache_attention` computes, for every query row of a KV head's group at once (G heads x T new tokens), attention
over the cache rows below `start` of one layer, flash-style: an online softmax over blocks of the sequence axis. It
returns the partial (max, sum, unnormalised output), which `model.attend` folds into its one softmax with the new
tokens' part (the chain's causal rows or a draft tree's ancestor mask), so both verifies share it.

The kernel's K and V operands are the whole caches, [L, B, KVH, S, D] (model.CACHE_AXIS): the layer index and each
request's start are scalar-prefetch arguments that the BlockSpecs' index maps read, so no layer is sliced out of the
cache before the kernel (a custom call takes its operands whole: a slice would be a copy). Blocks past a request's
start map to its last visible block (the pipeline fetches nothing new) and skip their compute.

On a TPU it compiles through Mosaic; on any other platform it runs in Pallas' interpret mode (lax.platform_dependent
picks per lowering platform, so a CPU machine that compiles for a TPU gets the Mosaic kernel). Under `jax.vmap` (a
batch) one kernel serves every request (custom_vmap), with the grid's first axis over the batch.
"""
from __future__ import annotations

import math
from functools import cache, partial

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCKS = (512, 256, 128, 64, 32, 16, 8)  # sequence rows a grid step reads, the largest dividing the span
Partial = tuple[jax.Array, jax.Array, jax.Array]  # max [..., R, 1], sum [..., R, 1], output [..., R, D]: float32


def block_rows(span: int) -> int:
    """The sequence block for a span: the largest of BLOCKS dividing it (TPU tiles want a multiple of 8)."""
    for b in BLOCKS:
        if span % b == 0:
            return b
    raise ValueError(f"span {span} is not a multiple of 8: the Pallas attention reads whole 8-row tiles")


def _kernel(layer_ref, start_ref, q_ref, k_ref, v_ref, m_out, l_out, o_out, m_acc, l_acc, o_acc, *, block: int):
    """One (request, KV head, sequence block) step of the online softmax; the outputs are written at the last."""
    del layer_ref  # read by the index maps only
    j = pl.program_id(2)
    start = start_ref[pl.program_id(0)]

    @pl.when(j == 0)
    def _init():
        m_acc[...] = jnp.full(m_acc.shape, jnp.finfo(jnp.float32).min, jnp.float32)
        l_acc[...] = jnp.zeros(l_acc.shape, jnp.float32)
        o_acc[...] = jnp.zeros(o_acc.shape, jnp.float32)

    @pl.when(j * block < start)
    def _step():
        q, k, v = q_ref[...], k_ref[...], v_ref[...]
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        s = s / math.sqrt(q.shape[-1])
        cols = j * block + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(cols < start, s, jnp.finfo(jnp.float32).min)
        m_prev = m_acc[...]
        m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
        scale = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_acc[...] = scale * l_acc[...] + p.sum(axis=-1, keepdims=True)
        o_acc[...] = scale * o_acc[...] + jax.lax.dot_general(
            p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        m_acc[...] = m_new

    @pl.when(j == pl.num_programs(2) - 1)
    def _done():
        m_out[...], l_out[...], o_out[...] = m_acc[...], l_acc[...], o_acc[...]


def _pallas(q: jax.Array, k_cache: jax.Array, v_cache: jax.Array, layer: jax.Array, starts: jax.Array, *,
            span: int, interpret: bool) -> Partial:
    """The kernel over a batch: q [B, KVH, R, D], caches [L, B, KVH, S, D], layer [1], starts [B] int32."""
    b, kvh, r, d = q.shape
    block = block_rows(span)

    def kv_map(i, h, j, layer_ref, start_ref):
        # past the start: the last visible block, not fetched again (lax.div: `//` lowers through sign, which Mosaic
        # resolves by asking the device it lowers on for its generation, and a machine compiling for a chip has none)
        last = jax.lax.div(jnp.maximum(start_ref[i] - 1, 0), block)
        return layer_ref[0], i, h, jnp.minimum(j, last), 0

    def row_map(i, h, j, layer_ref, start_ref):
        return i, h, 0, 0

    sq = pl.Squeezed()
    kv_spec = pl.BlockSpec((sq, sq, sq, block, d), kv_map)
    rows = pl.BlockSpec((sq, sq, r, d), row_map)
    stats = pl.BlockSpec((sq, sq, r, 1), row_map)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2, grid=(b, kvh, span // block), in_specs=[rows, kv_spec, kv_spec],
        out_specs=[stats, stats, rows],
        scratch_shapes=[pltpu.VMEM((r, 1), jnp.float32), pltpu.VMEM((r, 1), jnp.float32),
                        pltpu.VMEM((r, d), jnp.float32)])
    f32 = jnp.float32
    out_shape = [jax.ShapeDtypeStruct((b, kvh, r, 1), f32), jax.ShapeDtypeStruct((b, kvh, r, 1), f32),
                 jax.ShapeDtypeStruct((b, kvh, r, d), f32)]
    top, total, out = pl.pallas_call(
        partial(_kernel, block=block), grid_spec=grid_spec, out_shape=out_shape, interpret=interpret,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(layer.reshape(1).astype(jnp.int32), starts.astype(jnp.int32), q, k_cache, v_cache)
    return top, total, out


def _batched(q: jax.Array, k_cache: jax.Array, v_cache: jax.Array, layer: jax.Array, starts: jax.Array,
             span: int) -> Partial:
    """Mosaic on a TPU, interpret mode elsewhere, chosen where the caller lowers."""
    args = (q, k_cache, v_cache, layer, starts)
    return jax.lax.platform_dependent(*args, tpu=partial(_pallas, span=span, interpret=False),
                                      default=partial(_pallas, span=span, interpret=True))


@cache
def _per_span(span: int) -> jax.custom_batching.custom_vmap:
    """cache_attention's traced core for one span: one request, and under vmap the whole batch in one kernel."""

    @jax.custom_batching.custom_vmap
    def one(q: jax.Array, k_cache: jax.Array, v_cache: jax.Array, layer: jax.Array, start: jax.Array) -> Partial:
        top, total, out = _batched(q[None], k_cache[:, None], v_cache[:, None], layer, start[None], span)
        return top[0], total[0], out[0]

    @one.def_vmap
    def _batch(size: int, batched: list[bool], q: jax.Array, k_cache: jax.Array, v_cache: jax.Array,
               layer: jax.Array, start: jax.Array) -> tuple[Partial, tuple[bool, bool, bool]]:
        if batched[3]:
            raise NotImplementedError("cache_attention under vmap: the layer index must be the same for the batch")
        q_b, k_b, v_b, _, start_b = batched
        q, start = (x if bat else jnp.broadcast_to(x, (size, *x.shape)) for x, bat in ((q, q_b), (start, start_b)))
        # vmap hands a batched cache with its batch axis first; moved back to CACHE_AXIS (XLA folds the two moves)
        k_cache, v_cache = (jnp.moveaxis(c, 0, 1) if bat else jnp.broadcast_to(c[:, None], (c.shape[0], size,
                                                                                            *c.shape[1:]))
                            for c, bat in ((k_cache, k_b), (v_cache, v_b)))
        return _batched(q, k_cache, v_cache, layer, start, span), (True, True, True)

    return one


def cache_attention(q: jax.Array, k_cache: jax.Array, v_cache: jax.Array, layer: int | jax.Array, start: jax.Array,
                    span: int) -> Partial:
    """Attention of grouped queries q [KVH, R, D] (R = G x T, model.group_queries) over the rows < start of layer
    `layer` of the whole caches [L, KVH, S, D], reading the first `span` rows at most (start <= span, static span a
    multiple of 8): the partial (max [KVH, R, 1], sum [KVH, R, 1], unnormalised output [KVH, R, D]), float32.

    start 0 gives (float32 min, 0, 0): a part that adds nothing to a softmax."""
    return _per_span(span)(q, k_cache, v_cache, jnp.asarray(layer, jnp.int32), jnp.asarray(start, jnp.int32))
