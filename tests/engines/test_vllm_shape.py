"""vLLM's engine arguments from a cell's speculation shape (no engine started): a K schedule taken whole, a fixed K,
and the draft trees it does not run."""
from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.core.cells import Cell, KSchedule, TreeBudget
from benchmarks.engines.vllm import vllm_engine
from benchmarks.engines.vllm.vllm_engine import engine_args
from benchmarks.engines.vllm.vllm_options import K_SCHEDULE

HAVE = {"per_request_spec_decode_metrics": True}
NGRAM = Cell(engine="vllm", target="Qwen/Qwen3-4B", method="ngram", draft=None, k=3, temperature=0.0,
             max_new_tokens=16, seed=0, batch_size=4)


@pytest.fixture(autouse=True)
def no_vllm_import(monkeypatch):
    """The cells set no option: the installed release's option names (vLLM imported, seconds) are not needed."""
    monkeypatch.setattr(vllm_engine, "option_names", lambda: frozenset())


def test_a_whole_schedule_is_the_speculative_config_of_the_cell_and_no_option():
    cell = replace(NGRAM, shape=KSchedule(((1, 1, 7), (2, 4, 3)), whole=True))
    args = engine_args(cell, HAVE)
    assert args["speculative_config"][K_SCHEDULE] == [[1, 1, 7], [2, 4, 3]]
    assert args["speculative_config"]["num_speculative_tokens"] == 7 and args["max_num_seqs"] == 4
    assert K_SCHEDULE not in engine_args(NGRAM, HAVE)["speculative_config"]  # a fixed K: none
    assert K_SCHEDULE not in engine_args(replace(NGRAM, shape=KSchedule(((1, 4, 3),))), HAVE)[
        "speculative_config"]  # a schedule's K at this B, not taken whole


def test_a_draft_tree_cell_is_refused_naming_what_runs_it():
    tree = replace(NGRAM, method="ddtree", draft="z-lab/Qwen3-4B-DFlash-b16", k=0, shape=TreeBudget(64))
    with pytest.raises(ValueError, match="method ddtree verifies a draft tree, which vLLM does not run"):
        engine_args(tree, HAVE)
