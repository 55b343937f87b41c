"""The cost model's per-row term as measured on the devices we have, and a plain-decoding calibration over them.

A plain-decoding curve runs one row a request, so it cannot show the FLOP efficiency of a matmul of many rows
(step_model's rows / (rows + rows_half)), which prices every verify row. Each device grid we hold gives that term:
- from the matmul rates `study device-grid` measures by row count (grid.json's "matmul": rows_half fitted to them);
- or, for a grid timed before those rates were measured, from the step terms fitted to its steps (`--fit-from`).
`calibrated_range` calibrates the curve once per measured term, so that a speculative curve priced from it is a
range over the devices, not one line at an assumed efficiency.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.analysis.cost_model_compute import Engine, grid_points
from benchmarks.core.guarded import read_csv_text
from benchmarks.core.shapes import SHAPES, released_draft
from benchmarks.hardware import step_model
from benchmarks.hardware.chips import CHIPS


@dataclass(frozen=True)
class PerRow:
    """A device's per-row term: the rows at which its matmuls reach half the peak, and how it was measured."""

    device: str
    rows_half: float
    how: str


@dataclass(frozen=True)
class Measurement:
    """A device grid the per-row term is read from: the device, the grid (grid.csv or grid.json, relative to the
    repository), and for a grid without matmul rates the chip (None: a CPU), shape and itemsize its steps are fitted
    at."""

    device: str
    path: str
    chip: str | None = None
    shape: str = "qwen3-4b"
    itemsize: int = 2


# The grids we hold: the v5e's steps (timed before the grid measured matmul rates) and this CPU's matmul rates.
MEASURED = (
    Measurement("TPU v5e", "results/measured/tpu-v5e-2026-12-06/grid-engine.csv", "v5e", "qwen3-4b", 2),
    Measurement("this CPU", "results/measured/cpu-matmul-2026-12-07/grid.json"),
)


def of_matmul_rates(device: str, grid: Mapping[str, object], where: str) -> PerRow | None:
    """The per-row term a grid.json's matmul rates give, None where it has none."""
    mm = grid.get("matmul")
    if not isinstance(mm, dict) or "rows_half" not in mm:
        return None
    ordered = sorted(mm["by_rows"].items(), key=lambda kv: int(kv[0]))
    rows = ", ".join(f"{r} rows {v / 1e12:.3g} TFLOP/s" for r, v in ordered)
    return PerRow(device, float(mm["rows_half"]), f"{where}: its matmuls timed by row count ({rows}), of "
                                                  f"{mm['rows_half_of']}")


def of_grid_steps(m: Measurement, csv: Path) -> PerRow:
    """The per-row term of the step terms fitted to a grid's steps (as `cost-model --fit-from` fits them)."""
    shape = SHAPES[m.shape]
    dcfg = released_draft(shape, 16)
    engine = Engine(shape, dcfg.layers, len(dcfg.target_layer_ids), 15, dcfg.block_size, 256, m.itemsize)
    points = grid_points(read_csv_text(csv, numeric=("batch", "context", "k", "write_behind")).to_dict("records"),
                         engine)
    if m.chip is None:
        raise ValueError(f"{csv}: a CPU's per-row term is read from its grid.json's matmul rates")
    chip = CHIPS[m.chip]
    peak = chip.bf16_flops_per_s if m.itemsize == 2 else chip.fp32_flops_per_s
    terms = step_model.fit(points, peak, chip.bytes_per_s, ceiling=True)
    return PerRow(m.device, terms.rows_half, f"{m.path}: the step terms fitted to its {len(points)} steps "
                                             f"({m.shape}), of {chip.name}'s datasheet peak")


def measured(root: Path, grids: Sequence[Measurement] = MEASURED) -> list[PerRow]:
    """The per-row term of each grid: its matmul rates where its grid.json has them, else its fitted steps."""
    out = []
    for m in grids:
        path = root / m.path
        about = path if path.suffix == ".json" else path.with_name("grid.json")
        recorded = json.loads(about.read_text()) if about.is_file() else {}
        found = of_matmul_rates(m.device, recorded, m.path)
        out.append(found if found is not None else of_grid_steps(m, path))
    return out


def calibrated_range(ar_steps: Sequence[step_model.Measured], peak_flops: float, bytes_per_s: float,
                     sources: Mapping[str, str], per_rows: Sequence[PerRow]) -> list[tuple[PerRow, step_model.Terms]]:
    """The curve calibrated once per measured per-row term (step_model.calibrate), each term's source naming it."""
    out = []
    for pr in per_rows:
        said = {**sources, "rows_half": f"measured on the {pr.device} ({pr.how})"}
        out.append((pr, step_model.calibrate(ar_steps, peak_flops, bytes_per_s, pr.rows_half, said)))
    return out


def at_batches(engine: Engine, ranged: Sequence[tuple[PerRow, step_model.Terms]], batches: Sequence[int]
               ) -> dict[int, list[tuple[PerRow, float, float]]]:
    """Per batch size, each term's (per-row term, AR step s, DFlash step s)."""
    out: dict[int, list[tuple[PerRow, float, float]]] = {}
    for b in batches:
        at = dataclasses.replace(engine, batch=b)
        out[b] = [(pr, t.step_seconds(at.ar_step(), b), t.step_seconds(at.dflash_step(), b)) for pr, t in ranged]
    return out


def curve_range(engine: Engine, curve_ms: Mapping[int, float], peak_flops: float, bytes_per_s: float,
                per_rows: Sequence[PerRow], batches: Sequence[int]) -> dict[int, list[tuple[PerRow, float, float]]]:
    """A plain-decoding curve (B -> AR step ms at the engine's context) calibrated once per per-row term, and each
    calibration's AR and DFlash steps at every B of `batches` (`at_batches`)."""
    points = [step_model.Measured(f"B={b}", dataclasses.replace(engine, batch=b).ar_step(), b, ms / 1e3)
              for b, ms in sorted(curve_ms.items())]
    return at_batches(engine, calibrated_range(points, peak_flops, bytes_per_s, {}, per_rows), batches)
