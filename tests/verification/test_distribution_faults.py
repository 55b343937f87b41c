"""The distribution check can fail: sampler faults injected into the JAX engine (test-only, monkeypatched) are each
caught in >= 9 of 10 seeded repetitions at the shipped sample size, and the correct sampler passes AR vs AR and
AR vs DFlash at the nominal false-positive rate. Trained tiny pair, short continuations, one prompt.

The faulty samplers replace decode._verify, which both the per-request loop and the batched sampler call; a test
first shows that the batched sampler reproduces the per-request loop's tokens seed for seed."""
from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from benchmarks.core.paths import ROOT  # noqa: E402
from benchmarks.engines.jax import decode  # noqa: E402
from benchmarks.engines.jax import model as M  # noqa: E402
from benchmarks.engines.jax.decode import Decoder  # noqa: E402
from benchmarks.engines.jax.loader import load_draft, load_target  # noqa: E402
from benchmarks.engines.jax.score import Scorer  # noqa: E402
from verification import distribution  # noqa: E402

pytestmark = pytest.mark.slow
TINY = ROOT / "models" / "tiny"
T = 0.8  # where every fault shows (the temperature fault needs T != 1)
K = 3
REPS = 10


_verify = decode._verify


def accept_all(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """Drafts committed without verification: every step keeps all K drafts plus a sampled bonus token."""
    _, picked, taps, tcache = _verify(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span)
    return jnp.int32(drafts.shape[0]), jnp.concatenate([drafts, picked[-1:]]), taps, tcache


def temperature_twice(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """Verification divides the logits by the temperature twice (T² where AR uses T)."""
    return _verify(tparams, anchor, drafts, s, tcache, key, temperature * temperature, tcfg, tap_ids, span)


def residual_unnormalised(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """Explicit rejection sampling (accept d with probability p(d)), whose residual max(p - q, 0) is inverted
    without renormalising: a uniform beyond the residual's mass falls off the end of the vocabulary."""
    tokens = jnp.concatenate([anchor[None], drafts])
    logits, taps, tcache = M.forward(tparams, tokens, s, tcache, cfg=tcfg, tap_ids=tap_ids, span=span)
    probs = jax.nn.softmax(logits / temperature, axis=-1)
    keys = jax.vmap(lambda p: jax.random.fold_in(key, p))(s + jnp.arange(tokens.shape[0]))
    u = jax.vmap(jax.random.uniform)(keys)
    u2 = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, 1)))(keys)
    k = drafts.shape[0]
    accept = u[:k] < probs[jnp.arange(k), drafts]
    residual = probs[:k].at[jnp.arange(k), drafts].set(0.0)
    fallen = jnp.sum(jnp.cumsum(residual, axis=-1) < u2[:k, None], axis=-1)
    rejected = jnp.minimum(fallen, probs.shape[-1] - 1).astype(jnp.int32)
    bonus = jax.random.categorical(keys[k], logits[k] / temperature).astype(jnp.int32)
    picked = jnp.concatenate([jnp.where(accept, drafts, rejected), bonus[None]])
    return jnp.sum(jnp.cumprod(accept)), picked, taps, tcache


def draw_reuse(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """Every position of every verify step draws with the same key (no fold-in of the position)."""
    tokens = jnp.concatenate([anchor[None], drafts])
    logits, taps, tcache = M.forward(tparams, tokens, s, tcache, cfg=tcfg, tap_ids=tap_ids, span=span)
    picked = decode.pick(logits, jnp.zeros(tokens.shape[0], jnp.int32), key, temperature)
    return jnp.sum(jnp.cumprod(drafts == picked[:-1])), picked, taps, tcache


FAULTS = {"accept_all": accept_all, "temperature_twice": temperature_twice,
          "residual_unnormalised": residual_unnormalised, "draw_reuse": draw_reuse}


@pytest.fixture(scope="module")
def setup():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY / "target")
    text = tok.apply_chat_template([{"role": "user", "content": "Write a Python function that returns the sum of "
                                                                "a list."}],
                                   add_generation_prompt=True, tokenize=False, enable_thinking=False)
    prompts = [tok(text)["input_ids"]]  # one prompt: the shipped per-prompt sample size, a fifth of the tests
    tcfg, tp = load_target(TINY / "target", "float32")
    dcfg, dp = load_draft(TINY / "dflash", "float32")
    ar = Decoder(tcfg, tp, 64, jnp.float32)
    spec = Decoder(tcfg, tp, 64, jnp.float32, dcfg, dp, K, num_queries=K + 1)
    return prompts, ar, spec, Scorer(TINY / "target")


def arms(decoder: Decoder, prompts: list[list[int]], scorer: Scorer, offset: int) -> list[list[dict]]:
    """REPS independent sample sets (per prompt dicts, as the runner stores them), drawn in one batch per prompt."""
    n = distribution.SAMPLES
    reps: list[list[dict]] = [[] for _ in range(REPS)]
    for i, prompt in enumerate(prompts):
        seeds = list(range(offset + 100_000 * i, offset + 100_000 * i + REPS * n))
        samples = decoder.sample_batch(prompt, distribution.POSITIONS, T, seeds)
        logliks = scorer.logliks(prompt, samples, T)
        for r in range(REPS):
            reps[r].append({"prompt_sha256": str(i), "samples": samples[r * n:(r + 1) * n],
                            "loglik": logliks[r * n:(r + 1) * n]})
    return reps


def rejections(base: list[list[dict]], meth: list[list[dict]]) -> int:
    return sum(not distribution.check(b, m).passed for b, m in zip(base, meth))


def test_batched_sampler_equals_the_per_request_loop(setup):
    prompts, ar, spec, _ = setup
    for decoder in (ar, spec):
        want = [decoder.generate(prompts[0], distribution.POSITIONS, T, seed).tokens for seed in range(6)]
        assert decoder.sample_batch(prompts[0], distribution.POSITIONS, T, list(range(6))) == want


@pytest.fixture(scope="module")
def baseline(setup):
    prompts, ar, _, scorer = setup
    return arms(ar, prompts, scorer, 0)


def test_correct_sampler_passes_ar_vs_ar_and_ar_vs_dflash(setup, baseline):
    prompts, ar, spec, scorer = setup
    jax.clear_caches()
    assert rejections(baseline, arms(ar, prompts, scorer, 1_000_000)) <= 1
    assert rejections(baseline, arms(spec, prompts, scorer, 2_000_000)) <= 1


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_injected_fault_is_caught(fault, setup, baseline, monkeypatch):
    prompts, _, spec, scorer = setup
    monkeypatch.setattr(decode, "_verify", FAULTS[fault])
    jax.clear_caches()  # retrace the jitted steps with the faulty verification
    try:
        caught = rejections(baseline, arms(spec, prompts, scorer, 2_000_000))
    finally:
        jax.clear_caches()
    assert caught >= 9, f"{fault} caught in {caught} of {REPS} repetitions"
