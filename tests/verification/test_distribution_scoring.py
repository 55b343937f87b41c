"""The distribution check's log-likelihoods come from the engine under test: vLLM's `score_many` (prompt logprobs of
prompt + sample through the cell's own engine) agrees with the JAX engine's (its loaded parameters) on the same
samples, so a row's two arms, and vLLM AR against JAX AR, are scored by one function. One vLLM engine and the JAX
scorer on the tiny target, float32; ~50 s on 2 cores (the vLLM engine's start-up)."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams
from benchmarks.core.paths import ROOT
from benchmarks.engines.jax.loader import load_target
from benchmarks.engines.jax.score import logliks
from benchmarks.engines.vllm.vllm_engine import VllmEngine
from verification import distribution

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.vllm, pytest.mark.jax]  # heavy: its own vLLM engine
TARGET = ROOT / "models" / "tiny" / "target"
CELL = Cell(engine="vllm", target=str(TARGET), method="baseline", draft=None, k=0, temperature=1.0,
            max_new_tokens=distribution.LENGTH, seed=0,
            engine_options={"dtype": "float32", "max_model_len": 256, "enforce_eager": True})


def test_vllm_and_jax_score_the_same_samples_alike():
    prompt = np.random.default_rng(0).integers(4, 2000, size=40).tolist()
    vllm = VllmEngine()
    vllm.load(CELL)
    try:
        samples = vllm.sample_many(prompt, SamplingParams(1.0, distribution.LENGTH), list(range(50)))
        samples[3] = []  # an empty continuation scores 0
        by_vllm = vllm.score_many(prompt, samples)
    finally:
        vllm.close()
    by_jax = logliks(*load_target(TARGET, "float32"), prompt, samples)  # what JaxEngine.score_many runs
    assert by_vllm[3] == by_jax[3] == 0.0
    assert np.max(np.abs(np.array(by_vllm) - np.array(by_jax))) < 1e-3
    assert np.std(by_jax) > 1.0  # the samples differ, and so do their scores
