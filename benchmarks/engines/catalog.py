"""The engine catalog: one row per engine, as data, pointing to the options the engine declares in its own folder.
Validation, the engine registry, the run plan and the report read it; nothing here imports an engine library.

Adding an engine is one row here and its folder under benchmarks/engines/ (docs/engine-guide.md).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from benchmarks.core.cells import METHODS, TREE_METHODS, OptionValue
from benchmarks.engines.jax import jax_options
from benchmarks.engines.llamacpp import llamacpp_options
from benchmarks.engines.options import CONTEXT, EngineOptions
from benchmarks.engines.vllm import vllm_options

__all__ = ["CONTEXT", "EngineOptions"]  # a catalog row's option declaration, and its context bound

# The optional methods an engine may implement beyond the Engine protocol (benchmarks/engines/__init__.py declares
# each as a protocol); a row's `capabilities` names those its class has.
CAPABILITIES = ("sample_many", "token_scores", "score_many", "generate_batch")
ALL_CAPABILITIES = frozenset(CAPABILITIES)

@dataclass(frozen=True)
class EngineRow:
    """One engine.

    implementation  "module:Class" of the engine, imported only when a cell of it runs; a module name that starts
                    with "." is relative to benchmarks.engines (the registry resolves it there)
    methods         the methods it runs
    declared        the options a cell may set, as the engine declares them in its own folder (engines/options.py)
    worker          whether its cells run in worker processes when interleaved (one engine per process)
    serves          for a serving engine: the batch engine it serves behind HTTP, whose options it takes too;
                    its units run under the matrix's concurrency levels
    capabilities    the optional methods (CAPABILITIES) its class implements
    gpu_share       the option that sets the share of a GPU's memory each of its processes reserves up front (None:
                    it allocates on demand); the rule for cells interleaved on a GPU reads it
    max_batch       the largest batch_size its generate_batch takes (None: no limit of its own)
    whole_k_schedule  whether it takes a matrix's K schedule whole (its engine arguments carry the cell's
                    KSchedule ranges, and each step runs the K of the requests running); else each batch size's
                    cell runs the K of its range
    """

    name: str
    implementation: str
    methods: tuple[str, ...]
    declared: EngineOptions
    worker: bool = False
    serves: str | None = None
    capabilities: frozenset[str] = frozenset()
    gpu_share: str | None = None
    max_batch: int | None = None
    whole_k_schedule: bool = False

    def __post_init__(self) -> None:
        unknown = sorted(self.capabilities - ALL_CAPABILITIES)
        if unknown:
            raise ValueError(f"engine {self.name!r}: unknown capabilities {unknown}; known: {', '.join(CAPABILITIES)}")

    @property
    def options(self) -> Callable[[], frozenset[str]]:
        return self.declared.names

    @property
    def defaults(self) -> Mapping[str, OptionValue]:
        return self.declared.defaults

    @property
    def choices(self) -> Mapping[str, tuple[OptionValue, ...]]:
        return self.declared.choices

    @property
    def ranges(self) -> Mapping[str, tuple[int, int | str | None]]:
        return self.declared.ranges

    @property
    def base(self) -> str:
        """The engine that measures: itself, or the engine a server serves."""
        return self.serves or self.name


CHAIN_METHODS = tuple(m for m in METHODS if m not in TREE_METHODS)  # every method but the draft trees

ENGINES: dict[str, EngineRow] = {row.name: row for row in (
    EngineRow("vllm", ".vllm.vllm_engine:VllmEngine", CHAIN_METHODS, vllm_options.OPTIONS, worker=True,
              capabilities=ALL_CAPABILITIES, gpu_share="gpu_memory_utilization", whole_k_schedule=True),
    EngineRow("jax", ".jax.engine:JaxEngine", ("baseline", "dflash", "ddtree"), jax_options.OPTIONS,
              capabilities=ALL_CAPABILITIES, max_batch=jax_options.MAX_BATCH),
    EngineRow("vllm-serve", ".vllm.vllm_serve:VllmServer", CHAIN_METHODS, vllm_options.OPTIONS, serves="vllm",
              capabilities=frozenset({"sample_many", "score_many"})),
    EngineRow("llama.cpp", ".llamacpp.llamacpp_engine:LlamaCppEngine", CHAIN_METHODS, llamacpp_options.OPTIONS,
              capabilities=frozenset({"token_scores"})),
    EngineRow("llama.cpp-serve", ".llamacpp.llamacpp_serve:LlamaCppServer", CHAIN_METHODS, llamacpp_options.OPTIONS,
              serves="llama.cpp"),
)}
DEFAULT_ENGINE = "vllm"  # a matrix without `engine`, and `bench` without --engine


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
