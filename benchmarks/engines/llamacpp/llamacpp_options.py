"""The llama.cpp engine's options, as data (engines/options.py): the GGUF type the checkpoints are converted to, the
context per slot, CPU threads (0: every CPU this process may use), flash attention, and the n-gram length the ngram
method looks up (5: vLLM's default prompt lookup; llama.cpp's own default, 12, rarely matches). An n-gram must fit
the context (below the cell's max_model_len)."""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from benchmarks.core.cells import OptionValue
from benchmarks.engines.options import CONTEXT, EngineOptions

DEFAULTS: Mapping[str, OptionValue] = MappingProxyType({"dtype": "auto", "max_model_len": 2048, "threads": 0,
                                                        "flash_attn": "on", "ngram_n": 5})
OPTIONS = EngineOptions(lambda: frozenset(DEFAULTS), DEFAULTS,
                        MappingProxyType({"dtype": ("auto", "float32", "float16", "bfloat16"),
                                          "flash_attn": ("on", "off", "auto")}),
                        MappingProxyType({"ngram_n": (1, CONTEXT), "threads": (0, None)}))
