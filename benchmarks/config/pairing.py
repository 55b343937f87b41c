"""How speculative cells pair with their AR baseline: the one rule the summary, the drift recheck and the run order
share."""
from __future__ import annotations

from collections.abc import Mapping

from benchmarks.core.cells import Cell, CellOptions, k_ranges
from benchmarks.engines import catalog

PAIRING_KEYS = ("engine", "target", "temperature", "max_new_tokens", "seed", "batch_size")


def _schedule_option(cell: Cell) -> str | None:
    """The engine option through which the cell's engine takes a K schedule whole, where it has one."""
    return catalog.engine(cell.engine).k_schedule if cell.engine in catalog.ENGINES else None


def pairing_options(cell: Cell) -> CellOptions:
    """A cell's engine options as pairing compares them: without a K schedule passed to the engine (a speculative
    setting, which its baseline never has)."""
    option = _schedule_option(cell)
    return {k: v for k, v in cell.engine_options.items() if k != option}


def largest_k(cell: Cell) -> int:
    """The largest K the cell's steps can run: its K, or the largest of a K schedule passed to its engine whole (vLLM
    runs a range's K whenever that many requests are running, so the tail of a batch of B runs the K of fewer)."""
    option = _schedule_option(cell)
    ranges = k_ranges(cell.engine_options.get(option)) if option else []
    return max([cell.k, *(r[2] for r in ranges)])


def baseline_cell_id(cell: Cell, cells: Mapping[str, Cell]) -> str | None:
    """The AR baseline a method is compared with: same engine, target, sampling budget, engine options (but a K
    schedule) and batch size."""
    for cid, other in cells.items():
        if other.method == "baseline" and all(getattr(other, k) == getattr(cell, k) for k in PAIRING_KEYS) \
                and pairing_options(other) == pairing_options(cell):
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
