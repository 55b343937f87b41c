"""The K schedule: its parse from a matrix value and each engine's config written from it."""
from __future__ import annotations

import pytest

from benchmarks.decide import k_schedules as ks

SCHEDULE = ks.parse({1: 7, 4: 3, 16: 1, 32: 0})


def test_parse_mapping_gives_contiguous_ranges_open_at_the_top():
    assert SCHEDULE.ranges == (ks.Range(1, 3, 7), ks.Range(4, 15, 3), ks.Range(16, 31, 1), ks.Range(32, None, 0))
    assert [SCHEDULE.k_at(b) for b in (1, 3, 4, 15, 16, 31, 32, 1000)] == [7, 7, 3, 3, 1, 1, 0, 0]
    assert ks.parse({1: 4, 8: 4}).ranges == (ks.Range(1, None, 4),)  # equal neighbours merge


def test_parse_vllm_triples_is_the_same_schedule():
    assert ks.parse([[4, 15, 3], [1, 3, 7], [16, 31, 1], [32, 64, 0]]) == SCHEDULE


@pytest.mark.parametrize("value, words", [
    ({2: 3}, "start at batch size 1"),
    ({1: -1}, "a K, an int >= 0"),
    ({"a": 1}, "first batch size"),
    ([[1, 2, 3], [4, 8, 1]], "contiguous"),
    ([[2, 4, 3]], "start at batch size 1"),
    ([[1, 4]], "[first B, last B, K]"),
    ([[3, 1, 2]], "below the first"),
    ("7", "give {first B: K"),
    ([], "give {first B: K"),
])
def test_parse_refuses_with_the_fix(value, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("{", r"\{")):
        ks.parse(value)


def test_engine_configs():
    assert ks.vllm_config(SCHEDULE, max_batch=64) == {
        "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": [[1, 3, 7], [4, 15, 3], [16, 31, 1], [32, 64, 0]]}
    assert ks.trtllm_config(SCHEDULE) == {"max_draft_len": 7, "draft_len_schedule": {3: 7, 15: 3, 31: 1}}
    open_top = ks.trtllm_config(ks.parse({1: 4, 8: 2}))
    assert open_top["draft_len_schedule"] == {7: 4, ks.OPEN_END: 2}
    plain_first = ks.trtllm_config(ks.parse({1: 0, 2: 7, 4: 4, 16: 0}), max_batch=64)
    assert plain_first["draft_len_schedule"] == {1: 0, 3: 7, 15: 4}  # K = 0 above 15 is implicit
    sg = ks.sglang_config(SCHEDULE)
    assert sg[0] == {"batch_sizes": [1, 3], "speculative_num_steps": 7, "speculative_eagle_topk": 1,
                     "speculative_num_draft_tokens": 8}
    assert sg[-1] == {"batch_sizes": [32, None], "speculative_algorithm": None}
    m = ks.matrix_config(SCHEDULE, {"name": "x", "engine": "jax"})
    assert m["k"] == {"dflash": {1: 7, 4: 3, 16: 1, 32: 0}} and m["batch_size"] == [1, 4, 16, 32]
    assert ks.parse(m["k"]["dflash"]) == SCHEDULE  # the matrix reads back the schedule it was written from


def test_from_choices_needs_batch_one():
    with pytest.raises(ValueError, match="B = 1"):
        ks.from_choices({2: 3})
