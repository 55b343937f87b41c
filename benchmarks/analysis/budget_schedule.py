"""The draft tree's node budget to run at each batch size, from one tree run's τ(b) and a step cost priced by the
verify's rows, the way the K schedule is derived (analysis/k_schedule_compute.py, docs/k-schedule.md).

    rows(B, b)        = B · (b + 1)                   the verify's rows: each request's root and its b nodes
    step(B, b)        = the draft pass + a verify forward of rows(B, b)   (b = 0: the plain-decoding step)
    throughput(B, b)  = B · τ(b) / step(B, b)         τ(0) = 1
    best budget at B  = argmax over the budgets priced, 0 (no tree) included

τ(b) comes from the run at the largest budget, each step's accepted path cut at each smaller budget
(analysis/tree_curve.py); like τ(K) it is assumed not to depend on B. The choice, its margin over the next best and
that margin's selection-aware interval are the K schedule's own (`k_schedule_compute.choose`), with budgets in K's
place. The step comes from the run's own step times at two or more budgets per B (linear in the budget, so in the
rows, between them), a chip's roofline, or terms fitted to measured steps (hardware/step_model.py): the per-row
term prices the verify's rows, so a budget is nearly free while B · (b + 1) stays below the chip's ridge.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from benchmarks.analysis import k_schedule_compute as ksd
from benchmarks.analysis.cost_model_compute import Engine
from benchmarks.analysis.k_schedule_compute import Choice, GridCell, StepCost, TauCurve
from benchmarks.analysis.row_records import RowRecords
from benchmarks.core import metrics
from benchmarks.core.metrics import Interval
from benchmarks.hardware import roofline, step_cost, step_model


def rows(batch: int, budget: int) -> int:
    """The rows a step's verify forward multiplies: B · (budget + 1)."""
    return batch * (budget + 1)


def tree_step(engine: Engine, batch: int, budget: int) -> step_cost.Step:
    """The passes of a step at (B, budget): the AR forward at budget 0, else the draft over its block and the verify
    of budget + 1 rows per request."""
    e = ksd.engine_at(engine, batch, 0)
    if budget == 0:
        return e.ar_step()
    return step_cost.tree_step(e.target, e.draft_layers, e.num_taps, budget, e.queries, e.context, e.itemsize, batch)


def chip_cost(engine: Engine, device: roofline.Device) -> StepCost:
    """The step at (B, budget) on `device` at its roofline plus its overhead per pass: exact figures."""
    def cost(batch: int, budget: int) -> Interval:
        return metrics.exact(roofline.step_seconds(tree_step(engine, batch, budget), device) * 1e3)
    return cost


def fitted_cost(engine: Engine, terms: step_model.Terms) -> StepCost:
    """The step at (B, budget) priced by terms fitted to measured steps: exact figures of the fit."""
    def cost(batch: int, budget: int) -> Interval:
        return metrics.exact(terms.step_seconds(tree_step(engine, batch, budget), batch) * 1e3)
    return cost


def candidates(curve: TauCurve, budgets: Iterable[int]) -> list[int]:
    """The budgets to price: those asked that the curve reaches, and 0 (no tree)."""
    return sorted({0, *(b for b in budgets if b in curve.counts)})


def derive(batches: Sequence[int], curve: TauCurve, cost: StepCost, budgets: Iterable[int]) -> list[Choice]:
    """The best budget at each B of `batches` among `budgets` and 0, τ(b) from `curve`, its ratios paired over the
    curve's units (each Choice's `k` fields hold budgets)."""
    priced = candidates(curve, budgets)
    taus = {b: curve.at(b) if b else metrics.exact(1.0) for b in priced}
    return ksd.derive(batches, taus, cost, ks=priced, tau_ratio=curve.ratio)


def schedule(choices: Sequence[Choice]) -> dict[int, int]:
    """The budget to run from each B chosen up to the next (0: no tree)."""
    return {c.batch: c.best.k for c in choices}


def tree_grid(units: Sequence[RowRecords], workload: str, engine: str) -> dict[tuple[int, int], GridCell]:
    """The measured (B, budget) cells of a run's static-batch rows on one workload and engine (budget 0: the
    baseline; the tree cells at their budgets), keyed by (B, budget): their step times and throughputs."""
    out = {}
    for u in units:
        if u.workload != workload or u.cell.engine != engine or u.level is not None or not u.reqs:
            continue
        if u.speculative and not u.cell.tree_budget:
            continue
        b = u.cell.batch_size or 1
        spans = u.batches
        out[(b, u.cell.tree_budget)] = GridCell(
            b, u.cell.tree_budget, metrics.mean_interval(ksd.unit_step_ms(u.reqs)),
            metrics.rate_interval([x.tokens for x in spans], [x.span_s for x in spans]))
    return out

