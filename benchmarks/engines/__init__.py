"""Engines behind one interface, found by name in the catalog (benchmarks/engines/catalog.py) and imported lazily (a
CPU machine never imports TPU code)."""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters, TokenScores
from benchmarks.engines import catalog


class Engine(Protocol):
    """Takes a resolved cell and prompt token ids, returns records. Knows nothing of YAML, files or reports."""

    name: str

    def load(self, cell: Cell) -> None: ...

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord: ...

    def spec_counters(self) -> SpecCounters | None:
        """Cumulative since load (None for the AR baseline); the run diffs them around each dataset."""
        ...

    def describe(self) -> Mapping[str, object]:
        """Versions and settings for the run manifest."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class SampleMany(Protocol):
    """Many independent samples of one prompt at once; the engine's `samples_seeded` (default True) says whether
    the seeds were honoured."""

    def sample_many(self, prompt_ids: list[int], params: SamplingParams, seeds: list[int]) -> list[list[int]]: ...


@runtime_checkable
class ScoreTokens(Protocol):
    """The target's logits for the token after prompt + prefix, untimed (the lossless check's tie test,
    benchmarks/run/tie_pass.py)."""

    def token_scores(self, prompt_ids: list[int], prefix_ids: list[int], token_ids: list[int],
                     top_n: int) -> TokenScores: ...


@runtime_checkable
class ScoreMany(Protocol):
    """The target's raw (temperature 1) log-likelihood of each continuation after the prompt, from the engine's own
    loaded target (the distribution check's sequence statistic)."""

    def score_many(self, prompt_ids: list[int], continuations: list[list[int]]) -> list[float]: ...


@runtime_checkable
class GenerateBatch(Protocol):
    """The prompts decoded together as one static batch: one RequestRecord per prompt, in order, each timed on the
    batch's clock (its `extra` says how: docs/engine-findings.md)."""

    def generate_batch(self, prompts: list[list[int]], params: SamplingParams) -> list[RequestRecord]: ...


# The protocol of each optional capability a catalog row may declare (catalog.CAPABILITIES).
CAPABILITIES: dict[str, type] = {"sample_many": SampleMany, "token_scores": ScoreTokens, "score_many": ScoreMany,
                                 "generate_batch": GenerateBatch}
# An engine worker's proxy has one of these methods exactly when its hosted engine has it.
OPTIONAL_METHODS = catalog.CAPABILITIES


def offers(engine: object, name: str, capability: str) -> bool:
    """Whether `engine`, loaded for a cell of catalog engine `name` (or its worker proxy, or a test's stand-in),
    offers an optional capability: its row declares it and the object implements the capability's protocol."""
    return capability in catalog.engine(name).capabilities and isinstance(engine, CAPABILITIES[capability])


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
