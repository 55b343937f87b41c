"""Draft trees at T > 0: the harness's distribution check (verification/distribution.py) passes ddtree against AR,
sampled and scored through JaxEngine as the chain's check is (tests/verification/test_distribution_faults.py), and
rejects a planted fault: a tree step that takes the draft's token at the root instead of the target's sample. The
batched sampler reproduces the per-request loop's tokens seed for seed, so the check reads what `generate` runs."""
from __future__ import annotations

import pytest

from benchmarks.core.cells import Cell, TreeBudget
from benchmarks.core.engine_io import SamplingParams
from benchmarks.core.paths import ROOT
from benchmarks.engines.jax import decode
from benchmarks.engines.jax import tree as T
from benchmarks.engines.jax.engine import JaxEngine
from verification import distribution

pytestmark = [pytest.mark.heavy, pytest.mark.jax]
TINY = ROOT / "models" / "tiny"
TEMPERATURE = 0.6  # tiny-sampled's lower temperature: a traced scalar, every temperature runs the same steps
BUDGET = 16
REPS = 1  # one sample set per arm: the planted fault moves the root token of every step
QUESTIONS = ("Write a Python function that returns the sum of a list.",
             "Write a Python function that reverses a string.")
_tree_verify = decode._tree_verify


def draft_at_root(tparams, anchor, tree, s, tcache, key, temperature, tcfg, tap_ids, span, depth_limit):
    """The planted fault: the root's token is the draft's most likely first token (the first node), not the
    target's sample, so every step accepts it."""
    picked, _, taps, tcache = _tree_verify(tparams, anchor, tree, s, tcache, key, temperature, tcfg, tap_ids, span,
                                           depth_limit)
    picked = picked.at[0].set(tree.tokens[0])
    return picked, T.accept(tree, picked, depth_limit), taps, tcache


def load(method: str) -> JaxEngine:
    engine = JaxEngine()
    tree = method == "ddtree"
    engine.load(Cell(engine="jax", target=str(TINY / "target"), method=method,
                     draft=str(TINY / "dflash") if tree else None, k=0, temperature=TEMPERATURE,
                     max_new_tokens=distribution.LENGTH, seed=0, shape=TreeBudget(BUDGET) if tree else None,
                     engine_options={"dtype": "float32", "max_model_len": 256}))
    return engine


@pytest.fixture(scope="module")
def setup():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY / "target")
    prompts = [tok(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                           tokenize=False, enable_thinking=False))["input_ids"] for q in QUESTIONS]
    assert len(prompts) == distribution.PROMPTS
    return prompts, load("baseline"), load("ddtree")


def arms(engine: JaxEngine, prompts: list[list[int]], offset: int) -> list[list[distribution.Samples]]:
    """REPS independent sample sets (per-prompt), drawn and scored by the engine, seeds disjoint from `offset` on."""
    n = distribution.SAMPLES
    reps: list[list[distribution.Samples]] = [[] for _ in range(REPS)]
    for i, prompt in enumerate(prompts):
        seeds = list(range(offset + 100_000 * i, offset + 100_000 * i + REPS * n))
        samples = engine.sample_many(prompt, SamplingParams(TEMPERATURE, distribution.LENGTH), seeds)
        logliks = engine.score_many(prompt, samples)
        for r in range(REPS):
            reps[r].append(distribution.Samples(str(i), samples[r * n:(r + 1) * n], logliks[r * n:(r + 1) * n],
                                                distribution.SCORING, distribution.LENGTH))
    return reps


def passed(base: list[distribution.Samples], method: list[distribution.Samples]) -> bool:
    result = distribution.check(base, method)
    assert result is not None  # both arms hold samples of both prompts
    return result.passed


@pytest.fixture(scope="module")
def baseline(setup):
    prompts, ar, _ = setup
    return arms(ar, prompts, 1_000_000)


def test_tree_sampler_equals_the_per_request_loop_and_passes_the_check(setup, baseline):
    prompts, _, tree = setup
    want = [tree.generate(prompts[1], SamplingParams(TEMPERATURE, distribution.LENGTH, seed)).output_ids
            for seed in range(4)]
    decode._sample_batch.clear_cache()  # traced with decode._tree_verify as it is now
    assert tree.sample_many(prompts[1], SamplingParams(TEMPERATURE, distribution.LENGTH), list(range(4))) == want
    results = [passed(b, m) for b, m in zip(baseline, arms(tree, prompts, 2_000_000))]
    print(f"\nddtree b{BUDGET} T={TEMPERATURE}: passed {sum(results)} of {REPS}")
    assert all(results)


def test_planted_fault_is_caught(setup, baseline, monkeypatch):
    prompts, _, tree = setup
    monkeypatch.setattr(decode, "_tree_verify", draft_at_root)
    decode._sample_batch.clear_cache()  # retrace the batched sampler with the faulty step
    try:
        results = [passed(b, m) for b, m in zip(baseline, arms(tree, prompts, 3_000_000))]
    finally:
        decode._sample_batch.clear_cache()
    print(f"\ndraft token at the root: caught in {results.count(False)} of {REPS}")
    assert not any(results)
