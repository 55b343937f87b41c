"""The cost model's tables: predicted against measured speedup per K for a run (report.md's "Cost model" section),
and for a chip at the roofline, per dataset and per batch size (`cost-model --chip`). Rendering only: the model is
analysis/cost_model_compute.py."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.analysis.cost_model_compute import Engine, Group, Tau, chip_rows, first_batch, fitted_rows, group_table
from benchmarks.analysis.per_row import PerRow
from benchmarks.core import metrics
from benchmarks.core.markdown import fmt
from benchmarks.hardware import roofline, step_model
from benchmarks.records.summary_row import SummaryRow


def _pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:+.1f} %"


def _group_markdown(g: Group, kflat: Any) -> list[str]:
    """One (baseline, workload) group: predicted vs measured over the Ks run, and the predicted best K."""
    gt = group_table(g, kflat)
    verify_from = "the K-flat curve scaled to them" if gt.kflat else "interpolated"
    lines = [f"**{g.workload}** ({g.engine}): t_AR = {gt.t_ar_ms:.3f} ms/token; t_host = {gt.inputs.host_ms:.3f} "
             f"ms/step; p_i from {gt.inputs.p_source}; mean decode position {g.position:.0f}.",
             "In-sample: each K's own draft and verify times, the mean host time (checks that the step "
             "decomposition accounts for the measured TPOT). Held-out: inputs from the other Ks only (p_i of a "
             f"larger K; t_verify {verify_from}; t_draft interpolated or held), a true prediction; – where the "
             "other Ks cannot give one.", ""]
    table = ["| K | τ predicted | τ measured | draft ms | verify ms | step ms | tok/s predicted | speedup in-sample "
             "| speedup held-out | speedup measured (mean-ratio) | error in-sample | error held-out "
             "| speedup measured (geomean) |", "|" + "---|" * 13]
    for kr in gt.rows:
        pr, held, meas = kr.prediction, kr.held_out, kr.mean_ratio
        table.append(f"| {pr.k} | {pr.tau:.2f} | {fmt(kr.tau_measured)} | {pr.draft_ms:.3f} | {pr.verify_ms:.3f} | "
                     f"{pr.step_ms:.3f} | {pr.tok_per_s:.1f} | {pr.speedup:.2f} | {fmt(held)} | {fmt(meas)} | "
                     f"{_pct(pr.speedup / meas - 1)} | {_pct(held / meas - 1)} | "
                     f"{fmt(kr.geomean)} |")
    lines += table
    ks = ", ".join(map(str, gt.ks_run))
    source = (f"the K-flat curve scaled to the verify times measured at K = {ks}" if gt.kflat
              else f"measured at K = {ks}, linear in between")
    best, preds = gt.best, gt.candidates
    if best is not None:
        lines.append(f"\nPredicted best K: **{best.k}** (speedup {best.speedup:.2f}×, τ {best.tau:.2f}, "
                     f"step {best.step_ms:.3f} ms) among K = {preds[0].k}..{preds[-1].k}; t_verify {source}.")
    return lines


def cost_model_markdown(rows: Sequence[SummaryRow], groups: Sequence[Group], kflat: Any = None) -> str:
    """Predicted vs measured speedup for the Ks run, and the predicted best K; or what input is missing.

    Predictions are compared with the measured mean-ratio speedup (mean TPOT_AR / mean TPOT_M, the same ratio-of-means
    form as the model) and shown beside the geometric mean, twice: in-sample (each K's own step times: does the
    decomposition account for the measured TPOT?) and held-out (inputs from the other Ks only: a prediction).
    rows: the run's summary rows; groups: its cost-model groups (`cost_model.groups`); kflat: an optional K-flat CSV
    as a DataFrame.
    """
    if not groups:
        return "Not computed: the run has no successful dflash cell (the cost model predicts DFlash's speedup)."
    header = ("τ(K) = 1 + Σ_{i≤K} p_i (p_i of the largest K run: a block drafter's p_i do not depend on K); "
              "step(K) = t_draft + t_verify(K) + t_host; predicted speedup(K) = τ(K)·t_AR / step(K). "
              "Error = predicted / measured mean-ratio speedup − 1.")
    out = [header]
    for g in groups:
        if g.missing is None:
            out += [""] + _group_markdown(g, kflat)
    missing = [f"- Not computed for {g.engine} on {g.workload}: {g.missing}" for g in groups if g.missing]
    if missing:
        out += [""] + missing
    if any(r.method == "dflash" and r.batched for r in rows):
        out += ["", "Rows at a batch size above 1 are left out: this model prices a batch-1 step from its measured "
                    "parts; `cost-model --chip X --batch …` predicts a batched one."]
    return "\n".join(out)


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




def fitted_markdown(terms: step_model.Terms, source: str, checks: dict[str, list[step_model.Check]],
                    tolerance: float) -> str:
    """The terms fitted to a device grid, each with its source, and each held-out check's table."""
    lines = [f"Step terms fitted to {source} (benchmarks/hardware/step_model.py):", "",
             *(f"- {line}" for line in terms.lines())]
    for how, found in checks.items():
        lines += ["", held_out_markdown(how, found, tolerance)]
    return "\n".join(lines)


def held_out_markdown(how: str, checks: Sequence[step_model.Check], tolerance: float) -> str:
    """One held-out check: what was left out, each point's error, the worst and the median against `tolerance`."""
    return "\n".join([f"Held out: {how}.", "", *step_model.check_table(checks, tolerance)])


def fitted_batch_markdown(engine: Engine, terms: step_model.Terms, taus: Sequence[Tau], source: str,
                          batches: Sequence[int]) -> str:
    """Per B the AR and DFlash steps the fitted terms give, and per dataset the speedup and DFlash tokens/s at its
    τ (every request of a batch commits τ tokens per step on average)."""
    at = {b: dataclasses.replace(engine, batch=b) for b in batches}
    rows = {b: fitted_rows(e, terms, taus) for b, e in at.items()}
    lines = [f"Predicted by the fitted terms; τ from {source}; K = {engine.k}, {engine.queries} draft queries, "
             f"{engine.draft_layers.num_layers} draft layers, context {engine.context} per request.", "",
             "| B | AR step ms | AR tok/s | DFlash step ms | DFlash step (AR steps) |", "|" + "---|" * 5]
    for b in batches:
        ar_ms, step_ms = rows[b][0]["ar_ms"], rows[b][0]["step_ms"]
        lines.append(f"| {b} | {ar_ms:.3f} | {b / ar_ms * 1e3:.0f} | {step_ms:.3f} | {step_ms / ar_ms:.2f} |")
    lines += ["", "Speedup (DFlash tok/s) per dataset and B:", "",
              "| dataset | τ | " + " | ".join(f"B = {b}" for b in batches) + " |", "|" + "---|" * (len(batches) + 2)]
    for i, t in enumerate(taus):
        lines.append(f"| {t.dataset} | {t.tau:.2f} | "
                     + " | ".join(f"{rows[b][i]['speedup']:.2f} ({rows[b][i]['tok_per_s']:.0f})" for b in batches)
                     + " |")
    return "\n".join(lines)


def _span(values: Sequence[float], fmt_one: str = "{:.2f}") -> str:
    """'low–high' of the values, one value where they agree to the digits shown."""
    low, high = fmt_one.format(min(values)), fmt_one.format(max(values))
    return low if low == high else f"{low}–{high}"


def range_markdown(engine: Engine, steps: Mapping[int, Sequence[tuple[PerRow, float, float]]], taus: Sequence[Tau],
                   source: str) -> str:
    """The speculative curve of a plain-decoding calibration as a range over the measured per-row terms (`steps`:
    per B, each term's AR and DFlash step seconds, per_row.at_batches), per B the steps and per dataset the speedup
    and its ratio to the first B's under the same term."""
    batches = sorted(steps)
    per_rows = [pr for pr, _, _ in steps[batches[0]]]
    lines = ["A plain-decoding curve runs one row a request: it cannot show a matmul's efficiency at the many rows a "
             "verify multiplies (the per-row term). So the speculative curve is a range over the per-row terms "
             "measured on the devices we have, the curve calibrated once with each:", "",
             *(f"- {pr.device}: rows / (rows + {pr.rows_half:.0f}) of the peak ({pr.how})" for pr in per_rows), "",
             f"τ from {source}; K = {engine.k}, {engine.queries} draft queries, {engine.draft_layers.num_layers} draft "
             f"layers, context {engine.context} per request.", "",
             "| B | AR step ms | DFlash step ms | DFlash step (AR steps) |", "|---|---|---|---|"]
    for b in batches:
        at = steps[b]
        lines.append(f"| {b} | {_span([1e3 * a for _, a, _ in at], '{:.3f}')} | "
                     f"{_span([1e3 * s for _, _, s in at], '{:.3f}')} | {_span([s / a for _, a, s in at])} |")
    lines += ["", f"Speedup per dataset and B over the per-row terms (in brackets: its ratio to B = {batches[0]}'s "
                  f"under the same term):", "",
              "| dataset | τ | " + " | ".join(f"B = {b}" for b in batches) + " |", "|" + "---|" * (len(batches) + 2)]
    for t in taus:
        first = [metrics.predicted_speedup(t.tau, a, s) for _, a, s in steps[batches[0]]]
        cells = []
        for b in batches:
            speed = [metrics.predicted_speedup(t.tau, a, s) for _, a, s in steps[b]]
            cells.append(f"{_span(speed)} ({_span([x / f for x, f in zip(speed, first)])})")
        lines.append(f"| {t.dataset} | {t.tau:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
