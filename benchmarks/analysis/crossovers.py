"""Where a method stops paying along a load axis: per engine, workload and method, the smallest static batch size B
(or serving concurrency C) whose throughput speedup is shown below 1 (`metrics.crossover`: one-sided, Holm over the
levels scanned; a level without an interval is inconclusive). One definition for the batch axis and the serving axis.
Pure: the summary's row records in."""
from __future__ import annotations

from dataclasses import dataclass

from benchmarks.analysis.row_records import RowRecords
from benchmarks.core import metrics


@dataclass(frozen=True)
class SeriesCrossover:
    """One method's series along an axis ("B" or "C") and where it crosses below 1."""

    engine: str
    workload: str
    label: str
    axis: str
    units: str  # what each level's interval is over: "batches" or "waves"
    result: metrics.Crossover
    levels: list[int]


def crossovers(units: list[RowRecords], axis: str) -> list[SeriesCrossover]:
    """The series of the speculative rows along `axis`: B for the batch rows of every (engine, workload, T) measured
    at a batch size above 1, C for the serving rows."""
    batched = {(u.cell.engine, u.workload, u.cell.temperature) for u in units if (u.batch or 1) > 1}
    series: dict[tuple[str, str, str], list[tuple[int, metrics.Speedup]]] = {}
    for u in units:
        if not u.speculative:
            continue
        if axis == "B" and u.batch is not None and (u.cell.engine, u.workload, u.cell.temperature) in batched:
            level, s = u.cell.batch_size, u.batch_speedup
        elif axis == "C" and u.level is not None:
            level, s = u.level, u.level_speedup
        else:
            continue
        if s is None or not s.n:  # nothing measured at this level (its unit failed, or no baseline)
            continue
        label = u.cell.label + (f" T={u.cell.temperature:g}" if u.cell.temperature else "")
        series.setdefault((u.cell.engine, u.workload, label), []).append((level, s))
    return [SeriesCrossover(e, w, label, axis, "batches" if axis == "B" else "waves", metrics.crossover(points),
                            sorted(level for level, _ in points))
            for (e, w, label), points in sorted(series.items())]
