"""The tie rule still catches faults in bf16: greedy DFlash on the JAX engine in bfloat16 (the shipped tiny pair),
with test-only faults injected into decode._verify, is a lossless violation in >= 9 of 10 seeded runs (a run: 3
HumanEval prompts of at most 232 tokens from a seeded subset, 24 tokens each; caught when any prompt's first
divergence is not a numerical tie), while the correct engine has no violation in any of those runs. Divergences are
scored as the run does it: the baseline engine's token_scores through benchmarks.run.tie_pass.score, verdicts by
verification.ties."""
from __future__ import annotations

import jax.numpy as jnp
import pytest

from benchmarks.config.model_refs import load_tokenizer
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams
from benchmarks.core.paths import ROOT
from benchmarks.data.datasets import load_prompts
from benchmarks.engines.jax import batch, decode
from benchmarks.engines.jax.engine import JaxEngine
from benchmarks.run.tie_pass import score
from verification.ties import classify, divergence_key, row_ties

pytestmark = [pytest.mark.slow, pytest.mark.jax]
TINY = ROOT / "models" / "tiny"
K = 7
RUNS = 10
PROMPTS = 3
TOKENS = 24
OPTIONS = {"dtype": "bfloat16", "max_model_len": 256, "draft_queries": "k+1"}

_verify = decode._verify
# The jitted steps that trace decode._verify (through decode.spec_body): dropped before and after each DFlash engine
# here, so that it traces the _verify patched now and no later test reuses a faulty trace. Only these, not every
# compiled program (jax.clear_caches), so that the baseline engine's programs are compiled once for the module. A step
# the engine runs that is missing here would keep its first trace: a fault would go uncaught, and the test fail.
SPEC_STEPS = (decode.spec_steps, decode._sample_batch, batch.spec_batch_steps)


def retrace_spec_steps() -> None:
    for step in SPEC_STEPS:
        step.clear_cache()


def accept_past_mismatch(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """One draft token more than verification allows is accepted: the first rejected draft is committed."""
    n, picked, taps, tcache = _verify(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span)
    n2 = jnp.minimum(n + 1, drafts.shape[0])
    rows = jnp.arange(picked.shape[0])
    return n2, jnp.where(rows < n2, jnp.concatenate([drafts, picked[-1:]]), picked), taps, tcache


def wrong_bonus(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """The bonus token is read from the row after the last accepted one (an off-by-one index)."""
    n, picked, taps, tcache = _verify(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span)
    return n, picked.at[n].set(picked[jnp.minimum(n + 1, drafts.shape[0])]), taps, tcache


def draft_verifies_itself(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span):
    """Verification compares the drafts with the draft's own argmax (the drafts themselves): all K are accepted,
    the bonus is the target's token after them."""
    n, picked, taps, tcache = _verify(tparams, anchor, drafts, s, tcache, key, temperature, tcfg, tap_ids, span)
    return jnp.int32(drafts.shape[0]), jnp.concatenate([drafts, picked[-1:]]), taps, tcache


FAULTS = {"accept_past_mismatch": accept_past_mismatch, "wrong_bonus": wrong_bonus,
          "draft_verifies_itself": draft_verifies_itself}


def cell(method: str) -> Cell:
    return Cell("jax", str(TINY / "target"), method, str(TINY / "dflash") if method == "dflash" else None,
                K if method == "dflash" else 0, 0.0, TOKENS, 0, dict(OPTIONS))


@pytest.fixture(scope="module")
def runs():
    """RUNS seeded prompt subsets, the AR baseline's outputs on each, and the loaded baseline engine."""
    tok = load_tokenizer(str(TINY / "target"))
    base = JaxEngine()
    base.load(cell("baseline"))
    params = SamplingParams(0.0, TOKENS)
    subsets = [load_prompts("humaneval", PROMPTS, seed, tok, max_prompt_tokens=OPTIONS["max_model_len"] - TOKENS)
               for seed in range(RUNS)]
    outs = [{p.sha256: base.generate(p.ids, params).output_ids for p in ps} for ps in subsets]
    yield subsets, outs, base
    base.close()


def violations_per_run(runs) -> list[tuple[int, int, list[float]]]:
    """(ties, violations, the ties' margins in ulps) of each run, for a DFlash engine traced afresh (with
    decode._verify as patched now)."""
    subsets, outs, base = runs
    retrace_spec_steps()  # with whatever decode._verify is now
    spec_cell = cell("dflash")
    spec = JaxEngine()
    spec.load(spec_cell)
    try:
        out = []
        for prompts, base_out in zip(subsets, outs):
            spec_out = {p.sha256: spec.generate(p.ids, SamplingParams(0.0, TOKENS)).output_ids for p in prompts}
            keys = [divergence_key(sha, base_out[sha], spec_out[sha]) for sha in spec_out]
            todo = [k for k in keys if k is not None and None not in k]
            checks = score(base, spec_cell, "humaneval", {p.sha256: p for p in prompts},
                           base_out, todo)
            t = row_ties([(sha, base_out[sha], spec_out[sha]) for sha in spec_out], checks)
            out.append((t.n_ties, t.n_violations, [round(classify(c).margin_ulps, 2) for c in checks
                                                   if classify(c).tie]))
        return out
    finally:
        spec.close()
        retrace_spec_steps()


def test_correct_engine_in_bf16_has_no_violation(runs):
    per_run = violations_per_run(runs)
    print(f"correct: (ties, violations, tie margins in ulps) per run {per_run}")
    assert all(v == 0 for _, v, _ in per_run), per_run


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_injected_fault_is_a_violation(fault, runs, monkeypatch):
    monkeypatch.setattr(decode, "_verify", FAULTS[fault])
    per_run = violations_per_run(runs)
    caught = sum(v > 0 for _, v, _ in per_run)
    print(f"{fault}: caught in {caught}/{RUNS} runs; (ties, violations, tie margins in ulps) per run {per_run}")
    assert caught >= 9, f"{fault} caught in {caught} of {RUNS} runs: {per_run}"
