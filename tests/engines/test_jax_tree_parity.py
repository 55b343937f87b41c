"""Parity with the public DDTree reference (liranringel/ddtree, MIT; read, never copied): fed the same draft logits of
the tiny pair, its tree builder and ours give the same node tokens, parents, depths and visibility, and given the same
target tokens at every node, the same accepted path and bonus token.

    DDTREE_REFERENCE=<a checkout of liranringel/ddtree> .venv/bin/python -m pytest tests/engines/test_jax_tree_parity.py

The reference is PyTorch: its ddtree.py is imported from the checkout, with the two sibling modules it imports at
the top (its model and DFlash loop, which its tree functions do not use) stood in for while it loads.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.engines.jax import draft as D
from benchmarks.engines.jax import model as M
from benchmarks.engines.jax import tree as T
from benchmarks.engines.jax.loader import load_draft, load_target

pytestmark = [pytest.mark.jax, pytest.mark.heavy]

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"
ENV = "DDTREE_REFERENCE"
BUDGETS = (16, 64, 256)
TEXTS = ("def add(a, b):\n    return", "Write a Python function that reverses a string.",
         "The capital of France is", "for i in range(10):\n    print(")


@pytest.fixture(scope="module")
def ref() -> Any:
    """The reference's ddtree module, imported from the checkout named by DDTREE_REFERENCE."""
    checkout = os.environ.get(ENV)
    if not checkout or not (Path(checkout) / "ddtree.py").is_file():
        pytest.skip(f"{ENV} does not name a checkout of liranringel/ddtree (with ddtree.py)")
    stand_ins = {"model": types.ModuleType("model"), "dflash": types.ModuleType("dflash")}
    for name in ("DFlashDraftModel", "sample", "extract_context_feature"):
        setattr(stand_ins["model"], name, None)
    stand_ins["dflash"].dflash_generate = None  # type: ignore[attr-defined]
    stand_ins["dflash"].cuda_time = time.perf_counter  # type: ignore[attr-defined]
    stand_ins["dflash"].empty_stage_times = lambda order: dict.fromkeys(order, 0.0)  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        spec = importlib.util.spec_from_file_location("ddtree_reference", Path(checkout) / "ddtree.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return module


@pytest.fixture(scope="module")
def blocks(ref: Any) -> list[tuple[np.ndarray, Any]]:
    """(Once the reference is found.) Per prompt, the tiny draft's logits [block_size - 1, V] after it (the block
    [first token, MASK...]) and a function giving the target's greedy token at each verify row of a tree over it."""
    from transformers import AutoTokenizer

    M.full_precision(jnp.float32)
    tok = AutoTokenizer.from_pretrained(TINY / "target")
    tcfg, tp = load_target(TINY / "target", "float32")
    dcfg, dp = load_draft(TINY / "dflash", "float32")
    out = []
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        n = len(ids)
        tokens = jnp.zeros(32, jnp.int32).at[:n].set(jnp.asarray(ids, jnp.int32))
        tcache, dcache = M.init_cache(tcfg, 384, jnp.float32), M.init_cache(dcfg.layers, 384, jnp.float32)
        last, taps, tcache = M.prefill(tp, tokens, jnp.int32(n), tcache, cfg=tcfg, tap_ids=dcfg.target_layer_ids)
        dcache = D.prefill_context(dp, taps, dcache, dcfg)
        anchor, start = jnp.argmax(last).astype(jnp.int32), jnp.int32(n)
        pending = jnp.zeros((dcfg.block_size, taps.shape[1]), jnp.float32)
        logits, _ = D.draft_logits(dp, tp, dcache, pending, start, anchor, start, dcfg, tcfg, dcfg.block_size)

        def target(tree: T.Tree, anchor=anchor, start=start, tcache=tcache) -> np.ndarray:
            rows = T.positions(tree, start)
            verify, _, _ = M.forward(tp, jnp.concatenate([anchor[None], tree.tokens]), start,
                                     jax.tree.map(jnp.copy, tcache), cfg=tcfg, positions=rows,
                                     mask=T.ancestors(tree, dcfg.block_size - 1))
            return np.asarray(jnp.argmax(verify, axis=-1), np.int64)
        out.append((np.asarray(logits, np.float32), target))
    return out


@pytest.mark.parametrize("budget", BUDGETS)
def test_tree_and_accepted_path_equal_the_reference(budget, ref, blocks):
    import torch

    depth_limit = blocks[0][0].shape[0]
    build = jax.jit(T.build, static_argnums=1)
    for logits, target in blocks:
        ref_tokens, ref_depths, ref_parents, child_maps, visibility, _ = ref.build_ddtree_tree(
            torch.from_numpy(logits.copy()), budget)
        tree = build(jax.nn.log_softmax(jnp.asarray(logits), axis=-1), budget)
        np.testing.assert_array_equal(np.asarray(tree.tokens), ref_tokens.numpy())
        np.testing.assert_array_equal(np.asarray(tree.depths), ref_depths.numpy())
        np.testing.assert_array_equal(np.asarray(tree.parents), ref_parents[1:])
        np.testing.assert_array_equal(np.asarray(T.ancestors(tree, depth_limit)), visibility.numpy())
        # the same target tokens at every row: the tiny target's own, then ones that follow the tree's first-born
        # children down to the limit (a full-depth path)
        first_child = np.zeros(budget + 1, np.int64)
        for row in range(budget, 0, -1):
            first_child[ref_parents[row]] = ref_tokens[row - 1]
        depths = []
        for picked in (target(tree), first_child):
            indices, bonus = ref.follow_verified_tree(child_maps, torch.from_numpy(picked)[None])
            got = T.accept(tree, jnp.asarray(picked, jnp.int32), depth_limit)
            n = int(got.depth)
            assert [0] + list(np.asarray(got.path)[:n]) == indices and int(got.bonus) == bonus
            depths.append(n)
        print(f"budget {budget}: {budget} nodes equal (max depth {int(tree.depths.max())}); accepted path equal: "
              f"the target's {depths[0]} deep, the first-born {depths[1]} deep")
