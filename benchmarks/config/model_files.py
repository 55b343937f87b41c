"""What a matrix reads from the model folders it names: a local draft's config.json (its DFlash block size)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.core.paths import resolve_model_ref


def local_config(ref: str) -> dict[str, Any] | None:
    """The config.json of a local model folder; None for a hub id, a folder without one, or one that is not a
    mapping (the input check, benchmarks.config.inputs, names what is wrong)."""
    try:
        data = json.loads((Path(resolve_model_ref(ref)) / "config.json").read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def draft_block_size(ref: str | None) -> int | None:
    """block_size from a local DFlash draft's config.json, when the draft is on disk."""
    cfg = local_config(ref) if ref else None
    return cfg.get("block_size") if cfg is not None else None
