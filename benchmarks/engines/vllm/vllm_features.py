"""What the installed vLLM release offers the adapter: optional features (what is lost without each), the engine-core
timestamps every timing needs, and the engine options a cell may set. A release without per-request spec-decode
metrics (0.27) gives accept_lengths None; the engine-wide counters still give τ."""
from __future__ import annotations

import dataclasses
import functools
import importlib

from benchmarks.engines.vllm.vllm_options import NGRAM_OPTIONS
from benchmarks.engines.vllm.vllm_options import VLLM_OWNED_ARGS as OWNED_ARGS

# Optional vLLM features the adapter uses where a release has them, and what is lost without one.
FEATURE_LOSS = {
    "per_request_spec_decode_metrics": "per-request spec-decode metrics (the engine argument and "
                                       "CompletionOutput.spec_decode_metrics): accept_lengths and draft_lengths "
                                       "are None; tau and per-position rates still come from the engine-wide "
                                       "counters, which count a last step in full, past max_new_tokens or EOS",
    "frontend_ttft": "RequestStateStats.first_token_latency: extra['frontend_ttft_s'] is None",
}


# Engine-core timestamps every timing depends on: a release without them cannot be measured honestly.
REQUIRED_STATS = ("queued_ts", "first_token_ts", "last_token_ts", "num_generation_tokens")


def _fields(module: str, name: str) -> set[str]:
    """The dataclass fields of vllm's `module.name`, or none when this release does not have it."""

    try:
        return {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), name))}
    except (ImportError, AttributeError, TypeError):
        return set()


def features() -> dict[str, bool]:
    """Which optional features (FEATURE_LOSS) the installed vLLM has; raises if a required timestamp is missing."""
    import vllm  # lazy: vllm

    stats = _fields("vllm.v1.metrics.stats", "RequestStateStats")
    missing = [name for name in REQUIRED_STATS if name not in stats]
    if missing:
        raise RuntimeError(f"vllm engine: vLLM {vllm.__version__} has no RequestStateStats.{', .'.join(missing)}, "
                           "which every timing uses; install vLLM 0.27-0.32 (requirements-*.txt)")
    return {
        "per_request_spec_decode_metrics": "per_request_spec_decode_metrics" in _fields("vllm.engine.arg_utils",
                                                                                        "EngineArgs")
        and "spec_decode_metrics" in _fields("vllm.outputs", "CompletionOutput"),
        "frontend_ttft": "first_token_latency" in stats,
    }


@functools.cache
def option_names() -> frozenset[str] | None:
    """The engine options a cell may set: vllm's EngineArgs fields but those the adapter owns, plus the n-gram
    options; None when vllm does not import here (the options cannot be checked before a run)."""
    try:
        from vllm.engine.arg_utils import EngineArgs  # lazy: optional: vllm
    except Exception:  # noqa: BLE001 - a vllm that does not import here cannot run here either; load() says why
        return None
    return frozenset({f.name for f in dataclasses.fields(EngineArgs)} - OWNED_ARGS) | frozenset(NGRAM_OPTIONS)
