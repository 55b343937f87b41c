"""The side of an engine worker that holds the engine: a local child process or a Ray actor runs one `EngineHost`.

Its methods mirror the `Engine` protocol. An exception raised by the engine comes back as `WorkerError`, which
carries the worker's own traceback, so a failed unit's cause is the engine's, not the proxy's.
"""
from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any, TypedDict

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters
from benchmarks.engines import OPTIONAL_METHODS, create_engine


class WorkerError(RuntimeError):
    """An engine call that failed inside a worker (raised, crashed or timed out); `remote_traceback` is the cause."""

    def __init__(self, message: str, remote_traceback: str = ""):
        super().__init__(message)
        self.remote_traceback = remote_traceback

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes and Ray
        return (WorkerError, (str(self), self.remote_traceback))


class Capabilities(TypedDict):
    """What a worker's proxy mirrors of its engine (`EngineHost.capabilities`)."""

    name: str
    optional: list[str]
    samples_seeded: bool


class EngineHost:
    """One engine, driven call by call from another process. `engine_name` is a registry name (`vllm`, `jax`) or a
    `"module:Class"` spec of an engine class with the same protocol (the tests host scripted engines this way)."""

    def __init__(self, engine_name: str):
        self.engine = create_engine(engine_name)

    def capabilities(self) -> Capabilities:
        """What a proxy must mirror: the engine's name, which OPTIONAL_METHODS it has, and `samples_seeded`."""
        return {"name": getattr(self.engine, "name", type(self.engine).__name__),
                "optional": [m for m in OPTIONAL_METHODS if hasattr(self.engine, m)],
                "samples_seeded": getattr(self.engine, "samples_seeded", True)}

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            raise WorkerError(f"{type(exc).__name__}: {exc}", traceback.format_exc()) from None

    def load(self, cell: Cell) -> None:
        self._call(self.engine.load, cell)

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord:
        return self._call(self.engine.generate, prompt_ids, params)

    def optional(self, method: str, *args: Any) -> Any:
        """One of the engine's OPTIONAL_METHODS."""
        if method not in OPTIONAL_METHODS:
            raise WorkerError(f"{method!r} is not an optional engine method ({', '.join(OPTIONAL_METHODS)})")
        return self._call(getattr(self.engine, method), *args)

    def spec_counters(self) -> SpecCounters | None:
        return self._call(self.engine.spec_counters)

    def describe(self) -> Mapping[str, object]:
        return self._call(self.engine.describe)

    def close(self) -> None:
        self._call(self.engine.close)
