"""The figure style every figure of the harness shares: a pyplot-free Agg canvas, atomic PNG writes, bar labels,
and the names and subtitles of a run's series.

Figures are drawn on matplotlib's Agg canvas without pyplot, so importing this module changes no global backend.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from benchmarks.core.atomic import atomic_write_bytes

CI_NOTE = "whiskers: 95 % CI of the geometric mean (Student-t on log ratios; none at n=1)"


def new_figure(width: float = 9.0, height: float = 5.0) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def fit_text(fig: Figure) -> Figure:
    """Let the figure's titles and axis labels wrap at its edges (a long one breaks into lines, never runs off)."""
    suptitle: Text | None = fig._suptitle  # type: ignore[attr-defined]  # matplotlib's hints leave this private out
    titles: list[Text | None] = [suptitle, *(t for ax in fig.axes for t in (ax.title, ax.xaxis.label,
                                                                          ax.yaxis.label))]
    for text in titles:
        if text is not None:
            text.set_wrap(True)
    return fig


def save_figure(fig: Figure, path: Path) -> Path:
    """Render to memory (every text fitted to the canvas, `fit_text`), then write atomically: an interrupted save
    never leaves a truncated figure."""
    fit_text(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})  # no version stamp: same data, same bytes
    atomic_write_bytes(path, buf.getvalue())
    return path


def bar_labels(ax: Axes, bars: Any, texts: list[str], tops: list[float]) -> None:
    """Write texts[i] just above tops[i] (the bar or its whisker) centred on bar i."""
    for bar, text, top in zip(bars, texts, tops):
        if text and np.isfinite(top):
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, top), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)


def short_model(name: Any) -> str:
    """The last two components of an HF id or local path: 'Qwen/Qwen3-4B', 'tiny/target'."""
    return "/".join(Path(str(name)).parts[-2:])


def subtitle(summary: pd.DataFrame) -> str:
    hardware = sorted({str(v) for v in summary["hardware"].dropna()})
    targets = sorted({short_model(v) for v in summary["target"].dropna()})
    return " · ".join([run_name(str(summary["run_id"].iloc[0]))] + [", ".join(x) for x in (hardware, targets) if x])


def run_name(run_id: str) -> str:
    """A run as a figure's subtitle names it: "run <id>" (a folder named run: not "run run")."""
    return run_id if run_id.lower().startswith("run") else f"run {run_id}"


def series_names(rows: pd.DataFrame, with_k: bool = True) -> pd.Series:
    """A name per row: method/K label, plus engine/target/temperature where the rows differ in them."""
    names = rows["label"].astype(str) if with_k else rows["method"].astype(str)
    for col in ("engine", "target", "temperature"):
        if col in rows and rows[col].nunique(dropna=False) > 1:
            names = names + " · " + rows[col].map(short_model if col == "target" else lambda v: f"{col} {v}")
    return names



def along(summary: pd.DataFrame, axis: str) -> pd.DataFrame:
    """The rows with a value on `axis` (a concurrency, a batch size) as ints, each with a `series` name (and its
    dataset where there are several), in order along the axis."""
    if axis not in summary:
        return summary.iloc[0:0]
    values = pd.to_numeric(summary[axis], errors="coerce")
    rows = summary[values.notna()].copy()
    if rows.empty:
        return rows
    rows[axis] = values[values.notna()].astype(int)
    rows["series"] = series_names(rows) + (" · " + rows["dataset"] if rows["dataset"].nunique() > 1 else "")
    return rows.sort_values(axis)


def log2_axis(ax: Axes, values: list[int], label: str) -> None:
    """An x axis in powers of two, ticked at the measured values."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(values, [str(v) for v in values])
    ax.set_xlabel(label)


def ci_bars(ax: Axes, rows: pd.DataFrame, group: str, groups: list[Any], series: str, names: list[Any], value: str,
            note: Callable[[Any], str]) -> np.ndarray:
    """Grouped bars of column `value` with whiskers to `<value>_ci_low`/`_ci_high`: one bar per name of column
    `series` at each group of column `group`, each labelled by `note(row)`; returns the groups' x positions."""
    width = 0.8 / len(names)
    x = np.arange(len(groups))
    for j, name in enumerate(names):
        sub = rows[rows[series] == name].set_index(group).reindex(groups)
        height = sub[value].astype(float).to_numpy()
        low = (height - sub[f"{value}_ci_low"].astype(float)).clip(lower=0).fillna(0).to_numpy()
        high = (sub[f"{value}_ci_high"].astype(float) - height).clip(lower=0).fillna(0).to_numpy()
        bars = ax.bar(x + (j - (len(names) - 1) / 2) * width, height, width, yerr=[low, high], capsize=3, label=name)
        bar_labels(ax, bars, [note(r) for _, r in sub.iterrows()], list(height + high))
    return x
