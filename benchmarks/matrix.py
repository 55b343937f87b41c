"""Expand a validated matrix into cells: engine × temperature × (baseline, method × K)."""
from __future__ import annotations

from typing import Any

from benchmarks.config import Matrix
from benchmarks.records import ENGINE_METHODS, ENGINES, SERVING_ENGINES, Cell


def options_for(engine: str, options: dict[str, Any]) -> dict[str, Any]:
    """Shared engine options plus the engine's own sub-mapping (e.g. `vllm: {enforce_eager: true}`); a serving
    engine also takes the sub-mapping of the engine it serves (`vllm-serve` takes `vllm:`), its own winning."""
    shared = {k: v for k, v in options.items() if k not in ENGINES}
    served = options.get(SERVING_ENGINES[engine]) or {} if engine in SERVING_ENGINES else {}
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
                if method == "baseline" or (len(m.engines) > 1 and method not in ENGINE_METHODS[engine]):
                    continue
                for k in m.k[method]:
                    cells.append(Cell(method=method, draft=m.drafts.get(method), k=k, **common))
    return cells
