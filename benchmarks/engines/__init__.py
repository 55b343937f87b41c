"""Engines behind one interface, found by name and imported lazily (a CPU machine never imports TPU code)."""
from __future__ import annotations

import importlib
from typing import Any, Protocol

from benchmarks.core.records import Cell, RequestRecord, SamplingParams, SpecCounters

_REGISTRY = {
    "vllm": "benchmarks.engines.vllm_engine:VllmEngine",
    "jax": "benchmarks.engines.jax.engine:JaxEngine",
}


# Methods an engine may offer beyond the protocol; an engine worker's proxy has one exactly when its hosted engine has
# it (callers test with hasattr). sample_many(prompt_ids, params, seeds) -> list of token lists: many independent
# samples at once (with the attribute `samples_seeded`: whether the seeds were honoured).
# token_scores(prompt_ids, prefix_ids, token_ids, top_n) -> {dtype, top_ids, top_logits, token_logits}: the target's
# logits for the token after prompt + prefix, untimed (the lossless check's tie test, benchmarks/run/ties.py).
# score_many(prompt_ids, continuations) -> list of floats: the target's raw (temperature 1) log-likelihood of each
# continuation after the prompt, from the engine's own loaded target (the distribution check's sequence statistic).
OPTIONAL_METHODS = ("sample_many", "token_scores", "score_many")


class Engine(Protocol):
    """Takes a resolved cell and prompt token ids, returns records. Knows nothing of YAML, files or reports."""

    name: str

    def load(self, cell: Cell) -> None: ...

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord: ...

    def spec_counters(self) -> SpecCounters | None:
        """Cumulative since load (None for the AR baseline); the runner diffs them."""
        ...

    def describe(self) -> dict[str, Any]:
        """Versions and settings for the run manifest."""
        ...

    def close(self) -> None: ...


def create_engine(name: str) -> Engine:
    """An engine by registry name, or by a "module:Class" spec (an engine class with the same protocol, e.g. a test's
    scripted engine hosted in a worker)."""
    if name not in _REGISTRY and ":" not in name:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(sorted(_REGISTRY))}")
    module, cls = _REGISTRY.get(name, name).split(":", 1)
    return getattr(importlib.import_module(module), cls)()
