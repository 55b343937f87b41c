"""Draft trees (DDTree) on the device: the tree of a DFlash block's per-position distributions under a node budget,
its verify mask and positions, and the walk that accepts a path of it. Pure JAX, static shapes, batch 1.

A node is a path of per-position ranks (rank r at depth d: the draft's r-th most likely token at position d), its
score the sum of its tokens' log-probabilities. The tree is the `budget` nodes ordered first by score, descending,
ties broken by the rank path in lexicographic order (a prefix before its extensions): the order in which a best-first
heap that pops a node and pushes its next sibling and first child pops them. A node's score never exceeds its
parent's, so the set is prefix-closed, a parent precedes its children, and the tree at a smaller budget b' is the
first b' nodes. Built depth by depth: the top nodes at depth d are among the children of the top nodes at d - 1, so
each depth keeps `budget` candidates (top-k of its parents' scores plus the position's top-k log-probabilities).

Verify rows: row 0 is the root (the last committed token), rows 1..budget the nodes in that order.

On a TPU, where lax.top_k sorts whole rows, the per-position top-k over the vocabulary sorts a few candidates only
(top_k_rows: the k chunks of 128 lanes with the largest maxima hold every entry of the top k; exact).
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp


class Tree(NamedTuple):
    """A draft tree of `budget` nodes in pop order (node i is verify row i + 1)."""

    tokens: jax.Array  # [budget] int32: each node's token
    parents: jax.Array  # [budget] int32: the verify row of its parent (0: the root)
    depths: jax.Array  # [budget] int32: 1 for the root's children


# lanes per chunk of top_k_rows: a TPU's vector width. With k = 64 over V = 151936 the sorts see 1,187 chunk maxima
# and 8,192 candidates a row, where one top_k sorts 151,936 entries (and 1024-wide chunks' top-k sorted them all too).
TOP_K_WIDTH = 128


def top_k_rows(x: jax.Array, k: int, width: int = TOP_K_WIDTH) -> tuple[jax.Array, jax.Array]:
    """jax.lax.top_k(x, k) over x's last axis, ties included (the lower index first), sorting few entries: the row
    in `width`-wide chunks (the last padded with -inf), the k chunks of largest maxima (the lower chunk first among
    ties), then top-k over their entries in index order.

    Exact: an entry outside those chunks has k chunk maxima at or above it, each ranked before it (larger, or equal
    at a lower index), so it is not in the top k."""
    vocab = x.shape[-1]
    chunks = -(-vocab // width)
    if chunks < 8 or 2 * k * width > vocab:  # too few chunks to leave most of the row unsorted
        values, index = jax.lax.top_k(x, k)  # a list: vocab_top_k's branches must both return a tuple
        return values, index
    lead = x.shape[:-1]
    # padding sits past every real entry: -inf, and after real -infs in index order
    padded = jnp.pad(x, [(0, 0)] * len(lead) + [(0, chunks * width - vocab)], constant_values=-jnp.inf)
    padded = padded.reshape(*lead, chunks, width)
    _, best = jax.lax.top_k(padded.max(axis=-1), k)
    best = jnp.sort(best, axis=-1)  # the candidates in index order, so that ties break as lax.top_k breaks them
    candidates = jnp.take_along_axis(padded, best[..., None], axis=-2).reshape(*lead, k * width)
    values, pick = jax.lax.top_k(candidates, k)
    return values, jnp.take_along_axis(best, pick // width, axis=-1) * width + pick % width


def vocab_top_k(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """jax.lax.top_k(x, k): top_k_rows on a TPU; lax.top_k elsewhere (on a CPU, XLA's TopK is a partial sort, faster
    than top_k_rows' stages), chosen where the caller lowers."""
    return jax.lax.platform_dependent(x, tpu=partial(top_k_rows, k=k),
                                      default=partial(top_k_rows, k=k, width=x.shape[-1]))


def build(log_probs: jax.Array, budget: int) -> Tree:
    """The tree of `budget` nodes from per-position log-probabilities [depth_limit, V] (row d - 1 is depth d).

    Needs sum over depths of min(budget, k^d) >= budget nodes to choose from (k = min(budget, V)): any V >= 2.
    """
    depth_limit, vocab = log_probs.shape
    k = min(budget, vocab)
    top_lp, top_tok = vocab_top_k(log_probs.astype(jnp.float32), k)  # [D, k], each row descending
    slots = budget  # candidates kept per depth
    # depth 1: the root's children, padded to `slots` with invalid candidates (score -inf); parent -1 is the root
    first = (jnp.full(slots, -jnp.inf).at[:k].set(top_lp[0]),
             jnp.full((slots, depth_limit), -1, jnp.int32).at[:k, 0].set(jnp.arange(k, dtype=jnp.int32)),
             jnp.zeros(slots, jnp.int32).at[:k].set(top_tok[0]), jnp.full(slots, -1, jnp.int32))

    def deeper(carry: tuple[jax.Array, ...], d: jax.Array) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
        """Depth d + 1's top `slots` among the children of depth d's: flattened (slot, rank), so that top_k's ties
        keep the parents' order, then the rank."""
        score, rank = carry[0], carry[1]
        score, flat = jax.lax.top_k((score[:, None] + top_lp[d][None, :]).reshape(-1), slots)
        parent, r = (flat // k).astype(jnp.int32), (flat % k).astype(jnp.int32)
        new = (score, rank[parent].at[:, d].set(r), top_tok[d][r], parent)
        return new, new

    _, rest = jax.lax.scan(deeper, first, jnp.arange(1, depth_limit))
    scores, ranks, tokens, parents = (jnp.concatenate([a[None], b]) for a, b in zip(first, rest))  # [D, slots, ...]
    all_scores = scores.reshape(-1)
    all_ranks = ranks.reshape(-1, depth_limit)
    # lexsort: the last key is the primary one; ranks padded with -1 put a prefix before its extensions
    keys = [all_ranks[:, j] for j in reversed(range(depth_limit))] + [-all_scores]
    order = jnp.lexsort(keys)[:budget].astype(jnp.int32)  # slot (depth * slots + i) of each node, in pop order
    row = jnp.zeros(depth_limit * slots, jnp.int32).at[order].set(jnp.arange(1, budget + 1, dtype=jnp.int32))
    depth_of = order // slots
    parent_slot = parents.reshape(-1)[order]
    parent_row = jnp.where(depth_of == 0, 0, row[(depth_of - 1) * slots + jnp.maximum(parent_slot, 0)])
    return Tree(tokens.reshape(-1)[order], parent_row, depth_of + 1)


def ancestors(tree: Tree, depth_limit: int) -> jax.Array:
    """The verify's mask over its own rows [budget + 1, budget + 1]: row i sees row j iff j is i or an ancestor."""
    parent = jnp.concatenate([jnp.zeros(1, jnp.int32), tree.parents])
    rows = parent.shape[0]
    ptr = jnp.arange(rows, dtype=jnp.int32)
    mask = jnp.zeros((rows, rows), bool)
    for _ in range(depth_limit + 1):  # self, then each ancestor up to the root (which points at itself)
        mask = mask | (ptr[:, None] == jnp.arange(rows)[None, :])
        ptr = parent[ptr]
    return mask


def positions(tree: Tree, start: jax.Array) -> jax.Array:
    """Each verify row's position [budget + 1]: start + depth (the root at start)."""
    return start + jnp.concatenate([jnp.zeros(1, jnp.int32), tree.depths])


class Accepted(NamedTuple):
    """The path a verify accepts: `depth` nodes, their verify rows `path` [depth_limit] (padded with 0), and the
    target's token at the last one (the bonus)."""

    depth: jax.Array
    path: jax.Array
    bonus: jax.Array


def accept(tree: Tree, picked: jax.Array, depth_limit: int) -> Accepted:
    """Follow the target down the tree: picked [budget + 1] is the target's token at each verify row (argmax, or a
    sample). From the root, while the target's token at the current node is a child's token, move to that child."""
    parent = jnp.concatenate([jnp.full(1, -1, jnp.int32), tree.parents])
    token = jnp.concatenate([jnp.full(1, -1, jnp.int32), tree.tokens])

    def down(d: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        """One depth of the walk; after a miss it stays put (the same test fails at every later depth)."""
        cur, depth, path = carry
        match = (parent == cur) & (token == picked[cur])  # siblings hold distinct tokens: at most one matches
        found = jnp.any(match)
        nxt = jnp.argmax(match).astype(jnp.int32)
        return (jnp.where(found, nxt, cur), depth + found.astype(jnp.int32), path.at[d].set(jnp.where(found, nxt, 0)))

    cur, depth, path = jax.lax.fori_loop(0, depth_limit, down,
                                         (jnp.int32(0), jnp.int32(0), jnp.zeros(depth_limit, jnp.int32)))
    return Accepted(depth, path, picked[cur])
