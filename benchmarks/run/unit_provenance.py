"""What one engine load measures with, as its provenance record: the environment, the model files, the engine's own
description (or the failure that stopped it)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from benchmarks.core.cells import Cell
from benchmarks.hardware.provenance import Environment, ModelFingerprint
from benchmarks.records.records import cause
from benchmarks.records.store import ProvenanceRecord

if TYPE_CHECKING:
    from benchmarks.engines import Engine
    from benchmarks.engines.server import Server


def unit_provenance(env: Environment, cell: Cell, models: Mapping[str, ModelFingerprint],
                    describe: Mapping[str, object] | None, load_error: str | None = None) -> ProvenanceRecord:
    """What one engine load measures with: the environment, the model files, and the engine's own description."""
    return {"environment": env, "cell_id": cell.cell_id, "engine": cell.engine, "method": cell.method,
            "models": {"target": models[cell.target], **({"draft": models[cell.draft]} if cell.draft else {})},
            "describe": None if describe is None else dict(describe), "load_error": load_error}


def describe_engine(engine: Engine | Server) -> Mapping[str, object]:
    try:
        return engine.describe()
    except Exception as exc:  # a description that fails must not cost the measurement
        return {"describe_error": cause(exc)}
