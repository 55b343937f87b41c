"""Expand a validated matrix into cells: engine × temperature × (baseline, method × K); the run id of a matrix."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from benchmarks.core import catalog
from benchmarks.core.config import PLACEMENT_KEYS, WORKLOAD_KEYS, Matrix
from benchmarks.core.records import Cell


def options_for(engine: str, options: dict[str, Any]) -> dict[str, Any]:
    """Shared engine options plus the engine's own sub-mapping (e.g. `vllm: {enforce_eager: true}`); a serving
    engine also takes the sub-mapping of the engine it serves (`vllm-serve` takes `vllm:`), its own winning."""
    shared = {k: v for k, v in options.items() if k not in catalog.ENGINES}
    serves = catalog.engine(engine).serves
    served = options.get(serves) or {} if serves else {}
    return {**shared, **served, **(options.get(engine) or {})}


def expand(m: Matrix) -> list[Cell]:
    """Cells in run order: for each engine and temperature the baseline comes first, so a crash late in a run
    still leaves the reference that every speedup and lossless check needs. A matrix over several engines gives
    each engine only the methods it runs (a single engine asked for a method it lacks fails with its own error)."""
    cells: list[Cell] = []
    for engine in m.engines:
        for temperature in m.temperatures:
            common = dict(engine=engine, target=m.target, temperature=temperature,
                          max_new_tokens=m.max_new_tokens, seed=m.seed,
                          engine_options=options_for(engine, m.engine_options))
            if "baseline" in m.methods:
                cells.append(Cell(method="baseline", draft=None, k=0, **common))
            for method in m.methods:
                if method == "baseline" or (len(m.engines) > 1 and method not in catalog.engine(engine).methods):
                    continue
                for k in m.k[method]:
                    cells.append(Cell(method=method, draft=m.drafts.get(method), k=k, **common))
    return cells


def run_id_for(matrix: Matrix) -> str:
    """Deterministic per matrix content, so rerunning the same matrix resumes the same run (wherever it runs: the
    placement keys are left out unless the file itself sets them; unset workload keys are left out, so a matrix without
    them keeps the id it had before they existed)."""
    return config_id(dataclasses.asdict(matrix))


def config_id(config: dict[str, Any]) -> str:
    """`run_id_for` of a matrix given as its fields (a run manifest's `config`)."""
    fields = {k: v for k, v in config.items()
              if k not in PLACEMENT_KEYS and not (k in WORKLOAD_KEYS and v is None)}
    blob = json.dumps(fields, sort_keys=True, default=str)
    return f"{config['name']}-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"

