"""The engine catalog: one row per engine, as data. Validation, the engine registry, the run plan and the report
read it; nothing here imports an engine.

Adding an engine is one row here and one module under benchmarks/engines/ (docs/layout.md).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from benchmarks.core.cells import METHODS
from benchmarks.core.engine_options import vllm_option_names

# The optional methods an engine may implement beyond the Engine protocol (benchmarks/engines/__init__.py declares
# each as a protocol); a row's `capabilities` names those its class has.
CAPABILITIES = ("sample_many", "token_scores", "score_many", "generate_batch")
ALL_CAPABILITIES = frozenset(CAPABILITIES)

# The JAX engine's options and their defaults (benchmarks/engines/jax/engine.py reads them from its row).
JAX_OPTIONS: dict[str, Any] = {"dtype": "auto", "max_model_len": 2048, "breakdown": False, "draft_queries": "block",
                               "ignore_eos": False}
# The llama.cpp engine's options and their defaults (benchmarks/engines/llamacpp.py): the GGUF type the checkpoints are
# converted to, the context per slot, CPU threads (0: every CPU this process may use), flash attention, and the n-gram
# length the ngram method looks up (5: vLLM's default prompt lookup; llama.cpp's own default, 12, rarely matches).
LLAMACPP_OPTIONS: dict[str, Any] = {"dtype": "auto", "max_model_len": 2048, "threads": 0, "flash_attn": "on",
                                    "ngram_n": 5}


@dataclass(frozen=True)
class EngineRow:
    """One engine.

    implementation  "module:Class" of the engine, imported only when a cell of it runs; a module name that starts
                    with "." is relative to benchmarks.engines (the registry resolves it there)
    methods         the methods it runs
    options         the option names a cell may set (called at validation; data, no engine import)
    defaults        option defaults the engine applies itself
    choices         the values an option may take, where they are few
    ranges          the int options and their range (lowest, highest); highest None for no bound of its own, or
                    CONTEXT for below the cell's max_model_len
    worker          whether its cells run in worker processes when interleaved (one engine per process)
    serves          for a serving engine: the batch engine it serves behind HTTP, whose options it takes too;
                    its units run under the matrix's concurrency levels
    capabilities    the optional methods (CAPABILITIES) its class implements
    gpu_share       the option that sets the share of a GPU's memory each of its processes reserves up front (None:
                    it allocates on demand); the rule for cells interleaved on a GPU reads it
    max_batch       the largest batch_size its generate_batch takes (None: no limit of its own)
    k_schedule      the option through which it takes a matrix's K schedule whole, as [[first B, last B, K], ...]
                    (None: each batch size's cell runs the K of its range)
    """

    name: str
    implementation: str
    methods: tuple[str, ...]
    options: Callable[[], frozenset[str]]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    choices: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    ranges: Mapping[str, tuple[int, int | str | None]] = field(default_factory=dict)
    worker: bool = False
    serves: str | None = None
    capabilities: frozenset[str] = frozenset()
    gpu_share: str | None = None
    max_batch: int | None = None
    k_schedule: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(self.capabilities - ALL_CAPABILITIES)
        if unknown:
            raise ValueError(f"engine {self.name!r}: unknown capabilities {unknown}; known: {', '.join(CAPABILITIES)}")

    @property
    def base(self) -> str:
        """The engine that measures: itself, or the engine a server serves."""
        return self.serves or self.name


# The largest batch the JAX engine compiles (benchmarks/engines/jax/batch.py BATCH_SIZES ends here).
JAX_MAX_BATCH = 64
VLLM_K_SCHEDULE = "num_speculative_tokens_per_batch_size"  # a field of vLLM's speculative_config
# vLLM's `--dtype` choices; the JAX engine's dtypes and draft query counts (benchmarks/engines/jax/loader.py).
VLLM_CHOICES = MappingProxyType({"dtype": ("auto", "half", "float16", "bfloat16", "float", "float32"),
                                 "preload": (True, False)})
JAX_CHOICES = MappingProxyType({"dtype": ("auto", "float32", "bfloat16", "float16"), "draft_queries": ("block", "k+1"),
                                "breakdown": (True, False), "ignore_eos": (True, False)})

LLAMACPP_CHOICES = MappingProxyType({"dtype": ("auto", "float32", "float16", "bfloat16"),
                                    "flash_attn": ("on", "off", "auto")})
# The int options' ranges. An n-gram looked up must fit the context (CONTEXT: below the cell's max_model_len); 0
# threads is every CPU the process may use.
CONTEXT = "context"
VLLM_RANGES = MappingProxyType({"prompt_lookup_min": (1, CONTEXT), "prompt_lookup_max": (1, CONTEXT),
                                "max_num_seqs": (1, None), "tensor_parallel_size": (1, None)})
LLAMACPP_RANGES = MappingProxyType({"ngram_n": (1, CONTEXT), "threads": (0, None)})

ENGINES: dict[str, EngineRow] = {row.name: row for row in (
    EngineRow("vllm", ".vllm_engine:VllmEngine", METHODS, vllm_option_names, choices=VLLM_CHOICES, ranges=VLLM_RANGES,
              worker=True, capabilities=ALL_CAPABILITIES, gpu_share="gpu_memory_utilization",
              k_schedule=VLLM_K_SCHEDULE),
    EngineRow("jax", ".jax.engine:JaxEngine", ("baseline", "dflash"), lambda: frozenset(JAX_OPTIONS),
              defaults=MappingProxyType(JAX_OPTIONS), choices=JAX_CHOICES, capabilities=ALL_CAPABILITIES,
              max_batch=JAX_MAX_BATCH),
    EngineRow("vllm-serve", ".vllm_serve:VllmServer", METHODS, vllm_option_names, choices=VLLM_CHOICES,
              ranges=VLLM_RANGES, serves="vllm", capabilities=frozenset({"sample_many", "score_many"})),
    EngineRow("llama.cpp", ".llamacpp:LlamaCppEngine", METHODS, lambda: frozenset(LLAMACPP_OPTIONS),
              defaults=MappingProxyType(LLAMACPP_OPTIONS), choices=LLAMACPP_CHOICES,
              ranges=LLAMACPP_RANGES, capabilities=frozenset({"token_scores"})),
    EngineRow("llama.cpp-serve", ".llamacpp_serve:LlamaCppServer", METHODS, lambda: frozenset(LLAMACPP_OPTIONS),
              defaults=MappingProxyType(LLAMACPP_OPTIONS), choices=LLAMACPP_CHOICES,
              ranges=LLAMACPP_RANGES, serves="llama.cpp"),
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
