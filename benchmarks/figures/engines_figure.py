"""The engines side by side as a figure: every cell's speedup over the strongest baseline of the run (the fastest
baseline across engines on that dataset and temperature; summary.csv's `speedup_vs_strongest`), one group of bars per
engine, 95 % CI whiskers; the dashed line at 1 is that baseline. Drawn only for runs with baselines on two engines."""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from benchmarks.figures.figure_style import CI_NOTE, ci_bars, new_figure, subtitle

GROUPED_BY = (("dataset", "{}"), ("temperature", "T={:g}"), ("batch_size", "B={:g}"),
              ("context_tokens", "ctx {:g}"), ("turn", "turn {:g}"))


def engines_figure(summary: pd.DataFrame) -> Figure | None:
    if "speedup_vs_strongest" not in summary:
        return None
    rows = summary[pd.to_numeric(summary["speedup_vs_strongest"], errors="coerce").notna()].copy()
    if rows.empty:
        return None
    rows["group"] = rows["engine"]
    for column, name in GROUPED_BY:  # each axis that varies names its groups: one bar per label in each
        if column in rows and rows[column].nunique(dropna=False) > 1:
            rows["group"] += " · " + rows[column].map(lambda v, n=name: n.format(v) if pd.notna(v) else "-")
    groups, labels = list(dict.fromkeys(rows["group"])), list(dict.fromkeys(rows["label"]))
    fig = new_figure(max(7.0, 1.6 * len(groups) + 3), 5.0)
    ax = fig.subplots()
    x = ci_bars(ax, rows, "group", groups, "label", labels, "speedup_vs_strongest",
                lambda r: f"τ {r['tau']:.2f}" if pd.notna(r["tau"]) else "")
    strongest = ", ".join(sorted(set(rows["strongest_baseline"].dropna())))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8, label=f"strongest baseline ({strongest} AR)")
    ax.set_xticks(x, groups)
    ax.set_xlabel("engine")
    ax.set_ylabel("speedup over the strongest baseline (×, geometric mean of per-prompt ratios)")
    ax.set_title(f"Every cell against the fastest baseline of the run ({CI_NOTE})\n{subtitle(summary)}", fontsize=10)
    ax.legend(fontsize=8)
    return fig
