"""Published DFlash numbers (results/reference/): loading and validating them, and comparing a run with them.

A run's row is compared with a published row only when the conditions of MATCH_KEYS agree (hardware, target, draft,
method, K, temperature, max_new_tokens, dataset), names normalised first (`model_key`, `hardware_words`,
`dataset_key`). A condition the publication does not state is left empty in the reference files: it never blocks a
match but is listed under the table. Every other disagreement is spelled out, for matched rows (conditions outside
the key, such as prompt count and harness) and for run rows that match nothing (the closest published row and what
differs). The files and their caveats: results/reference/README.md.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.core import metrics
from benchmarks.core.datasets import DATASETS
from benchmarks.core.metrics import below_floor, tpot_floor_ms
from benchmarks.core.paths import REFERENCE_DIR
from benchmarks.core.records import SPEC_METHODS

RESULT_TABLES = ("tpu_v5p_qwen3_4b", "tpu_v5p_llama31_8b", "gpu_b200_qwen3_8b")
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
MATCH_KEYS = ("hardware", "target", "draft", "method", "k", "temperature", "max_new_tokens", "dataset")
# (label, published column, our summary column; None = the matching baseline row's mean TPOT)
METRICS = (
    ("τ", "tau", "tau"),
    ("speedup (mean-TPOT ratio)", "speedup", "speedup_mean_ratio"),
    ("AR TPOT (ms)", "tpot_ar_ms", None),
    ("TPOT (ms)", "tpot_ms", "tpot_ms_mean"),
)
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


def _present(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return not (isinstance(value, str) and not value.strip())


def _read_csv(path: Path, columns: tuple[str, ...], numeric: tuple[str, ...]) -> pd.DataFrame:
    if not path.is_file():
        raise ReferenceDataError(f"{path}: reference file is missing")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    if tuple(df.columns) != columns:
        missing = [c for c in columns if c not in df.columns]
        extra = [c for c in df.columns if c not in columns]
        raise ReferenceDataError(f"{path}: columns differ from the schema (missing {missing}, unexpected {extra}, "
                                 f"or out of order)")
    for col in numeric:
        for i, raw in enumerate(df[col]):
            if raw.strip():
                try:
                    float(raw)
                except ValueError:
                    raise ReferenceDataError(f"{path}:{i + 2}: '{col}' is not a number: {raw!r}") from None
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
        if r["stat"] == "value" and r["dataset"] not in DATASETS:
            raise fail(i, f"dataset {r['dataset']!r} is not one of {sorted(DATASETS)}")
        if r["stat"] in ("mean", "overall", "range") and r["dataset"]:
            raise fail(i, f"a '{r['stat']}' row covers several datasets; leave 'dataset' empty")
        ranged = [c for c in ("tau_low", "tau_high", "speedup_low", "speedup_high") if _present(r[c])]
        if r["stat"] == "range":
            pairs = [(lo, hi) for lo, hi in (("tau_low", "tau_high"), ("speedup_low", "speedup_high"))
                     if _present(r[lo]) or _present(r[hi])]
            if not pairs or any(not (_present(r[lo]) and _present(r[hi])) or r[lo] > r[hi] for lo, hi in pairs):
                raise fail(i, "a range row needs low <= high for tau and/or speedup")
            if _present(r["tau"]) or _present(r["speedup"]):
                raise fail(i, "a range row keeps its values in the *_low/*_high columns only")
        elif ranged:
            raise fail(i, f"{ranged} are for range rows only")
        elif not any(_present(r[c]) for c in ("tau", "speedup", "tpot_ar_ms", "tpot_ms")):
            raise fail(i, "no published value (tau, speedup, tpot_ar_ms, tpot_ms)")
        if _present(r["tau"]) and r["tau"] < 1.0:
            raise fail(i, f"tau {r['tau']} < 1 (τ counts the bonus token)")
        has_tau = any(_present(r[c]) for c in ("tau", "tau_low", "tau_high"))
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
            if _present(r[col]) and (r[col] != int(r[col]) or r[col] < 0):
                raise fail(i, f"'{col}' must be a non-negative integer, got {r[col]}")
        if _present(r["k"]) and _present(r["block_size"]) and r["k"] > r["block_size"] - 1:
            raise fail(i, f"K {r['k']:g} exceeds block_size - 1 = {r['block_size'] - 1:g}")
        if _present(r["temperature"]) and r["temperature"] < 0:
            raise fail(i, "temperature must be >= 0")
        if r["stat"] == "value" and all(_present(r[c]) for c in ("speedup", "tpot_ar_ms", "tpot_ms")):
            implied = metrics.tpot_ratio(r["tpot_ar_ms"], r["tpot_ms"])
            if abs(implied - r["speedup"]) > SPEEDUP_TPOT_TOLERANCE * r["speedup"]:
                raise fail(i, f"speedup {r['speedup']} disagrees with tpot_ar_ms/tpot_ms = {implied:.3f}")
    dup = df.duplicated(subset=["dataset", "stat", "method", "k"], keep=False)
    if dup.any():
        lines = [i + 2 for i in df.index[dup]]
        raise ReferenceDataError(f"{path}: duplicate (dataset, stat, method, k) on lines {lines}")
    for i, r in df[df["stat"] == "mean"].iterrows():
        rows = df[(df["stat"] == "value") & (df["method"] == r["method"])]
        for col in ("tau", "speedup", "tpot_ar_ms", "tpot_ms"):
            if _present(r[col]) and abs(rows[col].mean() - r[col]) > MEAN_TOLERANCE:
                raise fail(i, f"mean row {col} = {r[col]} but its {len(rows)} dataset rows average "
                              f"{rows[col].mean():.4f}")


def load_reference(directory: Path = REFERENCE_DIR) -> pd.DataFrame:
    """Every published result row (tau/speedup/TPOT with conditions), validated, with a leading 'table' column."""
    frames = []
    for table in RESULT_TABLES:
        path = Path(directory) / f"{table}.csv"
        df = _read_csv(path, RESULT_COLUMNS, RESULT_NUMERIC)
        _check_results_table(df, path)
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
            if not (_present(lo) and _present(hi) and 0 < lo <= hi):
                raise ReferenceDataError(f"{path}:{i + 2}: needs 0 < cost_ratio_low <= cost_ratio_high")
            flags.append(pd.NA)
        elif r["claim"] == "forward_time":
            needed = ("forward_ms", "floor_ms", "weight_gb", "bandwidth_gbps")
            if not all(_present(r[c]) for c in needed):
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


def model_key(name: Any) -> str:
    """Comparable model name: 'Qwen/Qwen3-4B' and '/models/Qwen3-4B' give 'qwen34b'.

    The last path component of an HF id or local folder (for an HF cache folder ``models--Org--Name/...``, ``Name``),
    lower-cased, without ``-``, ``_``, ``.`` and spaces, and with a leading ``meta`` dropped before ``llama``:
    ``LLaMA3.1-8B-Instruct`` matches ``Meta-Llama-3.1-8B-Instruct``. The organisation is ignored, so a differently
    trained model published under the same name would match too.
    """
    if not _present(name):
        return ""
    text = str(name).strip().rstrip("/\\")
    cached = re.search(r"models--[^/\\]+?--([^/\\]+)", text)
    base = cached.group(1) if cached else re.split(r"[/\\]", text)[-1]
    key = re.sub(r"[-_. ]", "", base.lower())
    return key[len("meta"):] if key.startswith("metallama") else key


_HARDWARE_ALIASES = {"tpu v5": "tpu v5p", "tpu v5 lite": "tpu v5e", "tpu v6 lite": "tpu v6e"}
_VENDOR_WORDS = {"nvidia", "google", "geforce"}


def hardware_words(name: Any) -> frozenset[str]:
    """The words that identify a device: lower-cased, vendor words (nvidia, google, geforce) and a TPU slice size
    (``v5p-8``) dropped; JAX's device kinds ``TPU v5``/``TPU v5 lite``/``TPU v6 lite`` read as v5p/v5e/v6e. A device
    matches when every word of the published name occurs in ours (``H100`` matches ``NVIDIA H100 80GB HBM3``)."""
    if not _present(name):
        return frozenset()
    text = re.sub(r"\b(v\d+[a-z]*)-\d+\b", r"\1", str(name).lower().replace("_", " "))
    text = " ".join(text.split())
    text = _HARDWARE_ALIASES.get(text, text)
    return frozenset(w for w in re.split(r"[\s(),/]+", text) if w and w not in _VENDOR_WORDS)


def hardware_matches(ours: Any, published: Any) -> bool:
    want = hardware_words(published)
    return bool(want) and want <= hardware_words(ours)


def dataset_key(name: Any) -> str:
    """Comparable dataset name: lower-cased, without ``-``, ``_`` and spaces."""
    return re.sub(r"[-_ ]", "", str(name).lower()) if _present(name) else ""


@dataclass(frozen=True)
class Check:
    """One condition of a run row against one published row: 'same', 'unstated' (by the publication) or 'differs'."""

    key: str
    ours: Any
    published: Any
    status: str


def _same(key: str, ours: Any, published: Any) -> bool:
    if key == "hardware":
        return hardware_matches(ours, published)
    if key in ("target", "draft"):
        return model_key(ours) == model_key(published)
    if key == "dataset":
        return dataset_key(ours) == dataset_key(published)
    if key == "method":
        return str(ours) == str(published)
    return math.isclose(float(ours), float(published), abs_tol=1e-9)


def compare_conditions(ours: dict[str, Any], published: pd.Series, keys: tuple[str, ...] = MATCH_KEYS) -> list[Check]:
    """Check every key of `keys`; a published condition that is empty is 'unstated'."""
    checks = []
    for key in keys:
        o, p = ours.get(key), published[key]
        if not _present(p):
            status = "unstated"
        elif _present(o) and _same(key, o, p):
            status = "same"
        else:
            status = "differs"
        checks.append(Check(key, o, p, status))
    return checks


def _fmt(value: Any) -> str:
    if not _present(value):
        return "—"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).replace("|", "\\|")


def _num(value: Any) -> str:
    return f"{value:.2f}" if _present(value) else "—"


def _describe(checks: list[Check], status: str) -> str:
    if status == "differs":
        return "; ".join(f"{c.key} {_fmt(c.ours)} (ours) vs {_fmt(c.published)} (published)"
                         for c in checks if c.status == status)
    if status == "same":
        return ", ".join(f"{c.key} {_fmt(c.ours)}" for c in checks if c.status == status)
    return ", ".join(c.key for c in checks if c.status == status)


def _our_conditions(row: pd.Series, manifest: dict[str, Any]) -> dict[str, Any]:
    hardware = row.get("hardware")
    if not _present(hardware):
        hardware = (manifest.get("hardware") or {}).get("device")
    conditions = {key: row.get(key) for key in MATCH_KEYS}
    conditions["hardware"] = hardware
    return conditions


def _baseline_row(summary: pd.DataFrame, row: pd.Series) -> pd.Series | None:
    base = summary[(summary["method"] == "baseline") & (summary["dataset"] == row["dataset"])]
    for col in ("engine", "temperature", "max_new_tokens"):
        if col in summary.columns:
            base = base[base[col] == row[col]]
    base = base[base["target"].map(model_key) == model_key(row["target"])]
    return None if base.empty else base.iloc[0]


def _column(column: str | None, published: pd.Series) -> str | None:
    """Our summary column for a metric: τ by the published table's own statistic."""
    return TAU_STATISTICS.get(published["tau_statistic"], "tau") if column == "tau" else column


def _ours(summary: pd.DataFrame, row: pd.Series, column: str | None) -> float:
    if column is None:
        base = _baseline_row(summary, row)
        return float("nan") if base is None else float(base["tpot_ms_mean"])
    return float(row[column]) if _present(row.get(column)) else float("nan")


def _metric_lines(dataset: str, label: str, ours: dict[str, float], published: pd.Series) -> list[str]:
    lines = []
    for name, ref_col, _ in METRICS:
        p = published[ref_col]
        if not _present(p):
            continue
        o = ours[name]
        if ref_col == "tau":
            inferred = ", inferred" if published["tau_statistic_basis"] == "inferred" else ""
            name = f"τ ({published['tau_statistic'].replace('_', ' ')}{inferred}, both)"
        ratio = o / p if _present(o) and p else float("nan")
        lines.append(f"| {dataset} | {label} | {name} | {_num(p)} | {_num(o)} | {_num(ratio)} |")
    return lines


def _side_conditions(published: pd.Series, rows: pd.DataFrame) -> list[str]:
    """Conditions outside the matching key where the run and the publication differ."""
    notes = []
    if _present(published["prompts_per_dataset"]):
        ours = sorted({int(n) for n in rows["n_prompts"] if _present(n)}) if "n_prompts" in rows else []
        warm = f" (+{published['warmup_prompts']:g} warm-up)" if _present(published["warmup_prompts"]) else ""
        if ours != [int(published["prompts_per_dataset"])]:
            notes.append(f"prompts per dataset {published['prompts_per_dataset']:g}{warm} (published) vs "
                         f"{', '.join(map(str, ours)) or '—'} (ours)")
    if _present(published["harness"]) and "engine" in rows:
        engines = ", ".join(sorted({str(e) for e in rows["engine"]}))
        notes.append(f"harness '{published['harness']}' (published) vs engine '{engines}' (ours)")
    return notes


def comparison_markdown(summary: pd.DataFrame, manifest: dict[str, Any],
                        reference: pd.DataFrame | None = None) -> str:
    """Markdown: run rows next to the published rows whose conditions match, and every mismatch spelled out."""
    ref = load_reference() if reference is None else reference
    hardware = manifest.get("hardware") or {}
    out = [
        f"Run `{manifest.get('run_id', '?')}` on {_fmt(hardware.get('device'))} "
        f"(platform {_fmt(manifest.get('platform'))}). Matching conditions: {', '.join(MATCH_KEYS)}; "
        "published values and their conditions are in results/reference/.",
        "",
    ]
    spec = summary[summary["method"] != "baseline"]
    if spec.empty:
        return "\n".join(out + ["The run has no speculative-decoding rows; nothing to compare.", ""])
    values = ref[ref["stat"] == "value"]
    aggregates = ref[ref["stat"] != "value"]
    table: list[str] = []
    matched_tables: dict[str, tuple[pd.Series, list[Check], list[pd.Series]]] = {}
    unmatched: dict[str, tuple[pd.Series, list[str]]] = {}
    for _, row in spec.iterrows():
        ours_cond = _our_conditions(row, manifest)
        checks = {i: compare_conditions(ours_cond, r) for i, r in values.iterrows()}
        hits = [i for i, c in checks.items() if all(x.status != "differs" for x in c)]
        for i in hits:
            published = values.loc[i]
            ours = {name: _ours(summary, row, _column(col, published)) for name, _, col in METRICS}
            table += _metric_lines(str(row["dataset"]), str(row["label"]), ours, published)
            entry = matched_tables.setdefault(published["table"], (published, checks[i], []))
            entry[2].append(row)
        if not hits:
            unmatched.setdefault(row["cell_id"], (row, []))[1].append(str(row["dataset"]))
    if table:
        out += ["### Rows with a published counterpart", "",
                "| dataset | method | metric | published | ours | ours / published |",
                "|---|---|---|---|---|---|", *table, "",
                "Speedup here is mean TPOT_AR / mean TPOT_method, the published tables' definition; the geometric "
                "mean of per-prompt ratios with its Student-t 95 % CI is in summary.csv. τ is ours computed with "
                "the statistic the published table used (pooled over all verify steps, or the mean over prompts "
                "of each prompt's τ; results/reference/README.md says where the publication does not).", ""]
        for name, (published, checks, rows) in matched_tables.items():
            notes = [f"published source: {published['source']}, {published['source_ref']}"]
            unstated = _describe(checks, "unstated")
            if unstated:
                notes.append(f"not stated by the publication (matched on the rest): {unstated}")
            if published["tau_statistic_basis"] == "inferred":
                notes.append(f"its τ statistic ({published['tau_statistic'].replace('_', ' ')}) is "
                             f"{TAU_BASES['inferred']}; see results/reference/README.md")
            notes += _side_conditions(published, pd.DataFrame(rows))
            out.append(f"- {name}: " + "; ".join(notes) + ".")
        out.append("")
    out += _aggregate_lines(spec, summary, manifest, ref, values, aggregates)
    if unmatched:
        out += ["### Run rows without a published counterpart", ""]
        for row, datasets in unmatched.values():
            out += _mismatch_lines(row, datasets, manifest, values)
        out.append("")
    return "\n".join(out)


def _mismatch_lines(row: pd.Series, datasets: list[str], manifest: dict[str, Any], values: pd.DataFrame) -> list[str]:
    """Why each published table fails to match one cell: its differing, equal and unstated conditions."""
    keys = tuple(k for k in MATCH_KEYS if k != "dataset")
    ours_cond = _our_conditions(row, manifest)
    lines = [f"- {row['label']} (cell {row['cell_id']}): no published row matches {', '.join(datasets)}."]
    for table, rows in values.groupby("table", sort=False):
        checks = [compare_conditions(ours_cond, r, keys) for _, r in rows.iterrows()]
        best = min(checks, key=lambda c: sum(x.status == "differs" for x in c))
        have = {dataset_key(d) for d in rows["dataset"]}
        lacking = [d for d in datasets if dataset_key(d) not in have]
        parts = []
        if any(c.status == "differs" for c in best):
            parts.append(f"differs in {_describe(best, 'differs')}")
        if lacking:
            parts.append(f"has no row for {', '.join(lacking)}")
        if any(c.status == "same" for c in best):
            parts.append(f"same {_describe(best, 'same')}")
        if any(c.status == "unstated" for c in best):
            parts.append(f"not stated by the publication: {_describe(best, 'unstated')}")
        lines.append(f"  - vs {table} ({rows.iloc[0]['source_ref']}): {'; '.join(parts)}.")
    return lines


def _aggregate_lines(spec: pd.DataFrame, summary: pd.DataFrame, manifest: dict[str, Any], ref: pd.DataFrame,
                     values: pd.DataFrame, aggregates: pd.DataFrame) -> list[str]:
    """Mean rows (compared when the run covers their datasets) and headline/'up to'/range figures."""
    keys = tuple(k for k in MATCH_KEYS if k != "dataset")
    lines: list[str] = []
    notes: list[str] = []
    for cell_id, rows in spec.groupby("cell_id", sort=False):
        first = rows.iloc[0]
        ours_cond = _our_conditions(first, manifest)
        for _, agg in aggregates.iterrows():
            if any(c.status == "differs" for c in compare_conditions(ours_cond, agg, keys)):
                continue
            label = str(first["label"])
            if agg["stat"] == "mean":
                table_rows = values[(values["table"] == agg["table"]) & (values["method"] == agg["method"])]
                want = {dataset_key(d): d for d in table_rows["dataset"]}
                have = {dataset_key(r["dataset"]): r for _, r in rows.iterrows()}
                missing = [d for k, d in want.items() if k not in have]
                if missing:
                    notes.append(f"- {agg['table']} mean row not compared for {label}: the run lacks "
                                 f"{', '.join(missing)}.")
                    continue
                ours = {name: float(pd.Series([_ours(summary, have[k], _column(col, agg)) for k in want]).mean())
                        for name, _, col in METRICS}
                lines += _metric_lines(f"mean of {len(want)}", label, ours, agg)
            else:
                notes.append(_claim_line(agg, label, rows))
    out: list[str] = []
    if lines:
        out += ["### Means over a published table's datasets", "",
                "| dataset | method | metric | published | ours | ours / published |", "|---|---|---|---|---|---|",
                *lines, ""]
    if notes:
        out += ["### Published aggregates under the same conditions", "", *notes, ""]
    return out


def _claim_line(agg: pd.Series, label: str, rows: pd.DataFrame) -> str:
    datasets = ", ".join(str(d) for d in rows["dataset"])
    speedups = pd.to_numeric(rows["speedup_mean_ratio"], errors="coerce").dropna()
    tau_col = TAU_STATISTICS.get(agg["tau_statistic"], "tau")
    taus = pd.to_numeric(rows[tau_col], errors="coerce").dropna() if tau_col in rows else pd.Series(dtype=float)
    where = f"{agg['table']} ({STATS[agg['stat']]}; {agg['source_ref']})"
    if agg["stat"] == "range":
        parts = []
        if _present(agg["speedup_low"]):
            parts.append(f"speedup {agg['speedup_low']:g}–{agg['speedup_high']:g} (published) vs "
                         f"{_range(speedups)} (ours)")
        if _present(agg["tau_low"]):
            parts.append(f"τ {agg['tau_low']:g}–{agg['tau_high']:g} (published) vs {_range(taus)} (ours)")
        return f"- {label} over {datasets}: {'; '.join(parts)} — {where}."
    ours = speedups.max() if agg["stat"] == "max" else speedups.mean()
    how = "max" if agg["stat"] == "max" else "mean"
    scope = f" on {agg['dataset']}" if agg["dataset"] else ""
    return (f"- {label}: published speedup{scope} {agg['speedup']:.2f} vs ours {_num(ours)} ({how} over "
            f"{datasets}; not the same dataset set) — {where}.")


def _range(values: pd.Series) -> str:
    return "—" if values.empty else f"{values.min():.2f}–{values.max():.2f}"
