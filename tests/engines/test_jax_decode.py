"""JAX decode loops: DFlash is lossless against AR, the oracle pair accepts everything, shapes stay static."""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams, SpecCounters
from benchmarks.engines import create_engine
from benchmarks.engines.jax import decode
from benchmarks.engines.jax.decode import Decoder, accepts_within
from benchmarks.engines.jax.loader import load_draft, load_target

pytestmark = pytest.mark.jax  # compiles and runs the JAX engine

MAX_LEN = 96  # caches of 128 rows: prefill buckets 32, 64 and 128
NEW = 24
PROMPT_LENS = (1, 9, MAX_LEN - 6, MAX_LEN - 1)  # the last two end near the cache limit


@pytest.fixture(scope="module")
def pair(random_pair):
    tcfg, tp = load_target(random_pair["target"], "float32")
    dcfg, dp = load_draft(random_pair["dflash"], "float32")
    return tcfg, tp, dcfg, dp


@pytest.fixture(scope="module")
def ar_outputs(pair):
    tcfg, tp, _, _ = pair
    ar = Decoder(tcfg, tp, MAX_LEN, jnp.float32)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, tcfg.vocab_size, n).tolist() for n in PROMPT_LENS]
    return ar, prompts, [ar.generate(p, NEW).tokens for p in prompts]


@pytest.mark.parametrize("k", [1, 4, 15])
def test_dflash_greedy_equals_ar(k, pair, ar_outputs):
    tcfg, tp, dcfg, dp = pair
    _, prompts, expected = ar_outputs
    spec = Decoder(tcfg, tp, MAX_LEN, jnp.float32, dcfg, dp, k)
    for prompt, want in zip(prompts, expected):
        got = spec.generate(prompt, NEW)
        assert len(want) == min(NEW, MAX_LEN - len(prompt))
        assert got.tokens == want, f"K={k}, prompt of {len(prompt)} tokens"
        assert all(0 <= n <= k for n in got.accept_lengths)


def test_dflash_breakdown_and_k_plus_1_queries_stay_lossless(pair, ar_outputs):
    tcfg, tp, dcfg, dp = pair
    _, prompts, expected = ar_outputs
    spec = Decoder(tcfg, tp, MAX_LEN, jnp.float32, dcfg, dp, 4, num_queries=5)
    got = spec.generate(prompts[1], NEW, breakdown=True)
    assert got.tokens == expected[1]
    assert set(got.breakdown) == {"draft_s", "verify_s", "host_s"} and all(v > 0 for v in got.breakdown.values())


def test_growing_past_cache_spans_changes_no_token(pair):
    """A request whose context crosses the 256- and 512-row spans decodes as if every step read the whole cache."""
    from benchmarks.engines.jax import model as M

    tcfg, tp, dcfg, dp = pair
    prompt = np.random.default_rng(1).integers(0, tcfg.vocab_size, 250).tolist()
    ar = Decoder(tcfg, tp, 600, jnp.float32)
    assert ar.spans == [256, 512, 640]
    got = ar.generate(prompt, 300)
    assert got.compile_s > 0 and len(got.tokens) == 300

    cache = M.init_cache(tcfg, 640, jnp.float32)
    tokens = np.zeros(256, np.int32)
    tokens[:250] = prompt
    last, _, cache = M.prefill(tp, jnp.asarray(tokens), jnp.int32(250), cache, cfg=tcfg)
    want = [int(jnp.argmax(last))]
    for pos in range(250, 549):  # span=None: every step reads all 640 rows
        logits, _, cache = M.forward(tp, jnp.asarray([want[-1]], jnp.int32), jnp.int32(pos), cache, cfg=tcfg)
        want.append(int(jnp.argmax(logits[0])))
    assert got.tokens == want
    assert Decoder(tcfg, tp, 600, jnp.float32, dcfg, dp, 4).generate(prompt, 300).tokens == want


def test_no_recompilation_as_the_sequence_grows(pair):
    tcfg, tp, dcfg, dp = pair
    spec = Decoder(tcfg, tp, MAX_LEN, jnp.float32, dcfg, dp, 4)
    spec.generate(list(range(3, 8)), 30)
    sizes = decode.spec_steps._cache_size(), decode.dflash_prefill_step._cache_size()
    for n in (6, 20, 31):  # same bucket (32), other lengths and positions
        again = spec.generate(list(range(3, 3 + n)), 30)
        assert again.compile_s == 0.0
    assert (decode.spec_steps._cache_size(), decode.dflash_prefill_step._cache_size()) == sizes


def test_the_host_waits_once_per_request_after_the_first_token(pair, ar_outputs):
    """The per-step loop this engine had waited for the device once per step (it read each token, or n and the
    committed tokens, before dispatching the next step); the device-resident loops wait once, at the end, whatever
    the number of steps and spans. The breakdown option keeps the host in the loop: two waits per step."""
    tcfg, tp, dcfg, dp = pair
    ar, prompts, _ = ar_outputs
    spec = Decoder(tcfg, tp, 600, jnp.float32, dcfg, dp, 4)
    long_ar = Decoder(tcfg, tp, 600, jnp.float32)
    for dec, prompt, new in ((ar, prompts[1], NEW), (spec, prompts[1], NEW), (long_ar, list(range(3, 253)), 300),
                             (spec, list(range(3, 253)), 300)):
        got = dec.generate(prompt, new)
        old_loop = len(got.accept_lengths) if dec.speculative else len(got.tokens) - 1
        assert old_loop > 10 and got.round_trips == 1, (old_loop, got.round_trips)
    timed = spec.generate(prompts[1], NEW, breakdown=True)
    assert timed.round_trips == 2 * len(timed.accept_lengths)


def test_eos_stops_both_loops_at_the_same_token(pair, ar_outputs):
    tcfg, tp, dcfg, dp = pair
    ar, prompts, expected = ar_outputs
    eos = expected[1][5]
    stop = expected[1].index(eos)
    want = ar.generate(prompts[1], NEW, eos_ids=(eos,)).tokens
    assert want == expected[1][: stop + 1]
    spec = Decoder(tcfg, tp, MAX_LEN, jnp.float32, dcfg, dp, 15)
    assert spec.generate(prompts[1], NEW, eos_ids=(eos,)).tokens == want


def test_eos_inside_an_accepted_block_ends_the_request(pair, monkeypatch):
    """A step that commits [.., EOS, ..] stops there: no further steps, EOS is the last token, and the step counts
    only the drafts before EOS (4 accepted, 2 within the output: metrics.accepted_within)."""
    tcfg, tp, dcfg, dp = pair
    eos = 2

    def accept_all(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
        _, _, taps, tcache = verify(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span)
        return jnp.int32(4), jnp.asarray([5, 6, eos, 7, 8], jnp.int32), taps, tcache

    verify = decode._verify
    monkeypatch.setattr(decode, "_verify", accept_all)
    decode.spec_steps.clear_cache()  # retrace the decode loop with the patched verification
    try:
        got = Decoder(tcfg, tp, MAX_LEN, jnp.float32, dcfg, dp, 4).generate([9, 10, 11], NEW, eos_ids=(eos,))
    finally:
        decode.spec_steps.clear_cache()
    assert got.tokens[1:] == [5, 6, eos] and got.accept_lengths == [2]


def test_sampling_keeps_the_prefix_rule(pair, ar_outputs):
    """Samples are keyed by position, so DFlash at temperature > 0 draws what AR draws with the same seed."""
    tcfg, tp, dcfg, dp = pair
    ar, prompts, _ = ar_outputs
    spec = Decoder(tcfg, tp, MAX_LEN, jnp.float32, dcfg, dp, 4)
    for seed in (0, 1):
        want = ar.generate(prompts[1], NEW, temperature=0.8, seed=seed).tokens
        assert spec.generate(prompts[1], NEW, temperature=0.8, seed=seed).tokens == want
    assert ar.generate(prompts[1], NEW, temperature=0.8, seed=0).tokens != \
        ar.generate(prompts[1], NEW, temperature=0.8, seed=1).tokens


def jax_cell(pair_dirs, method: str, k: int = 0, **options) -> Cell:
    return Cell(engine="jax", target=str(pair_dirs["target"]), method=method,
                draft=str(pair_dirs["dflash"]) if method == "dflash" else None, k=k, temperature=0.0,
                max_new_tokens=NEW, seed=0, engine_options={"dtype": "float32", "max_model_len": MAX_LEN, **options})


@pytest.mark.parametrize("k,temperature", [(4, 0.0), (15, 1.0)])
def test_oracle_pair_accepts_every_draft(k, temperature, oracle_pair):
    """Every draft accepted, K per step; the last step counts only the tokens still wanted (24 - 1 is no multiple of
    K + 1), so tau falls just short of K + 1."""
    engine = create_engine("jax")
    engine.load(jax_cell(oracle_pair, "dflash", k))
    before = engine.spec_counters()
    want = accepts_within(NEW, k)
    assert want[:-1] == [k] * (len(want) - 1) and want[-1] < k
    for n in (5, 30):
        rec = engine.generate(list(range(10, 10 + n)), SamplingParams(temperature, NEW, seed=n))
        assert len(set(rec.output_ids)) == 1 and len(rec.output_ids) == NEW
        assert rec.accept_lengths == want
    c = engine.spec_counters() - before
    tau = 1 + c.num_accepted_tokens / c.num_drafts
    print(f"oracle K={k} T={temperature}: tau={tau}")
    assert tau == 1 + sum(want) / len(want)
    assert c.accepted_per_pos == SpecCounters.from_accept_lengths(want * 2, k).accepted_per_pos
    engine.close()


def test_a_request_ending_on_eos_mid_block_counts_within_its_output():
    """The shipped tiny pair, greedy, K = 15: EOS set to the second token of a step that accepted several drafts ends
    the request there. Its accept lengths, at batch 1 and in a batch, and the engine's counters are cut at EOS: the
    step counts the one draft before EOS, and τ = (n_out - 1) / steps."""
    from benchmarks.core.metrics import drafted_within

    tiny = Path(__file__).resolve().parents[2] / "models" / "tiny"
    engine = create_engine("jax")
    engine.load(Cell(engine="jax", target=str(tiny / "target"), method="dflash", draft=str(tiny / "dflash"), k=15,
                     temperature=0.0, max_new_tokens=64, seed=0,
                     engine_options={"dtype": "float32", "max_model_len": 256, "ignore_eos": True}))
    params, prompt = SamplingParams(0.0, 64), tiny_prompt(tiny)
    free = engine.generate(prompt, params)
    starts = np.cumsum([1] + [a + 1 for a in free.accept_lengths])  # each step's first token
    step, at = next((i, int(c) + 1) for i, (c, a) in enumerate(zip(starts, free.accept_lengths))
                    if a >= 3 and free.output_ids[int(c) + 1] not in free.output_ids[:int(c) + 1])
    engine.eos = (free.output_ids[at],)  # the step's second token, an accepted draft with more after it
    before = engine.spec_counters()
    rec = engine.generate(prompt, params)
    [batched] = engine.generate_batch([prompt], params)
    counters = engine.spec_counters() - before
    want = free.accept_lengths[:step] + [1]
    print(f"EOS at token {at + 1}: accept lengths {free.accept_lengths[:step + 1]} -> {rec.accept_lengths}")
    assert rec.output_ids == batched.output_ids == free.output_ids[:at + 1]
    assert rec.accept_lengths == batched.accept_lengths == want
    n_out = len(rec.output_ids)
    assert metrics.acceptance(counters).tau == (n_out - 1) / len(want) == 1 + sum(want) / len(want)
    drafted = drafted_within(want, [15] * len(want), n_out)
    assert counters == SpecCounters.from_accept_lengths(want * 2, 15, drafted * 2) and drafted[-1] == 1
    engine.close()


def tiny_prompt(tiny: Path) -> list[int]:
    from transformers import AutoTokenizer

    return list(AutoTokenizer.from_pretrained(str(tiny / "target"))("def fibonacci(n):\n    ")["input_ids"])


def test_engine_records_and_description(random_pair):
    engine = create_engine("jax")
    engine.load(jax_cell(random_pair, "baseline"))
    assert engine.spec_counters() is None
    rec = engine.generate(list(range(3, 20)), SamplingParams(0.0, 8))
    assert 1 <= len(rec.output_ids) <= 8 and 0 < rec.ttft_s <= rec.last_token_s
    assert rec.accept_lengths is None and "compile_s" in rec.extra
    info = engine.describe()
    assert info["method"] == "baseline" and info["weight_bytes_per_step"] > 0
    assert info["platform"] == jax.default_backend()
    assert info["eos_token_ids"]  # from generation_config.json
    engine.close()

    for method in ("eagle3", "ngram"):
        with pytest.raises(ValueError, match="vllm engine"):
            create_engine("jax").load(jax_cell(random_pair, method))
    with pytest.raises(ValueError, match="unknown JAX engine options"):
        create_engine("jax").load(jax_cell(random_pair, "baseline", enforce_eager=True))
