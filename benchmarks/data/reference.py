"""The published DFlash and draft-tree numbers (results/reference/) as data: their schema, loading, and the
validation that names file, line and column of anything malformed or inconsistent. The files and their caveats:
results/reference/README.md.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.core import metrics
from benchmarks.core.cells import SPEC_METHODS
from benchmarks.core.guarded import read_csv_text
from benchmarks.core.metrics import below_floor, tpot_floor_ms
from benchmarks.core.paths import REFERENCE_DIR
from benchmarks.data.datasets import DATASETS

RESULT_TABLES = ("tpu_v5p_qwen3_4b", "tpu_v5p_llama31_8b", "gpu_b200_qwen3_8b", "gpu_h200_ddtree")
TREE_TABLE = "gpu_h200_ddtree"  # DDTree against DFlash: 10 datasets x 3 targets x 2 temperatures
# Datasets a publication reports that the harness's registry does not hold: their rows load and print, and match a
# run only where it measured a local prompt file of that name.
PUBLISHED_ONLY_DATASETS = ("livecodebench",)
# One published number per (dataset, stat, method, K) under one target and temperature.
ROW_KEY = ["dataset", "stat", "method", "k", "target", "temperature"]
RESULT_COLUMNS = (
    "dataset", "stat", "tau", "tau_low", "tau_high", "speedup", "speedup_low", "speedup_high",
    "tpot_ar_ms", "tpot_ms", "hardware", "target", "draft", "method", "k", "block_size", "temperature",
    "max_new_tokens", "prompts_per_dataset", "warmup_prompts", "batch_size", "harness", "source", "source_ref",
    "note", "tau_statistic", "tau_statistic_basis",
)
RESULT_NUMERIC = (
    "tau", "tau_low", "tau_high", "speedup", "speedup_low", "speedup_high", "tpot_ar_ms", "tpot_ms", "k",
    "block_size", "temperature", "max_new_tokens", "prompts_per_dataset", "warmup_prompts", "batch_size",
)
K_FLAT_COLUMNS = (
    "claim", "hardware", "target", "k_max", "cost_ratio_low", "cost_ratio_high", "forward_ms", "floor_ms",
    "weight_gb", "bandwidth_gbps", "source", "source_ref", "note",
)
K_FLAT_NUMERIC = ("k_max", "cost_ratio_low", "cost_ratio_high", "forward_ms", "floor_ms", "weight_gb",
                  "bandwidth_gbps")
STATS = {
    "value": "one dataset",
    "mean": "the arithmetic mean of its table's dataset rows",
    "overall": "a headline figure whose aggregation over datasets is not stated",
    "max": "an 'up to' figure over a group of datasets",
    "range": "a range across datasets (the *_low/*_high columns)",
}


# How a table's τ aggregates acceptance lengths, and our summary column computed the same way
# (benchmarks/core/metrics.py): pooled over all verify steps, or the mean over prompts of each prompt's τ. Empty: the
# publication gives no τ.
TAU_STATISTICS = {"pooled": "tau", "prompt_mean": "tau_prompt_mean"}


# What a row's tau_statistic rests on: the publication says so; the publication names the harness that produced the
# table, whose code computes it; or neither, so it is inferred (from the authors' code, which the publication does not
# name as the table's source) and the comparison says so.
TAU_BASES = {"stated": "stated by the publication", "harness": "computed by the harness the publication names",
             "inferred": "inferred: the publication does not say"}
MEAN_TOLERANCE = 0.011  # a mean row of 2-decimal values against the mean of 2-decimal values
SPEEDUP_TPOT_TOLERANCE = 0.02  # published speedup against the ratio of its published TPOTs
FLOOR_TOLERANCE = 0.05  # a stated floor against weight bytes / bandwidth


class ReferenceDataError(ValueError):
    """A reference file that is missing, malformed or inconsistent; the message names file, line and column."""


def present(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return not (isinstance(value, str) and not value.strip())


def _read_csv(path: Path, columns: tuple[str, ...], numeric: tuple[str, ...]) -> pd.DataFrame:
    """A reference table read by the guarded CSV reader (`guarded.read_csv_text`: its numeric cells finite), its
    columns exactly `columns`."""
    try:
        df = read_csv_text(path, numeric)
    except ValueError as exc:
        raise ReferenceDataError(str(exc)) from None
    if tuple(df.columns) != columns:
        missing = [c for c in columns if c not in df.columns]
        extra = [c for c in df.columns if c not in columns]
        raise ReferenceDataError(f"{path}: columns differ from the schema (missing {missing}, unexpected {extra}, "
                                 f"or out of order)")
    for col in numeric:
        df[col] = pd.to_numeric(df[col].replace("", None), errors="raise").astype(float)
    return df


def _check_results_table(df: pd.DataFrame, path: Path) -> None:
    def fail(i: int, msg: str) -> ReferenceDataError:
        return ReferenceDataError(f"{path}:{i + 2}: {msg}")

    for i, r in df.iterrows():
        for col in ("stat", "hardware", "target", "method", "source", "source_ref"):
            if not r[col].strip():
                raise fail(i, f"'{col}' must not be empty")
        if r["stat"] not in STATS:
            raise fail(i, f"stat {r['stat']!r} is not one of {list(STATS)}")
        if r["method"] not in SPEC_METHODS:
            raise fail(i, f"method {r['method']!r} is not one of {list(SPEC_METHODS)}")
        if r["stat"] == "value" and r["dataset"] not in DATASETS and r["dataset"] not in PUBLISHED_ONLY_DATASETS:
            raise fail(i, f"dataset {r['dataset']!r} is not one of {sorted(DATASETS) + list(PUBLISHED_ONLY_DATASETS)}")
        if r["stat"] in ("mean", "overall", "range") and r["dataset"]:
            raise fail(i, f"a '{r['stat']}' row covers several datasets; leave 'dataset' empty")
        ranged = [c for c in ("tau_low", "tau_high", "speedup_low", "speedup_high") if present(r[c])]
        if r["stat"] == "range":
            pairs = [(lo, hi) for lo, hi in (("tau_low", "tau_high"), ("speedup_low", "speedup_high"))
                     if present(r[lo]) or present(r[hi])]
            if not pairs or any(not (present(r[lo]) and present(r[hi])) or r[lo] > r[hi] for lo, hi in pairs):
                raise fail(i, "a range row needs low <= high for tau and/or speedup")
            if present(r["tau"]) or present(r["speedup"]):
                raise fail(i, "a range row keeps its values in the *_low/*_high columns only")
        elif ranged:
            raise fail(i, f"{ranged} are for range rows only")
        elif not any(present(r[c]) for c in ("tau", "speedup", "tpot_ar_ms", "tpot_ms")):
            raise fail(i, "no published value (tau, speedup, tpot_ar_ms, tpot_ms)")
        if present(r["tau"]) and r["tau"] < 1.0:
            raise fail(i, f"tau {r['tau']} < 1 (τ counts the bonus token)")
        has_tau = any(present(r[c]) for c in ("tau", "tau_low", "tau_high"))
        if has_tau and r["tau_statistic"] not in TAU_STATISTICS:
            raise fail(i, f"tau_statistic {r['tau_statistic']!r} is not one of {list(TAU_STATISTICS)}: say how "
                          f"the table's τ aggregates acceptance lengths")
        if not has_tau and r["tau_statistic"]:
            raise fail(i, "tau_statistic is set but the row has no τ")
        if has_tau and r["tau_statistic_basis"] not in TAU_BASES:
            raise fail(i, f"tau_statistic_basis {r['tau_statistic_basis']!r} is not one of {list(TAU_BASES)}: say "
                          f"whether the publication states the τ statistic or it is inferred")
        if not has_tau and r["tau_statistic_basis"]:
            raise fail(i, "tau_statistic_basis is set but the row has no τ")
        for col in ("k", "block_size", "max_new_tokens", "prompts_per_dataset", "warmup_prompts", "batch_size"):
            if present(r[col]) and (r[col] != int(r[col]) or r[col] < 0):
                raise fail(i, f"'{col}' must be a non-negative integer, got {r[col]}")
        if present(r["k"]) and present(r["block_size"]) and r["k"] > r["block_size"] - 1:
            raise fail(i, f"K {r['k']:g} exceeds block_size - 1 = {r['block_size'] - 1:g}")
        if present(r["temperature"]) and r["temperature"] < 0:
            raise fail(i, "temperature must be >= 0")
        if r["stat"] == "value" and all(present(r[c]) for c in ("speedup", "tpot_ar_ms", "tpot_ms")):
            implied = metrics.tpot_ratio(r["tpot_ar_ms"], r["tpot_ms"])
            if abs(implied - r["speedup"]) > SPEEDUP_TPOT_TOLERANCE * r["speedup"]:
                raise fail(i, f"speedup {r['speedup']} disagrees with tpot_ar_ms/tpot_ms = {implied:.3f}")
    dup = df.duplicated(subset=ROW_KEY, keep=False)
    if dup.any():
        lines = [i + 2 for i in df.index[dup]]
        raise ReferenceDataError(f"{path}: duplicate ({', '.join(ROW_KEY)}) on lines {lines}")
    for i, r in df[df["stat"] == "mean"].iterrows():
        rows = df[(df["stat"] == "value") & (df["method"] == r["method"]) & (df["target"] == r["target"])
                  & _same_number(df["temperature"], r["temperature"])]
        for col in ("tau", "speedup", "tpot_ar_ms", "tpot_ms"):
            if present(r[col]) and abs(rows[col].mean() - r[col]) > MEAN_TOLERANCE:
                raise fail(i, f"mean row {col} = {r[col]} but its {len(rows)} dataset rows average "
                              f"{rows[col].mean():.4f}")


def _same_number(column: pd.Series, value: float) -> pd.Series:
    """Where a numeric column equals `value`, an empty cell matching an empty value."""
    return column.isna() if not present(value) else column == value


def read_results_table(path: Path) -> pd.DataFrame:
    """One published results table (a file of the RESULT_COLUMNS schema), validated."""
    df = _read_csv(Path(path), RESULT_COLUMNS, RESULT_NUMERIC)
    _check_results_table(df, Path(path))
    return df


def load_reference(directory: Path = REFERENCE_DIR) -> pd.DataFrame:
    """Every published result row (tau/speedup/TPOT with conditions), validated, with a leading 'table' column."""
    frames = []
    for table in RESULT_TABLES:
        df = read_results_table(Path(directory) / f"{table}.csv")
        df.insert(0, "table", table)
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def load_k_flat(directory: Path = REFERENCE_DIR) -> pd.DataFrame:
    """The K-flat claims and the per-forward time, validated; adds 'below_floor' (NA for the cost-ratio rows)."""
    path = Path(directory) / "k_flat.csv"
    df = _read_csv(path, K_FLAT_COLUMNS, K_FLAT_NUMERIC)
    flags: list[Any] = []
    for i, r in df.iterrows():
        if not (r["hardware"].strip() and r["source"].strip() and r["source_ref"].strip()):
            raise ReferenceDataError(f"{path}:{i + 2}: hardware, source and source_ref must not be empty")
        if r["claim"] == "verify_cost_vs_k":
            lo, hi = r["cost_ratio_low"], r["cost_ratio_high"]
            if not (present(lo) and present(hi) and 0 < lo <= hi):
                raise ReferenceDataError(f"{path}:{i + 2}: needs 0 < cost_ratio_low <= cost_ratio_high")
            flags.append(pd.NA)
        elif r["claim"] == "forward_time":
            needed = ("forward_ms", "floor_ms", "weight_gb", "bandwidth_gbps")
            if not all(present(r[c]) for c in needed):
                raise ReferenceDataError(f"{path}:{i + 2}: a forward_time row needs {list(needed)}")
            floor = tpot_floor_ms(r["weight_gb"] * 1e9, r["bandwidth_gbps"] * 1e9)
            if abs(floor - r["floor_ms"]) > FLOOR_TOLERANCE * floor:
                raise ReferenceDataError(f"{path}:{i + 2}: floor_ms {r['floor_ms']} but weight_gb/bandwidth_gbps "
                                         f"gives {floor:.3f} ms")
            flags.append(below_floor(r["forward_ms"], r["floor_ms"]))
        else:
            raise ReferenceDataError(f"{path}:{i + 2}: claim {r['claim']!r} is not verify_cost_vs_k or "
                                     f"forward_time")
    df["below_floor"] = pd.array(flags, dtype="boolean")
    return df
