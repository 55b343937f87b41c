"""Batched JAX decoding: at B in {1, 3, 8}, requests of unequal prompt lengths and stops decode to their batch-1
tokens and accept lengths (greedy exactly on float32 CPU; sampled exactly too, keys being per request and position),
finished rows are counted, the host waits once per batch, and a last step's acceptance is cut at the limit."""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams
from benchmarks.engines import create_engine
from benchmarks.engines.jax import batch as B
from benchmarks.engines.jax.decode import Decoder, accepts_within
from benchmarks.engines.jax.loader import load_draft, load_target

pytestmark = pytest.mark.jax

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"
MAX_LEN = 96  # caches of 128 rows: one cache span, prefill buckets 32, 64 and 128
PROMPT_LENS = (3, 17, 40, 70, 5, 33, 9, 60)
LIMITS = (20, 9, 30, 24, 1, 16, 26, 12)  # unequal stops; a limit of 1 finishes at prefill
K = 7


@pytest.fixture(scope="module")
def decoders():
    tcfg, tp = load_target(TINY / "target", "float32")
    dcfg, dp = load_draft(TINY / "dflash", "float32")
    return {"ar": Decoder(tcfg, tp, MAX_LEN, jnp.float32),
            "dflash": Decoder(tcfg, tp, MAX_LEN, jnp.float32, dcfg, dp, K)}


@pytest.fixture(scope="module")
def batches(decoders):
    """A BatchDecoder per method, shared by the tests (their compiles too)."""
    return {name: B.BatchDecoder(dec) for name, dec in decoders.items()}


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    return [rng.integers(10, 2000, n).tolist() for n in PROMPT_LENS]


@pytest.fixture(scope="module")
def eos(decoders, prompts):
    """An EOS id that stops the first request partway: its 6th greedy token."""
    return (decoders["ar"].generate(prompts[0], LIMITS[0]).tokens[5],)


@pytest.fixture(scope="module")
def greedy_truth(decoders, prompts, eos):
    """Batch-1 greedy results, per method and prompt (the EOS and limits of the batches)."""
    return {name: [dec.generate(p, n, eos_ids=eos) for p, n in zip(prompts, LIMITS)] for name, dec in decoders.items()}


def test_batch_sizes_are_fixed_buckets():
    assert [B.batch_size_for(n) for n in (1, 2, 3, 5, 8, 9, 64)] == [1, 2, 4, 8, 8, 16, 64]
    for n in (0, 65):
        with pytest.raises(ValueError, match="a batch holds"):
            B.batch_size_for(n)


@pytest.mark.parametrize("size", [1, 3, 8])
@pytest.mark.parametrize("method", ["ar", "dflash"])
def test_greedy_batch_equals_batch_1(method, size, batches, prompts, eos, greedy_truth):
    truth = greedy_truth[method][:size]
    got = batches[method].generate(prompts[:size], list(LIMITS[:size]), eos_ids=eos)
    assert got.tokens == [t.tokens for t in truth]
    if method == "dflash":
        assert got.accept_lengths == [t.accept_lengths for t in truth]
    assert got.batch_size == B.batch_size_for(size) and got.round_trips == 1
    if size > 1:  # unequal stops in one batch: one request at EOS, another at its limit
        assert truth[0].tokens[-1] in eos and len(truth[0].tokens) < LIMITS[0]
        assert len(truth[1].tokens) == LIMITS[1] and truth[1].tokens[-1] not in eos


@pytest.mark.parametrize("method", ["ar", "dflash"])
def test_sampled_batch_equals_batch_1_under_the_same_seeds(method, decoders, batches, prompts):
    """Each row draws the token at position p+1 with fold_in(key(its seed), p), as a request alone does."""
    seeds = [3, 1, 4]
    got = batches[method].generate(prompts[:3], list(LIMITS[:3]), 0.8, seeds)
    truth = [decoders[method].generate(p, n, 0.8, s) for p, n, s in zip(prompts, LIMITS, seeds)]
    assert got.tokens == [t.tokens for t in truth]
    if method == "dflash":
        assert got.accept_lengths == [t.accept_lengths for t in truth]
    assert got.tokens[0] != decoders[method].generate(prompts[0], LIMITS[0], 0.8, 5).tokens


@pytest.mark.parametrize("method", ["ar", "dflash"])
def test_finished_and_padding_rows_are_counted(method, batches, prompts, eos):
    """3 requests run in the 4-row bucket: a row's idle steps are the batch's steps less its own, and the wasted
    row-steps add them up over every row, the padding row's (idle throughout) included."""
    got = batches[method].generate(prompts[:3], list(LIMITS[:3]), eos_ids=eos)
    own = [len(a) for a in got.accept_lengths] if got.accept_lengths else [len(t) - 1 for t in got.tokens]
    assert got.batch_size == 4 and got.steps == max(own)
    assert got.idle_steps == [got.steps - n for n in own] and min(got.idle_steps) == 0
    assert got.wasted_row_steps == sum(got.idle_steps) + got.steps


@pytest.mark.parametrize("method", ["ar", "dflash"])
def test_the_host_waits_once_per_batch_after_the_first_tokens(method, batches, prompts, monkeypatch):
    """Two reads of device results per batch, whatever its steps: the first tokens, then everything at the end."""
    batches[method].generate(prompts, list(LIMITS))  # compiled before counting
    reads = []
    get = jax.device_get
    monkeypatch.setattr(jax, "device_get", lambda x: reads.append(1) or get(x))
    got = batches[method].generate(prompts, list(LIMITS))
    assert got.steps > 10 and len(reads) == 2 and got.round_trips == 1
    assert got.compile_s == 0.0 and 0 < got.ttft_s < got.last_token_s


def test_engine_batch_cuts_a_last_step_at_the_limit(oracle_pair):
    """Every draft of the oracle pair is accepted: at 8 tokens and K = 4 the second step would accept 4 drafts where
    the request wants 2 more tokens; it counts 1 (+ the bonus), batch-1 and batched, host loop and device loop."""
    engine = create_engine("jax")
    engine.load(Cell(engine="jax", target=str(oracle_pair["target"]), method="dflash", draft=str(oracle_pair["dflash"]),
                     k=4, temperature=0.0, max_new_tokens=8, seed=0,
                     engine_options={"dtype": "float32", "max_model_len": MAX_LEN}))
    want = accepts_within(8, 4)
    assert want == [4, 1]
    params = SamplingParams(0.0, 8)
    prompts = [list(range(10, 10 + n)) for n in (5, 30, 12)]
    single = [engine.generate(p, params) for p in prompts]
    before = engine.spec_counters()
    records = engine.generate_batch(prompts, params)
    counters = engine.spec_counters() - before
    assert [r.output_ids for r in records] == [r.output_ids for r in single]
    assert [r.accept_lengths for r in records] == [r.accept_lengths for r in single] == [want] * 3
    assert counters.num_drafts == 6 and counters.num_accepted_tokens == 15
    assert {r.extra["batch_bucket"] for r in records} == {4} and records[0].extra["wasted_row_steps"] == 2
    assert engine.decoder.generate(prompts[0], 8, breakdown=True).accept_lengths == want
    with pytest.raises(ValueError, match="single temperature"):
        engine.generate_batch(prompts[:2], [params, SamplingParams(0.5, 8)])
    engine.close()
