"""The JAX engine's options, as data (engines/options.py): what `validate` checks a cell's options against and what
`engine.py` reads its defaults from.

    dtype          "auto" (the checkpoint's), "float32", "bfloat16" or "float16"
    max_model_len  prompt + output token budget; sizes the static KV caches (default 2048)
    breakdown      time draft, verify and host work separately, the host in every step (default off: the steps run
                   on the device, one loop per cache span)
    draft_queries  "block" (the released drafts' block_size, default) or "k+1" (what vLLM runs); a draft tree
                   (method ddtree) runs the whole block
    ignore_eos     generate exactly max_new_tokens (default off)
"""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from benchmarks.core.cells import OptionValue
from benchmarks.engines.options import EngineOptions

DEFAULTS: Mapping[str, OptionValue] = MappingProxyType({"dtype": "auto", "max_model_len": 2048, "breakdown": False,
                                                        "draft_queries": "block", "ignore_eos": False})
OPTIONS = EngineOptions(lambda: frozenset(DEFAULTS), DEFAULTS,
                        MappingProxyType({"dtype": ("auto", "float32", "bfloat16", "float16"),
                                          "draft_queries": ("block", "k+1"), "breakdown": (True, False),
                                          "ignore_eos": (True, False)}))
# The largest batch the engine compiles (batch.py's BATCH_SIZES end here).
MAX_BATCH = 64
