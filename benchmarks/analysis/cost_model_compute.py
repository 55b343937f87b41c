"""A cost model of DFlash decoding: predicted tokens/s and speedup against K, and the best K, from one run.

    τ(K)       = 1 + Σ_{i=1..K} p_i                 expected tokens committed per step (bonus included)
    step(K)    = t_draft(K) + t_verify(K) + t_host   time of one draft + verify + accept step
    tok/s(K)   = τ(K) / step(K)
    speedup(K) = τ(K) · t_AR / step(K)               t_AR = the AR baseline's TPOT

p_i (fraction of steps with >= i accepted drafts) does not depend on K for a block drafter: the drafts d_1..d_K are
the first K positions of one block, whatever K is, and acceptance is a prefix rule. So the p_i measured at the
largest K run predict τ at every smaller K (`gather`). Step times come from the JAX engine's breakdown
(`engine_options: {breakdown: true}`, `breakdown`), optionally shaped by a K-flat CSV (`kflat_verify`); predictions
are compared with the measured speedup in-sample and held-out (`group_table`). For a chip not measured, the step
times come from the roofline (benchmarks.hardware.roofline) at the τ of a run or a published table (`chip_rows`).
report/cost_model_render.py renders all of it.
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.config.pairing import baseline_cell_id
from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.exit_codes import BadInput
from benchmarks.core.guarded import read_csv_text
from benchmarks.core.numbers import as_float, is_number
from benchmarks.core.shapes import ModelConfig
from benchmarks.hardware import roofline, step_cost, step_model
from benchmarks.records.records import RequestLine
from benchmarks.records.summary_row import SummaryRow

BREAKDOWN_KEYS = ("draft_s", "verify_s", "host_s", "decode_steps")


def step_ms(draft_ms: float, verify_ms: float, host_ms: float) -> float:
    return draft_ms + verify_ms + host_ms


def interpolate(points: Mapping[int, float], k: int, hold: bool = False) -> float:
    """Linear in K between measured Ks; outside their range NaN, or (hold) the value at the nearest end."""
    ks = sorted(points)
    if not ks or (not hold and (k < ks[0] or k > ks[-1])):
        return math.nan
    return float(np.interp(k, ks, [points[x] for x in ks]))


@dataclass(frozen=True)
class Prediction:
    k: int
    tau: float
    draft_ms: float
    verify_ms: float
    host_ms: float
    step_ms: float
    tok_per_s: float
    speedup: float


def predict(per_position: Sequence[float], t_ar_ms: float, draft_ms: Mapping[int, float],
            verify_ms: Mapping[int, float], host_ms: float, ks: Sequence[int]) -> list[Prediction]:
    """Predictions at each K of ks for which p_1..p_K and t_verify(K) are known (others skipped).

    draft_ms / verify_ms map K to a measured per-step time. Other Ks: t_verify linear between measured Ks (none
    beyond them); t_draft linear between them and held at the nearest end beyond (one drafter pass at any K).
    """
    out = []
    for k in ks:
        d = interpolate(draft_ms, k, hold=True)
        v = interpolate(verify_ms, k)
        if k > len(per_position) or math.isnan(d) or math.isnan(v):
            continue
        t, s = metrics.tau_from_per_position(list(per_position), k), step_ms(d, v, host_ms)
        out.append(Prediction(k, t, d, v, host_ms, s, metrics.output_tok_per_s(t, s / 1000.0),
                              metrics.predicted_speedup(t, t_ar_ms, s)))
    return out


def best_k(predictions: Sequence[Prediction]) -> Prediction | None:
    return max(predictions, key=lambda p: p.speedup, default=None)


# ---------------------------------------------------------------------------------------------------------------
# From a run

@dataclass(frozen=True)
class Breakdown:
    """Per-step means (ms) of one dflash cell on one dataset."""

    draft_ms: float
    verify_ms: float
    host_ms: float
    steps: int


def breakdown(reqs: Sequence[RequestLine]) -> Breakdown | None:
    """Per-step draft / verify / host means from request records; None when any record lacks the breakdown."""
    extras = [r.extra or {} for r in reqs]
    if not reqs or not all(all(key in e for key in BREAKDOWN_KEYS) for e in extras):
        return None
    steps = sum(e["decode_steps"] for e in extras)
    if steps <= 0:
        return None
    per_step = {key: 1000.0 * sum(e[key] for e in extras) / steps for key in ("draft_s", "verify_s", "host_s")}
    return Breakdown(per_step["draft_s"], per_step["verify_s"], per_step["host_s"], steps)


KFLAT_NUMERIC = ("k", "context_len", "median_ms")  # the columns of a kflat.csv the model reads, with below_floor


def read_kflat(path: Path) -> Any:
    """A kflat.csv of `study kflat` as the model reads it (`guarded.read_csv_text`): its columns present, K >= 0,
    context >= 1 and times > 0, every number finite; ValueError naming the file and the line otherwise."""

    df = read_csv_text(path, KFLAT_NUMERIC)
    missing = [c for c in (*KFLAT_NUMERIC, "below_floor") if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a kflat.csv of `study kflat` (no column {', '.join(missing)})")
    if df.empty:
        raise ValueError(f"{path} holds no rows")
    for col, low, strict in (("k", 0, False), ("context_len", 1, False), ("median_ms", 0, True)):
        for i, raw in enumerate(df[col]):
            if not str(raw).strip() or (float(raw) <= low if strict else float(raw) < low):
                raise ValueError(f"{path}:{i + 2}: {col} {raw!r} is not a number {'>' if strict else '>='} {low}")
        df[col] = df[col].astype(float)
    df["below_floor"] = df["below_floor"].map(lambda v: str(v).strip().lower() in ("true", "1"))
    return df


def kflat_verify(kflat: Any, context_len: float, anchors: Mapping[int, float], ks: Sequence[int]) -> dict[int, float]:
    """t_verify at each K of ks within the K-flat table's range: its curve at the context length nearest
    context_len, times one scale, the median of measured / curve over the anchor Ks (K -> measured verify ms).
    Points below the floor (timing errors) are not used."""
    df = kflat[~kflat["below_floor"].astype(bool)]
    if df.empty:
        return {}
    ctx = min(df["context_len"].unique(), key=lambda c: abs(c - context_len))
    curve = {int(r.k): float(r.median_ms) for r in df[df["context_len"] == ctx].itertuples()}
    ratios = [ms / interpolate(curve, k) for k, ms in anchors.items() if not math.isnan(interpolate(curve, k))]
    if not ratios:
        return {}
    scale = float(np.median(ratios))
    return {k: scale * interpolate(curve, k) for k in ks if not math.isnan(interpolate(curve, k))}


def kflat_batch_points(kflat: Any, context_len: float, path: Path) -> dict[tuple[int, int], metrics.Interval]:
    """The verify forward's time at each (B, K) of a kflat.csv of `study kflat --batch`, at its context length nearest
    context_len: the median with its interval over the repeats (points below the floor left out); ValueError naming
    the file where it has no batch column or a bound that is not a finite time."""
    if "batch" not in kflat.columns:
        raise ValueError(f"{path} has no batch column: time the verify per batch size with `python -m benchmarks study "
                         "kflat --batch 1,4,...` on the chip")
    df = kflat[~kflat["below_floor"].astype(bool)]
    if df.empty:
        return {}
    ctx = min(df["context_len"].unique(), key=lambda c: abs(c - context_len))
    out = {}
    for i, r in df[df["context_len"] == ctx].iterrows():
        try:
            b, low, high, n = int(float(r["batch"])), float(r["ci_low"]), float(r["ci_high"]), int(float(r["repeats"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}:{int(i) + 2}: batch, ci_low, ci_high and repeats must be numbers") from None
        if b < 1 or not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"{path}:{int(i) + 2}: batch {r['batch']!r} or an interval bound is out of range")
        out[(b, int(r["k"]))] = metrics.Interval(float(r["median_ms"]), low, high, n)
    return out


@dataclass(frozen=True)
class Inputs:
    """The model's inputs gathered from a set of dflash cells of one (baseline, dataset) group."""

    per_position: list[float]
    p_source: str
    draft_ms: dict[int, float]
    verify_ms: dict[int, float]
    host_ms: float


def gather(spec: Sequence[SummaryRow], parts: Mapping[str, Breakdown], kflat: Any = None,
           position: float = 0.0, ks: Sequence[int] = ()) -> Inputs:
    """p_i of the largest K among `spec`, per-K draft / verify times, the step-weighted host time (host work per
    step: reading n and the committed tokens); with a K-flat table, t_verify at the other Ks of `ks` from its curve
    scaled to the verify times of `spec` (the engine's verify step adds sampling and host reads to the bare forward).
    """
    top = max(spec, key=lambda r: r.k)
    draft = {r.k: parts[r.cell_id].draft_ms for r in spec}
    verify = {r.k: parts[r.cell_id].verify_ms for r in spec}
    steps = sum(parts[r.cell_id].steps for r in spec)
    host = sum(parts[r.cell_id].host_ms * parts[r.cell_id].steps for r in spec) / steps
    if kflat is not None:
        verify = {**kflat_verify(kflat, position, verify, ks), **verify}
    return Inputs(json.loads(top.per_position or "[]"), top.label, draft, verify, host)


@dataclass(frozen=True)
class Group:
    """One (baseline, workload) group of a run's batch-1 dflash rows: the baseline's row, the dflash rows, each one's
    step breakdown, the mean decode position of their requests; or why the model cannot be computed for it."""

    workload: str
    engine: str
    base: SummaryRow | None
    spec: list[SummaryRow]
    parts: dict[str, Breakdown]
    position: float
    missing: str | None = None


def groups(rows: Sequence[SummaryRow], requests: Mapping[tuple[str, str], Sequence[RequestLine]],
           cells: Mapping[str, Cell]) -> list[Group]:
    """The cost model's groups of a run's summary rows (batch 1 only: a static batch is priced by `cost-model
    --batch`), with each dflash cell's requests on the workload (`requests`, by (cell, workload))."""
    rows = [r for r in rows if not r.batched]
    found: dict[tuple[str, str], list[SummaryRow]] = {}
    for r in rows:
        if r.method == "dflash" and not r.n_errors:
            found.setdefault((baseline_cell_id(cells[r.cell_id], cells) or "", r.dataset), []).append(r)
    out = []
    for (base_id, workload), spec in found.items():
        base = next((r for r in rows if r.cell_id == base_id and r.dataset == workload), None)
        engine = spec[0].engine
        reqs = {r.cell_id: list(requests.get((r.cell_id, workload), [])) for r in spec}
        every = [x for rs in reqs.values() for x in rs]
        position = float(np.mean([x.n_prompt_tokens + x.n_out / 2 for x in every])) if every else 0.0
        parts = {cid: breakdown(rs) for cid, rs in reqs.items()}
        missing = None
        if base is None or base.tpot_ms_mean is None or math.isnan(base.tpot_ms_mean):
            missing = "no AR baseline TPOT (add method baseline with the same engine and options)."
        elif any(not r.per_position for r in spec):
            missing = "no per-position acceptance p_i in the summary."
        elif any(b is None for b in parts.values()):
            missing = ("the records carry no draft / verify / host breakdown; run the JAX engine with "
                       "`engine_options: {breakdown: true}` (the vLLM engine does not expose one).")
        out.append(Group(workload, engine, base, spec, {c: b for c, b in parts.items() if b is not None}, position,
                         missing))
    return out


@dataclass(frozen=True)
class KRow:
    """One K run in a group: the prediction from every K's inputs (in-sample), the one from the other Ks only
    (held-out; NaN where they cannot give one), and the measured figures."""

    prediction: Prediction
    held_out: float
    tau_measured: float | None
    mean_ratio: float
    geomean: float | None


@dataclass(frozen=True)
class GroupTable:
    """A group's predictions against its measurements, and the predicted best K over every K up to the largest run."""

    t_ar_ms: float
    inputs: Inputs
    ks_run: list[int]
    rows: list[KRow]
    best: Prediction | None
    candidates: list[Prediction]
    kflat: bool


def group_table(g: Group, kflat: Any = None) -> GroupTable:
    """Predicted against measured over the Ks run (in-sample and held-out), and the predicted best K."""
    assert g.base is not None and g.missing is None
    t_ar = g.base.tpot_ms_mean
    run_ks = sorted(r.k for r in g.spec)
    full = gather(g.spec, g.parts)
    by_k = {r.k: r for r in g.spec}
    rows = []
    for pr in predict(full.per_position, t_ar, full.draft_ms, full.verify_ms, full.host_ms, run_ks):
        r = by_k[pr.k]
        others = [x for x in g.spec if x.k != pr.k]
        held = math.nan
        if others and max(x.k for x in others) >= pr.k:
            inp = gather(others, g.parts, kflat, g.position, [pr.k])
            hp = predict(inp.per_position, t_ar, inp.draft_ms, inp.verify_ms, inp.host_ms, [pr.k])
            held = hp[0].speedup if hp else math.nan
        rows.append(KRow(pr, held, r.tau, r.speedup_mean_ratio or math.nan, r.speedup))
    candidates = list(range(1, len(full.per_position) + 1))
    verify = full.verify_ms
    if kflat is not None:  # one smooth curve for every K, the Ks run included: no jumps between measured points
        verify = kflat_verify(kflat, g.position, full.verify_ms, candidates)
    preds = predict(full.per_position, t_ar, full.draft_ms, verify, full.host_ms, candidates)
    return GroupTable(t_ar, full, run_ks, rows, best_k(preds), preds, kflat is not None)


# ---------------------------------------------------------------------------------------------------------------
# On a chip nobody has measured yet: the roofline of benchmarks.hardware.roofline at a measured τ

@dataclass(frozen=True)
class Tau:
    """A measured τ on one dataset, with the speedup and times its source reports beside it (NaN where it does not)."""

    dataset: str
    tau: float
    published_speedup: float = math.nan
    published_ar_ms: float = math.nan
    published_step_ms: float = math.nan  # τ · its DFlash TPOT


@dataclass(frozen=True)
class Engine:
    """The decode steps an engine at the roofline runs: the target, the draft's layers and taps, K and the draft's
    queries, at a context length (the KV rows a step reads of each request), for `batch` requests at once."""

    target: ModelConfig
    draft_layers: ModelConfig
    num_taps: int
    k: int
    queries: int
    context: int
    itemsize: int
    batch: int = 1

    def ar_step(self) -> step_cost.Step:
        return step_cost.ar_step(self.target, self.context, self.itemsize, self.batch)

    def dflash_step(self) -> step_cost.Step:
        return step_cost.dflash_step(self.target, self.draft_layers, self.num_taps, self.k, self.queries,
                                     self.context, self.itemsize, self.batch)


def chip_rows(engine: Engine, device: Any, taus: Sequence[Tau]) -> list[dict[str, Any]]:
    """Per dataset: the predicted AR TPOT, DFlash step, tokens/s (of the whole batch) and speedup at its τ."""
    ar = roofline.step_seconds(engine.ar_step(), device) * 1e3
    step = roofline.step_seconds(engine.dflash_step(), device) * 1e3
    return [{"dataset": t.dataset, "tau": t.tau, "ar_ms": ar, "step_ms": step, "cost_ar_steps": step / ar,
             "tok_per_s": metrics.output_tok_per_s(engine.batch * t.tau, step / 1e3),
             "speedup": metrics.predicted_speedup(t.tau, ar, step), "published_speedup": t.published_speedup,
             "published_ar_ms": t.published_ar_ms, "published_step_ms": t.published_step_ms} for t in taus]


def first_batch(batches: Iterable[int], holds: Callable[[int], bool]) -> int | None:
    """The smallest batch of `batches` for which `holds(batch)`, or None."""
    return next((b for b in sorted(batches) if holds(b)), None)


def reference_taus(frame: Any) -> list[Tau]:
    """The per-dataset rows of a published table (results/reference/*.csv) that give τ, with speedups and TPOTs."""
    out = []
    for r in frame[(frame["stat"] == "value") & frame["tau"].notna()].itertuples():
        step = r.tau * r.tpot_ms if not math.isnan(r.tpot_ms) else math.nan
        out.append(Tau(r.dataset, float(r.tau), float(r.speedup), float(r.tpot_ar_ms), step))
    return out


def run_taus(rows: Sequence[SummaryRow]) -> list[Tau]:
    """The τ of each dataset of a run's largest-K dflash cell (summary rows), with its measured speedup, AR TPOT and
    step time."""
    spec = [r for r in rows if r.method == "dflash" and is_number(r.tau)]
    out = []
    for dataset in dict.fromkeys(r.dataset for r in spec):
        top = max((r for r in spec if r.dataset == dataset), key=lambda r: r.k)
        base = next((r for r in rows if r.method == "baseline" and r.dataset == dataset
                     and r.engine == top.engine), None)
        out.append(Tau(dataset, as_float(top.tau), float(top.speedup_mean_ratio or math.nan),
                       base.tpot_ms_mean if base else math.nan, as_float(top.tau) * top.tpot_ms_mean))
    return out


def grid_points(rows: Sequence[Mapping[str, Any]], engine: Engine) -> list[step_model.Measured]:
    """The measured steps of a device grid (`study device-grid`'s grid.csv: batch, context, k, status, step_ms) at
    `engine`'s shapes: plain decoding at K = 0, DFlash with its draft at K > 0; the points that did not run, and those
    at a write-behind window (an engine variant measured on the v5e and since removed, with another cache write than
    the one priced), left out."""
    out, seen = [], {}
    for line, r in grid_rows(rows):
        b, c, k, ms = r
        at = dataclasses.replace(engine, batch=b, context=c, k=max(k, 1))
        out.append(step_model.Measured(f"B={b} context={c} K={k}", at.ar_step() if k == 0 else at.dflash_step(), b,
                                       ms / 1e3))
        seen[(b, c, k)] = (line, ms)
    falling = [f"line {seen[small][0]} ({_point(small)}: {seen[small][1]:.4g} ms) against line {seen[big][0]} "
               f"({_point(big)}: {seen[big][1]:.4g} ms)"
               for small in seen for big in seen if small != big and small[2] == big[2]
               and small[0] <= big[0] and small[1] <= big[1] and seen[big][1] < seen[small][1] / FALL_TOLERANCE]
    if falling:
        raise BadInput(f"a step that takes less time at a larger batch or a longer context, which no chip does "
                       f"(more than {FALL_TOLERANCE - 1:.0%} below): {'; '.join(falling[:3])}"
                       + (f"; and {len(falling) - 3} more" if len(falling) > 3 else "")
                       + "; time the grid again (study device-grid)")
    return out


FALL_TOLERANCE = 1.25  # timing noise a larger point's step may fall below a smaller one's before the grid is refused
STEP_MS_MAX = 1e6  # a step past 1000 s is no measurement


def grid_rows(rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, tuple[int, int, int, float]]]:
    """The measured rows of a grid (status ok, no write-behind window) as (line, (batch, context, K, step ms)), or
    BadInput naming the line of one that no chip can produce: a batch, context or K that is no whole number in range,
    a step time that is not a finite number above 0 and below STEP_MS_MAX."""
    out, bad = [], []
    for i, r in enumerate(rows):
        window = float(r.get("write_behind") or 0)  # read as a number (a numpy one); empty: none
        if r["status"] != "ok" or (math.isfinite(window) and window):
            continue
        line = i + 2  # the header is line 1
        try:
            b, c, k, ms = (float(r[n]) for n in ("batch", "context", "k", "step_ms"))
        except (TypeError, ValueError):
            bad.append(f"line {line}: batch, context, k and step_ms must be numbers")
            continue
        whole = all(math.isfinite(x) and x == int(x) for x in (b, c, k))
        if not (whole and b >= 1 and c >= 1 and 0 <= k <= 1024):
            bad.append(f"line {line}: batch {b:g}, context {c:g}, K {k:g}: whole numbers, batch and context >= 1")
        elif not (math.isfinite(ms) and 0 < ms < STEP_MS_MAX):
            bad.append(f"line {line}: step_ms {ms:g} is no step time (a finite number of ms above 0, below "
                       f"{STEP_MS_MAX:g})")
        else:
            out.append((line, (int(b), int(c), int(k), ms)))
    if bad:
        raise BadInput(f"{len(bad)} row{'s' if len(bad) > 1 else ''} no chip can produce: {'; '.join(bad[:3])}"
                       + (f"; and {len(bad) - 3} more" if len(bad) > 3 else ""))
    return out


def curve_problems(step_ms: Mapping[int, float]) -> list[str]:
    """What no chip's plain-decoding curve (AR step ms per batch size) can show, one line per batch size: a step that
    is no finite time in (0, STEP_MS_MAX), a step shorter at a larger batch, or fewer tokens a second at a larger
    batch (each beyond FALL_TOLERANCE of timing noise); empty for a curve a fit may take."""
    bad = [f"B={b}: step {ms:g} ms is no step time" for b, ms in sorted(step_ms.items())
           if not (math.isfinite(ms) and 0 < ms < STEP_MS_MAX)]
    if bad:
        return bad
    ordered = sorted(step_ms.items())
    for (b0, ms0), (b1, ms1) in zip(ordered, ordered[1:]):
        if ms1 < ms0 / FALL_TOLERANCE:
            bad.append(f"B={b1}: its step ({ms1:.4g} ms) is shorter than B={b0}'s ({ms0:.4g} ms)")
        elif b1 / ms1 < b0 / ms0 / FALL_TOLERANCE:
            bad.append(f"B={b1}: {1e3 * b1 / ms1:.4g} tok/s, fewer than B={b0}'s {1e3 * b0 / ms0:.4g}")
    return bad


def _point(key: tuple[int, int, int]) -> str:
    return f"B={key[0]} context={key[1]} K={key[2]}"


def fitted_rows(engine: Engine, terms: step_model.Terms, taus: Sequence[Tau]) -> list[dict[str, Any]]:
    """`chip_rows` with the steps priced by fitted terms (benchmarks/hardware/step_model.py)."""
    ar = terms.step_seconds(engine.ar_step(), engine.batch) * 1e3
    step = terms.step_seconds(engine.dflash_step(), engine.batch) * 1e3
    return [{"dataset": t.dataset, "tau": t.tau, "ar_ms": ar, "step_ms": step,
             "tok_per_s": metrics.output_tok_per_s(engine.batch * t.tau, step / 1e3),
             "speedup": metrics.predicted_speedup(t.tau, ar, step)} for t in taus]
