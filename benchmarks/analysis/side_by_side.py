"""Engines side by side: every batch-1 cell beside its own engine's AR and the strongest baseline of the run
(analysis/strongest.py), and the engines' greedy AR tokens against each other on the same ids. Pure: the summary's
row records in, typed comparisons out (report/engines_report.py renders them)."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from benchmarks.analysis.row_records import RowRecords
from benchmarks.analysis.strongest import Requests
from benchmarks.core import metrics
from benchmarks.records.summary_row import SummaryRow


@dataclass(frozen=True)
class SideBySide:
    """One cell on a workload and temperature that has a strongest baseline: its TPOT and τ, its own engine's AR
    TPOT, its speedup over that AR and over the strongest baseline (on the compared half of the prompts), whether it
    is that baseline, shown slower than it, or ran apart from it (engines not interleaved: host drift between them is
    not seen)."""

    workload: str
    temperature: float
    engine: str
    label: str
    own_ar_tpot_ms: float | None
    tpot_ms: float | None
    tau: float | None
    over_own: metrics.Speedup | None  # None for a baseline, without a baseline of its own engine or shared prompts
    over_strongest: metrics.Speedup | None  # None without prompts shared with the strongest baseline
    strongest: bool
    slower: bool | None  # None: no interval to decide from
    apart: bool
    flip_shift: float | None = None  # apart: the host shift between the cells that would flip `slower`


@dataclass(frozen=True)
class AcrossEngines:
    """Two engines' greedy AR tokens on the prompts both were sent: how many identical, the first divergence."""

    workload: str
    engine_a: str
    engine_b: str
    identical: int
    prompts: int
    first_divergence: int | None


def _alone(u: RowRecords) -> bool:
    return u.level is None and u.cell.batch_size == 1


def side_by_side(units: list[RowRecords], rows: list[SummaryRow]) -> list[SideBySide]:
    """Every batch-1 cell beside the strongest baseline of its workload and temperature, in the report's order."""
    by_cell = {(u.cell_id, u.workload): (u, r) for u, r in zip(units, rows) if _alone(u) and u.strongest and u.reqs}
    base_of = {(u.cell.engine, u.workload, u.cell.temperature): r for u, r in by_cell.values() if not u.speculative}
    out = []
    for u, r in sorted(by_cell.values(), key=lambda ur: (ur[0].workload, ur[0].cell.temperature, ur[0].cell.engine,
                                                         ur[1].label)):
        assert u.strongest is not None
        best = u.strongest[0]
        own = base_of.get((u.cell.engine, u.workload, u.cell.temperature))
        out.append(SideBySide(u.workload, u.cell.temperature, u.cell.engine, r.label,
                              own.tpot_ms_mean if own else None, r.tpot_ms_mean, r.tau,
                              u.speedup if u.speculative else None, u.over_strongest, u.cell_id == best.cell_id,
                              best.slower(u.over_strongest), u.apart_from_strongest,
                              best.flip_shift(u.over_strongest) if u.apart_from_strongest else None))
    return out


def across_engines(units: list[RowRecords], reqs: dict[tuple[str, str], Requests]) -> list[AcrossEngines]:
    """The greedy batch-1 baselines of each workload, engine against engine, on the prompts both were sent."""
    bases = [u for u in units if not u.speculative and u.cell.temperature == 0 and _alone(u)]
    out = []
    for a, b in combinations(sorted(bases, key=lambda u: (u.workload, u.cell.engine)), 2):
        if a.workload != b.workload:
            continue
        ra, rb = reqs.get((a.cell_id, a.workload), {}), reqs.get((b.cell_id, b.workload), {})
        shared = sorted(set(ra) & set(rb))
        if not shared:
            continue
        firsts = [metrics.first_divergence(ra[s].output_ids, rb[s].output_ids) for s in shared]
        out.append(AcrossEngines(a.workload, a.cell.engine, b.cell.engine, sum(f is None for f in firsts),
                                 len(shared), min((f for f in firsts if f is not None), default=None)))
    return out
