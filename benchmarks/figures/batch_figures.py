"""Figures of a run with static batches (summary.csv rows whose `batch_size` > 1 somewhere): the throughput speedup
against batch size with its interval, and the Pareto front of tokens/s per user against tokens/s in total.

None are made for a run without a batch size above 1.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from benchmarks.figures.figure_style import along, log2_axis, new_figure, subtitle

BATCH_FIGURES = ("batch_speedup_vs_batch_size", "batch_pareto")
BATCH_CI_NOTE = "whiskers: 95 % CI of the geometric mean over batches (Student-t on log ratios; none at one batch)"
BATCH_AXIS = "offline batch size B (requests decoded together as one static batch)"


def batched(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows of a batch engine when the run has a batch size above 1, with a `series` name; else none."""
    rows = along(summary, "batch_size")
    return rows if not rows.empty and (rows["batch_size"] > 1).any() else rows.iloc[0:0]


def speedup_vs_batch_figure(summary: pd.DataFrame) -> Figure | None:
    """Per engine and method: the throughput speedup over AR at the same B, with its interval."""
    rows = batched(summary)
    if rows.empty:
        return None
    rows = rows[(rows["method"] != "baseline") & pd.to_numeric(rows["batch_speedup"], errors="coerce").notna()]
    if rows.empty:
        return None
    fig = new_figure()
    ax = fig.subplots()
    for i, (name, sub) in enumerate(rows.groupby("series", sort=False)):
        y = sub["batch_speedup"].astype(float).to_numpy()
        err = [np.clip(y - sub["batch_speedup_ci_low"].astype(float), 0, None).fillna(0).to_numpy(),
               np.clip(sub["batch_speedup_ci_high"].astype(float) - y, 0, None).fillna(0).to_numpy()]
        ax.errorbar(sub["batch_size"], y, yerr=err, marker="o", capsize=3, color=f"C{i % 10}", label=name)
    ax.axhline(1.0, color="black", linestyle=":", linewidth=0.8, label="AR baseline (1×)")
    log2_axis(ax, sorted(rows["batch_size"].unique()), BATCH_AXIS)
    ax.set_yscale("log")  # a ratio: an interval of a few batches spans a factor either way
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("throughput speedup over AR at the same B (×, log scale)")
    ax.set_title(f"Throughput speedup vs batch size ({BATCH_CI_NOTE})\n{subtitle(summary)}", fontsize=9)
    ax.legend(fontsize=7)
    return fig


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both axes (x: tokens/s in total, y: tokens/s per user), by rising x."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y))
    return sorted(front)


def pareto_figure(summary: pd.DataFrame) -> Figure | None:
    """Per engine and method (baseline included): tokens/s per user against tokens/s in total, a point per batch size
    (labelled B), the series' Pareto front drawn through its undominated points."""
    rows = batched(summary)
    if rows.empty:
        return None
    rows = rows[pd.to_numeric(rows["tok_per_s_total"], errors="coerce").notna()
                & pd.to_numeric(rows["tok_per_s_user_p50"], errors="coerce").notna()]
    if rows.empty:
        return None
    fig = new_figure()
    ax = fig.subplots()
    for i, (name, sub) in enumerate(rows.groupby("series", sort=False)):
        color = f"C{i % 10}"
        x, y = sub["tok_per_s_total"].astype(float).to_numpy(), sub["tok_per_s_user_p50"].astype(float).to_numpy()
        ax.scatter(x, y, color=color, s=18, alpha=0.6)
        for xi, yi, b in zip(x, y, sub["batch_size"]):
            ax.annotate(f"B={b}", (xi, yi), xytext=(3, 3), textcoords="offset points", fontsize=6, color=color)
        front = pareto_front(list(zip(x, y)))
        ax.plot([p[0] for p in front], [p[1] for p in front], marker="o", color=color, label=name)
    ax.set_xlabel("tokens/s in total (output tokens of all batches' decode spans / those spans)")
    ax.set_ylabel("tokens/s per user (median of each request's own decode rate)")
    ax.set_title(f"Pareto front: per-user speed against total throughput, one point per batch size\n"
                 f"{subtitle(summary)}", fontsize=9)
    ax.legend(fontsize=7)
    return fig


def batch_figures(summary: pd.DataFrame) -> dict[str, Figure | None]:
    return dict(zip(BATCH_FIGURES, (speedup_vs_batch_figure(summary), pareto_figure(summary))))
