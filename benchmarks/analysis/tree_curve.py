"""τ at every budget up to a draft-tree run's own, from that one run.

The tree at budget b' is the first b' nodes the best-first builder pops, so it is the top-b' subset of the run's tree,
and a step's accepted path at b' is the prefix of its accepted path whose nodes are among those b': each request's
`extra["tree_paths"]` gives, per step, the pop-order indices (1..budget, increasing) of the accepted path's nodes, so
the depth a step accepts at b' is the number of its path's indices ≤ b'. The curve is a `TauCurve` keyed by the
budget (b' = 0: the root alone, an AR step, τ = 1), with its intervals over the units as `tau_curve` gives them for K
(the prompts at B = 1, the static batches above) and its paired ratio between two budgets. Also the rows a row's
verify steps multiply per request (`rows_per_step`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from benchmarks.analysis.k_schedule_compute import TauCurve
from benchmarks.analysis.row_records import RowRecords
from benchmarks.core import metrics
from benchmarks.records.records import RequestLine

PATHS = "tree_paths"  # RequestLine.extra: per step, the accepted path's pop-order node indices, root excluded
ROWS = "tree_rows"  # RequestLine.extra: per step, the rows its verify multiplied (budget + 1)


def tree_paths(request: RequestLine, budget: int) -> list[list[int]] | None:
    """A request's accepted paths, step for step with its accept lengths; None where it records none. ValueError
    where they contradict its accept lengths, decrease along a path or leave 1..budget."""
    paths = (request.extra or {}).get(PATHS)
    if paths is None or request.accept_lengths is None:
        return None
    where = f"prompt {request.prompt_index}"
    if not isinstance(paths, list) or len(paths) != len(request.accept_lengths):
        raise ValueError(f"{where}: {PATHS} is not one path per step of its {len(request.accept_lengths)}")
    for step, (path, accepted) in enumerate(zip(paths, request.accept_lengths)):
        if not isinstance(path, list) or len(path) != accepted:
            raise ValueError(f"{where}, step {step}: a path of {accepted} nodes expected, got {path!r:.60}")
        if any(not isinstance(i, int) or not 1 <= i <= budget for i in path) or path != sorted(set(path)):
            raise ValueError(f"{where}, step {step}: node indices must increase within 1..{budget}: {path!r:.60}")
    return paths


def depths_at(paths: Sequence[Sequence[int]], budget: int) -> list[int]:
    """Each step's accepted depth had its tree been the first `budget` nodes: its path's indices ≤ budget."""
    return [sum(1 for i in path if i <= budget) for path in paths]


def tree_curve(requests: Sequence[RequestLine], budget: int) -> TauCurve:
    """The TauCurve of a run at node budget `budget` over b' = 0..budget, from the requests that record their paths."""
    units: dict[object, np.ndarray] = {}  # per unit: the tokens its steps commit at each b'
    steps_of: dict[object, float] = {}
    need: dict[str, list[float]] = {}
    for r in requests:
        paths = tree_paths(r, budget)
        if not paths:
            continue
        nodes = np.bincount([i for path in paths for i in path], minlength=budget + 1).astype(float)
        made = len(paths) + np.cumsum(nodes)  # at b': the steps' bonus tokens and their path nodes within b'
        unit = r.prompt_sha256 if r.batch_index is None else r.batch_index
        units[unit] = units.get(unit, 0.0) + made
        steps_of[unit] = steps_of.get(unit, 0.0) + len(paths)
        need[r.prompt_sha256] = list(len(paths) * made[-1] / made)  # its tokens / its τ(b'): its steps at b'
    counts = {b: [float(u[b]) for u in units.values()] for b in range(budget + 1)}
    return TauCurve(counts=counts, steps=list(steps_of.values()), need=need)


def ladder(budget: int, smallest: int = 16) -> list[int]:
    """The budgets a table shows for a run at `budget`: powers of two from `smallest` below it, and itself."""
    out, b = [], smallest
    while b < budget:
        out.append(b)
        b *= 2
    return [*out, budget]


def rows_per_step(u: RowRecords) -> float:
    """The rows a row's verify steps multiply per request, mean over its steps: a tree's recorded `tree_rows`
    (budget + 1 where a request does not record them), K + 1 for a chain, 1 for AR."""
    if not u.speculative:
        return 1.0
    if not u.cell.tree_budget:
        return float(u.cell.k + 1)
    per_step = [float(n) for r in u.reqs for n in ((r.extra or {}).get(ROWS)
                                                     or [u.cell.tree_budget + 1] * len(r.accept_lengths or []))]
    return metrics.mean(per_step) if per_step else float(u.cell.tree_budget + 1)


def row_tau(u: RowRecords, counted: float | None) -> float:
    """A row's τ: its counters' (`counted`, summary.csv `tau`), else pooled over its requests' accept lengths; 1 for
    AR."""
    if not u.speculative:
        return 1.0
    if counted is not None and math.isfinite(counted):
        return counted
    steps = [a for q in u.reqs for a in (q.accept_lengths or [])]
    return 1.0 + sum(steps) / len(steps) if steps else math.nan
