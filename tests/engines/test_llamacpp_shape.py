"""llama.cpp's cell options refuse the draft trees, which only the JAX engine runs (no server started)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.core.cells import Cell, TreeBudget
from benchmarks.engines.llamacpp.llamacpp_engine import options


def test_a_draft_tree_cell_is_refused_and_a_chain_cell_is_not():
    chain = Cell(engine="llama.cpp", target="models/tiny/target", method="dflash", draft="models/tiny/dflash", k=7,
                 temperature=0.0, max_new_tokens=8, seed=0)
    assert options(chain)["dtype"]
    tree = replace(chain, method="ddtree", k=0, shape=TreeBudget(16))
    with pytest.raises(ValueError, match="method ddtree verifies a draft tree, which this llama.cpp engine does not"):
        options(tree)
