"""The strongest baseline of a run: for each workload and temperature on which two or more engines measured a
baseline at batch 1, the fastest of them (lowest geometric-mean AR TPOT), chosen on a third of the prompts they all
measured so that the comparisons, on the other two thirds, do not reuse the data the choice was made on. Pure: typed
records in."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.records.records import RequestLine

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


@dataclass(frozen=True)
class Strongest:
    """The strongest baseline of a workload and temperature: its cell, the m baselines it was chosen from, and the
    prompts it was chosen on and those every comparison with it uses (disjoint parts of the prompts all the
    candidates measured: every third prompt in prompt order to choose, the others to compare; the choice reuses no
    compared prompt, so it does not favour itself, the winner's curse)."""

    cell_id: str
    chosen_on: frozenset[str]
    compared_on: frozenset[str]

    def slower(self, s: metrics.Speedup | None) -> bool | None:
        """Whether a cell is shown slower than this baseline: its speedup over it below 1 with one-sided p below
        SLOWER_ALPHA, on the compared prompts; None without an interval. The choice saw none of them, so the test
        keeps its size with no correction for the candidates. That holds where the cells ran interleaved (a host's
        speed is on both sides of each pair); where they ran apart it is not, and `flip_shift` states how far the
        host would have to have moved (docs/statistics.md, tests/analysis/test_strongest_host.py)."""
        if s is None or not s.has_interval:
            return None
        return s.p_below < SLOWER_ALPHA


    def flip_shift(self, s: metrics.Speedup | None) -> float | None:
        """For a cell that ran apart from this baseline (another engine, not interleaved), how far the host's speed
        would have to have moved between the two cells to flip `slower`, as a fraction of the cell's TPOT: shown
        slower, 1 / the interval's upper end − 1 (a host that slow during the cell alone explains the verdict); not
        shown slower, the upper end − 1 (a host that fast during the cell would hide a real slowdown; 0 or less: the
        cell is shown no faster either). None without an interval."""
        if s is None or not s.has_interval:
            return None
        return 1 / s.ci_high - 1 if self.slower(s) else s.ci_high - 1


SLOWER_ALPHA = 0.025  # one-sided: "slower" exactly when the 95 % interval lies below 1


def strongest_baselines(cells: dict[str, Cell], units: Iterable[tuple[str, str, int | None]],
                        reqs: dict[tuple[str, str], Requests]) -> dict[tuple[str, float], Strongest]:
    """(workload, temperature) → the fastest of two or more engines' batch-1 baselines (of the `units` (cell,
    workload, level) that hold requests), chosen by geometric-mean TPOT on a third of the prompts they share and
    compared on the rest (`Strongest`); none where they share fewer than two prompts."""
    groups: dict[tuple[str, float], list[str]] = defaultdict(list)
    for cid, workload, level in units:
        cell = cells[cid]
        if cell.method == "baseline" and level is None and cell.batch_size == 1 and reqs.get((cid, workload)):
            groups[(workload, cell.temperature)].append(cid)
    best = {}
    for (workload, t), ids in groups.items():
        if len(ids) < 2:
            continue
        first = reqs[(ids[0], workload)]
        common = sorted(set.intersection(*(set(reqs[(c, workload)]) for c in ids)),
                        key=lambda sha: first[sha].prompt_index)
        chosen_on = frozenset(common[0::3])  # a third to choose; two thirds, where the power lies, to compare
        compared_on = frozenset(common) - chosen_on
        if compared_on:
            cid = min(ids, key=lambda c: _geomean_tpot(reqs[(c, workload)], set(chosen_on)))
            best[(workload, t)] = Strongest(cid, chosen_on, compared_on)
    return best
