"""Draft trees (engines/jax/tree.py): the builder equals a brute-force enumeration of every path, prefix-closed and in
pop order; the mask sees ancestors only; the walk follows the target."""
from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.core.shapes import SHAPES
from benchmarks.engines.jax import tree as T
from benchmarks.hardware import step_cost

pytestmark = pytest.mark.jax  # compiles JAX functions
build = jax.jit(T.build, static_argnums=1)


def brute_force(log_probs: np.ndarray, budget: int) -> list[tuple[int, ...]]:
    """Every path of ranks (top-k per position, k = min(budget, V)) sorted by score, descending, then by rank path;
    the first `budget`. Scores summed in float32 depth by depth, as the builder sums them."""
    depth_limit, vocab = log_probs.shape
    k = min(budget, vocab)
    top = -np.sort(-log_probs.astype(np.float32), axis=1)[:, :k]
    nodes = []
    for depth in range(1, depth_limit + 1):
        for ranks in itertools.product(range(k), repeat=depth):
            score = np.float32(0)
            for d, r in enumerate(ranks):
                score = np.float32(score + top[d, r]) if d else top[0, r]
            nodes.append((-float(score), ranks))
    return [ranks for _, ranks in sorted(nodes)[:budget]]


def as_paths(tree: T.Tree, log_probs: np.ndarray) -> list[tuple[int, ...]]:
    """Each node of a built tree as its rank path, read through its parents and tokens."""
    order = np.argsort(-log_probs, axis=1, kind="stable")
    rank_of = [{int(t): r for r, t in enumerate(row)} for row in order]
    tokens, parents, depths = (np.asarray(x) for x in tree)
    paths: list[tuple[int, ...]] = []
    for i in range(len(tokens)):
        p = int(parents[i])
        assert p <= i, "a parent precedes its child"
        prefix = paths[p - 1] if p else ()
        assert depths[i] == len(prefix) + 1
        paths.append(prefix + (rank_of[depths[i] - 1][int(tokens[i])],))
    return paths


@pytest.mark.parametrize("vocab,depth_limit,budget", [(5, 3, 7), (3, 4, 30), (6, 2, 12)])
def test_builder_equals_brute_force(vocab, depth_limit, budget):
    rng = np.random.default_rng(vocab * 100 + budget)
    for _ in range(3):
        logits = rng.normal(size=(depth_limit, vocab)) * 2
        log_probs = np.asarray(jax.nn.log_softmax(jnp.asarray(logits, jnp.float32)), np.float32)
        tree = build(jnp.asarray(log_probs), budget)
        got = as_paths(tree, log_probs)
        assert got == brute_force(log_probs, budget)
        assert all(p[:-1] in got[: i] or len(p) == 1 for i, p in enumerate(got)), "prefix-closed, parents first"


def test_smaller_budget_is_a_prefix_of_the_tree():
    log_probs = jax.nn.log_softmax(jax.random.normal(jax.random.key(0), (15, 64)) * 3)
    big = build(log_probs, 64)
    for b in (1, 16):
        small = build(log_probs, b)
        for a, c in zip(small, big):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(c)[:b])


def test_mask_positions_and_walk():
    # a hand-made tree: root -> 1 (tok 7) -> 3 (tok 5); root -> 2 (tok 9); 1 -> 4 (tok 6)
    tree = T.Tree(jnp.asarray([7, 9, 5, 6], jnp.int32), jnp.asarray([0, 0, 1, 1], jnp.int32),
                  jnp.asarray([1, 1, 2, 2], jnp.int32))
    mask = np.asarray(T.ancestors(tree, 3))
    want = np.zeros((5, 5), bool)
    for row, seen in {0: [0], 1: [0, 1], 2: [0, 2], 3: [0, 1, 3], 4: [0, 1, 4]}.items():
        want[row, seen] = True
    np.testing.assert_array_equal(mask, want)
    np.testing.assert_array_equal(np.asarray(T.positions(tree, jnp.int32(10))), [10, 11, 11, 12, 12])
    # target: root -> 7 (row 1), row 1 -> 6 (row 4), row 4 -> 11 (no child): depth 2, bonus 11
    got = T.accept(tree, jnp.asarray([7, 6, 0, 0, 11], jnp.int32), 3)
    assert int(got.depth) == 2 and list(np.asarray(got.path)) == [1, 4, 0] and int(got.bonus) == 11
    got = T.accept(tree, jnp.asarray([8, 6, 0, 0, 11], jnp.int32), 3)  # the root's token is no child's
    assert int(got.depth) == 0 and int(got.bonus) == 8


def test_a_tree_step_costs_a_chain_step_of_as_many_verify_rows():
    """A tree of budget b verifies b + 1 rows after a whole-block draft: the chain's step at K = b when the chain's
    draft also runs the block, and its verify grows with the budget."""
    target = SHAPES["qwen3-4b"]
    layers = dataclasses.replace(target, num_layers=1)
    tree = step_cost.tree_step(target, layers, 5, 15, 16, 1024, 2)
    assert tree == step_cost.dflash_step(target, layers, 5, 15, 16, 1024, 2)
    bigger = step_cost.tree_step(target, layers, 5, 64, 16, 1024, 2, batch=4)
    assert bigger.passes[0] == step_cost.dflash_step(target, layers, 5, 15, 16, 1024, 2, batch=4).passes[0]
    assert bigger.passes[1] == step_cost.forward(target, 65, 1024, 2, batch=4)
