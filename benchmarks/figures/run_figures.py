"""Figures of a summarised run (analysis/summary.py): speedup per dataset, τ against K, per-position
acceptance, the TPOT CDF, τ and speedup against temperature, τ, speedup and the step time against context length,
and the serving figures of a serving run. Every bar carries the number of prompts behind it ("n=…"); bars of measured
speedups carry their 95 % CI as whiskers."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from benchmarks.analysis.row_records import RowRecords
from benchmarks.analysis.summary import Summary
from benchmarks.analysis.summary_csv import summary_frame
from benchmarks.analysis.tree_curve import row_tau, tree_curve
from benchmarks.core.atomic import not_a_link, output_folder
from benchmarks.core.cells import TREE_METHODS
from benchmarks.figures.batch_figures import batch_figures
from benchmarks.figures.capacity_figures import capacity_figures
from benchmarks.figures.engines_figure import engines_figure
from benchmarks.figures.figure_style import (
    CI_NOTE,
    ci_bars,
    new_figure,
    save_figure,
    series_names,
    subtitle,
)
from benchmarks.figures.serve_figures import serve_figures
from benchmarks.records.records import RequestLine
from benchmarks.records.summary_row import SummaryRow

T = TypeVar("T")
RUN_FIGURES = ("speedup_per_dataset", "tau_vs_k", "per_position_acceptance", "tpot_cdf", "tau_speedup_vs_temperature",
               "tau_speedup_vs_context", "step_time_vs_context")
MARKERS = "osD^vP*X"


def _spec_rows(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[summary["method"] != "baseline"].copy()


def speedup_figure(summary: pd.DataFrame) -> Figure | None:
    """Grouped bars: speedup (geometric mean, 95 % CI whiskers) per dataset, one bar per method/K."""
    rows = _spec_rows(summary)
    rows = rows[pd.to_numeric(rows["speedup"], errors="coerce").notna()]
    if rows.empty:
        return None
    rows["series"] = series_names(rows)
    datasets = list(dict.fromkeys(rows["dataset"]))
    series = list(dict.fromkeys(rows["series"]))
    fig = new_figure(max(7.0, 1.2 * len(datasets) * max(1, len(series)) ** 0.5 + 3), 5.0)
    ax = fig.subplots()
    x = ci_bars(ax, rows, "dataset", datasets, "series", series, "speedup",
                lambda r: f"n={int(r['n_prompts'])}" if pd.notna(r["n_prompts"]) else "")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8, label="AR baseline (1×)")
    ax.set_xticks(x, datasets)
    ax.set_xlabel("dataset")
    ax.set_ylabel("speedup over AR (×, geometric mean of per-prompt TPOT_AR / TPOT)")
    ax.set_title(f"Speedup per dataset ({CI_NOTE})\n{subtitle(summary)}", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def tau_vs_k_figure(summary: pd.DataFrame) -> Figure | None:
    """τ against K, one line per method and dataset, with the K+1 ceiling (a draft tree has no K: report.md's Draft
    trees section has its τ against the budget)."""
    rows = _spec_rows(summary)
    rows = rows[~rows["method"].isin(TREE_METHODS)]
    rows = rows[pd.to_numeric(rows["tau"], errors="coerce").notna()]
    if rows.empty:
        return None
    rows["series"] = series_names(rows, with_k=False)
    fig = new_figure(8.0, 5.0)
    ax = fig.subplots()
    markers = "osD^vP*X"
    for i, (name, by_method) in enumerate(rows.groupby("series", sort=False)):
        for dataset, sub in by_method.groupby("dataset", sort=False):
            sub = sub.sort_values("k")
            n = sorted({int(v) for v in sub["n_prompts"].dropna()})
            n_text = f"n={n[0]}" if len(n) == 1 else f"n={n[0]}–{n[-1]}" if n else "n=?"
            ax.plot(sub["k"], sub["tau"].astype(float), marker=markers[i % len(markers)],
                    label=f"{name} · {dataset} ({n_text} prompts)")
    ks = np.array(sorted(rows["k"].astype(int).unique()))
    ax.plot(ks, ks + 1, color="grey", linestyle=":", marker="_", markersize=14, label="ceiling K+1")
    ax.set_xticks(ks)
    ax.set_ylim(0, (ks.max() + 1) * 1.05)
    ax.set_xlabel("K (draft tokens per verify step)")
    ax.set_ylabel("τ (tokens committed per verify step, incl. bonus)")
    ax.set_title(f"Acceptance length τ against K\n{subtitle(summary)}", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def tree_figure(summary: Summary) -> Figure | None:
    """τ and speedup against a draft tree's node budget at B = 1, one colour per engine · dataset · temperature: the
    budgets measured (markers; the speedup with its 95 % CI), τ at every smaller budget from the largest budget's
    run (line and its 95 % band), and DFlash at its best K (dashed)."""
    groups: dict[tuple[str, str, float], list[tuple[RowRecords, SummaryRow]]] = {}
    for u, r in zip(summary.units, summary.rows, strict=True):
        if u.level is None and (u.cell.batch_size or 1) == 1 and not r.n_errors:
            groups.setdefault((u.cell.engine, u.workload, u.cell.temperature), []).append((u, r))
    groups = {g: pairs for g, pairs in groups.items() if any(u.cell.tree_budget for u, _ in pairs)}
    if not groups:
        return None
    fig = new_figure(11.0, 4.8)
    ax_tau, ax_speed = fig.subplots(1, 2)
    for i, ((engine, workload, temperature), pairs) in enumerate(groups.items()):
        colour, name = f"C{i}", f"{engine} · {workload} · T {temperature:g}"
        trees = sorted((p for p in pairs if p[0].cell.tree_budget), key=lambda p: p[0].cell.tree_budget)
        top = trees[-1][0]
        if any((q.extra or {}).get("tree_paths") for q in top.reqs):
            curve = tree_curve(top.reqs, top.cell.tree_budget)
            budgets = np.arange(1, top.cell.tree_budget + 1)
            est = [curve.at(int(b)) for b in budgets]
            ax_tau.plot(budgets, [e.value for e in est], color=colour, label=f"{name}: from b = {budgets[-1]}")
            ax_tau.fill_between(budgets, [e.low for e in est], [e.high for e in est], color=colour, alpha=0.15)
        x = [u.cell.tree_budget for u, _ in trees]
        ax_tau.plot(x, [row_tau(u, r.tau) for u, r in trees], marker="o", linestyle="none", color=colour,
                    label=f"{name}: measured")
        speed = [(r.speedup, r.speedup_ci_low, r.speedup_ci_high) for _, r in trees]
        value = np.array([np.nan if v is None else v for v, _, _ in speed], dtype=float)
        low = np.array([np.nan if v is None else v for _, v, _ in speed], dtype=float)
        high = np.array([np.nan if v is None else v for _, _, v in speed], dtype=float)
        ax_speed.errorbar(x, value, yerr=[np.nan_to_num(value - low), np.nan_to_num(high - value)], marker="o",
                          color=colour, capsize=3, label=name)
        chains = [p for p in pairs if p[0].cell.method == "dflash" and p[1].speedup is not None]
        if chains:
            u, r = max(chains, key=lambda p: float(p[1].speedup or 0.0))
            ax_tau.axhline(row_tau(u, r.tau), color=colour, linestyle="--", linewidth=0.8, label=f"{name}: {r.label}")
            ax_speed.axhline(float(r.speedup or 0.0), color=colour, linestyle="--", linewidth=0.8,
                             label=f"{name}: {r.label}")
    ax_speed.axhline(1.0, color="black", linestyle=":", linewidth=0.8, label="AR (1×)")
    for ax in (ax_tau, ax_speed):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("node budget b (rows verified per request: b + 1)")
        ax.legend(fontsize=7)
    ax_tau.set_ylabel("τ (tokens committed per verify step, incl. bonus)")
    ax_speed.set_ylabel("speedup over AR (×)")
    fig.suptitle(f"Draft trees at B = 1: τ and speedup against the budget ({CI_NOTE})\n"
                 f"{subtitle(summary_frame(summary.rows))}", fontsize=10)
    return fig


def temperature_figure(summary: pd.DataFrame) -> Figure | None:
    """τ (pooled and per-prompt mean) and speedup against temperature, one line per engine · method/K · dataset;
    drawn when a run has more than one temperature. Hollow markers: the cell failed the distribution check."""
    rows = _spec_rows(summary)
    if rows.empty or rows["temperature"].nunique() < 2:
        return None
    fig = new_figure(11.0, 4.8)
    ax_tau, ax_sp = fig.subplots(1, 2)
    markers = "osD^vP*X"
    groups = rows.groupby(["engine", "label", "dataset"], sort=False)
    ring_label: str | None = "failed distribution check"
    for i, ((engine, label, dataset), sub) in enumerate(groups):
        sub = sub.sort_values("temperature")
        name = f"{engine} · {label} · {dataset}"
        line = ax_tau.plot(sub["temperature"], sub["tau"].astype(float), marker=markers[i % len(markers)],
                           label=f"{name} (pooled)")[0]
        if "tau_prompt_mean" in sub:
            ax_tau.plot(sub["temperature"], sub["tau_prompt_mean"].astype(float), color=line.get_color(),
                        linestyle="--", marker=markers[i % len(markers)], fillstyle="none",
                        label=f"{name} (prompt mean)")
        sp = sub["speedup"].astype(float)
        low = (sp - sub["speedup_ci_low"].astype(float)).clip(lower=0).fillna(0)
        high = (sub["speedup_ci_high"].astype(float) - sp).clip(lower=0).fillna(0)
        ax_sp.errorbar(sub["temperature"], sp, yerr=[low, high], marker=markers[i % len(markers)], capsize=3,
                       color=line.get_color(), label=name)
        failed = sub[sub["dist_verdict"] == "FAIL"] if "dist_verdict" in sub else sub.iloc[:0]
        ax_sp.scatter(failed["temperature"], failed["speedup"].astype(float), s=160, facecolors="none",
                      edgecolors="red", zorder=3, label=ring_label if len(failed) else None)
        ring_label = ring_label if failed.empty else None
    temps = sorted(rows["temperature"].astype(float).unique())
    for ax in (ax_tau, ax_sp):
        ax.set_xticks(temps)
        ax.set_xlabel("temperature (0 = greedy)")
    ax_sp.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax_tau.set_ylabel("τ (tokens committed per verify step, incl. bonus)")
    ax_sp.set_ylabel("speedup over AR at the same T (×, geometric mean)")
    ax_sp.set_title(CI_NOTE, fontsize=8)
    ax_tau.legend(fontsize=6)
    ax_sp.legend(fontsize=6)
    fig.suptitle(f"τ and speedup against temperature\n{subtitle(summary)}", fontsize=10)
    return fig


def _context_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows of a run with two or more context lengths, with their dataset's own name; empty otherwise."""
    if "context_tokens" not in summary:
        return summary.iloc[:0]
    rows = summary[pd.to_numeric(summary["context_tokens"], errors="coerce").notna()].copy()
    if rows["context_tokens"].nunique() < 2:
        return rows.iloc[:0]
    rows["source"] = rows["dataset"].astype(str).str.split("@").str[0]
    rows["x"] = rows["prompt_tokens_mean"].astype(float)
    return rows.sort_values("x")


def _context_axis(ax, rows: pd.DataFrame) -> None:
    ax.set_xlabel("prompt tokens (mean over each context length's prompts)")
    if rows["x"].max() > 8 * rows["x"].min():
        ax.set_xscale("log", base=2)


def context_figure(summary: pd.DataFrame) -> Figure | None:
    """τ and speedup against the prompts' length at each context length, one line per engine · method · dataset."""
    rows = _context_rows(_spec_rows(summary))
    if rows.empty:
        return None
    fig = new_figure(11.0, 4.8)
    ax_tau, ax_sp = fig.subplots(1, 2)
    labelled: set[tuple[float, int]] = set()
    for i, ((engine, label, source), sub) in enumerate(rows.groupby(["engine", "label", "source"], sort=False)):
        n = sorted({int(v) for v in sub["n_prompts"].dropna()})
        name = f"{engine} · {label} · {source} (n={n[0] if len(n) == 1 else f'{n[0]}–{n[-1]}'} prompts)"
        line = ax_tau.plot(sub["x"], sub["tau"].astype(float), marker=MARKERS[i % len(MARKERS)], label=name)[0]
        sp = sub["speedup"].astype(float)
        low = (sp - sub["speedup_ci_low"].astype(float)).clip(lower=0).fillna(0)
        high = (sub["speedup_ci_high"].astype(float) - sp).clip(lower=0).fillna(0)
        ax_sp.errorbar(sub["x"], sp, yerr=[low, high], marker=MARKERS[i % len(MARKERS)], capsize=3,
                       color=line.get_color(), label=name)
        for x, ctx, tau in zip(sub["x"], sub["context_tokens"], sub["tau"].astype(float)):
            if (x, ctx) not in labelled:  # one label per context length, however many series share it
                labelled.add((x, ctx))
                ax_tau.annotate(f"≥{int(ctx)}", (x, tau), xytext=(0, 4), textcoords="offset points", ha="center",
                                fontsize=6)
    for ax in (ax_tau, ax_sp):
        _context_axis(ax, rows)
        ax.legend(fontsize=6)
    ax_sp.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax_tau.set_ylabel("τ (tokens committed per verify step, incl. bonus)")
    ax_tau.set_title("labels: context_tokens of each point", fontsize=8)
    ax_sp.set_ylabel("speedup over AR on the same prompts (×, geometric mean)")
    ax_sp.set_title(CI_NOTE, fontsize=8)
    fig.suptitle(f"τ and speedup against context length\n{subtitle(summary)}", fontsize=10)
    return fig


def step_time_figure(summary: pd.DataFrame) -> Figure | None:
    """The time of one decode step against the prompts' length: an AR step, a speculative step, and its draft and
    verify parts where the engine timed them apart (JAX `breakdown: true`)."""
    rows = _context_rows(summary)
    if rows.empty or "step_ms" not in rows or pd.to_numeric(rows["step_ms"], errors="coerce").isna().all():
        return None
    fig = new_figure(8.5, 5.0)
    ax = fig.subplots()
    parts = (("step_ms", "step", "-"), ("verify_step_ms", "verify", "--"), ("draft_step_ms", "draft", ":"))
    for i, ((engine, label, source), sub) in enumerate(rows.groupby(["engine", "label", "source"], sort=False)):
        color = None
        for column, what, style in parts:
            values = pd.to_numeric(sub[column], errors="coerce")
            if values.isna().all():
                continue
            line = ax.plot(sub["x"], values, linestyle=style, marker=MARKERS[i % len(MARKERS)], color=color,
                           label=f"{engine} · {label} · {source}: {'AR step' if label == 'baseline' else what}")[0]
            color = line.get_color()
    _context_axis(ax, rows)
    ax.set_ylabel("ms per decode step (mean over the run's steps)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    ax.set_title(f"Step time against context length\n{subtitle(summary)}", fontsize=10)
    return fig


def per_position_figure(summary: pd.DataFrame) -> Figure | None:
    """p_i (fraction of verify steps with >= i accepted drafts) against i, one panel per dataset."""
    rows = _spec_rows(summary)
    rows["p"] = rows["per_position"].map(lambda v: json.loads(v) if isinstance(v, str) and v.strip() else [])
    rows = rows[rows["p"].map(len) > 0]
    if rows.empty:
        return None
    rows["series"] = series_names(rows)
    datasets = list(dict.fromkeys(rows["dataset"]))
    ncols = min(3, len(datasets))
    nrows = -(-len(datasets) // ncols)
    fig = new_figure(max(7.0, 4.2 * ncols), 3.6 * nrows)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False).ravel())
    for ax, dataset in zip(axes, datasets):
        for _, r in rows[rows["dataset"] == dataset].iterrows():
            n = f"n={int(r['n_prompts'])}" if pd.notna(r.get("n_prompts")) else "n=?"
            ax.plot(range(1, len(r["p"]) + 1), r["p"], marker=".", label=f"{r['series']} ({n} prompts)")
        ax.set_ylim(0, 1.05)
        ax.set_title(dataset, fontsize=9)
        ax.set_xlabel("draft position i")
        ax.set_ylabel("p_i (fraction of steps, ≥ i accepted)")
        ax.legend(fontsize=7)
    for ax in axes[len(datasets):]:
        ax.set_visible(False)
    fig.suptitle(f"Per-position acceptance\n{subtitle(summary)}", fontsize=10)
    return fig


def tpot_cdf_figure(requests: pd.DataFrame, subtitle: str = "") -> Figure | None:
    """Empirical CDF of per-request TPOT, one curve per method/K, all datasets pooled."""
    requests = requests[pd.to_numeric(requests["tpot_ms"], errors="coerce").notna()]
    if requests.empty:
        return None
    series = requests["label"].astype(str)
    if requests["engine"].nunique() > 1:
        series = series + " · " + requests["engine"].astype(str)
    fig = new_figure(8.0, 5.0)
    ax = fig.subplots()
    for name, tpot in requests.groupby(series, sort=False)["tpot_ms"]:
        values = np.sort(tpot.astype(float).to_numpy())
        ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post",
                label=f"{name} (n={len(values)} requests)")
    ax.set_xlabel("TPOT (ms per output token after the first)")
    ax.set_ylabel("fraction of requests with TPOT ≤ x")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"TPOT distribution per method (all datasets)\n{subtitle}", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def requests_frame(requests: list[RequestLine]) -> pd.DataFrame:
    """The request records of a run as a table (timing fields only; token ids are dropped)."""
    keep = ("cell_id", "label", "engine", "method", "k", "dataset", "n_out", "ttft_ms", "tpot_ms", "concurrency",
            "batch_index")
    rows = [(r.cell_id, r.label, r.engine, r.method, r.k, r.workload, r.n_out, r.ttft_ms, r.tpot_ms, r.level_of(),
             r.batch_index) for r in requests]
    return pd.DataFrame(rows, columns=list(keep))


@dataclass(frozen=True)
class Drawn:
    """A run's figures as written: the paths saved, and each figure (or group of figures) that raised while drawn or
    saved, by name with its error, so that one failing plot costs only itself."""

    paths: list[Path]
    failed: list[tuple[str, str]]


def guarded(name: str, draw: Callable[[], T], failed: list[tuple[str, str]]) -> T | None:
    """draw()'s result, or None with (name, its error) added to failed."""
    try:
        return draw()
    except Exception as exc:  # noqa: BLE001 - a plot's bug must not cost the run's other outputs
        failed.append((name, f"{type(exc).__name__}: {exc}"))
        return None


def _one(name: str, draw: Callable[[], Figure | None]) -> tuple[str, Callable[[], dict[str, Figure | None]]]:
    """A drawer of one figure, named as its file."""
    return name, lambda: {name: draw()}


def run_figures(summary: Summary, out_dir: Path) -> Drawn:
    """Write a summarised run's figures into out_dir (speedup, τ vs K, per-position acceptance, TPOT CDF, and those
    of its axes). Figures without data (e.g. per-position acceptance of a baseline-only run) are skipped; one that
    raises is named in `Drawn.failed` (its file of an earlier rendering removed) and the others are still drawn.
    BadInput, before any figure is written, when a link stands where out_dir or one of its figures goes."""
    output_folder(out_dir)
    full = summary_frame(summary.rows)
    levels = pd.to_numeric(full["concurrency"], errors="coerce")
    rows = full[levels.isna() | (levels == 1)]  # batch-1 figures: C = 1 only
    rows = rows[pd.to_numeric(rows["batch_size"], errors="coerce").fillna(1) == 1]  # and B = 1 only
    requests = requests_frame(summary.records.requests)
    requests = requests[requests["batch_index"].isna()]
    alone = requests[requests["concurrency"].fillna(1) == 1]
    singles = (lambda: speedup_figure(rows), lambda: tau_vs_k_figure(rows), lambda: per_position_figure(rows),
               lambda: tpot_cdf_figure(alone, subtitle(rows) if not rows.empty else ""),
               lambda: temperature_figure(rows), lambda: context_figure(rows), lambda: step_time_figure(rows))
    drawers: list[tuple[str, Callable[[], dict[str, Figure | None]]]] = [
        *map(_one, RUN_FIGURES, singles),
        ("serving figures", lambda: serve_figures(full)),
        ("batch figures", lambda: batch_figures(full)),
        _one("engines_vs_strongest", lambda: engines_figure(rows)),
        _one("tau_speedup_vs_budget", lambda: tree_figure(summary)),
        ("capacity figures", lambda: capacity_figures(summary.capacities, summary.manifest)),
    ]
    failed: list[tuple[str, str]] = []
    figures: dict[str, Figure | None] = {}
    for name, draw in drawers:
        figures.update(guarded(name, draw, failed) or {})
    for name in [*figures, *(name for name, _ in failed)]:
        not_a_link(out_dir / f"{name}.png", "a figure")
    saved = (guarded(name, partial(save_figure, fig, out_dir / f"{name}.png"), failed)
             for name, fig in figures.items() if fig is not None)
    paths = [path for path in saved if path is not None]
    for name, _ in failed:  # a figure of an earlier rendering would stand for data it was not drawn from
        (out_dir / f"{name}.png").unlink(missing_ok=True)
    return Drawn(paths, failed)
