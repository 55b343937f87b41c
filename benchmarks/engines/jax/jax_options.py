"""The JAX engine's options, as data (engines/options.py): what `validate` checks a cell's options against and what
`engine.py` reads its defaults from.

    dtype          "auto" (the checkpoint's), "float32", "bfloat16" or "float16"
    max_model_len  prompt + output token budget; sizes the static KV caches (default 2048)
    breakdown      time draft, verify and host work separately, the host in every step (default off: the steps run
                   on the device, one loop per cache span)
    draft_queries  "block" (the released drafts' block_size, default) or "k+1" (what vLLM runs); a draft tree
                   (method ddtree) runs the whole block
    ignore_eos     generate exactly max_new_tokens (default off)
    attention      how the target attends to its cache: "xla" (default; `model.attend` over the cache's slice) or
                   "pallas" (pallas_attention.py: a flash-style Pallas kernel reading each layer from the whole cache;
                   Mosaic on a TPU, Pallas' interpret mode elsewhere, slow there: for checking, not timing)
"""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from benchmarks.core.cells import OptionValue
from benchmarks.engines.options import EngineOptions

ATTENTION = ("xla", "pallas")  # the values of `attention`

DEFAULTS: Mapping[str, OptionValue] = MappingProxyType({"dtype": "auto", "max_model_len": 2048, "breakdown": False,
                                                        "draft_queries": "block", "ignore_eos": False,
                                                        "attention": "xla"})
OPTIONS = EngineOptions(lambda: frozenset(DEFAULTS), DEFAULTS,
                        MappingProxyType({"dtype": ("auto", "float32", "bfloat16", "float16"),
                                          "draft_queries": ("block", "k+1"), "breakdown": (True, False),
                                          "ignore_eos": (True, False), "attention": ATTENTION}))
# The largest batch the engine compiles (batch.py's BATCH_SIZES end here).
MAX_BATCH = 64
