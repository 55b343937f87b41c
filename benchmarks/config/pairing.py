"""How speculative cells pair with their AR baseline: the one rule the summary, the drift recheck and the run order
share."""
from __future__ import annotations

from collections.abc import Mapping

from benchmarks.core.cells import Cell

PAIRING_KEYS = ("engine", "target", "temperature", "max_new_tokens", "seed", "batch_size")


def largest_k(cell: Cell) -> int:
    """The largest K the cell's steps can run: its K, or the largest of a K schedule its engine takes whole (vLLM
    runs a range's K whenever that many requests are running, so the tail of a batch of B runs the K of fewer)."""
    return max([cell.k, *(k for _, _, k in cell.whole_schedule)])


def baseline_cell_id(cell: Cell, cells: Mapping[str, Cell]) -> str | None:
    """The AR baseline a method is compared with: same engine, target, sampling budget, engine options and batch
    size."""
    for cid, other in cells.items():
        if other.method == "baseline" and all(getattr(other, k) == getattr(cell, k) for k in PAIRING_KEYS) \
                and other.engine_options == cell.engine_options:
            return cid
    return None


def families(cells: list[Cell]) -> list[tuple[Cell, list[Cell]]]:
    """Each baseline with the speculative cells whose speedups are measured against it (the summary's pairing: same
    engine, temperature, sampling budget and options), in run order; baselines with no such cell are left out."""
    by_id = {c.cell_id: c for c in cells}
    found: dict[str, tuple[Cell, list[Cell]]] = {c.cell_id: (c, []) for c in cells if c.method == "baseline"}
    for c in cells:
        base = baseline_cell_id(c, by_id) if c.method != "baseline" else None
        if base in found:
            found[base][1].append(c)
    return [f for f in found.values() if f[1]]
