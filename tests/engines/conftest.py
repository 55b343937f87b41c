"""Fixtures shared by the engines' test modules."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.engines.test_vllm_engine import Run


@pytest.fixture(scope="session")
def random_dflash(random_pair: dict[str, Path]) -> Run:
    """vLLM's DFlash engine on the random pair at K = 4 with max_num_seqs = 3 (a cell of batch size 3): each of the
    prompts alone (test_vllm_engine), then the three in one batch (test_vllm_batch). One engine start for both
    modules (tens of seconds on CPU)."""
    import dataclasses

    from tests.engines.test_vllm_engine import PROMPTS, greedy, make_cell, run_cell

    cell = dataclasses.replace(make_cell(random_pair, "dflash", 4), batch_size=3)
    return run_cell(cell, PROMPTS, [greedy()] * len(PROMPTS), batch=greedy())
