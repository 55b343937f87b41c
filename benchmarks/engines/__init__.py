"""Engines behind one interface, found by name in the catalog (benchmarks/core/catalog.py) and imported lazily (a
CPU machine never imports TPU code)."""
from __future__ import annotations

import importlib
from typing import Any, Protocol

from benchmarks.core import catalog
from benchmarks.core.records import Cell, RequestRecord, SamplingParams, SpecCounters

# Methods an engine may offer beyond the protocol; an engine worker's proxy has one exactly when its hosted engine has
# it (callers test with hasattr). sample_many(prompt_ids, params, seeds) -> list of token lists: many independent
# samples at once (with the attribute `samples_seeded`: whether the seeds were honoured).
# token_scores(prompt_ids, prefix_ids, token_ids, top_n) -> {dtype, top_ids, top_logits, token_logits}: the target's
# logits for the token after prompt + prefix, untimed (the lossless check's tie test, benchmarks/run/tie_pass.py).
# score_many(prompt_ids, continuations) -> list of floats: the target's raw (temperature 1) log-likelihood of each
# continuation after the prompt, from the engine's own loaded target (the distribution check's sequence statistic).
OPTIONAL_METHODS = ("sample_many", "token_scores", "score_many")


class Engine(Protocol):
    """Takes a resolved cell and prompt token ids, returns records. Knows nothing of YAML, files or reports."""

    name: str

    def load(self, cell: Cell) -> None: ...

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord: ...

    def spec_counters(self) -> SpecCounters | None:
        """Cumulative since load (None for the AR baseline); the run diffs them around each dataset."""
        ...

    def describe(self) -> dict[str, Any]:
        """Versions and settings for the run manifest."""
        ...

    def close(self) -> None: ...


def implementation(name_or_spec: str) -> str:
    """The "module:Class" of an engine: its catalog row's, or the spec itself when it is one."""
    return name_or_spec if ":" in name_or_spec else catalog.engine(name_or_spec).implementation


def engine_class(name_or_spec: str) -> Any:
    """The class of an engine named in the catalog, or of a "module:Class" spec (a module starting with "." is
    relative to this package)."""
    module, cls = implementation(name_or_spec).split(":", 1)
    return getattr(importlib.import_module(module, package=__name__), cls)


def create_engine(name_or_spec: str) -> Engine:
    """An engine by catalog name or "module:Class" spec (a worker receives the spec, so that a test's scripted
    engine hosted in a child process is found there too)."""
    return engine_class(name_or_spec)()
