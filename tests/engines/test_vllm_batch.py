"""vLLM's batched path (random tiny pair, float32): a cell of batch size 3 builds its engine with max_num_seqs = 3,
generate_batch submits the prompts in one call and returns each request's own timings on the batch's clock, the
counters count the batch's verify steps, and the greedy tokens are the ones each prompt gets alone. The engine is
the one test_vllm_engine's random_dflash runs its prompts alone on (tests/engines/conftest.py)."""
import pytest

from tests.engines.test_vllm_engine import Run

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_a_batch_of_3_is_one_call_timed_per_request_and_equals_batch_1(random_dflash: Run) -> None:
    batch = random_dflash.batch
    assert batch is not None and batch.max_num_seqs == 3
    records = batch.records
    assert [r.output_ids for r in records] == [r.output_ids for r in random_dflash.records]
    offsets = [r.extra["queued_offset_s"] for r in records]
    assert min(offsets) == 0.0 and max(offsets) < 1.0 and {r.extra["batch_size"] for r in records} == {3}
    assert all(0 < r.ttft_s <= r.last_token_s for r in records)
    if records[0].accept_lengths is not None:  # per-request spec-decode metrics (vLLM 0.32)
        assert batch.counters.num_drafts == sum(len(r.accept_lengths) for r in records)
    assert batch.counters.num_drafts > 0
