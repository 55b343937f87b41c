"""Figures of a run (from its summary.csv and records.jsonl) and of the published numbers (results/reference/).

Figures are drawn on matplotlib's Agg canvas without pyplot, so importing this module changes no global backend.
Every bar carries the number of prompts behind it ("n=…", or "n not stated" for published figures that do not
give it); bars of measured speedups carry their bootstrap 95 % CI as whiskers.

    python -m benchmarks.plots [--run RUN_DIR] [--out DIR] [--published]

With no option: the published figures and those of results/runs/latest. --published alone: only the published
ones; --run alone: only that run's. Published figures go to DIR (default results/figures), a run's figures to
DIR/runs/<run_id>/. A missing run is reported and the published figures are still made.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from benchmarks.store import RUNS_DIR, atomic_write_bytes
from verification.published import load_k_flat, load_reference

ROOT = Path(__file__).resolve().parent.parent
FIGURES_DIR = ROOT / "results" / "figures"
DEFAULT_RUN = RUNS_DIR / "latest"
RUN_FIGURES = ("speedup_per_dataset", "tau_vs_k", "per_position_acceptance", "tpot_cdf", "tau_speedup_vs_temperature")
PUBLISHED_FIGURES = ("published_tpu_v5p_qwen3_4b", "published_llama31_8b_dflash_vs_eagle3", "published_k_flat")
CI_NOTE = "whiskers: bootstrap 95 % CI of the geometric mean"


def _new_figure(width: float = 9.0, height: float = 5.0) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: Path) -> Path:
    """Render to memory, then write atomically: an interrupted save never leaves a truncated figure."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})  # no version stamp: same data, same bytes
    atomic_write_bytes(path, buf.getvalue())
    return path


def _bar_labels(ax: Axes, bars: Any, texts: list[str], tops: list[float]) -> None:
    """Write texts[i] just above tops[i] (the bar or its whisker) centred on bar i."""
    for bar, text, top in zip(bars, texts, tops):
        if text and np.isfinite(top):
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, top), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)


def _short_model(name: Any) -> str:
    """The last two components of an HF id or local path: 'Qwen/Qwen3-4B', 'tiny/target'."""
    return "/".join(Path(str(name)).parts[-2:])


def _subtitle(summary: pd.DataFrame) -> str:
    hardware = sorted({str(v) for v in summary["hardware"].dropna()})
    targets = sorted({_short_model(v) for v in summary["target"].dropna()})
    return " · ".join([f"run {summary['run_id'].iloc[0]}"] + [", ".join(x) for x in (hardware, targets) if x])


def _series(rows: pd.DataFrame, with_k: bool = True) -> pd.Series:
    """A name per row: method/K label, plus engine/target/temperature where the rows differ in them."""
    names = rows["label"].astype(str) if with_k else rows["method"].astype(str)
    for col in ("engine", "target", "temperature"):
        if col in rows and rows[col].nunique(dropna=False) > 1:
            names = names + " · " + rows[col].map(_short_model if col == "target" else lambda v, c=col: f"{c} {v}")
    return names


def _spec_rows(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[summary["method"] != "baseline"].copy()


def speedup_figure(summary: pd.DataFrame) -> Figure | None:
    """Grouped bars: speedup (geometric mean, 95 % CI whiskers) per dataset, one bar per method/K."""
    rows = _spec_rows(summary)
    rows = rows[pd.to_numeric(rows["speedup"], errors="coerce").notna()]
    if rows.empty:
        return None
    rows["series"] = _series(rows)
    datasets = list(dict.fromkeys(rows["dataset"]))
    series = list(dict.fromkeys(rows["series"]))
    width = 0.8 / len(series)
    fig = _new_figure(max(7.0, 1.2 * len(datasets) * max(1, len(series)) ** 0.5 + 3), 5.0)
    ax = fig.subplots()
    x = np.arange(len(datasets))
    for j, name in enumerate(series):
        sub = rows[rows["series"] == name].set_index("dataset").reindex(datasets)
        height = sub["speedup"].astype(float).to_numpy()
        low = (height - sub["speedup_ci_low"].astype(float)).clip(lower=0).fillna(0).to_numpy()
        high = (sub["speedup_ci_high"].astype(float) - height).clip(lower=0).fillna(0).to_numpy()
        bars = ax.bar(x + (j - (len(series) - 1) / 2) * width, height, width, yerr=[low, high], capsize=3,
                      label=name)
        n = [f"n={int(v)}" if pd.notna(v) else "" for v in sub["n_prompts"]]
        _bar_labels(ax, bars, n, list(height + high))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8, label="AR baseline (1×)")
    ax.set_xticks(x, datasets)
    ax.set_xlabel("dataset")
    ax.set_ylabel("speedup over AR (×, geometric mean of per-prompt TPOT_AR / TPOT)")
    ax.set_title(f"Speedup per dataset ({CI_NOTE})\n{_subtitle(summary)}", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def tau_vs_k_figure(summary: pd.DataFrame) -> Figure | None:
    """τ against K, one line per method and dataset, with the K+1 ceiling."""
    rows = _spec_rows(summary)
    rows = rows[pd.to_numeric(rows["tau"], errors="coerce").notna()]
    if rows.empty:
        return None
    rows["series"] = _series(rows, with_k=False)
    fig = _new_figure(8.0, 5.0)
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
    ax.set_title(f"Acceptance length τ against K\n{_subtitle(summary)}", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def temperature_figure(summary: pd.DataFrame) -> Figure | None:
    """τ (pooled and per-prompt mean) and speedup against temperature, one line per engine · method/K · dataset;
    drawn when a run has more than one temperature. Hollow markers: the cell failed the distribution check."""
    rows = _spec_rows(summary)
    if rows.empty or rows["temperature"].nunique() < 2:
        return None
    fig = _new_figure(11.0, 4.8)
    ax_tau, ax_sp = fig.subplots(1, 2)
    markers = "osD^vP*X"
    groups = rows.groupby(["engine", "label", "dataset"], sort=False)
    ring_label = "failed distribution check"
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
    fig.suptitle(f"τ and speedup against temperature\n{_subtitle(summary)}", fontsize=10)
    return fig


def per_position_figure(summary: pd.DataFrame) -> Figure | None:
    """p_i (fraction of verify steps with >= i accepted drafts) against i, one panel per dataset."""
    rows = _spec_rows(summary)
    rows["p"] = rows["per_position"].map(lambda v: json.loads(v) if isinstance(v, str) and v.strip() else [])
    rows = rows[rows["p"].map(len) > 0]
    if rows.empty:
        return None
    rows["series"] = _series(rows)
    datasets = list(dict.fromkeys(rows["dataset"]))
    ncols = min(3, len(datasets))
    nrows = -(-len(datasets) // ncols)
    fig = _new_figure(max(7.0, 4.2 * ncols), 3.6 * nrows)
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
    fig.suptitle(f"Per-position acceptance\n{_subtitle(summary)}", fontsize=10)
    return fig


def tpot_cdf_figure(requests: pd.DataFrame, subtitle: str = "") -> Figure | None:
    """Empirical CDF of per-request TPOT, one curve per method/K, all datasets pooled."""
    requests = requests[pd.to_numeric(requests["tpot_ms"], errors="coerce").notna()]
    if requests.empty:
        return None
    series = requests["label"].astype(str)
    if requests["engine"].nunique() > 1:
        series = series + " · " + requests["engine"].astype(str)
    fig = _new_figure(8.0, 5.0)
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


def load_requests(run_dir: Path) -> pd.DataFrame:
    """The request records of a run (timing fields only; token ids are dropped)."""
    keep = ("cell_id", "label", "engine", "method", "k", "dataset", "n_out", "ttft_ms", "tpot_ms", "concurrency")
    rows = []
    path = Path(run_dir) / "records.jsonl"
    if path.is_file():
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    if rec.get("kind") == "request":
                        rows.append({key: rec.get(key) for key in keep})
    return pd.DataFrame(rows, columns=list(keep))


def run_figures(run_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Write the run's figures (speedup, τ vs K, per-position acceptance, TPOT CDF) and return their paths.

    Figures without data (e.g. per-position acceptance of a baseline-only run) are skipped.
    """
    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.csv"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{summary_path} does not exist; the run has not been summarised")
    out_dir = run_dir / "figures" if out_dir is None else Path(out_dir)
    from benchmarks.serve_plots import serve_figures

    full = pd.read_csv(summary_path)
    levels = pd.to_numeric(full["concurrency"], errors="coerce") if "concurrency" in full else None
    summary = full if levels is None else full[levels.isna() | (levels == 1)]  # batch-1 figures: C = 1 only
    requests = load_requests(run_dir)
    figures = dict(zip(RUN_FIGURES, (
        speedup_figure(summary),
        tau_vs_k_figure(summary),
        per_position_figure(summary),
        tpot_cdf_figure(requests[requests["concurrency"].fillna(1) == 1], _subtitle(summary) if not summary.empty else ""),
        temperature_figure(summary),
    )))
    figures.update(serve_figures(full))
    return [save_figure(fig, out_dir / f"{name}.png") for name, fig in figures.items() if fig is not None]


def _conditions(row: pd.Series) -> str:
    parts = [str(row["hardware"]), str(row["target"]).split("/")[-1]]
    if pd.notna(row["k"]):
        parts.append(f"K={int(row['k'])}")
    if pd.notna(row["temperature"]):
        parts.append("greedy" if row["temperature"] == 0 else f"T={row['temperature']:g}")
    if pd.notna(row["max_new_tokens"]):
        parts.append(f"{int(row['max_new_tokens'])} new tokens")
    return ", ".join(parts)


def _n_text(row: pd.Series) -> str:
    return f"n={int(row['prompts_per_dataset'])}" if pd.notna(row["prompts_per_dataset"]) else "n not stated"


def published_v5p_figure(reference: pd.DataFrame) -> Figure:
    """Published per-dataset speedup and τ on TPU v5p (Qwen3-4B), with the table's mean drawn as a line."""
    table = reference[reference["table"] == "tpu_v5p_qwen3_4b"]
    rows = table[table["stat"] == "value"]
    mean = table[table["stat"] == "mean"].iloc[0]
    fig = _new_figure(12.0, 4.8)
    for ax, col, label in zip(fig.subplots(1, 2), ("speedup", "tau"),
                              ("speedup over AR (×, mean TPOT_AR / mean TPOT_DFlash)",
                               "τ (tokens committed per verify step, incl. bonus)")):
        bars = ax.bar(rows["dataset"], rows[col], color="tab:blue" if col == "speedup" else "tab:green")
        _bar_labels(ax, bars, [f"{v:.2f}\n{_n_text(r)}" for v, (_, r) in zip(rows[col], rows.iterrows())],
                    list(rows[col]))
        ax.axhline(mean[col], color="black", linestyle="--", linewidth=0.8,
                   label=f"published mean of {len(rows)} datasets: {mean[col]:.2f}")
        ax.set_xlabel("dataset")
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=45)
        ax.set_ylim(0, rows[col].max() * 1.2)
        ax.legend(fontsize=8, loc="upper right")
    first = rows.iloc[0]
    fig.suptitle(f"Published: DFlash on {_conditions(first)} ({first['harness']}; no CI published)\n"
                 f"source: {first['source']}", fontsize=10)
    return fig


def _llama_group(row: pd.Series) -> str:
    if row["stat"] == "overall":
        return "overall"
    return f"{row['dataset']} (up to)" if row["stat"] == "max" else str(row["dataset"])


def published_llama_figure(reference: pd.DataFrame) -> Figure:
    """Published DFlash vs EAGLE-3 speedups on TPU v5p with Llama-3.1-8B-Instruct."""
    rows = reference[reference["table"] == "tpu_v5p_llama31_8b"]
    fig = _new_figure(8.0, 5.0)
    ax = fig.subplots()
    groups = list(dict.fromkeys(_llama_group(r) for _, r in rows.iterrows()))
    methods = list(dict.fromkeys(zip(rows["method"], rows["k"])))
    width = 0.8 / len(methods)
    x = np.arange(len(groups))
    for j, (method, k) in enumerate(methods):
        sub = rows[(rows["method"] == method) & (rows["k"] == k)]
        heights = np.full(len(groups), np.nan)
        texts = [""] * len(groups)
        for _, r in sub.iterrows():
            g = groups.index(_llama_group(r))
            heights[g] = r["speedup"]
            tpot = f"\nTPOT {r['tpot_ar_ms']:g}→{r['tpot_ms']:g} ms" if pd.notna(r["tpot_ms"]) else ""
            texts[g] = f"{r['speedup']:.2f}×{tpot}\n{_n_text(r)}"
        bars = ax.bar(x + (j - (len(methods) - 1) / 2) * width, heights, width, label=f"{method} K={int(k)}")
        _bar_labels(ax, bars, texts, list(heights))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8, label="AR baseline (1×)")
    ax.set_xticks(x, groups)
    ax.set_xlabel("datasets (overall: aggregation not stated; math: 'up to', datasets not named)")
    ax.set_ylabel("speedup over AR (×)")
    ax.set_ylim(0, np.nanmax(rows["speedup"]) * 1.35)
    ax.legend(fontsize=8)
    first = rows.iloc[0]
    ax.set_title(f"Published: DFlash vs EAGLE-3 on {first['hardware']}, {str(first['target']).split('/')[-1]} "
                 f"(no CI published)\nsource: {first['source']}", fontsize=9)
    return fig


def published_k_flat_figure(k_flat: pd.DataFrame) -> Figure:
    """The K-flat claim (verify cost ratio per device) and the per-forward time against the v5p HBM floor."""
    fig = _new_figure(12.0, 4.8)
    left, right = fig.subplots(1, 2)
    cost = k_flat[k_flat["claim"] == "verify_cost_vs_k"]
    mid = (cost["cost_ratio_low"] + cost["cost_ratio_high"]) / 2
    bars = left.bar(cost["hardware"], mid, yerr=[mid - cost["cost_ratio_low"], cost["cost_ratio_high"] - mid],
                    capsize=4, color="tab:purple")
    texts = [(f"{lo:.2f}" if lo == hi else f"{lo:.2f}–{hi:.2f}") + "×\n"
             + (f"K ≤ {int(k)}" if pd.notna(k) else "K range not stated") + "\nn not stated"
             for lo, hi, k in zip(cost["cost_ratio_low"], cost["cost_ratio_high"], cost["k_max"])]
    _bar_labels(left, bars, texts, list(cost["cost_ratio_high"]))
    left.axhline(1.0, color="black", linestyle="--", linewidth=0.8, label="flat (1.00×)")
    left.set_ylim(0, cost["cost_ratio_high"].max() * 1.4)
    left.set_xlabel("hardware")
    left.set_ylabel("verify cost at large K / at small K (×)")
    left.set_title("Published K-flat claim (whiskers: published range)", fontsize=9)
    left.legend(fontsize=8)
    fwd = k_flat[k_flat["claim"] == "forward_time"]
    names = [f"{r['hardware']}\n{str(r['target']).split('/')[-1]}" for _, r in fwd.iterrows()]
    bars = right.bar(names, fwd["forward_ms"], color="tab:orange", width=0.5)
    _bar_labels(right, bars, [f"{v:.2f} ms\nn not stated" for v in fwd["forward_ms"]], list(fwd["forward_ms"]))
    for i, (_, r) in enumerate(fwd.iterrows()):
        right.hlines(r["floor_ms"], i - 0.4, i + 0.4, colors="red", linewidth=2,
                     label=f"HBM floor {r['weight_gb']:g} GB / {r['bandwidth_gbps']:g} GB/s = {r['floor_ms']:g} ms")
        if r["below_floor"]:
            right.annotate("below the floor:\na timing artefact", (i, r["forward_ms"] / 2), ha="center",
                           fontsize=8, color="red")
    right.set_ylim(0, max(fwd["floor_ms"].max(), fwd["forward_ms"].max()) * 1.3)
    right.set_xlabel("hardware, target")
    right.set_ylabel("time per target forward (ms)")
    right.set_title("Published per-forward time against the memory-bandwidth floor", fontsize=9)
    right.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Published K-flat claim and per-forward time\nsource: {k_flat.iloc[0]['source']}", fontsize=9)
    return fig


def published_figures(out_dir: Path) -> list[Path]:
    """Write the figures of the published numbers (results/reference/) and return their paths."""
    reference = load_reference()
    k_flat = load_k_flat()
    figures = dict(zip(PUBLISHED_FIGURES, (published_v5p_figure(reference), published_llama_figure(reference),
                                           published_k_flat_figure(k_flat))))
    return [save_figure(fig, Path(out_dir) / f"{name}.png") for name, fig in figures.items()]


def _run_id(run_dir: Path) -> str:
    manifest = run_dir / "manifest.json"
    if manifest.is_file():
        return str(json.loads(manifest.read_text(encoding="utf-8")).get("run_id") or run_dir.resolve().name)
    return run_dir.resolve().name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plots", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="run directory (default results/runs/latest when neither --run "
                                                 "nor --published is given)")
    parser.add_argument("--out", type=Path, default=FIGURES_DIR,
                        help="output folder (default results/figures); a run's figures go to OUT/runs/<run_id>/")
    parser.add_argument("--published", action="store_true", help="make the figures of the published numbers")
    args = parser.parse_args(argv)
    want_published = args.published or args.run is None
    run_dir = args.run if args.run is not None else None if args.published else DEFAULT_RUN
    status = 0
    if want_published:
        for path in published_figures(args.out):
            print(path)
    if run_dir is not None:
        if not (run_dir / "summary.csv").is_file():
            made = "made only the published figures" if want_published else "no figures made"
            print(f"benchmarks.plots: no summarised run at {run_dir} (no summary.csv); {made}.", file=sys.stderr)
            status = 0 if run_dir.absolute() == DEFAULT_RUN.absolute() else 1
        else:
            for path in run_figures(run_dir, args.out / "runs" / _run_id(run_dir)):
                print(path)
    return status


if __name__ == "__main__":
    sys.exit(main())
