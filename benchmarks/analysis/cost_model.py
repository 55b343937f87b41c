"""A cost model of DFlash decoding: predicted tokens/s and speedup against K, and the best K, from one run.

    τ(K)       = 1 + Σ_{i=1..K} p_i                 expected tokens committed per step (bonus included)
    step(K)    = t_draft(K) + t_verify(K) + t_host   time of one draft + verify + accept step
    tok/s(K)   = τ(K) / step(K)
    speedup(K) = τ(K) · t_AR / step(K)               t_AR = the AR baseline's TPOT

p_i (fraction of steps with >= i accepted drafts) does not depend on K for a block drafter: the drafts d_1..d_K are
the first K positions of one block, whatever K is, and acceptance is a prefix rule. So the p_i measured at the
largest K run predict τ at every smaller K (`gather`). Step times come from the JAX engine's breakdown
(`engine_options: {breakdown: true}`, `breakdown`), optionally shaped by a K-flat CSV (`kflat_verify`); predictions
are compared with the measured speedup in-sample and held-out (`cost_model_markdown`). For a chip not measured, the
step times come from the roofline (benchmarks.core.roofline) at the τ of a run or a published table (`chip_markdown`).
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.core import metrics, roofline, step_cost
from benchmarks.core.markdown import fmt
from benchmarks.core.numbers import is_number
from benchmarks.core.shapes import ModelConfig

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


def breakdown(records: Sequence[dict[str, Any]]) -> Breakdown | None:
    """Per-step draft / verify / host means from request records; None when any record lacks the breakdown."""
    reqs = [r for r in records if r.get("kind") == "request"]
    extras = [r.get("extra") or {} for r in reqs]
    if not reqs or not all(all(key in e for key in BREAKDOWN_KEYS) for e in extras):
        return None
    steps = sum(e["decode_steps"] for e in extras)
    if steps <= 0:
        return None
    per_step = {key: 1000.0 * sum(e[key] for e in extras) / steps for key in ("draft_s", "verify_s", "host_s")}
    return Breakdown(per_step["draft_s"], per_step["verify_s"], per_step["host_s"], steps)


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


def _pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:+.1f} %"


@dataclass(frozen=True)
class Inputs:
    """The model's inputs gathered from a set of dflash cells of one (baseline, dataset) group."""

    per_position: list[float]
    p_source: str
    draft_ms: dict[int, float]
    verify_ms: dict[int, float]
    host_ms: float


def gather(spec: Sequence[dict[str, Any]], parts: Mapping[str, Breakdown], kflat: Any = None,
           position: float = 0.0, ks: Sequence[int] = ()) -> Inputs:
    """p_i of the largest K among `spec`, per-K draft / verify times, the step-weighted host time (host work per
    step: reading n and the committed tokens); with a K-flat table, t_verify at the other Ks of `ks` from its curve
    scaled to the verify times of `spec` (the engine's verify step adds sampling and host reads to the bare forward).
    """
    top = max(spec, key=lambda r: r["k"])
    draft = {r["k"]: parts[r["cell_id"]].draft_ms for r in spec}
    verify = {r["k"]: parts[r["cell_id"]].verify_ms for r in spec}
    steps = sum(parts[r["cell_id"]].steps for r in spec)
    host = sum(parts[r["cell_id"]].host_ms * parts[r["cell_id"]].steps for r in spec) / steps
    if kflat is not None:
        verify = {**kflat_verify(kflat, position, verify, ks), **verify}
    return Inputs(json.loads(top["per_position"]), top["label"], draft, verify, host)


def _group_markdown(dataset: str, engine: str, base: dict[str, Any], spec: list[dict[str, Any]],
                    parts: dict[str, Breakdown], records: Sequence[dict[str, Any]], kflat: Any) -> list[str]:
    """One (baseline, dataset) group: predicted vs measured over the Ks run, and the predicted best K."""
    t_ar = base["tpot_ms_mean"]
    run_ks = sorted(r["k"] for r in spec)
    ids = {r["cell_id"] for r in spec}
    reqs = [x for x in records if x.get("kind") == "request" and x["cell_id"] in ids and x["dataset"] == dataset]
    position = float(np.mean([x["n_prompt_tokens"] + x["n_out"] / 2 for x in reqs])) if reqs else 0.0
    full = gather(spec, parts)
    verify_from = "the K-flat curve scaled to them" if kflat is not None else "interpolated"
    lines = [f"**{dataset}** ({engine}): t_AR = {t_ar:.3f} ms/token; t_host = {full.host_ms:.3f} ms/step; "
             f"p_i from {full.p_source}; mean decode position {position:.0f}.",
             "In-sample: each K's own draft and verify times, the mean host time (checks that the step "
             "decomposition accounts for the measured TPOT). Held-out: inputs from the other Ks only (p_i of a "
             f"larger K; t_verify {verify_from}; t_draft interpolated or held), a true prediction; – where the "
             "other Ks cannot give one.", ""]
    table = ["| K | τ predicted | τ measured | draft ms | verify ms | step ms | tok/s predicted | speedup in-sample "
             "| speedup held-out | speedup measured (mean-ratio) | error in-sample | error held-out "
             "| speedup measured (geomean) |", "|" + "---|" * 13]
    by_k = {r["k"]: r for r in spec}
    for pr in predict(full.per_position, t_ar, full.draft_ms, full.verify_ms, full.host_ms, run_ks):
        r = by_k[pr.k]
        others = [x for x in spec if x["k"] != pr.k]
        held = math.nan
        if others and max(x["k"] for x in others) >= pr.k:
            inp = gather(others, parts, kflat, position, [pr.k])
            hp = predict(inp.per_position, t_ar, inp.draft_ms, inp.verify_ms, inp.host_ms, [pr.k])
            held = hp[0].speedup if hp else math.nan
        meas = r["speedup_mean_ratio"] or math.nan
        table.append(f"| {pr.k} | {pr.tau:.2f} | {fmt(r['tau'])} | {pr.draft_ms:.3f} | {pr.verify_ms:.3f} | "
                     f"{pr.step_ms:.3f} | {pr.tok_per_s:.1f} | {pr.speedup:.2f} | {fmt(held)} | {fmt(meas)} | "
                     f"{_pct(pr.speedup / meas - 1)} | {_pct(held / meas - 1)} | "
                     f"{fmt(r['speedup'])} |")
    lines += table
    candidates = list(range(1, len(full.per_position) + 1))
    source = f"measured at K = {', '.join(map(str, run_ks))}, linear in between"
    verify = full.verify_ms
    if kflat is not None:  # one smooth curve for every K, the Ks run included: no jumps between measured points
        verify = kflat_verify(kflat, position, full.verify_ms, candidates)
        source = f"the K-flat curve scaled to the verify times measured at K = {', '.join(map(str, run_ks))}"
    preds = predict(full.per_position, t_ar, full.draft_ms, verify, full.host_ms, candidates)
    best = best_k(preds)
    if best is not None:
        lines.append(f"\nPredicted best K: **{best.k}** (speedup {best.speedup:.2f}×, τ {best.tau:.2f}, "
                     f"step {best.step_ms:.3f} ms) among K = {preds[0].k}..{preds[-1].k}; t_verify {source}.")
    return lines


def cost_model_markdown(rows: list[dict[str, Any]], records: list[dict[str, Any]], manifest: dict[str, Any],
                        kflat: Any = None) -> str:
    """Predicted vs measured speedup for the Ks run, and the predicted best K; or what input is missing.

    Predictions are compared with the measured mean-ratio speedup (mean TPOT_AR / mean TPOT_M, the same ratio-of-means
    form as the model) and shown beside the geometric mean, twice: in-sample (each K's own step times: does the
    decomposition account for the measured TPOT?) and held-out (inputs from the other Ks only: a prediction).
    rows: benchmarks.analysis.summary rows; records: the run's records; kflat: an optional K-flat CSV as a DataFrame.
    """
    from benchmarks.core.pairing import baseline_cell_id

    cells = manifest["cells"]
    batched = any(r["method"] == "dflash" and (r.get("batch_size") or 1) > 1 for r in rows)
    rows = [r for r in rows if (r.get("batch_size") or 1) == 1]  # a static batch is priced by `cost-model --batch`
    spec_rows = [r for r in rows if r["method"] == "dflash" and not r["n_errors"]]
    if not spec_rows:
        return "Not computed: the run has no successful dflash cell (the cost model predicts DFlash's speedup)."
    by_unit: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in records:
        by_unit.setdefault((rec["cell_id"], rec.get("dataset")), []).append(rec)
    header = ("τ(K) = 1 + Σ_{i≤K} p_i (p_i of the largest K run: a block drafter's p_i do not depend on K); "
              "step(K) = t_draft + t_verify(K) + t_host; predicted speedup(K) = τ(K)·t_AR / step(K). "
              "Error = predicted / measured mean-ratio speedup − 1.")
    out, missing = [header], []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in spec_rows:
        groups.setdefault((baseline_cell_id(cells[r["cell_id"]], cells) or "", r["dataset"]), []).append(r)
    for (base_id, dataset), spec in groups.items():
        base = next((r for r in rows if r["cell_id"] == base_id and r["dataset"] == dataset), None)
        engine = spec[0]["engine"]
        what = f"{engine} on {dataset}"
        if base is None or base["tpot_ms_mean"] is None or math.isnan(base["tpot_ms_mean"]):
            missing.append(f"{what}: no AR baseline TPOT (add method baseline with the same engine and options).")
            continue
        if any(not r["per_position"] for r in spec):
            missing.append(f"{what}: no per-position acceptance p_i in the summary.")
            continue
        parts = {r["cell_id"]: breakdown(by_unit.get((r["cell_id"], dataset), [])) for r in spec}
        if any(b is None for b in parts.values()):
            missing.append(f"{what}: the records carry no draft / verify / host breakdown; run the JAX engine with "
                           f"`engine_options: {{breakdown: true}}` (the vLLM engine does not expose one).")
            continue
        out += [""] + _group_markdown(dataset, engine, base, spec, parts, records, kflat)
    if missing:
        out += [""] + [f"- Not computed for {m}" for m in missing]
    if batched:
        out += ["", "Rows at a batch size above 1 are left out: this model prices a batch-1 step from its measured "
                    "parts; `cost-model --chip X --batch …` predicts a batched one."]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------------
# On a chip nobody has measured yet: the roofline of benchmarks.core.roofline at a measured τ

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


def chip_markdown(engine: Engine, device: Any, taus: Sequence[Tau], source: str) -> str:
    """The predicted table for `device` at the τ of `source`, beside what the source reports, and the AR floor."""
    rows = chip_rows(engine, device, taus)
    ar_floor = roofline.floor_seconds(engine.ar_step(), device.bytes_per_s) * 1e3
    lines = [f"Predicted on {device.name} ({device.source}) for an engine at the roofline, plus "
             f"{device.overhead_s * 1e3:.3f} ms of overhead per forward pass; τ from {source}; K = {engine.k}, "
             f"{engine.queries} draft queries, {engine.draft_layers.num_layers} draft layers, context "
             f"{engine.context}. AR floor {ar_floor:.3f} ms; a DFlash step costs {rows[0]['cost_ar_steps']:.2f} AR "
             f"steps." if rows else f"No τ in {source}.", ""]
    lines += ["| dataset | τ | AR TPOT ms | DFlash step ms | tok/s | speedup | source's speedup | predicted / source's "
              "| source's AR TPOT ms (× this AR floor) | source's step ms (AR steps) |", "|" + "---|" * 10]
    for r in rows:
        pub_floor = r["published_ar_ms"] / ar_floor
        pub_cost = r["published_step_ms"] / r["published_ar_ms"]
        lines.append(f"| {r['dataset']} | {r['tau']:.2f} | {r['ar_ms']:.3f} | {r['step_ms']:.3f} | "
                     f"{r['tok_per_s']:.0f} | {r['speedup']:.2f} | {fmt(r['published_speedup'])} | "
                     f"{fmt(r['speedup'] / r['published_speedup'])} | "
                     f"{fmt(r['published_ar_ms'])} ({fmt(pub_floor)}) | {fmt(r['published_step_ms'])} "
                     f"({fmt(pub_cost)}) |")
    return "\n".join(lines)


def first_batch(batches: Iterable[int], holds: Callable[[int], bool]) -> int | None:
    """The smallest batch of `batches` for which `holds(batch)`, or None."""
    return next((b for b in sorted(batches) if holds(b)), None)


def batch_markdown(engine: Engine, device: Any, taus: Sequence[Tau], source: str, batches: Sequence[int]) -> str:
    """Per batch B the predicted AR and DFlash steps (the same on every dataset) and whether the verify forward is
    compute-bound; per dataset and B the speedup and DFlash tokens/s; the smallest B (of every B up to the largest
    asked) at which the verify turns compute-bound and, per dataset, at which the speedup falls below 1. Each
    request of a batch commits τ tokens per step on average."""
    at = {b: dataclasses.replace(engine, batch=b) for b in range(1, max(batches) + 1)}
    rows = {b: chip_rows(e, device, taus) for b, e in at.items()}
    steps = {b: (roofline.step_seconds(e.ar_step(), device) * 1e3, e.dflash_step()) for b, e in at.items()}
    bound = first_batch(at, lambda b: roofline.compute_bound(steps[b][1].passes[-1], device))
    none = f"none up to {max(batches)}"
    lines = [f"Predicted on {device.name} ({device.source}) for an engine at the roofline, plus "
             f"{device.overhead_s * 1e3:.3f} ms of overhead per forward pass; τ from {source}; K = {engine.k}, "
             f"{engine.queries} draft queries, {engine.draft_layers.num_layers} draft layers, context "
             f"{engine.context} per request. The verify forward (B·(K+1) rows) turns compute-bound at B = "
             f"{bound or none}.", "",
             "| B | AR step ms | AR tok/s | DFlash step ms | DFlash step (AR steps) | verify |", "|" + "---|" * 6]
    for b in batches:
        ar_ms, spec = steps[b]
        step_ms = roofline.step_seconds(spec, device) * 1e3
        verify = "compute-bound" if roofline.compute_bound(spec.passes[-1], device) else "memory-bound"
        lines.append(f"| {b} | {ar_ms:.3f} | {b / ar_ms * 1e3:.0f} | {step_ms:.3f} | {step_ms / ar_ms:.2f} | "
                     f"{verify} |")
    lines += ["", "Speedup (DFlash tok/s) per dataset and B:", "",
              "| dataset | τ | " + " | ".join(f"B = {b}" for b in batches) + " | speedup below 1 from B |",
              "|" + "---|" * (len(batches) + 3)]
    for i, t in enumerate(taus):
        cells = [f"{rows[b][i]['speedup']:.2f} ({rows[b][i]['tok_per_s']:.0f})" for b in batches]
        below = first_batch(rows, lambda b: rows[b][i]["speedup"] < 1)
        lines.append(f"| {t.dataset} | {t.tau:.2f} | " + " | ".join(cells) + f" | {below or none} |")
    return "\n".join(lines)


def reference_taus(frame: Any) -> list[Tau]:
    """The per-dataset rows of a published table (results/reference/*.csv) that give τ, with speedups and TPOTs."""
    out = []
    for r in frame[(frame["stat"] == "value") & frame["tau"].notna()].itertuples():
        step = r.tau * r.tpot_ms if not math.isnan(r.tpot_ms) else math.nan
        out.append(Tau(r.dataset, float(r.tau), float(r.speedup), float(r.tpot_ar_ms), step))
    return out


def run_taus(rows: Sequence[dict[str, Any]]) -> list[Tau]:
    """The τ of each dataset of a run's largest-K dflash cell (summary rows), with its measured speedup, AR TPOT and
    step time."""
    spec = [r for r in rows if r["method"] == "dflash" and is_number(r["tau"])]
    out = []
    for dataset in dict.fromkeys(r["dataset"] for r in spec):
        top = max((r for r in spec if r["dataset"] == dataset), key=lambda r: r["k"])
        base = next((r for r in rows if r["method"] == "baseline" and r["dataset"] == dataset
                     and r["engine"] == top["engine"]), None)
        out.append(Tau(dataset, float(top["tau"]), float(top.get("speedup_mean_ratio") or math.nan),
                       float(base["tpot_ms_mean"]) if base else math.nan, top["tau"] * top["tpot_ms_mean"]))
    return out
