"""Engines side by side: for each workload and temperature on which two or more engines measured a baseline at batch
1, the strongest baseline (the lowest geometric-mean AR TPOT over the prompts every one of those baselines measured);
each cell's speedup over its own engine's AR and over that strongest baseline, paired on the same prompt hashes
(core.metrics.paired_speedup); and the engines' greedy AR tokens against each other on the same ids. Pure: typed
records in, typed comparisons out (analysis/engines_report.py renders them)."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations

from benchmarks.analysis.row_records import RowRecords, paired_tpot_speedup
from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.records import RequestLine

Requests = dict[str, RequestLine]  # a cell's batch-1 requests on a workload, by prompt hash


def alone_requests(requests: Iterable[RequestLine]) -> dict[tuple[str, str], Requests]:
    """Requests measured one at a time (no serving level), by (cell, workload), each by prompt hash."""
    out: dict[tuple[str, str], Requests] = defaultdict(dict)
    for r in requests:
        if r.level is None:
            out[(r.cell_id, r.workload)][r.prompt_sha256] = r
    return out


def _geomean_tpot(reqs: Requests, prompts: set[str]) -> float:
    values = [t for s in prompts if (t := reqs[s].tpot_ms)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def strongest_baselines(cells: dict[str, Cell], units: Iterable[tuple[str, str, int | None]],
                        reqs: dict[tuple[str, str], Requests]) -> dict[tuple[str, float], str]:
    """(workload, temperature) → the cell id of the fastest baseline among two or more engines' batch-1 baselines
    (of the `units` (cell, workload, level) that hold requests)."""
    groups: dict[tuple[str, float], list[str]] = defaultdict(list)
    for cid, workload, level in units:
        cell = cells[cid]
        if cell.method == "baseline" and level is None and cell.batch_size == 1 and reqs.get((cid, workload)):
            groups[(workload, cell.temperature)].append(cid)
    best = {}
    for (workload, t), ids in groups.items():
        if len(ids) < 2:
            continue
        common = set.intersection(*(set(reqs[(c, workload)]) for c in ids))
        if common:
            best[(workload, t)] = min(ids, key=lambda c: _geomean_tpot(reqs[(c, workload)], common))
    return best


@dataclass(frozen=True)
class SideBySide:
    """One cell on a workload and temperature that has a strongest baseline: its TPOT and τ, its own engine's AR
    TPOT, its speedup over that AR and over the strongest baseline, and whether it is that baseline or slower."""

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
    slower: bool


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


def side_by_side(units: list[RowRecords], rows: list[dict], best: dict[tuple[str, float], str],
                 reqs: dict[tuple[str, str], Requests]) -> list[SideBySide]:
    """Every batch-1 cell beside the strongest baseline of its workload and temperature, in the report's order."""
    by_cell = {(u.cell_id, u.workload): (u, r) for u, r in zip(units, rows) if _alone(u)}
    base_of = {(u.cell.engine, u.workload, u.cell.temperature): u.cell_id for u, _ in by_cell.values()
               if not u.speculative}
    out = []
    for (workload, t), best_id in sorted(best.items()):
        strongest = reqs[(best_id, workload)]
        for (cell_id, w), (u, r) in sorted(by_cell.items(), key=lambda kv: (kv[1][0].cell.engine, kv[1][1]["label"])):
            if w != workload or u.cell.temperature != t or not reqs.get((cell_id, w)):
                continue
            own = base_of.get((u.cell.engine, workload, t))
            mine = list(reqs[(cell_id, w)].values())
            over_best = paired_tpot_speedup(list(strongest.values()), mine)
            over_own = (paired_tpot_speedup(list(reqs[(own, workload)].values()), mine)
                        if u.speculative and own is not None else None)
            out.append(SideBySide(workload, t, u.cell.engine, r["label"],
                                  by_cell[(own, workload)][1]["tpot_ms_mean"] if own else None, r["tpot_ms_mean"],
                                  r["tau"], over_own, over_best, cell_id == best_id,
                                  over_best is not None and over_best.geomean < 1))
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
