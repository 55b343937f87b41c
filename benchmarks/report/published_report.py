"""The report's "reproduced vs published" section: run rows next to the published rows whose conditions match
(verification/published.py), and every disagreement spelled out, for matched rows (conditions outside the key, such
as prompt count and harness) and for run rows that match nothing (the closest published row and what differs)."""
from __future__ import annotations

from typing import Any

import pandas as pd

from benchmarks.core.cells import TREE_METHODS
from benchmarks.core.numbers import MISSING
from benchmarks.data.reference import STATS, TAU_BASES, TAU_STATISTICS, TREE_TABLE, load_reference, present
from benchmarks.records.manifest_read import Manifest
from verification.published import MATCH_KEYS, Check, compare_conditions, dataset_key, model_key

# (label, published column, our summary column; None = the matching baseline row's mean TPOT)
METRICS = (
    ("τ", "tau", "tau"),
    ("speedup (mean-TPOT ratio)", "speedup", "speedup_mean_ratio"),
    ("AR TPOT (ms)", "tpot_ar_ms", None),
    ("TPOT (ms)", "tpot_ms", "tpot_ms_mean"),
)


def _fmt(value: Any) -> str:
    if not present(value):
        return MISSING
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).replace("|", "\\|")


def _num(value: Any) -> str:
    return f"{value:.2f}" if present(value) else MISSING


def _describe(checks: list[Check], status: str) -> str:
    if status == "differs":
        return "; ".join(f"{c.key} {_fmt(c.ours)} (ours) vs {_fmt(c.published)} (published)"
                         for c in checks if c.status == status)
    if status == "same":
        return ", ".join(f"{c.key} {_fmt(c.ours)}" for c in checks if c.status == status)
    return ", ".join(c.key for c in checks if c.status == status)


def _our_conditions(row: pd.Series, manifest: Manifest) -> dict[str, Any]:
    hardware = row.get("hardware")
    if not present(hardware):
        hardware = manifest.hardware.get("device")
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
    return float(row[column]) if present(row.get(column)) else float("nan")


def _metric_lines(dataset: str, label: str, ours: dict[str, float], published: pd.Series) -> list[str]:
    lines = []
    for name, ref_col, _ in METRICS:
        p = published[ref_col]
        if not present(p):
            continue
        o = ours[name]
        if ref_col == "tau":
            inferred = ", inferred" if published["tau_statistic_basis"] == "inferred" else ""
            name = f"τ ({published['tau_statistic'].replace('_', ' ')}{inferred}, both)"
        ratio = o / p if present(o) and p else float("nan")
        lines.append(f"| {dataset} | {label} | {name} | {_num(p)} | {_num(o)} | {_num(ratio)} |")
    return lines


def _side_conditions(pairs: list[tuple[pd.Series, pd.Series]]) -> list[str]:
    """Conditions outside the matching key where the run and the publication differ, over (our row, published row)
    pairs of one table; a table whose prompt counts differ by dataset is spelled out dataset by dataset."""
    notes = []
    counted = [(row, published) for row, published in pairs if present(published["prompts_per_dataset"])]
    counts = {int(published["prompts_per_dataset"]) for _, published in counted}
    if len(counts) == 1:
        published = counted[0][1]
        ours = sorted({int(row["n_prompts"]) for row, _ in counted if present(row.get("n_prompts"))})
        warm = f" (+{published['warmup_prompts']:g} warm-up)" if present(published["warmup_prompts"]) else ""
        if ours != [int(published["prompts_per_dataset"])]:
            notes.append(f"prompts per dataset {published['prompts_per_dataset']:g}{warm} (published) vs "
                         f"{', '.join(map(str, ours)) or MISSING} (ours)")
    elif counts:
        differ = {str(row["dataset"]): f"{published['prompts_per_dataset']:g} vs {_fmt(row.get('n_prompts'))}"
                  for row, published in counted if not present(row.get("n_prompts"))
                  or int(row["n_prompts"]) != int(published["prompts_per_dataset"])}
        if differ:
            notes.append("prompts per dataset, published vs ours: "
                         + ", ".join(f"{dataset} {text}" for dataset, text in differ.items()))
    harnesses = sorted({str(published["harness"]) for _, published in pairs if present(published["harness"])})
    engines = sorted({str(row["engine"]) for row, _ in pairs if present(row.get("engine"))})
    if harnesses and engines:
        notes.append(f"harness '{', '.join(harnesses)}' (published) vs engine '{', '.join(engines)}' (ours)")
    published_notes = dict.fromkeys(str(published["note"]) for _, published in pairs if present(published["note"]))
    notes += [f"published note: {note}" for note in published_notes]
    return notes


def comparison_markdown(summary: pd.DataFrame, manifest: Manifest,
                        reference: pd.DataFrame | None = None) -> str:
    """Markdown: run rows next to the published rows whose conditions match, and every mismatch spelled out."""
    ref = load_reference() if reference is None else reference
    hardware = manifest.hardware
    out = [
        f"Run `{manifest.run_id or '?'}` on {_fmt(hardware.get('device'))} "
        f"(platform {_fmt(manifest.platform)}). Matching conditions: {', '.join(MATCH_KEYS)}; "
        "published values and their conditions are in results/reference/.",
        "",
    ]
    spec = summary[summary["method"] != "baseline"]
    if spec.empty:
        return "\n".join(out + ["The run has no speculative-decoding rows; nothing to compare.", ""])
    values = ref[ref["stat"] == "value"]
    aggregates = ref[ref["stat"] != "value"]
    table: list[str] = []
    matched_tables: dict[str, tuple[pd.Series, list[Check], list[tuple[pd.Series, pd.Series]]]] = {}
    unmatched: dict[str, tuple[pd.Series, list[str]]] = {}
    unmatched_trees: list[str] = []
    for _, row in spec.iterrows():
        ours_cond = _our_conditions(row, manifest)
        checks = {i: compare_conditions(ours_cond, r) for i, r in values.iterrows()}
        hits = [i for i, c in checks.items() if all(x.status != "differs" for x in c)]
        for i in hits:
            published = values.loc[i]
            ours = {name: _ours(summary, row, _column(col, published)) for name, _, col in METRICS}
            table += _metric_lines(str(row["dataset"]), str(row["label"]), ours, published)
            entry = matched_tables.setdefault(published["table"], (published, checks[i], []))
            entry[2].append((row, published))
        if not hits:
            unmatched.setdefault(row["cell_id"], (row, []))[1].append(str(row["dataset"]))
            if row["method"] in TREE_METHODS:
                unmatched_trees.append(str(row["dataset"]))
    if table:
        out += ["### Rows with a published counterpart", "",
                "| dataset | method | metric | published | ours | ours / published |",
                "|---|---|---|---|---|---|", *table, "",
                "Speedup here is mean TPOT_AR / mean TPOT_method, the published tables' definition; the geometric "
                "mean of per-prompt ratios with its Student-t 95 % CI is in summary.csv. τ is ours computed with "
                "the statistic the published table used (pooled over all verify steps, or the mean over prompts "
                "of each prompt's τ; results/reference/README.md says where the publication does not).", ""]
        for name, (published, matched, pairs) in matched_tables.items():
            notes = [f"published source: {published['source']}, {published['source_ref']}"]
            unstated = _describe(matched, "unstated")
            if unstated:
                notes.append(f"not stated by the publication (matched on the rest): {unstated}")
            if published["tau_statistic_basis"] == "inferred":
                notes.append(f"its τ statistic ({published['tau_statistic'].replace('_', ' ')}) is "
                             f"{TAU_BASES['inferred']}; see results/reference/README.md")
            notes += _side_conditions(pairs)
            out.append(f"- {name}: " + "; ".join(notes) + ".")
        out.append("")
    out += _aggregate_lines(spec, summary, manifest, ref, values, aggregates)
    if unmatched:
        out += ["### Run rows without a published counterpart", ""]
        for row, datasets in unmatched.values():
            out += _mismatch_lines(row, datasets, manifest, values)
        out.append("")
    if unmatched_trees:
        out += _tree_table_lines(ref, unmatched_trees)
    return "\n".join(out)


def _tree_table_lines(reference: pd.DataFrame, datasets: list[str]) -> list[str]:
    """The published draft-tree table (DDTree against DFlash) at the given datasets, every target and temperature,
    for a run whose tree rows match none of its rows; a dataset it lacks is named."""
    table = reference[(reference["table"] == TREE_TABLE) & (reference["stat"] == "value")]
    keys = list(dict.fromkeys(dataset_key(d) for d in datasets))
    rows = table[table["dataset"].map(dataset_key).isin(keys)]
    lacking = [d for d in dict.fromkeys(datasets) if dataset_key(d) not in set(table["dataset"].map(dataset_key))]
    first = table.iloc[0]
    lines = ["### Published draft trees for this run's datasets", "",
             f"No tree row of this run matches {TREE_TABLE} ({first['hardware']}, batch {_fmt(first['batch_size'])}, "
             f"{first['max_new_tokens']:g} new tokens); its numbers, for reference. DDTree at its best node budget; "
             f"τ by its own statistic ({first['tau_statistic'].replace('_', ' ')}); speedup the ratio of mean TPOTs.",
             ""]
    if not rows.empty:
        lines += ["| dataset | target | T | DFlash τ | DDTree τ | DFlash speedup | DDTree speedup |",
                  "|---|---|---|---|---|---|---|"]
        for (dataset, target, temperature), group in rows.groupby(["dataset", "target", "temperature"], sort=False):
            by = group.set_index("method")
            cells = [_num(by.loc[m, col]) if m in by.index else MISSING
                     for col in ("tau", "speedup") for m in ("dflash", *TREE_METHODS)]
            lines.append(f"| {dataset} | {str(target).rsplit('/', 1)[-1]} | {temperature:g} | {' | '.join(cells)} |")
        lines.append("")
    if lacking:
        lines += [f"{TREE_TABLE} has no row for {', '.join(lacking)}; its datasets: "
                  f"{', '.join(dict.fromkeys(table['dataset']))}.", ""]
    lines += [f"source: {first['source']}; results/reference/README.md gives its settings.", ""]
    return lines


def _mismatch_lines(row: pd.Series, datasets: list[str], manifest: Manifest, values: pd.DataFrame) -> list[str]:
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


def _aggregate_lines(spec: pd.DataFrame, summary: pd.DataFrame, manifest: Manifest, ref: pd.DataFrame,
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
        if present(agg["speedup_low"]):
            parts.append(f"speedup {agg['speedup_low']:g}–{agg['speedup_high']:g} (published) vs "
                         f"{_range(speedups)} (ours)")
        if present(agg["tau_low"]):
            parts.append(f"τ {agg['tau_low']:g}–{agg['tau_high']:g} (published) vs {_range(taus)} (ours)")
        return f"- {label} over {datasets}: {'; '.join(parts)} — {where}."
    ours = speedups.max() if agg["stat"] == "max" else speedups.mean()
    how = "max" if agg["stat"] == "max" else "mean"
    scope = f" on {agg['dataset']}" if agg["dataset"] else ""
    return (f"- {label}: published speedup{scope} {agg['speedup']:.2f} vs ours {_num(ours)} ({how} over "
            f"{datasets}; not the same dataset set) — {where}.")


def _range(values: pd.Series) -> str:
    return MISSING if values.empty else f"{values.min():.2f}–{values.max():.2f}"
