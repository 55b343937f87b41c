"""How speculative cells pair with their AR baseline: the one rule the summary, the drift recheck and the run order
share."""
from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.core.cells import Cell

PAIRING_KEYS = ("engine", "target", "temperature", "max_new_tokens", "seed", "engine_options")


def batch_size(cell: dict[str, Any]) -> int:
    """A cell's static batch size (1 for cells written before batches existed)."""
    return cell.get("batch_size") or 1


def baseline_cell_id(cell: dict[str, Any], cells: dict[str, dict[str, Any]]) -> str | None:
    """The AR baseline a method is compared with: same engine, target, sampling budget, engine options and batch
    size."""
    for cid, other in cells.items():
        if (other["method"] == "baseline" and all(other[k] == cell[k] for k in PAIRING_KEYS)
                and batch_size(other) == batch_size(cell)):
            return cid
    return None


def families(cells: list[Cell]) -> list[tuple[Cell, list[Cell]]]:
    """Each baseline with the speculative cells whose speedups are measured against it (the summary's pairing: same
    engine, temperature, sampling budget and options), in run order; baselines with no such cell are left out."""
    as_dicts = {c.cell_id: dataclasses.asdict(c) for c in cells}
    found: dict[str, tuple[Cell, list[Cell]]] = {c.cell_id: (c, []) for c in cells if c.method == "baseline"}
    for c in cells:
        base = baseline_cell_id(as_dicts[c.cell_id], as_dicts) if c.method != "baseline" else None
        if base in found:
            found[base][1].append(c)
    return [f for f in found.values() if f[1]]

