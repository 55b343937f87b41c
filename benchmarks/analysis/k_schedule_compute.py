"""The K to run at each batch size, derived from τ(K) and the step cost at (B, K), and checked against a measured grid.

    throughput(B, K) = B · τ(K) / step(B, K)      τ(0) = 1, step(B, 0) = the plain-decoding step
    best K at B      = argmax over K (K = 0 allowed) of throughput(B, K)
    margin           = throughput(best) / throughput(next best) − 1; its interval covers throughput(best) / the
                       largest other throughput − 1, with the best chosen on the same data (`choose`)

τ(K) comes from the largest K run, its accepted lengths cut at each K (`tau_curve`; the prefix rule of a block
drafter or of a greedy chain); it is assumed not to depend on B, except where an engine's static batch keeps its
finished rows until its last request ends (`TauCurve.in_batches`: τ as the batch's row-steps see it). The step cost
comes from one of four sources:
- the run's own step times at two or more K per B (`run_costs`, linear in K between the Ks measured);
- a chip's verify forward measured at each (B, K) by `study kflat --batch`, the draft priced at its roofline
  (`measured_verify_cost`);
- a chip's roofline (`chip_cost`), optionally calibrated on a plain-decoding curve (`calibrate`: a per-pass overhead
  and the fraction of the peak FLOP/s reached, fitted to AR step times at several B);
- for an autoregressive drafter (EAGLE-3), the verify forward plus K times a measured per-token draft time.
Rendering: report/k_schedule_render.py.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri, stdtrit

from benchmarks.analysis.cost_model_compute import Engine
from benchmarks.analysis.row_records import RowRecords
from benchmarks.core import metrics
from benchmarks.core.metrics import Interval
from benchmarks.decide import k_schedules
from benchmarks.hardware import roofline, step_cost, step_model
from benchmarks.records.records import RequestLine

StepCost = Callable[[int, int], Interval | None]  # (B, K) -> step ms, None where the source cannot say


@dataclass(frozen=True)
class Point:
    batch: int
    k: int
    tau: Interval
    step_ms: Interval
    tok_per_s: Interval


def throughput(batch: int, tau: Interval, step_ms: Interval) -> Interval:
    """B · τ / step (tokens/s of the batch), its bounds τ's and the step's at their extremes."""
    def rate(t: float, s: float) -> float:
        return batch * t / s * 1e3 if s > 0 else math.nan
    return Interval(rate(tau.value, step_ms.value), rate(tau.low, step_ms.high), rate(tau.high, step_ms.low),
                    min(tau.units, step_ms.units) if tau.units and step_ms.units else max(tau.units, step_ms.units))


@dataclass(frozen=True)
class Choice:
    """The best K at one B among the Ks priced, the next best, the margin between them, and every K's point."""

    batch: int
    best: Point
    runner_up: Point | None
    margin: Interval  # best / runner-up − 1
    points: list[Point]

    @property
    def decided(self) -> bool:
        """Whether the best K beats the next best beyond the uncertainty: the margin's lower bound above 0."""
        return self.runner_up is not None and self.margin.low > 0


TauRatio = Callable[[int, int, float], Interval]  # (K_a, K_b, level) -> τ(K_a) / τ(K_b), paired over the same units

LEVEL = 0.95  # the margin's two-sided level: each bound wrong at most 2.5 % of the time, the choice included
SERIAL_R = 0.7  # the serial correlation a step's batches, taken in time order, are allowed (a drifting host)


def _crit(level: float, units: int) -> float:
    """The two-sided Student-t critical value at `level` over `units` independent units (normal where unknown)."""
    return float(stdtrit(units - 1, 0.5 + level / 2)) if units >= 2 else float(ndtri(0.5 + level / 2))


def _log_se(iv: Interval, serial_r: float = 0.0) -> tuple[float, float]:
    """A 95 % Student-t interval's standard error on the log scale (where it is symmetric) and its degrees of
    freedom, its units' less one; widened for units in time order correlated up to `serial_r`
    (`metrics.serial_inflation`). (0, inf) for an exact figure; (NaN, NaN) where a bound is missing."""
    if iv.low == iv.high == iv.value:
        return 0.0, math.inf
    if not (iv.low > 0 and iv.high > 0 and math.isfinite(iv.low) and math.isfinite(iv.high)):
        return math.nan, math.nan
    se = (math.log(iv.high) - math.log(iv.low)) / (2 * _crit(LEVEL, iv.units))
    return se * metrics.serial_inflation(iv.units, serial_r), (iv.units - 1 if iv.units >= 2 else math.inf)


def _welch(parts: Sequence[tuple[float, float]], tail: float) -> float:
    """The one-sided half-width, wrong at most `tail` of the time, of a sum of independent log estimates given as
    (standard error, degrees of freedom): t at Welch–Satterthwaite's degrees of freedom (NaN where one is missing)."""
    var = sum(se ** 2 for se, _ in parts)
    if not math.isfinite(var):
        return math.nan
    if var == 0:
        return 0.0
    df = var ** 2 / sum(se ** 4 / df for se, df in parts if se > 0)
    crit = float(stdtrit(df, 1 - tail)) if math.isfinite(df) else float(ndtri(1 - tail))
    return crit * math.sqrt(var)


def _pair(best: Point, other: Point, tail: float, tau_ratio: TauRatio | None, serial_r: float
          ) -> tuple[float, float, float]:
    """throughput(best) / throughput(other) − 1 with one-sided bounds each wrong at most `tail` of the time: the log
    of τ's ratio (paired over its units where `tau_ratio` gives it, else the two τ apart) plus the log of the two
    steps' ratio (t at Welch–Satterthwaite's degrees of freedom from the steps' own units), their bounds combined as
    independent errors, each keeping its own shape (MOVER: a skewed τ ratio keeps its skew)."""
    steps = [_log_se(x.step_ms, serial_r) for x in (best, other)]
    step_half = _welch(steps, tail)
    centre_step = math.log(other.step_ms.value / best.step_ms.value)
    if tau_ratio is not None:
        t = tau_ratio(best.k, other.k, 1 - 2 * tail)
        value = t.value
        tau_low, tau_high = ((math.log(t.value / t.low), math.log(t.high / t.value)) if t.low > 0 and t.high > 0
                             else (math.nan, math.nan))
    else:
        value = best.tau.value / other.tau.value
        tau_low = tau_high = _welch([_log_se(x.tau) for x in (best, other)], tail)
    centre = math.log(value) + centre_step
    if not all(math.isfinite(x) for x in (step_half, tau_low, tau_high)):
        return math.exp(centre) - 1, math.nan, math.nan
    low = centre - math.hypot(tau_low, step_half)
    high = centre + math.hypot(tau_high, step_half)
    return math.exp(centre) - 1, math.exp(low) - 1, math.exp(high) - 1


def choose(batch: int, taus: Mapping[int, Interval], cost: StepCost, ks: Iterable[int] | None = None,
           tau_ratio: TauRatio | None = None, serial_r: float = SERIAL_R) -> Choice | None:
    """The best K at `batch` among `ks` (default: every K with a τ), K = 0 included where `taus` has it and the cost
    source prices it; None where no K is priced.

    The margin is chosen on the data that bound it, so its interval is selection-aware (multiple comparisons with the
    best, Bonferroni): the best against each other K, each bound at a one-sided 2.5 % / max(m − 1, 2) for m Ks priced
    (two tied Ks either of which the data may make best spend 2.5 % between them, so even m = 2 halves it); the lower
    bound the smallest of those against every other K, the upper the smallest upper bound. Both then hold, whichever
    K the data made best, with at least 95 % between them; it is decided when the lower bound is above 0. A measured
    step's batches ran in time order: its interval is widened for a correlation up to `serial_r` between them."""
    points = []
    for k in sorted(taus if ks is None else ks):
        step = cost(batch, k)
        if k in taus and step is not None and step.value > 0:
            points.append(Point(batch, k, taus[k], step, throughput(batch, taus[k], step)))
    if not points:
        return None
    ranked = sorted(points, key=lambda p: -p.tok_per_s.value)
    best, nxt = ranked[0], (ranked[1] if len(ranked) > 1 else None)
    if nxt is None:
        return Choice(batch, best, None, Interval(math.nan, math.nan, math.nan, 0), points)
    tail = (1 - LEVEL) / 2 / max(len(points) - 1, 2)
    pairs = [_pair(best, other, tail, tau_ratio, serial_r) for other in ranked[1:]]
    bounded = all(math.isfinite(p[1]) and math.isfinite(p[2]) for p in pairs)
    margin = Interval(pairs[0][0], min(p[1] for p in pairs) if bounded else math.nan,
                      min(p[2] for p in pairs) if bounded else math.nan, best.tau.units)
    return Choice(batch, best, nxt, margin, points)


def derive(batches: Sequence[int], taus: Mapping[int, Interval], cost: StepCost, ks: Iterable[int] | None = None,
           tau_ratio: TauRatio | None = None) -> list[Choice]:
    """`choose` at each B of `batches` (those where some K is priced)."""
    ks = None if ks is None else list(ks)
    return [c for c in (choose(b, taus, cost, ks, tau_ratio) for b in batches) if c is not None]


def derive_batched(batches: Sequence[int], curve: TauCurve, cells: Mapping[tuple[int, int], GridCell], cost: StepCost,
                   ks: Iterable[int] | None = None) -> list[Choice]:
    """`derive` with τ(K) at each B as the run's static batches there see it (`TauCurve.in_batches`) where the
    engine's batches keep their finished rows (the grid's `rows_kept`), the run's τ(K) elsewhere."""
    ks = None if ks is None else list(ks)
    out = []
    for b in batches:
        kept = next((c.rows_kept for (cb, _), c in sorted(cells.items()) if cb == b and c.rows_kept), None)
        taus, ratio = curve.in_batches(kept, b) if kept else (curve.taus(), curve.ratio)
        choice = choose(b, taus, cost, ks, ratio)
        if choice is not None:
            out.append(choice)
    return out


def schedule_of(choices: Sequence[Choice]) -> k_schedules.Schedule:
    """The schedule the choices give (each K from its B up to the next B chosen); B = 1 must be among them."""
    return k_schedules.from_choices({c.batch: c.best.k for c in choices})


# ---------------------------------------------------------------------------------------------------------------
# τ(K) and step costs from a run

@dataclass(frozen=True)
class TauCurve:
    """τ(K) for K = 0..k_max from accepted lengths cut at each K: per independent unit (a request at B = 1, its
    static batch above) the tokens its steps commit at each K and its steps."""

    counts: dict[int, list[float]]  # K -> per unit: Σ over its steps of 1 + min(a, K)
    steps: list[float]
    need: dict[str, list[float]]  # per request (prompt hash): the steps its tokens take at K = 0..k_max

    def at(self, k: int) -> Interval:
        """τ(K) pooled over steps, its interval over the units, bounded by 1 and K + 1."""
        t = metrics.rate_interval(self.counts[k], self.steps)
        return Interval(t.value, max(t.low, 1.0), min(t.high, k + 1.0), t.units)

    def taus(self) -> dict[int, Interval]:
        return {k: self.at(k) if k else metrics.exact(1.0) for k in self.counts}

    def ratio(self, a: int, b: int, level: float = 0.95) -> Interval:
        """τ(a) / τ(b) on the same units (the steps cancel): its interval paired over them, a studentized bootstrap's
        (`metrics.ratio_bootstrap_t`: the ratio of two Ks far apart is skewed)."""
        return metrics.ratio_bootstrap_t(self.counts[a], self.counts[b], level)

    def in_batches(self, groups: Sequence[Iterable[str]], batch: int) -> tuple[dict[int, Interval], TauRatio]:
        """τ(K) as static batches of `batch` rows see it when finished rows ride along until the batch's last request
        ends (each group: one batch's prompt hashes): a batch's tokens over `batch` × the steps of its longest
        request at K, each request's steps its tokens over its own τ(K); the interval over the batches, and the
        ratio of two Ks paired over them (its tokens cancel)."""
        kept = [[s for s in g if s in self.need] for g in groups]
        kept = [g for g in kept if g]
        tokens = [sum(self.need[s][0] for s in g) for g in kept]
        rows = {k: [batch * max(self.need[s][k] for s in g) for g in kept] for k in self.counts}

        def tau(k: int) -> Interval:
            t = metrics.rate_interval(tokens, rows[k])
            return Interval(t.value, t.low, min(t.high, k + 1.0), t.units)
        return {k: tau(k) for k in rows}, lambda a, b, level=0.95: metrics.ratio_bootstrap_t(rows[b], rows[a], level)


def tau_curve(requests: Sequence[RequestLine], k_max: int | None = None) -> TauCurve:
    """The TauCurve of requests run at K >= k_max (default: their K)."""
    k_max = k_max if k_max is not None else max(r.k for r in requests)
    units: dict[object, list[list[float]]] = {}  # per unit, per request: the tokens its steps commit at each K
    steps_of: dict[object, float] = {}
    need = {}
    for r in requests:
        if r.accept_lengths:
            a = r.accept_lengths
            made = [float(len(a) + sum(metrics.accepted_at(a, k))) for k in range(k_max + 1)]
            unit = r.prompt_sha256 if r.batch_index is None else r.batch_index
            units.setdefault(unit, []).append(made)
            steps_of[unit] = steps_of.get(unit, 0.0) + len(a)
            need[r.prompt_sha256] = [len(a) * made[-1] / m for m in made]  # its tokens / its τ(K)
    counts = {k: [sum(m[k] for m in u) for u in units.values()] for k in range(k_max + 1)}
    steps = list(steps_of.values())
    return TauCurve(counts, steps, need)


def unit_step_ms(reqs: Sequence[RequestLine]) -> list[float]:
    """One step time (ms) per independent unit: a static batch's own (`batch_step_s`, once per batch), a request's
    (`step_s`, or its decode span over its steps: verify steps, or tokens after the first)."""
    out: dict[object, float] = {}
    for r in reqs:
        e = r.extra or {}
        if r.batch_index is not None and e.get("batch_step_s"):
            out[("batch", r.batch_index)] = 1e3 * e["batch_step_s"]
            continue
        steps = len(r.accept_lengths) if r.accept_lengths is not None else r.n_out - 1
        step = e.get("step_s") or (r.decode_s / steps if steps > 0 else math.nan)
        out[r.prompt_sha256] = 1e3 * step
    return [v for v in out.values() if math.isfinite(v)]


@dataclass(frozen=True)
class GridCell:
    """One measured (B, K) of a run on one dataset: its step time and its throughput (output tokens of its batches
    over their decode spans), each with its interval over the batches."""

    batch: int
    k: int
    step_ms: Interval
    tok_per_s: Interval
    rows_kept: tuple[frozenset[str], ...] | None = None  # its batches' prompts where finished rows ride along (JAX)


def grid(units: Sequence[RowRecords], workload: str, engine: str) -> dict[tuple[int, int], GridCell]:
    """The measured (B, K) cells of a run's static-batch rows on one workload and engine (K = 0: the baseline;
    one speculative method), keyed by (B, K)."""
    out = {}
    for u in units:
        if u.workload != workload or u.cell.engine != engine or u.level is not None or not u.reqs:
            continue
        b = u.cell.batch_size or 1
        k = u.cell.k if u.speculative else 0
        spans = u.batches
        kept = (tuple(x.prompts for x in spans)
                if b > 1 and spans and all(x.wasted_row_steps is not None for x in spans) else None)
        out[(b, k)] = GridCell(b, k, metrics.mean_interval(unit_step_ms(u.reqs)),
                               metrics.rate_interval([x.tokens for x in spans], [x.span_s for x in spans]), kept)
    return out


def interpolated(points: Mapping[int, Interval], k: int) -> Interval | None:
    """The step at K from the Ks measured: itself, or linear between the two around it (value and bounds alike);
    None outside their range (a step at K = 0 is the plain one, never interpolated)."""
    if k in points:
        return points[k]
    ks = sorted(x for x in points if x > 0)
    if k <= 0 or not ks or not ks[0] < k < ks[-1]:
        return None
    lo = max(x for x in ks if x < k)
    hi = min(x for x in ks if x > k)
    w = (k - lo) / (hi - lo)
    a, b = points[lo], points[hi]
    def mix(x: float, y: float) -> float:
        return (1 - w) * x + w * y
    return Interval(mix(a.value, b.value), mix(a.low, b.low), mix(a.high, b.high), min(a.units, b.units))


def run_costs(cells: Mapping[tuple[int, int], GridCell], cost_ks: Iterable[int] | None = None) -> StepCost:
    """The step at (B, K) from the run's own step times at B: K = 0 the baseline's, other Ks linear between the Ks
    measured (only those of `cost_ks` where given: a held-out check of the Ks left out)."""
    keep = None if cost_ks is None else set(cost_ks)
    by_b: dict[int, dict[int, Interval]] = {}
    for (b, k), c in cells.items():
        if k == 0 or keep is None or k in keep:
            by_b.setdefault(b, {})[k] = c.step_ms

    def cost(batch: int, k: int) -> Interval | None:
        return interpolated(by_b.get(batch, {}), k)
    return cost


# ---------------------------------------------------------------------------------------------------------------
# Step costs at the roofline of a chip (or this CPU), calibrated or not, and an autoregressive drafter

def engine_at(engine: Engine, batch: int, k: int) -> Engine:
    """The engine at (B, K): the draft's queries K + 1 where the engine runs K + 1 (vLLM), its block otherwise."""
    queries = k + 1 if engine.queries == engine.k + 1 else engine.queries
    return dataclasses.replace(engine, batch=batch, k=k, queries=queries)


def step_at(engine: Engine, batch: int, k: int, ar_draft_ms: float | None = None) -> step_cost.Step:
    """The passes of a step at (B, K): the AR forward at K = 0; else the draft and the verify, or (an autoregressive
    drafter, priced by `ar_draft_ms` apart) the verify alone."""
    e = engine_at(engine, batch, k)
    if k == 0:
        return e.ar_step()
    if ar_draft_ms is not None:
        return step_cost.verify_step(e.target, k, e.context, e.itemsize, batch)
    return e.dflash_step()


def chip_cost(engine: Engine, device: roofline.Device, ar_draft_ms: float | None = None) -> StepCost:
    """The step at (B, K) on `device` (roofline, with its overhead per pass): exact figures, no interval; an
    autoregressive drafter adds K · ar_draft_ms."""
    def cost(batch: int, k: int) -> Interval:
        ms = roofline.step_seconds(step_at(engine, batch, k, ar_draft_ms), device) * 1e3
        return metrics.exact(ms + (k * ar_draft_ms if ar_draft_ms is not None and k else 0.0))
    return cost


def fitted_cost(engine: Engine, terms: step_model.Terms) -> StepCost:
    """The step at (B, K) priced by terms fitted to measured steps (benchmarks/hardware/step_model.py): exact figures
    of the fit; its held-out errors say how far they carry."""
    def cost(batch: int, k: int) -> Interval:
        return metrics.exact(terms.step_seconds(step_at(engine, batch, k), batch) * 1e3)
    return cost


def measured_verify_cost(verify: Mapping[tuple[int, int], Interval], engine: Engine, device: roofline.Device,
                         ar_draft_ms: float | None = None) -> StepCost:
    """The step at (B, K) from the verify forward measured on the chip at (B, K) (`study kflat --batch`: its median
    and interval, linear in K between the Ks measured; K = 0 is the plain step itself) plus the draft priced apart:
    the draft pass at `device`'s roofline, or K · `ar_draft_ms` for an autoregressive drafter."""
    by_b: dict[int, dict[int, Interval]] = {}
    for (b, k), t in verify.items():
        by_b.setdefault(b, {})[k] = t

    def cost(batch: int, k: int) -> Interval | None:
        forward = interpolated(by_b.get(batch, {}), k)
        if forward is None or k == 0:
            return forward
        draft = (k * ar_draft_ms if ar_draft_ms is not None else
                 roofline.pass_seconds(step_at(engine, batch, k).passes[0], device) * 1e3)
        return Interval(forward.value + draft, forward.low + draft, forward.high + draft, forward.units)
    return cost


@dataclass(frozen=True)
class Calibration:
    """A per-pass overhead and the fraction of the device's peak FLOP/s that fit a plain-decoding curve, and the fit's
    worst relative error on it."""

    overhead_ms: float
    flops_fraction: float
    worst_error: float
    points: dict[int, tuple[float, float]]  # B -> (measured, fitted) AR step ms

    def device(self, device: roofline.Device) -> roofline.Device:
        return dataclasses.replace(device, flops_per_s=device.flops_per_s * self.flops_fraction,
                                   overhead_s=self.overhead_ms / 1e3,
                                   source=f"{device.source}; calibrated: {self.overhead_ms:.3f} ms per pass, "
                                          f"{100 * self.flops_fraction:.2g} % of peak FLOP/s")


def calibrate(ar_ms: Mapping[int, float], engine: Engine, device: roofline.Device) -> Calibration:
    """Fit the overhead per pass (>= 0) and the fraction of peak FLOP/s (1e-5..1) so that the roofline of the AR step
    at each B matches `ar_ms` (B -> measured ms) in relative least squares: the fraction by a search over a log grid,
    the overhead in closed form at each."""
    batches = sorted(ar_ms)
    if len(batches) < 2:
        raise ValueError("a calibration needs AR step times at two or more batch sizes")
    y = np.array([ar_ms[b] for b in batches])
    steps = [engine_at(engine, b, 0).ar_step() for b in batches]
    best: tuple[float, float, float] | None = None
    for f in np.logspace(-5, 0, 501):
        dev = dataclasses.replace(device, flops_per_s=device.flops_per_s * f, overhead_s=0.0)
        base = np.array([roofline.step_seconds(s, dev) * 1e3 for s in steps])
        w = 1 / y ** 2  # relative errors: each B weighs alike
        o = max(0.0, float(np.sum(w * (y - base)) / np.sum(w)))
        err = float(np.sum(w * (y - base - o) ** 2))
        if best is None or err < best[0]:
            best = (err, float(f), o)
    assert best is not None
    _, f, o = best
    cal = Calibration(o, f, 0.0, {})
    fitted = {b: roofline.step_seconds(s, cal.device(device)) * 1e3 for b, s in zip(batches, steps)}
    points = {b: (ar_ms[b], fitted[b]) for b in batches}
    return Calibration(o, f, max(abs(p / m - 1) for m, p in points.values()), points)


def first_fall(choices: Sequence[Choice]) -> int | None:
    """The smallest B whose best K is below the best K at the smallest B."""
    if not choices:
        return None
    return next((c.batch for c in choices if c.best.k < choices[0].best.k), None)
