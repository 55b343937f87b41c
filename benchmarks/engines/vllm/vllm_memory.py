"""The memory a vLLM engine reserves on CPU, as environment changes: the KV cache the run needs, never a share of the
machine's total memory (docs/engine-findings.md)."""
from __future__ import annotations

import json
import math
import os
from collections.abc import MutableMapping

from benchmarks.core.cells import Cell
from benchmarks.core.shapes import HfConfig
from benchmarks.hardware.batch_memory import itemsize, kv_bytes_per_token
from benchmarks.hardware.provenance import resolve_model

# On CPU, vLLM reserves gpu_memory_utilization (default 0.92) of the machine's *total* memory and refuses to start
# when less is free, so an engine on a host that uses more than 8 % of its memory fails. VLLM_CPU_KVCACHE_SPACE (GiB
# of KV cache) replaces that reservation; it overrides the engine arguments that size the memory (MEMORY_OPTIONS), so
# a cell that sets one of those gets the variable unset instead. A value exported by the user is kept.
KVCACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
MEMORY_OPTIONS = ("kv_cache_memory_bytes", "gpu_memory_utilization")
KV_HEADROOM = 1.25  # over the bare K/V bytes: block rounding and the scheduler's slack
_EXPORTED_KVCACHE = os.environ.get(KVCACHE_ENV) or None


def _model_config(ref: str | None) -> HfConfig:
    """A model's config.json (local folder or Hugging Face cache); empty when it is not on disk."""
    folder = resolve_model(ref)[0] if ref else None
    path = folder / "config.json" if folder else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else {}


def kv_cache_gib(cell: Cell, sequences: int = 1) -> int:
    """The KV cache the run needs, in whole GiB (at least 1): `sequences` requests of max_model_len tokens each
    (vLLM needs room for one full-length request anyway) through the target's and the draft's attention layers,
    with KV_HEADROOM."""
    target, draft = _model_config(cell.target), _model_config(cell.draft)
    own = cell.engine_options.get("max_model_len")
    max_len = (own if isinstance(own, int) else None) or target.get("max_position_embeddings") or 2048
    dtype = str(cell.engine_options.get("dtype", "auto"))
    per_token = sum(kv_bytes_per_token(cfg, itemsize(dtype, cfg)) for cfg in (target, draft))
    return max(1, math.ceil(KV_HEADROOM * per_token * max_len * max(1, sequences) / 2**30))


def cpu_memory_environment(cell: Cell, sequences: int = 1) -> dict[str, str | None]:
    """The memory setting of a vLLM engine for `cell` on CPU, as environment changes (None: unset the variable):
    what the run needs (`kv_cache_gib`: `sequences` requests in flight), never a share of the machine's total; the
    cell's own MEMORY_OPTIONS when it sets one; a value the user exported. Empty off CPU."""
    from vllm.platforms import current_platform  # lazy: vllm

    if not current_platform.is_cpu():
        return {}
    if any(key in cell.engine_options for key in MEMORY_OPTIONS):
        return {KVCACHE_ENV: None}
    return {KVCACHE_ENV: _EXPORTED_KVCACHE or str(kv_cache_gib(cell, sequences))}


def apply_environment(changes: dict[str, str | None], env: MutableMapping[str, str]) -> None:
    """Set (or, for None, remove) environment variables in `env`."""
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
