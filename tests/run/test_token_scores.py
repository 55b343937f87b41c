"""token_scores, the optional engine method behind the tie pass, on both engines in bf16 (the shipped tiny target):
the values are logits (not log probabilities) at the right position, within a few bf16 ulps of the float32 logits of
the JAX engine teacher-forced the same way; scoring leaves the next timed request as it was; and on vLLM it is
refused under a logprobs mode whose prompt logprobs are not logits."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.config.model_refs import load_tokenizer
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams
from benchmarks.core.paths import ROOT
from benchmarks.engines.jax.engine import JaxEngine
from benchmarks.engines.vllm.vllm_engine import VllmEngine
from verification.ties import ulp

pytestmark = pytest.mark.slow
TINY = ROOT / "models" / "tiny"
TOKENS = 24
AT = (0, 7, 19)  # positions of the output teacher-forced to


def cell(engine: str, dtype: str, **options) -> Cell:
    extra = {"enforce_eager": True} if engine == "vllm" else {}
    return Cell(engine, str(TINY / "target"), "baseline", None, 0, 0.0, TOKENS, 0,
                {"dtype": dtype, "max_model_len": 512, **extra, **options})


@pytest.fixture(scope="module")
def prompt() -> list[int]:
    tok = load_tokenizer(str(TINY / "target"))
    text = tok.apply_chat_template([{"role": "user", "content": "Write a Python function that reverses a string."}],
                                   add_generation_prompt=True, tokenize=False, enable_thinking=False)
    return tok(text)["input_ids"]


@pytest.fixture(scope="module")
def float32_logits(prompt):
    """The JAX engine in float32: its AR output and, at each position of AT, its logits of every token scored."""
    engine = JaxEngine()
    engine.load(cell("jax", "float32"))
    try:
        out = engine.generate(prompt, SamplingParams(0.0, TOKENS)).output_ids
        return out, {d: engine.token_scores(prompt, out[:d], list(range(2048)), 4) for d in AT}  # every token
    finally:
        engine.close()


def check_scores(engine, prompt, out32, reference):
    """At each position of AT, teacher-forcing the float32 output's prefix: logits (> 0 at the top: log probabilities
    are <= 0) within a few bf16 ulps of the float32 ones, for the top tokens and a token far outside them (the
    float32 engine's least likely), the top token the float32 one unless those two are close."""
    for d in AT:
        ref = reference[d].token_logits
        other = min(range(len(ref)), key=lambda t: ref[t])
        scores = engine.token_scores(prompt, out32[:d], [out32[d], other], 8)
        assert scores.dtype == "bfloat16" and len(scores.top_ids) == len(scores.top_logits) == 8
        assert scores.top_logits == sorted(scores.top_logits, reverse=True) and scores.top_logits[0] > 0
        for t, v in [*zip(scores.top_ids, scores.top_logits), *zip([out32[d], other], scores.token_logits)]:
            assert abs(v - ref[t]) <= 4 * ulp(max(abs(v), 1.0), "bfloat16"), (d, t, v, ref[t])
        best, second = sorted(ref, reverse=True)[:2]
        if best - second > 8 * ulp(best, "bfloat16"):
            assert scores.top_ids[0] == out32[d]


def check_engine(engine, prompt, out32, reference):
    """The prefill's own argmax scored first, then check_scores; scoring used the live cache as scratch, so the
    next timed request is unchanged."""
    out = engine.generate(prompt, SamplingParams(0.0, TOKENS)).output_ids
    assert engine.token_scores(prompt, [], [out[0]], 8).top_ids[0] == out[0]
    check_scores(engine, prompt, out32, reference)
    assert engine.generate(prompt, SamplingParams(0.0, TOKENS)).output_ids == out


@pytest.mark.jax
def test_jax_token_scores_are_the_targets_logits(prompt, float32_logits):
    engine = JaxEngine()
    engine.load(cell("jax", "bfloat16"))
    try:
        check_engine(engine, prompt, *float32_logits)
    finally:
        engine.close()


@pytest.mark.vllm
@pytest.mark.jax
@pytest.mark.heavy
def test_vllm_token_scores_are_the_targets_logits_and_leave_timed_tokens_alone(prompt, float32_logits):
    engine = VllmEngine()
    engine.load(cell("vllm", "bfloat16"))
    try:
        assert engine.describe()["engine_args"]["logprobs_mode"] == "raw_logits"  # a greedy baseline's default
        check_engine(engine, prompt, *float32_logits)
    finally:
        engine.close()


@pytest.mark.vllm
def test_vllm_token_scores_refuse_an_engine_whose_prompt_logprobs_are_not_logits():
    """Under vLLM's default logprobs_mode (raw_logprobs) prompt logprobs are log probabilities: refused, naming the
    mode. (That the raw-logits mode leaves timed greedy tokens alone across engines: test_vllm_engine's
    test_greedy_output_equals_baseline, whose baseline loads with it and whose speculative cells do not.)"""
    engine = VllmEngine()
    config = SimpleNamespace(logprobs_mode="raw_logprobs")
    engine._llm = SimpleNamespace(llm_engine=SimpleNamespace(model_config=config))
    with pytest.raises(RuntimeError, match="logprobs_mode raw_logits"):
        engine.token_scores([5, 6], [7], [8], 8)
