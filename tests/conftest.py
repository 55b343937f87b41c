"""Shared fixtures: tiny checkpoints built once per test session (no network)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


@pytest.fixture(scope="session")
def random_pair(tmp_path_factory) -> dict[str, Path]:
    """Random-weight Qwen3 target + DFlash + EAGLE-3 drafts: τ ≈ 1, greedy output must still equal AR."""
    from preparation.tiny_models import build_pair

    return build_pair(tmp_path_factory.mktemp("random_pair"), seed=0)


@pytest.fixture(scope="session")
def oracle_pair(tmp_path_factory) -> dict[str, Path]:
    """Target and DFlash draft that always emit the same token: every draft is accepted, τ == K+1."""
    from preparation.tiny_models import build_pair

    return build_pair(tmp_path_factory.mktemp("oracle_pair"), seed=0, oracle=True)
