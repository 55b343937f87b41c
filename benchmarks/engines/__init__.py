"""Engines behind one interface, found by name and imported lazily (a CPU machine never imports TPU code)."""
from __future__ import annotations

import importlib
from typing import Any, Protocol

from benchmarks.records import Cell, RequestRecord, SamplingParams, SpecCounters

_REGISTRY = {
    "vllm": "benchmarks.engines.vllm_engine:VllmEngine",
    "jax": "benchmarks.engines.jax.engine:JaxEngine",
}
# Each engine module's own list of the engine options it accepts (a function, so that listing them imports only
# what that engine needs: vLLM's come from vllm's EngineArgs).
_OPTION_NAMES = {
    "vllm": "benchmarks.engines.vllm_engine:option_names",
    "jax": "benchmarks.engines.jax.engine:option_names",
    "vllm-serve": "benchmarks.engines.vllm_engine:option_names",  # the server takes vllm's engine arguments
}


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
    if name not in _REGISTRY:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(sorted(_REGISTRY))}")
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)()


def option_names(name: str) -> frozenset[str] | None:
    """The engine options engine `name` accepts; None when they cannot be known here (its package does not import)."""
    module, fn = _OPTION_NAMES[name].split(":")
    return getattr(importlib.import_module(module), fn)()
