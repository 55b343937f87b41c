"""What one engine load measures with, as its provenance record: the environment, the model files, the engine's own
description (or the failure that stopped it)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchmarks.core.cells import Cell
from benchmarks.records.records import cause

if TYPE_CHECKING:
    from benchmarks.engines import Engine
    from benchmarks.engines.server import Server


def unit_provenance(env: dict[str, Any], cell: Cell, models: dict[str, dict[str, Any]],
                    describe: dict[str, Any] | None, load_error: str | None = None) -> dict[str, Any]:
    """What one engine load measures with: the environment, the model files, and the engine's own description."""
    return {"environment": env, "cell_id": cell.cell_id, "engine": cell.engine, "method": cell.method,
            "models": {"target": models[cell.target], **({"draft": models[cell.draft]} if cell.draft else {})},
            "describe": describe, "load_error": load_error}


def describe_engine(engine: Engine | Server) -> dict[str, Any]:
    try:
        return engine.describe()
    except Exception as exc:  # a description that fails must not cost the measurement
        return {"describe_error": cause(exc)}
