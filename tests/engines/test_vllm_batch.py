"""vLLM's batched path (random tiny pair, float32): a cell of batch size 3 builds its engine with max_num_seqs = 3,
generate_batch submits the prompts in one call and returns each request's own timings on the batch's clock, the
counters count the batch's verify steps, and the greedy tokens are the ones each prompt gets alone."""
import dataclasses

import pytest

from benchmarks.core.engine_io import SpecCounters
from benchmarks.engines import create_engine
from tests.engines.test_vllm_engine import PROMPTS, greedy, make_cell

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_a_batch_of_3_is_one_call_timed_per_request_and_equals_batch_1(random_pair):
    cell = dataclasses.replace(make_cell(random_pair, "dflash", 4), batch_size=3)
    engine = create_engine("vllm")
    engine.load(cell)
    try:
        assert engine.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs == 3
        before = engine.spec_counters()
        records = engine.generate_batch(PROMPTS, greedy())
        counters: SpecCounters = engine.spec_counters() - before
        alone = [engine.generate(p, greedy()).output_ids for p in PROMPTS]
    finally:
        engine.close()
    assert [r.output_ids for r in records] == alone
    offsets = [r.extra["queued_offset_s"] for r in records]
    assert min(offsets) == 0.0 and max(offsets) < 1.0 and {r.extra["batch_size"] for r in records} == {3}
    assert all(0 < r.ttft_s <= r.last_token_s for r in records)
    if records[0].accept_lengths is not None:  # per-request spec-decode metrics (vLLM 0.32)
        assert counters.num_drafts == sum(len(r.accept_lengths) for r in records)
    assert counters.num_drafts > 0
