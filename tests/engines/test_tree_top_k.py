"""The draft tree's top-k over the vocabulary (engines/jax/tree.py): top_k_rows returns exactly what jax.lax.top_k
returns, values and indices, ties and -inf included, and a tree built with it is the tree built with lax.top_k."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.engines.jax import tree as T

pytestmark = pytest.mark.jax  # compiles JAX functions
top_k_rows = jax.jit(T.top_k_rows, static_argnums=(1, 2))
plain = jax.jit(jax.lax.top_k, static_argnums=1)


def assert_same(x: jax.Array, k: int, width: int) -> None:
    """top_k_rows equals lax.top_k: the same values and the same indices."""
    got, want = top_k_rows(x, k, width), plain(x, k)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))


@pytest.mark.parametrize("k", [1, 64, 128])
def test_random_vocab_not_a_multiple_of_the_width(k):
    x = jnp.asarray(np.random.default_rng(k).normal(size=(15, 5000)), jnp.float32)  # 313 chunks of 16, the last short
    assert_same(x, k, 16)


@pytest.mark.parametrize("k", [1, 64, 256])
def test_ties(k):
    """A few levels only (most entries tie with many others), as float32 and as bfloat16."""
    rng = np.random.default_rng(k)
    levels = jnp.asarray(np.round(rng.normal(size=(15, 20000)) * 2) / 2, jnp.float32)
    assert_same(levels, k, 32)
    coarse = jnp.asarray(rng.normal(size=(15, 20000)), jnp.float32).astype(jnp.bfloat16)
    assert_same(coarse, k, 32)
    assert_same(coarse.astype(jnp.float32), k, 32)


@pytest.mark.parametrize("k", [1, 64, 128])
def test_minus_infinity(k):
    """-inf entries: sprinkled, a row with 3 finite entries (k - 3 real -infs, never the padding, fill it), and a row
    of -inf only; 376 chunks of 8, the last short."""
    rng = np.random.default_rng(k)
    x = rng.normal(size=(4, 3004)).astype(np.float32)
    x[0, rng.random(3004) < 0.5] = -np.inf
    x[1, :] = -np.inf
    x[1, [5, 2500, 2999]] = [1.0, -1.0, 0.0]
    x[2, :] = -np.inf
    assert_same(jnp.asarray(x), k, 8)


@pytest.mark.parametrize(("k", "width"), [(129, 4), (256, 4), (300, 4), (129, 256)])
def test_k_past_a_chunks_width(k, width):
    """k chunks of fewer than k entries each; and candidates past half the row (lax.top_k itself)."""
    assert_same(jnp.asarray(np.random.default_rng(k).normal(size=(3, 3000)), jnp.float32), k, width)


def test_batched():
    """Leading axes (a batch of trees under vmap) and vmap itself."""
    x = jnp.asarray(np.random.default_rng(7).normal(size=(2, 3, 3000)), jnp.float32)
    assert_same(x, 64, 8)
    got = jax.vmap(lambda row: T.top_k_rows(row, 64, 8))(x)
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(plain(x, 64)[1]))


def test_build_with_it_is_the_tree_of_lax_top_k(monkeypatch):
    """A Qwen3-sized vocabulary, budget 64: build with top_k_rows forced (on a CPU it picks lax.top_k) against build
    with lax.top_k."""
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(15, 151936)) * 3, jnp.float32)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    monkeypatch.setattr(T, "vocab_top_k", jax.lax.top_k)
    want = jax.jit(lambda lp: T.build(lp, 64))(log_probs)
    monkeypatch.setattr(T, "vocab_top_k", T.top_k_rows)
    got = jax.jit(lambda lp: T.build(lp, 64))(log_probs)
    for name, a, b in zip(T.Tree._fields, got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def test_two_stages_lower_for_a_tpu_only():
    """vocab_top_k lowers to two top-ks (the chunks', the candidates') for a TPU and to one elsewhere."""
    x = jax.ShapeDtypeStruct((15, 151936), jnp.float32)
    traced = jax.jit(lambda a: T.vocab_top_k(a, 64)).trace(x)
    for platform, count in (("tpu", 2), ("cpu", 1)):
        text = traced.lower(lowering_platforms=(platform,)).as_text()
        assert text.count("chlo.top_k") == count, platform
