"""Figures of serving runs against concurrency: speedup (both ratios), aggregate throughput, TTFT p90.

Drawn from summary.csv rows that carry a `concurrency`; none are made for a batch-1 run.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from benchmarks.figures.figure_style import CI_NOTE, along, log2_axis, new_figure, subtitle

SERVE_FIGURES = ("serve_speedup_vs_concurrency", "serve_throughput_vs_concurrency", "serve_ttft_p90_vs_concurrency")


CONCURRENCY = "concurrency (requests in flight)"


def speedup_vs_concurrency_figure(summary: pd.DataFrame) -> Figure | None:
    """Per method: paired TPOT speedup (CI whiskers, solid) and throughput speedup (dashed) at each level."""
    rows = along(summary, "concurrency")
    if rows.empty:
        return None
    rows = rows[(rows["method"] != "baseline") & (pd.to_numeric(rows["speedup"], errors="coerce").notna()
                                                  | pd.to_numeric(rows["throughput_speedup"], errors="coerce").notna())]
    if rows.empty:
        return None
    fig = new_figure()
    ax = fig.subplots()
    for i, (name, sub) in enumerate(rows.groupby("series", sort=False)):
        color = f"C{i % 10}"
        y = sub["speedup"].astype(float).to_numpy()
        err = [np.clip(y - sub["speedup_ci_low"].astype(float), 0, None).fillna(0).to_numpy(),
               np.clip(sub["speedup_ci_high"].astype(float) - y, 0, None).fillna(0).to_numpy()]
        ax.errorbar(sub["concurrency"], y, yerr=err, marker="o", capsize=3, color=color,
                    label=f"{name}: TPOT speedup")
        ax.plot(sub["concurrency"], sub["throughput_speedup"].astype(float), marker="s", linestyle="--",
                color=color, label=f"{name}: throughput speedup")
    ax.axhline(1.0, color="black", linestyle=":", linewidth=0.8, label="AR baseline (1×)")
    log2_axis(ax, sorted(rows["concurrency"].unique()), CONCURRENCY)
    ax.set_ylabel("speedup over AR at the same concurrency (×)")
    ax.set_title(f"Speedup vs concurrency (TPOT: {CI_NOTE}; throughput: aggregate output tok/s ratio)\n"
                 f"{subtitle(summary)}", fontsize=9)
    ax.legend(fontsize=7)
    return fig


def _per_level(summary: pd.DataFrame, column: str, ylabel: str, title: str) -> Figure | None:
    rows = along(summary, "concurrency")
    if rows.empty:
        return None
    rows = rows[pd.to_numeric(rows[column], errors="coerce").notna()]
    if rows.empty:
        return None
    fig = new_figure()
    ax = fig.subplots()
    for name, sub in rows.groupby("series", sort=False):
        ax.plot(sub["concurrency"], sub[column].astype(float), marker="o", label=name)
    log2_axis(ax, sorted(rows["concurrency"].unique()), CONCURRENCY)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n{subtitle(summary)}", fontsize=9)
    ax.legend(fontsize=7)
    return fig


def serve_figures(summary: pd.DataFrame) -> dict[str, Figure | None]:
    return dict(zip(SERVE_FIGURES, (
        speedup_vs_concurrency_figure(summary),
        _per_level(summary, "agg_output_tok_per_s", "aggregate output tokens/s",
                   "Throughput vs concurrency (all measured requests' output tokens / level wall time)"),
        _per_level(summary, "ttft_ms_p90", "TTFT p90 (ms)", "Time to first token, 90th percentile, vs concurrency"),
    )))
