"""Draft trees in the JAX decode loops: greedy equals AR token for token at every budget, alone and batched (B trees a
step), and a request's records carry per step the rows verified and the accepted path, consistent with its accept
lengths."""
from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.core.cells import Cell, TreeBudget
from benchmarks.core.engine_io import SamplingParams
from benchmarks.engines.jax import batch as B
from benchmarks.engines.jax import model as M
from benchmarks.engines.jax.decode import Decoder
from benchmarks.engines.jax.engine import JaxEngine
from benchmarks.engines.jax.loader import load_draft, load_target

pytestmark = pytest.mark.jax

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"
MAX_LEN = 96
NEW = 24
PROMPT_LENS = (3, 17, 40, 70, 5, 33, 9, 60, 12, 25, 50, 7, 44, 21, 30, 65)  # 16: the largest batch of the grid
BUDGETS = (16, 32, 64, 128, 256)


@pytest.fixture(scope="module")
def pair():
    M.full_precision(jnp.float32)  # as JaxEngine.load sets it, so that the engine and these decoders share compiles
    tcfg, tp = load_target(TINY / "target", "float32")
    dcfg, dp = load_draft(TINY / "dflash", "float32")
    return tcfg, tp, dcfg, dp


@pytest.fixture(scope="module")
def prompts():
    """Random-token prompts of unequal lengths."""
    rng = np.random.default_rng(0)
    return [rng.integers(10, 2000, n).tolist() for n in PROMPT_LENS]


@pytest.fixture(scope="module")
def ar_truth(pair, prompts):
    """AR's greedy tokens of the first n prompts, computed once each."""
    tcfg, tp, _, _ = pair
    ar, done = Decoder(tcfg, tp, MAX_LEN, jnp.float32), []

    def first(n: int) -> list[list[int]]:
        done.extend(ar.generate(p, NEW).tokens for p in prompts[len(done):n])
        return done[:n]
    return first


def check_paths(paths: list[list[int]], accepts: list[int], budget: int) -> None:
    """Per step, the accepted path's pop-order indices: as many as the accepted depth, increasing, in 1..budget."""
    assert [len(p) for p in paths] == accepts
    assert all(p == sorted(set(p)) and all(1 <= i <= budget for i in p) for p in paths)


@pytest.mark.heavy
@pytest.mark.parametrize("budget", BUDGETS)
def test_tree_greedy_equals_ar_at_every_budget_and_batch(budget, pair, prompts, ar_truth):
    """Budgets {16, ..., 256} at B = 1, 4 and 16: every request's tokens are AR's, its records the batch-1 ones."""
    tcfg, tp, dcfg, dp = pair
    tree = Decoder(tcfg, tp, MAX_LEN, jnp.float32, dcfg, dp, budget=budget)
    assert tree.k == dcfg.block_size - 1 and tree.num_queries == dcfg.block_size
    alone = [tree.generate(p, NEW) for p in prompts[:4]]
    assert [g.tokens for g in alone] == ar_truth(4), f"budget {budget} at B = 1"
    for g in alone:
        assert g.accept_lengths is not None and g.tree_paths is not None
        assert len(g.tokens) == 1 + sum(n + 1 for n in g.accept_lengths)
    batcher = B.BatchDecoder(tree)
    for size in (4, 16):
        got = batcher.generate(prompts[:size], NEW)
        assert got.tokens == ar_truth(size), f"budget {budget} at B = {size}"
        assert got.accept_lengths is not None and got.tree_paths is not None
        assert got.accept_lengths[:4] == [g.accept_lengths for g in alone]
        assert got.tree_paths[:4] == [g.tree_paths for g in alone]
        for paths, accepts in zip(got.tree_paths, got.accept_lengths):
            check_paths(paths, accepts, budget)


def test_engine_ddtree_equals_ar_and_records_rows_and_paths_cut_at_the_output(pair, prompts, ar_truth):
    """The fast case: budget 16 at B = 1, through JaxEngine (the cell's budget mapped to the decoder's)."""
    engine = JaxEngine()
    engine.load(Cell(engine="jax", target=str(TINY / "target"), method="ddtree", draft=str(TINY / "dflash"), k=0,
                     temperature=0.0, max_new_tokens=NEW, seed=0, shape=TreeBudget(16),
                     engine_options={"dtype": "float32", "max_model_len": MAX_LEN, "ignore_eos": True}))
    assert engine.describe()["tree_budget"] == 16
    for prompt, want, n_out in zip(prompts, ar_truth(2), (NEW, 5)):  # 5: the limit cuts a step short
        record = engine.generate(prompt, SamplingParams(0.0, n_out, 0))
        assert record.output_ids == want[:n_out]
        accepts = record.accept_lengths
        assert accepts is not None and 1 + sum(a + 1 for a in accepts) == n_out
        assert record.extra["tree_rows"] == [17] * len(accepts)
        check_paths(record.extra["tree_paths"], accepts, 16)
    engine.close()
