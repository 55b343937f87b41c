"""The decision a capacity run supports, computed from its probe records: per workload and SLO, each configuration's
search replayed over its stored probes (`capacity.replay`: the capacity with its range, the probes it took and why it
stopped), its throughput and goodput at the capacity, its capacity against the best plain-decoding capacity of the run
(any engine), and the winner, or a tie where the leaders' ranges overlap; and how each capacity moves as one
threshold tightens or loosens (`capacity.capacity_from` over every stored probe). Pure: typed records in."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.decide.capacity import (
    BISECT,
    SWEEP,
    Capacity,
    Path,
    Reading,
    Round,
    Space,
    capacity_from,
    replay,
    space_of,
)
from benchmarks.decide.slo import Goodput, Slo, goodput, slos_of
from benchmarks.records.manifest_read import Manifest
from benchmarks.records.probe_rounds import rounds_by_load
from benchmarks.records.records import ByKind, Line

# How far a threshold is moved, either way, to draw how the capacity follows it (factors of its own value).
SCAN = np.geomspace(0.25, 4.0, 49)


@dataclass(frozen=True)
class CellCapacity:
    """One configuration's capacity under one SLO on one workload: its search's path over the stored probes, and its
    throughput (output tokens/s of the probe at the capacity) and goodput there. Of a sweep, `bisect` is the
    bracketing search walked over the sweep's probes: what it would have found, with how many of them."""

    cell_id: str
    cell: Cell
    path: Path
    stored: dict[float, list[Round]]
    bisect: Path | None = None

    @property
    def capacity(self) -> Capacity:
        return self.path.capacity

    @property
    def at_capacity(self) -> Reading | None:
        low = self.capacity.low
        return None if low is None else self.path.readings.get(low)

    @property
    def name(self) -> str:
        return f"{self.cell.engine} {self.cell.label}"


@dataclass(frozen=True)
class Ratio:
    """A capacity over the best plain one: the ratio of their lowest capacities, and the range their ranges allow."""

    point: float
    low: float
    high: float


def _div(a: float, b: float) -> float:
    return a / b if b > 0 else (math.inf if a > 0 else math.nan)


def ratio(c: Capacity, best: Capacity) -> Ratio:
    """The point where both capacities have a load shown to meet (NaN otherwise), and the range their ranges allow."""
    (a, b), (x, y) = c.bounds, best.bounds
    point = _div(a, x) if c.low is not None and best.low is not None else math.nan
    return Ratio(point, _div(a, y), _div(b, x))


@dataclass(frozen=True)
class Decision:
    """Per workload and SLO: every configuration's capacity, the best plain-decoding one, and the leaders: one
    configuration when its range lies above every other's (a win), several when their ranges overlap the
    leader's (a tie)."""

    workload: str
    slo_index: int
    slo: Slo
    space: Space
    cells: list[CellCapacity]
    best_plain: CellCapacity | None
    leaders: list[CellCapacity]

    def ratio(self, c: CellCapacity) -> Ratio | None:
        """c's capacity over the best plain one; exactly 1 for that one itself, whatever its range."""
        if self.best_plain is None:
            return None
        return Ratio(1.0, 1.0, 1.0) if c is self.best_plain else ratio(c.capacity, self.best_plain.capacity)

    def verdict(self) -> str:
        if not self.leaders:
            return "no configuration was searched"
        names = ", ".join(c.name for c in self.leaders)
        if len(self.leaders) == 1:
            return f"{names} holds the most ({self.leaders[0].capacity.text(self.space)})"
        return f"tie between {names}: their capacity ranges overlap the leader's"

    def goodput(self, c: CellCapacity) -> Goodput | None:
        at = c.at_capacity
        return None if at is None else goodput(self.slo, at.requests, at.duration_s)

    def moving(self, c: CellCapacity, index: int) -> tuple[list[float], list[Capacity]]:
        """The capacity every stored probe of `c` shows as threshold `index` moves over SCAN times its value."""
        limit = self.slo.thresholds[index].limit_ms
        limits = [float(f * limit) for f in SCAN]
        return limits, [capacity_from(self.space, self.slo.with_limit(index, x), c.stored) for x in limits]


def leaders(cells: Sequence[CellCapacity]) -> list[CellCapacity]:
    """The configuration with the highest capacity (its range's low end, then its high end) and every other whose
    range overlaps its range."""
    if not cells:
        return []
    top = max(cells, key=lambda c: c.capacity.bounds)
    low, high = top.capacity.bounds
    return [top] + [c for c in cells if c is not top and c.capacity.bounds[1] >= low and c.capacity.bounds[0] <= high]


def _order(cell: Cell) -> tuple:
    """Configurations as the report lists them: by engine, plain decoding first, then by method and K."""
    return cell.engine, cell.temperature, cell.method != "baseline", cell.method, cell.k


def decisions(records: ByKind, manifest: Manifest) -> list[Decision]:
    """Every (workload, SLO) decision of a run with a capacity search, in the order of its workloads and SLOs; none
    without an SLO or a probe."""
    space = space_of(vars(manifest.config))
    if space is None:
        return []
    lines: dict[tuple[str, str], list[Line]] = defaultdict(list)
    for line in [*records.probe_requests, *records.probes]:
        lines[(line.cell_id, line.workload)].append(line)
    workloads = list(dict.fromkeys(w for _, w in lines))
    out = []
    for i, slo in enumerate(slos_of(vars(manifest.config))):
        for w in workloads:
            cells = []
            for cell_id, cell in sorted(manifest.cells.items(), key=lambda kv: _order(kv[1])):
                if (cell_id, w) in lines:
                    stored = rounds_by_load(space, lines[(cell_id, w)])
                    bisect = replay(replace(space, mode=BISECT), slo, stored) if space.mode == SWEEP else None
                    cells.append(CellCapacity(cell_id, cell, replay(space, slo, stored), stored, bisect))
            plain = [c for c in cells if c.cell.method == "baseline"]
            best = max(plain, key=lambda c: c.capacity.bounds) if plain else None
            out.append(Decision(w, i, slo, space, cells, best, leaders(cells)))
    return out


def user_rate(reading: Reading, slo: Slo) -> float:
    """Tokens/s per user at a probe, read at the SLO's TPOT percentile (each request's own rate is 1000 / its TPOT
    in ms, so the rate its slowest (100 − q) % of users get): at the median without a TPOT threshold."""
    q = next((t.percentile for t in slo.thresholds if t.metric == "tpot"), 50)
    rates = [1000.0 / r.tpot for r in reading.requests if r.tpot > 0]
    return metrics.percentile(rates, 100 - q)
