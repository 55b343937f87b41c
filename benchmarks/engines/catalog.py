"""The engine catalog: one row per engine, as data, pointing into the engine's own folder by "module:name" for its
class, its declared options and its pre-run check, each imported only when read. Validation, the engine registry,
the run plan and the report read it; importing it imports no engine folder and no engine library.

Adding an engine is one row here and its folder under benchmarks/engines/ (docs/engine-guide.md).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from benchmarks.core.cells import METHODS, TREE_METHODS, OptionValue
from benchmarks.engines.options import CONTEXT, EngineOptions, PreRun

__all__ = ["CONTEXT", "EngineOptions", "PreRun"]  # a row's option declaration, its context bound, a pre-run check's

# The optional methods an engine may implement beyond the Engine protocol (benchmarks/engines/__init__.py declares
# each as a protocol); a row's `capabilities` names those its class has.
CAPABILITIES = ("sample_many", "token_scores", "score_many", "generate_batch")
ALL_CAPABILITIES = frozenset(CAPABILITIES)


@cache
def resolve(spec: str) -> Any:
    """The object a "module:name" spec names, its module imported now (a module name that starts with "." is
    relative to benchmarks.engines)."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module, package="benchmarks.engines"), name)


@dataclass(frozen=True)
class EngineRow:
    """One engine.

    implementation  "module:Class" of the engine, imported only when a cell of it runs; a module name that starts
                    with "." is relative to benchmarks.engines (the registry resolves it there)
    methods         the methods it runs
    declared        the options a cell may set, as the engine declares them in its own folder (engines/options.py):
                    an EngineOptions, or the "module:name" of one, imported when first read
    worker          whether its cells run in worker processes when interleaved (one engine per process)
    serves          for a serving engine: the batch engine it serves behind HTTP, whose options it takes too;
                    its units run under the matrix's concurrency levels
    capabilities    the optional methods (CAPABILITIES) its class implements
    gpu_share       the option that sets the share of a GPU's memory each of its processes reserves up front (None:
                    it allocates on demand); the rule for cells interleaved on a GPU reads it
    max_batch       the largest batch_size its generate_batch takes, or the "module:name" of that int (None: no
                    limit of its own); read it with `largest_batch()`
    whole_k_schedule  whether it takes a matrix's K schedule whole (its engine arguments carry the cell's
                    KSchedule ranges, and each step runs the K of the requests running); else each batch size's
                    cell runs the K of its range
    pre_run         "module:function" of its check before a run (a function of no arguments returning a PreRun:
                    a problem that stops the run, the builds it starts, how its options were checked), called by
                    `validate` and the run plan only where a cell of it (or of the engine it serves) runs
    """

    name: str
    implementation: str
    methods: tuple[str, ...]
    declared: EngineOptions | str
    worker: bool = False
    serves: str | None = None
    capabilities: frozenset[str] = frozenset()
    gpu_share: str | None = None
    max_batch: int | str | None = None
    whole_k_schedule: bool = False
    pre_run: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(self.capabilities - ALL_CAPABILITIES)
        if unknown:
            raise ValueError(f"engine {self.name!r}: unknown capabilities {unknown}; known: {', '.join(CAPABILITIES)}")

    @property
    def declaration(self) -> EngineOptions:
        """Its declared options (imported from its folder when `declared` names them)."""
        declared = resolve(self.declared) if isinstance(self.declared, str) else self.declared
        if not isinstance(declared, EngineOptions):
            raise TypeError(f"engine {self.name!r}: {self.declared!r} is not an EngineOptions")
        return declared

    @property
    def options(self) -> Callable[[], frozenset[str]]:
        return self.declaration.names

    @property
    def defaults(self) -> Mapping[str, OptionValue]:
        return self.declaration.defaults

    @property
    def choices(self) -> Mapping[str, tuple[OptionValue, ...]]:
        return self.declaration.choices

    @property
    def ranges(self) -> Mapping[str, tuple[int, int | str | None]]:
        return self.declaration.ranges

    def largest_batch(self) -> int | None:
        """The largest batch_size it takes (None: no limit of its own)."""
        value = resolve(self.max_batch) if isinstance(self.max_batch, str) else self.max_batch
        if value is not None and not isinstance(value, int):
            raise TypeError(f"engine {self.name!r}: max_batch {self.max_batch!r} is not an int")
        return value

    def pre_run_check(self) -> PreRun:
        """Its pre-run check's finding (nothing where it has none)."""
        if self.pre_run is None:
            return PreRun()
        found = resolve(self.pre_run)()
        if not isinstance(found, PreRun):
            raise TypeError(f"engine {self.name!r}: {self.pre_run} returned {type(found).__name__}, not a PreRun")
        return found

    @property
    def base(self) -> str:
        """The engine that measures: itself, or the engine a server serves."""
        return self.serves or self.name


CHAIN_METHODS = tuple(m for m in METHODS if m not in TREE_METHODS)  # every method but the draft trees

ENGINES: dict[str, EngineRow] = {row.name: row for row in (
    EngineRow("vllm", ".vllm.vllm_engine:VllmEngine", CHAIN_METHODS, ".vllm.vllm_options:OPTIONS", worker=True,
              capabilities=ALL_CAPABILITIES, gpu_share="gpu_memory_utilization", whole_k_schedule=True,
              pre_run=".vllm.vllm_options:pre_run"),
    EngineRow("jax", ".jax.engine:JaxEngine", ("baseline", "dflash", "ddtree"), ".jax.jax_options:OPTIONS",
              capabilities=ALL_CAPABILITIES, max_batch=".jax.jax_options:MAX_BATCH"),
    EngineRow("vllm-serve", ".vllm.vllm_serve:VllmServer", CHAIN_METHODS, ".vllm.vllm_options:OPTIONS",
              serves="vllm", capabilities=frozenset({"sample_many", "score_many"})),
    EngineRow("llama.cpp", ".llamacpp.llamacpp_engine:LlamaCppEngine", CHAIN_METHODS,
              ".llamacpp.llamacpp_options:OPTIONS", capabilities=frozenset({"token_scores"}),
              pre_run=".llamacpp.llamacpp_build:pre_run"),
    EngineRow("llama.cpp-serve", ".llamacpp.llamacpp_serve:LlamaCppServer", CHAIN_METHODS,
              ".llamacpp.llamacpp_options:OPTIONS", serves="llama.cpp"),
)}
DEFAULT_ENGINE = "vllm"  # a matrix without `engine`, `bench` without --engine, where vLLM is installed
ABSENT_DEFAULT = "jax"  # ... and where it is absent (`vllm_absence`)
VLLM_ENGINES = tuple(name for name, row in ENGINES.items() if row.base == "vllm")  # the engines that need vLLM
ABSENT_NOTE = "vllm-absent.txt"  # written into the venv by preparation/bootstrap.sh where it builds no vLLM


def vllm_absence() -> str | None:
    """Why vLLM cannot run in this environment (the reason set-up recorded, else that it is not installed), or None
    when it is installed. Where it is absent, `bench`, `matrix` and `validate` default to ABSENT_DEFAULT and refuse
    VLLM_ENGINES with this reason."""
    if importlib.util.find_spec("vllm") is not None:
        return None
    recorded = Path(sys.prefix) / ABSENT_NOTE
    if recorded.is_file() and recorded.read_text().strip():
        return recorded.read_text().strip()
    return f"vLLM is absent: it is not installed for {sys.executable}"


def absent_default(absence: str) -> str:
    """What a command runs where vLLM is absent and no engine is named, and why (`absence`: `vllm_absence()`)."""
    return f"engine {ABSENT_DEFAULT}, the default where vLLM is absent ({absence})"


class UnknownEngine(ValueError):
    """An engine name the catalog does not have."""


def engine(name: str) -> EngineRow:
    """The catalog row of an engine."""
    if name not in ENGINES:
        raise UnknownEngine(f"unknown engine {name!r}; known engines: {', '.join(ENGINES)}")
    return ENGINES[name]


def serving() -> list[str]:
    """The engines that serve a load (a server per cell, a concurrency axis)."""
    return [name for name, row in ENGINES.items() if row.serves]


def batch() -> list[str]:
    """The engines that run one prompt at a time (or a static batch of them: `batching`)."""
    return [name for name, row in ENGINES.items() if not row.serves]


def batching() -> list[str]:
    """The batch engines that decode a static batch of requests together (a `batch_size` axis)."""
    return [name for name in batch() if "generate_batch" in ENGINES[name].capabilities]


def pre_run_checks(engines: list[str]) -> list[PreRun]:
    """The pre-run checks of the engines that measure `engines` (a server's is the engine it serves', its own where
    that engine has no row: a server of an outside engine), each once."""
    rows = [ENGINES.get(engine(e).base, engine(e)) for e in engines]
    return [row.pre_run_check() for row in {r.name: r for r in rows}.values()]
