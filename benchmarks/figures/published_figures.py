"""Figures of the published numbers (results/reference/): the TPU v5p table, DFlash vs EAGLE-3 on Llama-3.1-8B, the
K-flat claim, and draft trees (DDTree) against DFlash at each published temperature. Every bar says how many prompts
are behind it ("n=…", or "n not stated"), on the bar or under its dataset."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from benchmarks.data.reference import TREE_TABLE, load_k_flat, load_reference
from benchmarks.figures.figure_style import bar_labels, new_figure, save_figure

TREE_TEMPERATURES = (0.0, 1.0)  # the published draft-tree table's temperatures, a figure each
PUBLISHED_FIGURES = ("published_tpu_v5p_qwen3_4b", "published_llama31_8b_dflash_vs_eagle3", "published_k_flat",
                     *(f"published_ddtree_h200_t{t:g}" for t in TREE_TEMPERATURES))
TREE_SERIES = (("dflash", "DFlash (K = 15)", "tab:blue"), ("ddtree", "DDTree (best node budget)", "tab:orange"))


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
    fig = new_figure(12.0, 4.8)
    for ax, col, label in zip(fig.subplots(1, 2), ("speedup", "tau"),
                              ("speedup over AR (×, mean TPOT_AR / mean TPOT_DFlash)",
                               "τ (tokens committed per verify step, incl. bonus)")):
        bars = ax.bar(rows["dataset"], rows[col], color="tab:blue" if col == "speedup" else "tab:green")
        bar_labels(ax, bars, [f"{v:.2f}\n{_n_text(r)}" for v, (_, r) in zip(rows[col], rows.iterrows())],
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
    fig = new_figure(8.0, 5.0)
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
        bar_labels(ax, bars, texts, list(heights))
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
    fig = new_figure(12.0, 4.8)
    left, right = fig.subplots(1, 2)
    cost = k_flat[k_flat["claim"] == "verify_cost_vs_k"]
    mid = (cost["cost_ratio_low"] + cost["cost_ratio_high"]) / 2
    bars = left.bar(cost["hardware"], mid, yerr=[mid - cost["cost_ratio_low"], cost["cost_ratio_high"] - mid],
                    capsize=4, color="tab:purple")
    texts = [(f"{lo:.2f}" if lo == hi else f"{lo:.2f}–{hi:.2f}") + "×\n"
             + (f"K ≤ {int(k)}" if pd.notna(k) else "K range not stated") + "\nn not stated"
             for lo, hi, k in zip(cost["cost_ratio_low"], cost["cost_ratio_high"], cost["k_max"])]
    bar_labels(left, bars, texts, list(cost["cost_ratio_high"]))
    left.axhline(1.0, color="black", linestyle="--", linewidth=0.8, label="flat (1.00×)")
    left.set_ylim(0, cost["cost_ratio_high"].max() * 1.4)
    left.set_xlabel("hardware")
    left.set_ylabel("verify cost at large K / at small K (×)")
    left.set_title("Published K-flat claim (whiskers: published range)", fontsize=9)
    left.legend(fontsize=8)
    fwd = k_flat[k_flat["claim"] == "forward_time"]
    names = [f"{r['hardware']}\n{str(r['target']).split('/')[-1]}" for _, r in fwd.iterrows()]
    bars = right.bar(names, fwd["forward_ms"], color="tab:orange", width=0.5)
    bar_labels(right, bars, [f"{v:.2f} ms\nn not stated" for v in fwd["forward_ms"]], list(fwd["forward_ms"]))
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


def published_tree_figure(reference: pd.DataFrame, temperature: float) -> Figure:
    """Published DDTree against DFlash at one temperature: τ and speedup per dataset, a row of panels per target."""
    table = reference[(reference["table"] == TREE_TABLE) & (reference["stat"] == "value")
                      & (reference["temperature"] == temperature)]
    targets = list(dict.fromkeys(table["target"]))
    datasets = list(dict.fromkeys(table["dataset"]))
    fig = new_figure(15.0, 3.6 * len(targets))
    axes = fig.subplots(len(targets), 2, squeeze=False)
    width = 0.8 / len(TREE_SERIES)
    x = np.arange(len(datasets))
    for (ax_tau, ax_speedup), target in zip(axes, targets):
        rows = table[table["target"] == target].set_index(["dataset", "method"])
        n = rows.xs(TREE_SERIES[0][0], level="method").reindex(datasets)
        ticks = [f"{d}\n{_n_text(r)}" for d, (_, r) in zip(datasets, n.iterrows())]
        for ax, col, label in ((ax_tau, "tau", "τ (mean over prompts, incl. bonus)"),
                               (ax_speedup, "speedup", "speedup over AR (×, mean-TPOT ratio)")):
            for j, (method, name, color) in enumerate(TREE_SERIES):
                values = [rows.loc[(d, method), col] if (d, method) in rows.index else np.nan for d in datasets]
                bars = ax.bar(x + (j - (len(TREE_SERIES) - 1) / 2) * width, values, width, label=name, color=color)
                bar_labels(ax, bars, [f"{v:.2f}" if np.isfinite(v) else "" for v in values], values)
            ax.set_xticks(x, ticks, fontsize=7, rotation=30, ha="right", rotation_mode="anchor")
            ax.set_ylabel(label)
            ax.set_ylim(0, np.nanmax(table[col]) * 1.3)
            ax.set_title(str(target).split("/")[-1], fontsize=9)
            ax.legend(fontsize=7, loc="upper right")
    first = table.iloc[0]
    fig.suptitle(f"Published: DDTree against DFlash on {first['hardware']}, batch {int(first['batch_size'])}, "
                 f"{'greedy' if temperature == 0 else f'T={temperature:g}'}, {int(first['max_new_tokens'])} new "
                 f"tokens, block {int(first['block_size'])} (no CI published)\nsource: {first['source']}", fontsize=10)
    return fig


def published_figures(out_dir: Path) -> list[Path]:
    """Write the figures of the published numbers (results/reference/) and return their paths."""
    reference = load_reference()
    k_flat = load_k_flat()
    drawn = (published_v5p_figure(reference), published_llama_figure(reference), published_k_flat_figure(k_flat),
             *(published_tree_figure(reference, t) for t in TREE_TEMPERATURES))
    figures = dict(zip(PUBLISHED_FIGURES, drawn))
    return [save_figure(fig, Path(out_dir) / f"{name}.png") for name, fig in figures.items()]

