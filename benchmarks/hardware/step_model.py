"""A decode step's time from named terms, each fitted from measured steps and checked on steps it never saw.

    step    = the sum over its passes (an AR step: the target's forward; a DFlash step: the draft, then the verify)
    pass    = pass_s                                              a fixed cost per forward pass (dispatch, the loop)
            + batch · request_s                                   each request's own work per pass (its position,
                                                                  cache write, sampling, scheduling)
            + max(weight bytes / bandwidth,                       the matmuls: every weight read once per pass ...
                  FLOPs / (peak · efficiency(rows)))              ... or their FLOPs, at an efficiency that grows
                                                                  with the rows a matmul multiplies
            + other bytes / KV bandwidth                          every request's KV rows read and written, norms:
                                                                  attention streams them at its own rate
            + attention FLOPs / attention FLOP/s                  its scores and weighted sums (rows x context), at
                                                                  a rate of their own, at most the peak
    efficiency(rows) = rows / (rows + rows_half)                  half the peak at rows_half rows (0: the roofline)

What a step reads and computes is benchmarks.hardware.step_cost's; the terms are fitted to measured steps
(`fit`: relative least squares over all of them, from a start fitted on the memory-bound ones where there are
enough) and checked on points
left out (`held_out`). A fit that cannot tell its terms apart is refused with what to add (`FitError`). What each
source of measurements can and cannot separate: docs/roofline.md.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, minimize_scalar

from benchmarks.hardware.step_cost import Pass, Step

TERMS = ("pass_s", "request_s", "bytes_per_s", "kv_bytes_per_s", "attention_flops_per_s", "rows_half")
TOLERANCE = 0.10  # the held-out error a fit is held to


class FitError(ValueError):
    """The measurements cannot tell the terms apart; the message names what to add."""


@dataclass(frozen=True)
class Terms:
    """The named terms of a step, the peak FLOP/s the efficiency is a fraction of, and where each term came from."""

    pass_s: float
    request_s: float
    bytes_per_s: float
    kv_bytes_per_s: float
    attention_flops_per_s: float
    rows_half: float
    peak_flops: float
    sources: Mapping[str, str] = field(default_factory=dict)

    def efficiency(self, rows: int) -> float:
        """The fraction of the peak FLOP/s a matmul of `rows` rows reaches."""
        return rows / (rows + self.rows_half)

    def pass_seconds(self, p: Pass, batch: int) -> float:
        rows = max((m.rows for m in p.matmuls), default=1)
        matmuls = max(p.weight_bytes() / self.bytes_per_s,
                      sum(m.flops() for m in p.matmuls) / (self.peak_flops * self.efficiency(rows)))
        rest = p.other_bytes / self.kv_bytes_per_s + p.attention_flops / self.attention_flops_per_s
        return self.pass_s + batch * self.request_s + matmuls + rest

    def step_seconds(self, step: Step, batch: int) -> float:
        return sum(self.pass_seconds(p, batch) for p in step.passes)

    def lines(self) -> list[str]:
        """Each term in words, with its source."""
        def src(name: str) -> str:
            return f" ({self.sources[name]})" if name in self.sources else ""
        return [f"per pass {1e3 * self.pass_s:.3f} ms{src('pass_s')}",
                f"per request and pass {1e3 * self.request_s:.4f} ms{src('request_s')}",
                f"weights at {self.bytes_per_s / 1e9:.1f} GB/s{src('bytes_per_s')}",
                f"KV and other bytes at {self.kv_bytes_per_s / 1e9:.1f} GB/s{src('kv_bytes_per_s')}",
                f"attention's FLOPs at {self.attention_flops_per_s / 1e12:.3g} TFLOP/s "
                f"({100 * self.attention_flops_per_s / self.peak_flops:.3g} % of the peak)"
                f"{src('attention_flops_per_s')}",
                f"FLOP efficiency rows / (rows + {self.rows_half:.0f}) of {self.peak_flops / 1e12:.1f} TFLOP/s "
                f"({100 * self.efficiency(16):.0f} % at 16 rows, {100 * self.efficiency(256):.0f} % at 256)"
                f"{src('rows_half')}"]


@dataclass(frozen=True)
class Measured:
    """One measured step: what it reads and computes, its batch, its seconds, and a label for tables."""

    label: str
    step: Step
    batch: int
    seconds: float


def _memory_bound(point: Measured, peak_flops: float, bytes_per_s: float) -> bool:
    """Whether the roofline at the nominal peak and bandwidth leaves every pass's FLOPs under half its weight read."""
    return all(sum(m.flops() for m in p.matmuls) / peak_flops < 0.5 * p.weight_bytes() / bytes_per_s
               for p in point.step.passes)


def _design(point: Measured) -> tuple[float, float, float, float]:
    """The memory-bound step as a linear function of (pass_s, request_s, 1 / bandwidth, 1 / KV bandwidth)."""
    passes = len(point.step.passes)
    return passes, passes * point.batch, point.step.weight_bytes(), point.step.bytes() - point.step.weight_bytes()


def _rows(point: Measured) -> int:
    """The rows of the widest matmul a step multiplies."""
    return max((m.rows for p in point.step.passes for m in p.matmuls), default=1)


def identify(points: Sequence[Measured]) -> str | None:
    """What the points lack for every term to be fitted, in words naming what to add; None when they suffice."""
    if len(points) < len(TERMS):
        return (f"{len(points)} step(s): add steps to make {len(TERMS)} or more (one per term): plain decoding at two "
                f"or more batch sizes and contexts, and speculative steps of few and of many rows")
    if len({p.batch for p in points}) < 2:
        return "the steps are all at one batch size: add one at another batch size (the per-request term)"
    if len({p.step.weight_bytes() for p in points}) < 2:
        return ("the steps all read the same weights, so the per-pass cost and the weights' bandwidth are one number: "
                "add a speculative step (it reads the draft's weights too)")
    if np.linalg.matrix_rank(np.array([_design(p) for p in points])) < 4:
        return ("the steps do not separate the KV bytes from the per-request cost: add steps at another context (the "
                "same batch reading more KV rows)")
    if max(_rows(p) for p in points) < 8 * min(_rows(p) for p in points):
        return ("every step multiplies about as many rows: add steps of many rows (a large K at a large batch) for "
                "the FLOP efficiency")
    return None


def fit(points: Sequence[Measured], peak_flops: float, nominal_bytes_per_s: float,
        sources: Mapping[str, str] | None = None, ceiling: bool = False, rows_half: float | None = None) -> Terms:
    """The terms that best reproduce `points` in relative least squares (each step's error as a fraction of it),
    started from the memory-bound steps' linear fit. FitError where the points cannot tell the terms apart.

    rows_half: the per-row term as measured (the device's matmul rates by row count), held there; None: fitted.
    ceiling: no bandwidth above the nominal one (a chip's datasheet figure, which nothing reads faster than). Where
    every step reads the weights once, the per-pass cost and the weights' bandwidth trade against each other; a
    chip's fit is held to bandwidths it can have."""
    problem = identify(points)
    if problem:
        raise FitError(problem)
    memory = [p for p in points if _memory_bound(p, peak_flops, nominal_bytes_per_s)]
    if len(memory) < 4 or np.linalg.matrix_rank(np.array([_design(p) for p in memory])) < 4:
        memory = list(points)  # too few memory-bound steps to start from: every step, its FLOPs left to the fit
    a = np.array([_design(p) for p in memory]) / np.array([[p.seconds] for p in memory])
    start, *_ = np.linalg.lstsq(a, np.ones(len(memory)), rcond=None)
    pass_s, request_s = max(float(start[0]), 0.0), max(float(start[1]), 0.0)
    inv_bw = float(start[2]) if start[2] > 0 else 1 / nominal_bytes_per_s
    inv_kv = float(start[3]) if start[3] > 0 else inv_bw

    def terms_of(x: np.ndarray) -> Terms:
        return Terms(float(x[0]), float(x[1]), 1 / float(x[2]), 1 / float(x[3]), 1 / float(x[5]),
                     float(math.exp(x[4])), peak_flops)

    def residuals(x: np.ndarray) -> np.ndarray:
        t = terms_of(x)
        return np.array([t.step_seconds(p.step, p.batch) / p.seconds - 1 for p in points])

    inv_attn = 1 / peak_flops
    scale = np.array([max(pass_s, 1e-6), max(request_s, 1e-7), inv_bw, inv_kv, 1.0, inv_attn])
    low = [0, 0, inv_bw / 10, min(inv_kv, inv_bw) / 10, math.log(1e-3), inv_attn]
    high = [np.inf, np.inf, inv_bw * 10, max(inv_kv, inv_bw) * 100, math.log(1e6), inv_attn * 1e3]
    if ceiling:
        low[2:4] = [max(v, 1 / nominal_bytes_per_s) for v in low[2:4]]
        high[2:4] = [max(v, 1 / nominal_bytes_per_s) for v in high[2:4]]
    starts: tuple[float, ...] = (1.0, 32.0, 256.0, 2048.0)
    if rows_half is not None:  # held at the measured value (a bound of no width is refused: one of 1e-9 in its log)
        low[4], high[4], starts = math.log(rows_half) - 1e-9, math.log(rows_half) + 1e-9, (rows_half,)
    best = min((least_squares(residuals, np.clip([pass_s, request_s, inv_bw, inv_kv, math.log(h), inv_attn], low, high),
                              bounds=(low, high), x_scale=scale) for h in starts),
               key=lambda r: r.cost)
    return dataclasses.replace(terms_of(best.x), sources=dict(sources or {}))


@dataclass(frozen=True)
class Check:
    """A point predicted by terms fitted without it."""

    label: str
    measured_s: float
    predicted_s: float | None  # None where the rest could not be fitted (what it lacked: `why`)
    why: str = ""

    @property
    def error(self) -> float | None:
        return None if self.predicted_s is None else self.predicted_s / self.measured_s - 1


def held_out(points: Sequence[Measured], peak_flops: float, nominal_bytes_per_s: float,
             fitted_on: Callable[[Measured], bool] | None = None, ceiling: bool = False,
             rows_half: float | None = None) -> list[Check]:
    """Each point predicted without it: leave one out (default), or, with `fitted_on`, every point it rejects
    predicted by the terms fitted on those it keeps (`fit`'s ceiling and measured rows_half as given)."""
    if fitted_on is not None:
        kept = [p for p in points if fitted_on(p)]
        try:
            terms = fit(kept, peak_flops, nominal_bytes_per_s, ceiling=ceiling, rows_half=rows_half)
        except FitError as exc:
            return [Check(p.label, p.seconds, None, str(exc)) for p in points if not fitted_on(p)]
        return [Check(p.label, p.seconds, terms.step_seconds(p.step, p.batch)) for p in points if not fitted_on(p)]
    out = []
    for i, p in enumerate(points):
        try:
            terms = fit([q for j, q in enumerate(points) if j != i], peak_flops, nominal_bytes_per_s, ceiling=ceiling,
                        rows_half=rows_half)
        except FitError as exc:
            out.append(Check(p.label, p.seconds, None, str(exc)))
            continue
        out.append(Check(p.label, p.seconds, terms.step_seconds(p.step, p.batch)))
    return out


def check_table(checks: Sequence[Check], tolerance: float) -> list[str]:
    """The held-out points as a Markdown table (measured, predicted, error), and the verdict against `tolerance`."""
    lines = ["| point | measured ms | predicted ms | error |", "|---|---|---|---|"]
    for c in checks:
        error = c.error
        if c.predicted_s is None or error is None:
            lines.append(f"| {c.label} | {1e3 * c.measured_s:.3f} | – | not predicted: {c.why} |")
        else:
            lines.append(f"| {c.label} | {1e3 * c.measured_s:.3f} | {1e3 * c.predicted_s:.3f} | {100 * error:+.1f} % |")
    errors = [abs(c.error) for c in checks if c.error is not None]
    worst = max(errors, default=math.nan)
    median = float(np.median(errors)) if errors else math.nan
    over = [c.label for c in checks if c.error is not None and abs(c.error) > tolerance]
    lines.append("")
    if not errors:
        lines.append("held out: no point could be predicted from the others (each line says why); not checked")
        return lines
    lines.append(f"held out: worst error {100 * worst:.1f} %, median {100 * median:.1f} % over {len(errors)} "
                 "point(s); "
                 + (f"ABOVE the {100 * tolerance:.0f} % target at {', '.join(over)}" if over
                    else f"every one within the {100 * tolerance:.0f} % target"))
    return lines


def calibrate(ar_steps: Sequence[Measured], peak_flops: float, bytes_per_s: float, rows_half: float,
              sources: Mapping[str, str]) -> Terms:
    """Terms from plain-decoding steps alone (a published tok/s curve at one context, say): the per-pass and the
    per-request costs fitted in relative least squares (>= 0), the rest given. Such a curve cannot separate the
    per-pass cost from the weights' bandwidth, nor the per-request cost from the KV bytes' (both grow with the batch
    alone), nor see the FLOP efficiency (plain decoding of a few rows is memory-bound): `bytes_per_s` (both
    bandwidths) and `rows_half` are what the caller assumes, and `sources` says so."""
    if len({p.batch for p in ar_steps}) < 2:
        raise FitError("a plain-decoding curve at one batch size: give it at two or more (the per-request cost is "
                       "its slope)")
    base = Terms(0.0, 0.0, bytes_per_s, bytes_per_s, peak_flops, rows_half, peak_flops)
    a = np.array([[len(p.step.passes), len(p.step.passes) * p.batch] for p in ar_steps]) \
        / np.array([[p.seconds] for p in ar_steps])
    rest = np.array([1 - base.step_seconds(p.step, p.batch) / p.seconds for p in ar_steps])
    (pass_s, request_s), *_ = np.linalg.lstsq(a, rest, rcond=None)
    if request_s < 0:  # the bytes alone grow faster than the curve: no per-request cost, the intercept refitted
        request_s = 0.0
        pass_s = float(np.sum(a[:, 0] * rest) / np.sum(a[:, 0] ** 2))
    return Terms(max(float(pass_s), 0.0), float(request_s), bytes_per_s, bytes_per_s, peak_flops, rows_half, peak_flops,
                 dict(sources))


def calibration_held_out(ar_steps: Sequence[Measured], peak_flops: float, bytes_per_s: float, rows_half: float,
                         sources: Mapping[str, str]) -> list[Check]:
    """Each point of a plain-decoding curve predicted by `calibrate` on the others (leave one out); a point whose
    others cannot be calibrated (one batch size left) says why."""
    out = []
    for i, p in enumerate(ar_steps):
        try:
            terms = calibrate([q for j, q in enumerate(ar_steps) if j != i], peak_flops, bytes_per_s, rows_half,
                              sources)
        except FitError as exc:
            out.append(Check(p.label, p.seconds, None, str(exc)))
            continue
        out.append(Check(p.label, p.seconds, terms.step_seconds(p.step, p.batch)))
    return out


def rows_half_from_rates(rates: Mapping[int, float], peak_flops: float) -> float:
    """The `rows_half` whose efficiency rows / (rows + rows_half) of `peak_flops` best reproduces the FLOP/s measured
    at each row count (relative least squares, over 1e-3 to 1e6 rows): the per-row term of a measured device."""
    if not rates:
        raise FitError("no matmul rate measured: time the matmuls by row count (study device-grid --matmul-gb)")

    def cost(log_h: float) -> float:
        h = math.exp(log_h)
        return sum((r / (r + h) * peak_flops / rate - 1) ** 2 for r, rate in rates.items())

    found = minimize_scalar(cost, bounds=(math.log(1e-3), math.log(1e6)), method="bounded")
    return float(math.exp(found.x))
