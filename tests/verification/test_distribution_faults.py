"""The distribution check can fail: sampler faults injected into the JAX engine (test-only, monkeypatched) are each
caught in >= 9 of 10 seeded repetitions at the shipped configuration, and the correct sampler passes.

Shipped: tiny-sampled's temperatures (0.6 and 1.0), `PROMPTS` prompts, `SAMPLES` samples of `LENGTH` tokens per arm,
each arm sampled and scored through JaxEngine (`sample_many`, `score_many`), and Holm over the family a tiny-sampled
run corrects over (its checked cells times their tests: the strictest level any of its rows meets). Two short chat
prompts stand in for tiny-sampled's HumanEval ones (180 and 349 tokens), and K = 1 for its K = 15: the batched sampler
keeps a cache per sample, so long prompts cost 2-3x more, and a step verifies K + 1 tokens to commit about 1.4. The
faults live in the verify rule, the same code at any K; at K = 1 about half the steps end in a rejection and the rest
accept the draft and draw a bonus token, so both paths run in every sample (12 tokens: 8-10 verify steps).

The faulty samplers replace decode._verify, which both the per-request loop and the batched sampler call; a test
first shows that the batched sampler reproduces the per-request loop's tokens seed for seed. Costs on 2 cores: ~5 min
(the false-positive rate itself is measured on a synthetic sampler in test_distribution.py)."""
from __future__ import annotations

import jax  # required on every platform: a missing one fails this module, never skips it
import jax.numpy as jnp
import pytest

from benchmarks.config.matrix_expand import expand
from benchmarks.config.matrix_parse import load_matrix
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams
from benchmarks.core.paths import ROOT
from benchmarks.engines.jax import decode
from benchmarks.engines.jax import model as M
from benchmarks.engines.jax.engine import JaxEngine
from verification import distribution

pytestmark = [pytest.mark.slow, pytest.mark.jax]
TINY = ROOT / "models" / "tiny"
MATRIX = load_matrix(ROOT / "configs" / "matrices" / "tiny-sampled.yaml")
K = 1
REPS = 10
CORRECT_REPS = 5  # a check of the engine's own sampler and scoring; the calibration is test_distribution.py's
QUESTIONS = ("Write a Python function that returns the sum of a list.",
             "Write a Python function that reverses a string.")


def shipped() -> tuple[tuple[float, ...], int]:
    """tiny-sampled's temperatures above 0, and the number of tests its run corrects over: every speculative cell
    at T > 0 with a baseline of its engine and temperature, per dataset, PROMPTS x (POSITIONS + 2) tests each."""
    cells = expand(MATRIX)
    bases = {(c.engine, c.temperature) for c in cells if c.method == "baseline"}
    checked = [c for c in cells if c.method != "baseline" and c.temperature > 0 and (c.engine, c.temperature) in bases]
    family = len(checked) * len(MATRIX.datasets) * distribution.PROMPTS * (distribution.POSITIONS + 2)
    return tuple(sorted({c.temperature for c in checked})), family


TEMPERATURES, FAMILY = shipped()
_verify = decode._verify


def accept_all(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """Drafts committed without verification: every step keeps all K drafts plus a sampled bonus token."""
    _, picked, taps, tcache = _verify(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span)
    return jnp.int32(drafts.shape[0]), jnp.concatenate([drafts, picked[-1:]]), taps, tcache


def temperature_twice(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """Verification divides the logits by the temperature twice (T² where AR uses T): no fault at T = 1."""
    return _verify(tparams, anchor, drafts, s, tcache, key, temperature * temperature, tcfg, tap_ids, span)


def residual_unnormalised(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """Explicit rejection sampling (accept d with probability p(d)), whose residual max(p - q, 0) is inverted
    without renormalising: a uniform beyond the residual's mass falls off the end of the vocabulary. Acts only
    after a rejection."""
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


def stale_bonus(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """When every draft is accepted, the bonus token is drawn from the last draft's row (the distribution of the
    token just accepted) instead of the row after it. Acts only after a full acceptance."""
    tokens = jnp.concatenate([anchor[None], drafts])
    positions = s + jnp.arange(tokens.shape[0], dtype=jnp.int32)
    logits, taps, tcache = M.forward(tparams, tokens, s, tcache, cfg=tcfg, tap_ids=tap_ids, span=span)
    picked = decode.pick(logits, positions, key, temperature)
    k = drafts.shape[0]
    n = jnp.sum(jnp.cumprod(drafts == picked[:-1]))
    stale = decode.pick(logits[k - 1:k], positions[k:], key, temperature)[0]
    return n, picked.at[k].set(jnp.where(n == k, stale, picked[k])), taps, tcache


def draw_reuse(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """Every position of every verify step draws with the same key (no fold-in of the position)."""
    tokens = jnp.concatenate([anchor[None], drafts])
    logits, taps, tcache = M.forward(tparams, tokens, s, tcache, cfg=tcfg, tap_ids=tap_ids, span=span)
    picked = decode.pick(logits, jnp.zeros(tokens.shape[0], jnp.int32), key, temperature)
    return jnp.sum(jnp.cumprod(drafts == picked[:-1])), picked, taps, tcache


FAULTS = {"accept_all": accept_all, "temperature_twice": temperature_twice,
          "residual_unnormalised": residual_unnormalised, "stale_bonus": stale_bonus, "draw_reuse": draw_reuse}
# temperature_twice is no fault at T = 1
CASES = {f: [t for t in TEMPERATURES if not (f == "temperature_twice" and t == 1.0)] for f in FAULTS}


def load(method: str) -> JaxEngine:
    engine = JaxEngine()
    engine.load(Cell(engine="jax", target=str(TINY / "target"), method=method,
                     draft=str(TINY / "dflash") if method == "dflash" else None, k=K if method == "dflash" else 0,
                     temperature=TEMPERATURES[0], max_new_tokens=distribution.LENGTH, seed=0,
                     engine_options={"dtype": "float32", "max_model_len": 256, "draft_queries": "k+1"}))
    return engine


@pytest.fixture(scope="module")
def setup():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY / "target")
    prompts = [tok(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                           tokenize=False, enable_thinking=False))["input_ids"] for q in QUESTIONS]
    assert len(prompts) == distribution.PROMPTS
    return prompts, load("baseline"), load("dflash")


def arms(engine: JaxEngine, prompts: list[list[int]], temperature: float, offset: int,
         count: int = REPS) -> list[list[distribution.Samples]]:
    """`count` independent sample sets (per-prompt dicts, as the runner stores them), drawn and scored by the engine
    in one batch per prompt; seeds from `offset` on, disjoint per prompt and repetition."""
    n = distribution.SAMPLES
    reps: list[list[distribution.Samples]] = [[] for _ in range(count)]
    for i, prompt in enumerate(prompts):
        seeds = list(range(offset + 100_000 * i, offset + 100_000 * i + count * n))
        samples = engine.sample_many(prompt, SamplingParams(temperature, distribution.LENGTH), seeds)
        logliks = engine.score_many(prompt, samples)
        for r in range(count):
            reps[r].append(distribution.Samples(str(i), samples[r * n:(r + 1) * n], logliks[r * n:(r + 1) * n],
                                                distribution.SCORING, distribution.LENGTH))
    return reps


def rejections(base: list[list[distribution.Samples]], meth: list[list[distribution.Samples]]) -> int:
    return sum(not distribution.check(b, m, family=FAMILY).passed for b, m in zip(base, meth))


@pytest.mark.heavy  # the module's engines (~50 s to set up): make test ALL=1 and CI, as the faults below
def test_batched_sampler_equals_the_per_request_loop(setup):
    prompts, ar, spec = setup
    t = TEMPERATURES[0]  # a traced scalar: every temperature runs the same compiled steps
    for engine in (ar, spec):
        want = [engine.generate(prompts[1], SamplingParams(t, distribution.LENGTH, seed)).output_ids
                for seed in range(6)]
        assert engine.sample_many(prompts[1], SamplingParams(t, distribution.LENGTH), list(range(6))) == want


@pytest.fixture(scope="module")
def baseline(setup):
    prompts, ar, _ = setup
    return {t: arms(ar, prompts, t, 1_000_000) for t in TEMPERATURES}


@pytest.mark.heavy
def test_correct_sampler_passes_against_ar(setup, baseline):
    prompts, _, spec = setup
    temperature = TEMPERATURES[0]  # a traced scalar: every temperature runs the same compiled steps
    decode._sample_batch.clear_cache()  # traced with decode._verify as it is now
    found = rejections(baseline[temperature], arms(spec, prompts, temperature, 2_000_000, CORRECT_REPS))
    print(f"\ncorrect dflash T={temperature}: rejected in {found} of {CORRECT_REPS} (family {FAMILY})")
    assert found == 0


@pytest.mark.heavy
@pytest.mark.parametrize("fault", CASES)
def test_injected_fault_is_caught(fault, setup, baseline, monkeypatch):
    """At each shipped temperature (one trace of the faulty sampler: the temperature is a traced scalar)."""
    prompts, _, spec = setup
    monkeypatch.setattr(decode, "_verify", FAULTS[fault])
    decode._sample_batch.clear_cache()  # retrace the batched sampler (sample_many's) with the faulty verification
    try:
        caught = {t: rejections(baseline[t], arms(spec, prompts, t, 2_000_000)) for t in CASES[fault]}
    finally:
        decode._sample_batch.clear_cache()
    print(f"\n{fault}: caught in " + ", ".join(f"{n} of {REPS} at T={t}" for t, n in caught.items())
          + f" (family {FAMILY})")
    assert all(n >= 9 for n in caught.values()), f"{fault}: caught {caught} (of {REPS} repetitions per T)"
