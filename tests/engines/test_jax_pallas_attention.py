"""The Pallas attention over the cache (engine option attention="pallas"), in Pallas' interpret mode on a CPU: its
partial softmax equals a direct one over the visible rows, and the decoder with it equals the XLA path within float32
rounding for the chain and a draft tree's mask, at several starts and spans, alone and under a batch's vmap."""
from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.core.shapes import ModelConfig
from benchmarks.engines.jax import batch as B
from benchmarks.engines.jax import model as M
from benchmarks.engines.jax.decode import Decoder
from benchmarks.engines.jax.loader import load_draft, load_target
from benchmarks.engines.jax.pallas_attention import block_rows, cache_attention

pytestmark = pytest.mark.jax

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=16, weight_layout="io")
S = 128  # cache rows
T = 4  # new tokens a verify
TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"
MAX_LEN = 96
NEW = 24


def direct(q: np.ndarray, kc: np.ndarray, vc: np.ndarray, layer: int, start: int) -> tuple[np.ndarray, ...]:
    """max, sum and unnormalised output of softmax(q k^T / sqrt(D)) over rows < start, in float64."""
    s = np.einsum("hrd,hsd->hrs", q, kc[layer, :, :start]) / math.sqrt(q.shape[-1])
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    return m, p.sum(-1, keepdims=True), np.einsum("hrs,hsd->hrd", p, vc[layer, :, :start])


def test_block_rows_divides_the_span():
    assert [block_rows(s) for s in (32, 96, 128, 2048, 8200)] == [32, 32, 128, 512, 8]
    with pytest.raises(ValueError, match="multiple of 8"):
        block_rows(12)


@pytest.mark.heavy
def test_partial_equals_a_direct_softmax_over_the_visible_rows():
    """Span 96 in blocks of 32: starts inside the first block, on a block's edge, inside the last and at the span;
    start 0 gives a part that adds nothing."""
    keys = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(keys[0], (2, 6, 16))
    kc, vc = (jax.random.normal(k, (3, 2, S, 16)) for k in keys[1:])
    part = jax.jit(cache_attention, static_argnums=(3, 5))
    for start in (1, 32, 77, 96):
        got = [np.asarray(x) for x in part(q, kc, vc, 2, jnp.int32(start), 96)]
        for g, w in zip(got, direct(*(np.asarray(x, np.float64) for x in (q, kc, vc)), 2, start)):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
    top, total, out = (np.asarray(x) for x in part(q, kc, vc, 0, jnp.int32(0), 96))
    assert (top == np.finfo(np.float32).min).all() and not total.any() and not out.any()


@pytest.fixture(scope="module")
def model():
    """Random float32 weights (numpy's: nothing to compile) and a cache with every row filled (rows past a start must
    not be read)."""
    rng = np.random.default_rng(1)
    shapes = jax.eval_shape(lambda: M.init_random_params(CFG, jax.random.key(1), jnp.float32))
    params = jax.tree.map(lambda x: jnp.asarray(rng.normal(0, 0.3, x.shape), jnp.float32), shapes)
    shape = (CFG.num_layers, CFG.num_kv_heads, S, CFG.head_dim)
    return params, {name: jnp.asarray(rng.normal(size=shape), jnp.float32) for name in ("k", "v")}


def run(cfg: ModelConfig, params, tokens, start, cache, span, positions=None, mask=None):
    """The decoder's hidden states and cache, jitted (interpret mode runs its ops through XLA)."""
    h, _, cache = jax.jit(M.decoder, static_argnums=(4, 5, 6))(params, tokens, start, cache, cfg, (), span,
                                                                  positions, mask)
    return h, cache


def assert_same(got, want):
    (h1, c1), (h0, c0) = got, want
    np.testing.assert_allclose(np.asarray(h1), np.asarray(h0), rtol=1e-5, atol=1e-5)
    for name in ("k", "v"):
        np.testing.assert_allclose(np.asarray(c1[name]), np.asarray(c0[name]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("start", "span"), [(45, 96), pytest.param(1, 32, marks=pytest.mark.heavy),
                                             pytest.param(64, 64, marks=pytest.mark.heavy)])
def test_chain_equals_the_xla_path(model, start, span):
    params, cache = model
    tokens = jnp.arange(3, 3 + T, dtype=jnp.int32)
    pallas = M.with_attention(CFG, "pallas")
    assert M.attention_of(pallas) == "pallas" and M.attention_of(CFG) == "xla"
    assert_same(run(pallas, params, tokens, jnp.int32(start), cache, span),
                run(CFG, params, tokens, jnp.int32(start), cache, span))


@pytest.mark.heavy
def test_tree_mask_equals_the_xla_path(model):
    """A draft tree's verify: the root, two children and a grandchild, each at its depth's position."""
    params, cache = model
    tokens = jnp.array([5, 9, 11, 7], jnp.int32)
    parent = [-1, 0, 0, 1]
    mask = np.eye(T, dtype=bool)
    for i, p in enumerate(parent):
        while p >= 0:
            mask[i, p], p = True, parent[p]
    start = jnp.int32(50)
    positions = start + jnp.array([0, 1, 1, 2], jnp.int32)
    assert_same(run(M.with_attention(CFG, "pallas"), params, tokens, start, cache, 64, positions, jnp.asarray(mask)),
                run(CFG, params, tokens, start, cache, 64, positions, jnp.asarray(mask)))


@pytest.mark.heavy
def test_batch_under_vmap_equals_the_xla_path(model):
    """Three requests at their own starts, caches [L, B, KVH, S, D] (CACHE_AXIS) as a batch keeps them."""
    params, cache = model
    starts = jnp.array([3, 64, 40], jnp.int32)
    tokens = jnp.arange(12, dtype=jnp.int32).reshape(3, T)
    caches = {name: jnp.stack([c, c[:, :, ::-1], c * 0.5], axis=M.CACHE_AXIS) for name, c in cache.items()}

    def batched(cfg: ModelConfig):
        def row(tok, start, c):
            return M.decoder(params, tok, start, c, cfg, (), 64)[::2]
        return jax.jit(jax.vmap(row, in_axes=(0, 0, M.CACHE_AXIS), out_axes=(0, M.CACHE_AXIS)))(tokens, starts, caches)

    assert_same(batched(M.with_attention(CFG, "pallas")), batched(CFG))


@pytest.fixture(scope="module")
def pair():
    """The tiny pair in float32, the target's attention through the kernel."""
    M.full_precision(jnp.float32)
    tcfg, tp = load_target(TINY / "target", "float32")
    dcfg, dp = load_draft(TINY / "dflash", "float32")
    return tcfg, tp, dcfg, dp


@pytest.mark.heavy
@pytest.mark.parametrize(("budget", "prompt_lens"), [(0, (5, 40)), (16, (21, 70))])
def test_greedy_with_the_kernel_equals_ar(pair, budget, prompt_lens):
    """DFlash's chain (K = block_size - 1) and a draft tree of budget 16, alone and as a batch of two, with
    attention="pallas": token for token AR's (the XLA path's), over the spans the loop moves through."""
    tcfg, tp, dcfg, dp = pair
    rng = np.random.default_rng(3)
    prompts = [rng.integers(10, 2000, n).tolist() for n in prompt_lens]
    want = [Decoder(tcfg, tp, MAX_LEN, jnp.float32).generate(p, NEW).tokens for p in prompts]
    spec = Decoder(M.with_attention(tcfg, "pallas"), tp, MAX_LEN, jnp.float32, dcfg, dp, k=dcfg.block_size - 1,
                   budget=budget)
    assert [spec.generate(p, NEW).tokens for p in prompts] == want
    assert B.BatchDecoder(spec).generate(prompts, NEW).tokens == want
