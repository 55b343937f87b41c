"""Figures of a capacity run (analysis/capacities.py), computed from its probes: each configuration's capacity as
one threshold of the SLO moves (the others kept), and the Pareto front of tokens/s per user against tokens/s in
total over the probes, with the SLO drawn on it."""
from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from benchmarks.analysis.capacities import SCAN, Decision, user_rate
from benchmarks.decide.slo import FAILS, MEETS, METRIC_WORDS
from benchmarks.figures.figure_style import new_figure, run_name, short_model
from benchmarks.records.manifest_read import Manifest

CAPACITY_FIGURES = ("capacity_vs_threshold", "capacity_pareto")


def _subtitle(manifest: Manifest) -> str:
    device = manifest.hardware.get("device")
    return " · ".join(str(x) for x in (run_name(manifest.run_id), device, short_model(manifest.target)) if x)


def _name(d: Decision, name: str, several: bool) -> str:
    return f"{name} · {d.workload}" if several else name


def capacity_vs_threshold_figure(found: list[Decision], manifest: Manifest) -> Figure | None:
    """One panel per (SLO, threshold): each configuration's capacity (its lowest, the line; its range, the band)
    as that threshold goes from a quarter to four times its value, read from every probe stored; the SLO's value
    dotted."""
    if not any(d.cells for d in found):
        return None
    slos = list(dict.fromkeys(d.slo_index for d in found))
    cols = max(len(d.slo.thresholds) for d in found)
    fig = new_figure(4.6 * cols + 1.0, 3.8 * len(slos) + 0.8)
    axes = np.atleast_2d(fig.subplots(len(slos), cols, squeeze=False))
    several = len({d.workload for d in found}) > 1
    for d in found:
        row = slos.index(d.slo_index)
        for t_index, t in enumerate(d.slo.thresholds):
            ax = axes[row, t_index]
            for i, c in enumerate(d.cells):
                limits, caps = d.moving(c, t_index)
                low = [cap.low if cap.low is not None else 0.0 for cap in caps]
                top = d.space.grid[-1]
                high = [top if cap.open_above else cap.high if cap.high is not None else 0.0 for cap in caps]
                color = f"C{i % 10}"
                ax.step(limits, low, where="post", color=color, label=_name(d, c.name, several))
                ax.fill_between(limits, low, high, step="post", color=color, alpha=0.15)
            ax.axvline(t.limit_ms, color="black", linestyle=":", linewidth=0.8)
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(FixedLocator([f * t.limit_ms for f in (SCAN[0], 0.5, 1.0, 2.0, SCAN[-1])]))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlabel(f"p{t.percentile} {METRIC_WORDS[t.metric]} threshold (ms); dotted: the SLO's")
            ax.set_ylabel(f"capacity ({'concurrency' if d.space.axis == 'concurrency' else 'requests/s'})")
            ax.set_title(d.slo.text(), fontsize=8)
            ax.legend(fontsize=6)
    for ax in axes.flat:
        if not ax.has_data():
            ax.set_visible(False)
    fig.suptitle("Capacity against each threshold (the others kept): line = largest load with every load below it "
                 f"shown to meet, band = the range it may lie in; from every probe stored\n{_subtitle(manifest)}",
                 fontsize=9)
    return fig


def pareto_figure(found: list[Decision], manifest: Manifest) -> Figure | None:
    """One panel per (workload, SLO): every probe of each configuration at (tokens/s in total, tokens/s per user at
    the SLO's TPOT percentile), its Pareto front joined, each probe marked by its verdict and labelled by its load;
    the TPOT threshold drawn as the per-user rate it implies."""
    panels = [d for d in found if d.cells]
    if not panels:
        return None
    fig = new_figure(6.5 * len(panels) + 1.0, 5.0)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, d in zip(axes, panels):
        for i, c in enumerate(d.cells):
            color = f"C{i % 10}"
            points = sorted(((r.tok_per_s, user_rate(r, d.slo), r.verdict, load) for load, r in c.path.readings.items()
                             if math.isfinite(r.tok_per_s)), key=lambda p: -p[0])
            front, best = [], -math.inf
            for p in points:  # by total rate, falling: a point is on the front when no faster one serves users better
                if p[1] > best:
                    front.append(p)
                    best = p[1]
            ax.plot([p[0] for p in front], [p[1] for p in front], color=color, linewidth=1.0, label=c.name)
            for total, user, verdict, load in points:
                if verdict == FAILS:
                    ax.scatter([total], [user], color=color, marker="x", s=25)
                else:
                    ax.scatter([total], [user], marker="o" if verdict == MEETS else "^", s=25, edgecolors=color,
                               facecolors=color if verdict == MEETS else "none")
                ax.annotate(f"{load:g}", (total, user), xytext=(3, 3), textcoords="offset points", fontsize=6)
        tpot = next((t for t in d.slo.thresholds if t.metric == "tpot"), None)
        if tpot is not None:
            ax.axhline(1000.0 / tpot.limit_ms, color="black", linestyle=":", linewidth=0.8,
                       label=f"SLO: {tpot.text()} (≥ {1000.0 / tpot.limit_ms:.3g} tok/s per user)")
        users = [u for c in d.cells for r in c.path.readings.values() if (u := user_rate(r, d.slo)) > 0]
        if users and max(users) > 8 * min(users):  # rates that span a decade: a log axis shows the low ones
            ax.set_yscale("log")
        q = tpot.percentile if tpot else 50
        ax.set_xlabel("output tokens/s in total (probe's tokens / wall time)")
        ax.set_ylabel(f"tokens/s per user (the p{100 - q} request's own rate)")
        ax.set_title(f"{d.workload} · {d.slo.text()}\n● meets  × fails  △ uncertain; labels: the load", fontsize=8)
        ax.legend(fontsize=6)
    fig.suptitle(f"Pareto front: tokens/s per user against tokens/s in total, per probe\n{_subtitle(manifest)}",
                 fontsize=9)
    return fig


def capacity_figures(found: list[Decision], manifest: Manifest) -> dict[str, Figure | None]:
    return dict(zip(CAPACITY_FIGURES, (capacity_vs_threshold_figure(found, manifest),
                                       pareto_figure(found, manifest))))
