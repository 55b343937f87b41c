"""The published draft-tree figures: DDTree against DFlash per dataset, τ and speedup, a row per target, drawn from
results/reference/ bar for bar."""
from __future__ import annotations

import pytest

from benchmarks.data.reference import TREE_TABLE, load_reference
from benchmarks.figures import published_figures


@pytest.mark.parametrize("temperature", published_figures.TREE_TEMPERATURES)
def test_tree_figure_draws_every_published_value(temperature: float) -> None:
    """(tests/analysis/test_figures.py writes every published figure as a PNG.)"""
    ref = load_reference()
    fig = published_figures.published_tree_figure(ref, temperature)
    table = ref[(ref["table"] == TREE_TABLE) & (ref["temperature"] == temperature)]
    targets = list(dict.fromkeys(table["target"]))
    assert len(fig.axes) == 2 * len(targets) == 6
    for row, target in enumerate(targets):
        rows = table[table["target"] == target]
        for ax, col in zip(fig.axes[2 * row: 2 * row + 2], ("tau", "speedup")):
            assert ax.get_title() == target.split("/")[-1]
            datasets = [t.get_text().split("\n")[0] for t in ax.get_xticklabels()]
            assert datasets == list(dict.fromkeys(table["dataset"]))
            for container, method in zip(ax.containers, ("dflash", "ddtree")):
                want = rows[rows["method"] == method].set_index("dataset")[col].reindex(datasets)
                assert [p.get_height() for p in container.patches] == want.tolist()
            assert {t.get_text().split("\n")[1] for t in ax.get_xticklabels()} == {"n=128", "n=30", "n=164", "n=80"}
    assert "NVIDIA H200" in fig.get_suptitle() and "no CI published" in fig.get_suptitle()


def test_the_published_figures_include_one_tree_figure_per_temperature() -> None:
    assert [n for n in published_figures.PUBLISHED_FIGURES if "ddtree" in n] == [
        "published_ddtree_h200_t0", "published_ddtree_h200_t1"]
