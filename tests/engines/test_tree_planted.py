"""When does a draft tree raise τ above the chain? A drafter whose per-position distributions are planted: at each
depth the target's token is the draft's rank-r token, r drawn from the draft's own probabilities (a calibrated draft,
the same distribution at every depth, independent across depths). Then the expected accepted depth of a tree is the
sum over its nodes of their path probabilities (the walk passes a node iff the target's ranks start with its path), so
τ = 1 + Σ_nodes Π π(rank), in closed form; the chain at K is the tree of the rank-0 path, τ = 1 + Σ_{m≤K} π(0)^m.
Both are checked by Monte-Carlo through `tree.build` and `tree.accept`:

- a confident draft (top-1 right with probability p, the rest spread over the vocabulary): the tree at budget 64
  accepts what the chain at K = 15 does, since every node off the rank-0 path is a low-probability token;
- a flat top (the right token often rank 2 or 3): the tree at budget 64 more than doubles the chain's τ.

The heavy test measures which case the shipped tiny pair is in (docs/trees.md, "On the tiny pair").
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.core.paths import ROOT
from benchmarks.engines.jax import tree as T

pytestmark = pytest.mark.jax  # compiles JAX functions

DEPTH, BUDGET, K = 15, 64, 15  # the tiny draft's block of 16: depths 1..15
VOCAB = 4096
SAMPLES = 20_000
build = jax.jit(T.build, static_argnums=1)
walk = jax.jit(jax.vmap(T.accept, in_axes=(None, 0, None)), static_argnums=2)


def planted(top: tuple[float, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank probabilities π [V] (`top`, then the rest spread evenly) and each depth's tokens by rank [DEPTH, V]
    (a seeded permutation per depth, so that rank and token id differ and vary by depth)."""
    rest = (1.0 - sum(top)) / (VOCAB - len(top))
    pi = np.concatenate([np.asarray(top), np.full(VOCAB - len(top), rest)])
    rng = np.random.default_rng(seed)
    return pi, np.stack([rng.permutation(VOCAB) for _ in range(DEPTH)]).astype(np.int32)


def log_probs(pi: np.ndarray, by_rank: np.ndarray) -> jax.Array:
    """The draft's log-probabilities [DEPTH, V]: token by_rank[d, r] has probability π(r) at depth d + 1."""
    out = np.empty((DEPTH, VOCAB), np.float32)
    for d in range(DEPTH):
        out[d, by_rank[d]] = np.log(pi)
    return jnp.asarray(out)


def chain(by_rank: np.ndarray, k: int) -> T.Tree:
    """DFlash's chain at K as a tree: the rank-0 token at depths 1..k, each the child of the one before."""
    return T.Tree(jnp.asarray(by_rank[:k, 0]), jnp.arange(k, dtype=jnp.int32), jnp.arange(1, k + 1, dtype=jnp.int32))


def closed_form(tree: T.Tree, pi: np.ndarray, by_rank: np.ndarray) -> float:
    """Expected τ: 1 + the sum over nodes of their path probabilities (a parent precedes its children); pi [V] is
    every depth's rank probabilities, or [DEPTH, V] each depth's."""
    pi = np.broadcast_to(pi, by_rank.shape)
    rank_of = np.argsort(by_rank, axis=1)  # rank_of[d, token]
    tokens, parents, depths = (np.asarray(a) for a in tree)
    path = np.ones(len(tokens) + 1)
    for i, (tok, parent, depth) in enumerate(zip(tokens, parents, depths)):
        path[i + 1] = path[parent] * pi[depth - 1, rank_of[depth - 1, tok]]
    return 1.0 + float(path[1:].sum())


def monte_carlo(tree: T.Tree, pi: np.ndarray, by_rank: np.ndarray, seed: int) -> np.ndarray:
    """τ of each of SAMPLES steps: the target's ranks drawn from π at every depth, its token at each verify row the
    one at the next depth of that rank (the deepest rows' token is the bonus, never walked)."""
    ranks = np.random.default_rng(seed).choice(VOCAB, size=(SAMPLES, DEPTH), p=pi)
    target = by_rank[np.arange(DEPTH)[None, :], ranks]  # [SAMPLES, DEPTH]: the target's token at depth d + 1
    rows = np.concatenate([[0], np.asarray(tree.depths)])  # each verify row's depth; the next depth's token is picked
    picked = np.where(rows < DEPTH, target[:, np.minimum(rows, DEPTH - 1)], 0).astype(np.int32)
    return np.asarray(walk(tree, jnp.asarray(picked), DEPTH).depth) + 1.0


def tree_and_chain(top: tuple[float, ...], seed: int) -> tuple[tuple[float, float], tuple[np.ndarray, np.ndarray]]:
    """(closed-form τ of the tree at BUDGET and of the chain at K), (their Monte-Carlo τ per step, paired)."""
    pi, by_rank = planted(top, seed)
    tree, line = build(log_probs(pi, by_rank), BUDGET), chain(by_rank, K)
    expected = closed_form(tree, pi, by_rank), closed_form(line, pi, by_rank)
    chain_tau = 1.0 + sum(top[0] ** m for m in range(1, K + 1))
    assert expected[1] == pytest.approx(chain_tau, rel=1e-9)
    return expected, (monte_carlo(tree, pi, by_rank, seed), monte_carlo(line, pi, by_rank, seed))


def within_error(sampled: np.ndarray, expected: float) -> None:
    """The Monte-Carlo mean is within 4 standard errors of the closed form."""
    assert abs(sampled.mean() - expected) < 4 * sampled.std(ddof=1) / np.sqrt(len(sampled)) + 1e-9, \
        (sampled.mean(), expected)


@pytest.mark.parametrize("p", [0.5, 0.75, 0.9])
def test_a_confident_draft_gains_nothing_from_a_tree(p):
    (tree_tau, chain_tau), (tree_mc, chain_mc) = tree_and_chain((p,), seed=int(p * 100))
    within_error(tree_mc, tree_tau)
    within_error(chain_mc, chain_tau)
    # every node off the rank-0 path is a token of probability (1 - p) / (V - 1): 49 of them add < 0.01 to τ
    assert 0 <= tree_tau - chain_tau < (BUDGET - K) * (1 - p) / (VOCAB - 1) / p
    assert np.all(tree_mc >= chain_mc) and (tree_mc - chain_mc).mean() < 0.01


@pytest.mark.parametrize("top,tree_tau_is", [((0.4, 0.3, 0.2), 3.78), ((0.5, 0.3, 0.15), 4.34)])
def test_a_flat_top_makes_the_tree_pay(top, tree_tau_is):
    (tree_tau, chain_tau), (tree_mc, chain_mc) = tree_and_chain(top, seed=7)
    within_error(tree_mc, tree_tau)
    within_error(chain_mc, chain_tau)
    assert tree_tau == pytest.approx(tree_tau_is, abs=0.01)
    assert tree_tau > 2 * chain_tau - 0.2 and tree_mc.mean() / chain_mc.mean() > 1.9


# ---------------------------------------------------------------------------------------------------------------
# The shipped tiny pair: which case is it in?

MATRIX = ROOT / "configs" / "matrices" / "tiny-ddtree-tau.yaml"
TINY = ROOT / "models" / "tiny"
CACHE_ROWS = 640  # the longest prompt (432 tokens) plus the continuation
PAST_END = 1 << 30  # the rank of a target token past the output's end: never matched
RANKS = (0, 1, 2, 3, 4, BUDGET)  # 0-based rank bins: 0, 1, 2, 3, 4..63, BUDGET and past (in no tree of BUDGET nodes)


class Step(NamedTuple):
    """The draft's block at one step start: per depth, the target token's rank, the entropy, top-1 and top-4 mass;
    the depth the chain at K and the tree at BUDGET accept."""

    rank: np.ndarray  # [DEPTH] 0-based, PAST_END past the output's end (each field gains a leading step axis)
    entropy: np.ndarray  # [DEPTH] nats
    top1: np.ndarray
    top4: np.ndarray
    chain: np.ndarray  # accepted depth
    tree: np.ndarray


@pytest.fixture(scope="module")
def tiny_steps() -> dict[str, list[Step]]:
    """Per dataset of the matrix, for each of its measured prompts, teacher-forced on the target's greedy output: the
    draft's block at every step start j of the continuation (anchor its token j, context every earlier position's
    target taps, as the decoder gives them), against the target's next DEPTH tokens."""
    from benchmarks.config.matrix_parse import load_matrix
    from benchmarks.config.model_refs import load_tokenizer
    from benchmarks.data.prompts import select_prompts
    from benchmarks.engines.jax import draft as D
    from benchmarks.engines.jax import model as M
    from benchmarks.engines.jax.engine import eos_token_ids
    from benchmarks.engines.jax.loader import load_draft, load_target

    matrix = load_matrix(MATRIX)
    M.full_precision(jnp.float32)
    tcfg, tp = load_target(TINY / "target", "float32")
    dcfg, dp = load_draft(TINY / "dflash", "float32")
    assert dcfg.block_size - 1 == DEPTH
    eos = set(eos_token_ids(TINY / "target"))
    tokenizer = load_tokenizer(str(TINY / "target"))
    pending = jnp.zeros((1, tcfg.hidden_size * len(dcfg.target_layer_ids)), jnp.float32)  # no pending context
    blocks = jax.jit(jax.vmap(lambda anchor, start, dcache, targets: block_stats(D.draft_logits(
        dp, tp, dcache, pending, start, anchor, start, dcfg, tcfg, dcfg.block_size)[0], targets),
        in_axes=(0, 0, None, 0)))
    out: dict[str, list[Step]] = {}  # per dataset, per prompt: its steps' figures stacked (step j first)
    for d in matrix.datasets:
        prompts = select_prompts(d.name, matrix.num_prompts + matrix.warmup_prompts, matrix.seed, tokenizer, None,
                                 None, matrix.chat_template).prompts[:matrix.num_prompts]
        out[d.name] = []
        for p in prompts:
            n = len(p.ids)
            tokens = jnp.zeros(CACHE_ROWS, jnp.int32).at[:n].set(jnp.asarray(p.ids, jnp.int32))
            cache = M.init_cache(tcfg, CACHE_ROWS, jnp.float32)
            last, _, cache = M.prefill(tp, tokens, jnp.int32(n), cache, cfg=tcfg)
            cont = [int(jnp.argmax(last))]
            while len(cont) < matrix.max_new_tokens and cont[-1] not in eos:
                logits, _, cache = M.forward(tp, jnp.asarray(cont[-1:], jnp.int32), jnp.int32(n + len(cont) - 1),
                                             cache, cfg=tcfg)
                cont.append(int(jnp.argmax(logits[0])))
            seq = tokens.at[n:n + len(cont)].set(jnp.asarray(cont, jnp.int32))
            _, taps, _ = M.prefill(tp, seq, jnp.int32(n + len(cont)), M.init_cache(tcfg, CACHE_ROWS, jnp.float32),
                                   cfg=tcfg, tap_ids=tuple(dcfg.target_layer_ids))
            dcache = D.prefill_context(dp, taps, M.init_cache(dcfg.layers, CACHE_ROWS, jnp.float32), dcfg)
            ahead = np.full(len(cont) + DEPTH, -1, np.int32)
            ahead[:len(cont)] = cont
            # a step from token j verifies tokens j + 1 .. j + DEPTH; every j at once, padded to one shape
            j = np.minimum(np.arange(matrix.max_new_tokens - 1), len(cont) - 2)
            got = blocks(jnp.asarray(ahead[j]), jnp.asarray(n + j, jnp.int32), dcache,
                         jnp.asarray(ahead[j[:, None] + 1 + np.arange(DEPTH)[None, :]]))
            out[d.name].append(Step(*(np.asarray(a)[:len(cont) - 1] for a in got)))
    return out


def block_stats(logits: jax.Array, targets: jax.Array) -> Step:
    """One block's figures (`Step`); targets [DEPTH] are the target's tokens at depths 1..DEPTH (-1 past its end)."""
    lp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    target_lp = jnp.take_along_axis(lp, jnp.maximum(targets, 0)[:, None], axis=1)[:, 0]
    rank = jnp.where(targets >= 0, jnp.sum(lp > target_lp[:, None], axis=1), PAST_END)
    probs = jnp.exp(lp)
    top = jax.lax.top_k(probs, 4)[0]
    chain_depth = jnp.argmin(jnp.concatenate([rank[:K] == 0, jnp.zeros(1, bool)]))
    tree = T.build(lp, BUDGET)
    rows = jnp.concatenate([jnp.zeros(1, jnp.int32), tree.depths])  # the target's token after row i is at depth + 1
    picked = jnp.where(rows < DEPTH, targets[jnp.minimum(rows, DEPTH - 1)], -1)
    return Step(rank, -jnp.sum(probs * lp, axis=1), top[:, 0], top.sum(axis=1), chain_depth,
                T.accept(tree, picked, DEPTH).depth)


def planted_like(rank: np.ndarray, live: np.ndarray) -> tuple[float, float]:
    """Closed-form τ of the tree at BUDGET and the chain at K for a calibrated planted drafter whose rank
    probabilities at each depth are the measured frequencies of the target's rank there (depths independent)."""
    vocab = BUDGET + 1  # ranks past BUDGET - 1 are in no tree: pooled into one
    pi = np.stack([np.bincount(np.minimum(rank[live[:, d], d], BUDGET), minlength=vocab) / live[:, d].sum()
                   for d in range(DEPTH)])
    pi[:, BUDGET] = 0.0  # past the tree's ranks: a miss at any budget, its mass left out of every path
    pi = np.maximum(pi, 1e-12)
    by_rank = np.argsort(-pi, axis=1, kind="stable").astype(np.int32)  # token = rank index; sorted by frequency
    pi_by_rank = np.take_along_axis(pi, by_rank, axis=1)
    tree = build(jnp.asarray(np.log(pi), jnp.float32), BUDGET)
    chain_tau = 1.0 + float(np.cumprod(pi[:K, 0]).sum())
    return closed_form(tree, pi_by_rank, by_rank), chain_tau


def decoded_tau(prompts: list[Step], field: str) -> float:
    """τ as the decoder measures it: from each prompt's first token, a step at j accepts its depth (`field`: chain
    or tree) plus the bonus, and the next starts after them; accepted tokens plus bonus over steps, all prompts."""
    made = steps = 0
    for p in prompts:
        depth, j = getattr(p, field), 0
        while j < len(depth):
            made, steps, j = made + int(depth[j]) + 1, steps + 1, j + int(depth[j]) + 1
    return made / steps


@pytest.mark.heavy
def test_the_tiny_draft_has_a_flat_top(tiny_steps):
    """Where the chain misses, the target's token is mostly the draft's rank 2 to 4: the tree at BUDGET decodes
    with a τ well above the chain's at K, and a planted drafter with the same rank frequencies per depth says so."""
    for name, prompts in tiny_steps.items():
        rank, entropy, top1, top4 = (np.concatenate([getattr(p, f) for p in prompts]) for f in Step._fields[:4])
        chain_depth, tree_depth = (np.concatenate([getattr(p, f) for p in prompts]) for f in ("chain", "tree"))
        live = rank < PAST_END
        miss = chain_depth < K  # the chain stops at depth chain_depth + 1: the target's rank there
        first_miss = rank[miss, chain_depth[miss]]
        first_miss = first_miss[first_miss < PAST_END]
        bins = np.histogram(first_miss, bins=[*RANKS[1:], PAST_END])[0] / len(first_miss)
        decoded = decoded_tau(prompts, "chain"), decoded_tau(prompts, "tree")
        every = chain_depth.mean() + 1, tree_depth.mean() + 1
        print(f"\n{name}: {len(prompts)} prompts, {len(rank)} step starts; decoded τ chain {decoded[0]:.3f} "
              f"tree {decoded[1]:.3f}; every start: chain {every[0]:.3f} tree {every[1]:.3f}")
        print("  the target's rank where the chain misses (2, 3, 4, 5-64, >64):", " ".join(f"{b:.3f}" for b in bins))
        planted_tree, planted_chain = planted_like(rank, live)
        print(f"  planted with these rank frequencies per depth: τ chain {planted_chain:.3f} tree {planted_tree:.3f}")
        assert bins[:3].sum() > 0.6 and decoded[1] > 1.3 * decoded[0] and planted_tree > 1.3 * planted_chain
        for d in (0, 1, 3, 7, 14):
            ok = live[:, d]
            r = rank[ok, d]
            print(f"  depth {d + 1}: entropy {entropy[ok, d].mean():.2f} nats, top-1 {top1[ok, d].mean():.3f}, "
                  f"top-4 {top4[ok, d].mean():.3f}; target rank 1 {np.mean(r == 0):.3f}, 2 {np.mean(r == 1):.3f}, "
                  f"3 {np.mean(r == 2):.3f}, 4 {np.mean(r == 3):.3f}, 5-64 {np.mean((r >= 4) & (r < 64)):.3f}, "
                  f">64 {np.mean(r >= 64):.3f}")
