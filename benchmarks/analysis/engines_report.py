"""report.md's "Engines side by side": for each dataset and temperature on which two or more engines measured a
baseline at batch 1, the strongest baseline (the lowest geometric-mean AR TPOT over the prompts every one of those
baselines measured), and every cell's speedup over its own engine's AR beside its speedup over that strongest
baseline, paired on the same prompt hashes, with 95 % CIs (core.metrics.paired_speedup). A cell whose speedup over the
strongest baseline is below 1 is marked slower. Then the engines' AR tokens against each other on the same ids:
identical prompts and the first divergence. Pure: summary rows and records in, Markdown out.
"""
from __future__ import annotations

import math
from collections import defaultdict
from itertools import combinations
from typing import Any

from benchmarks.core import metrics
from benchmarks.core.markdown import fmt

Requests = dict[str, dict[str, Any]]  # a cell's batch-1 requests on a dataset, by prompt hash


def _requests(records: list[dict[str, Any]]) -> dict[tuple[str, str], Requests]:
    out: dict[tuple[str, str], Requests] = defaultdict(dict)
    for r in records:
        if r["kind"] == "request" and not r.get("level") and not r.get("concurrency"):
            out[(r["cell_id"], r["dataset"])][r["prompt_sha256"]] = r
    return out


def alone(row: dict[str, Any]) -> bool:
    """A row measured one request at a time: no serving level, batch size 1 (the comparison this section makes)."""
    return not row.get("concurrency") and (row.get("batch_size") or 1) == 1


def _tpot(r: dict[str, Any]) -> float:
    return math.nan if r["tpot_ms"] is None else r["tpot_ms"]


def _speedup(base: Requests, meth: Requests) -> metrics.Speedup:
    shared = [sha for sha in meth if sha in base]
    return metrics.paired_speedup([_tpot(base[s]) for s in shared], [_tpot(meth[s]) for s in shared])


def _geomean_tpot(reqs: Requests, prompts: set[str]) -> float:
    values = [reqs[s]["tpot_ms"] for s in prompts if reqs[s]["tpot_ms"]]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def _with_ci(s: metrics.Speedup) -> str:
    if not s.n or math.isnan(s.geomean):
        return "–"
    ci = "" if math.isnan(s.ci_low) else f" [{s.ci_low:.2f}, {s.ci_high:.2f}]"
    return f"{s.geomean:.2f}{ci}"


def strongest_baselines(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> dict[tuple[str, float], str]:
    """(dataset, temperature) → the cell id of the fastest baseline among two or more engines' baselines."""
    reqs = _requests(records)
    groups: dict[tuple[str, float], list[str]] = defaultdict(list)
    for row in rows:
        if row["method"] == "baseline" and alone(row) and reqs.get((row["cell_id"], row["dataset"])):
            groups[(row["dataset"], row["temperature"])].append(row["cell_id"])
    best = {}
    for (dataset, t), cells in groups.items():
        if len(cells) < 2:
            continue
        common = set.intersection(*(set(reqs[(c, dataset)]) for c in cells))
        if common:
            best[(dataset, t)] = min(cells, key=lambda c: _geomean_tpot(reqs[(c, dataset)], common))
    return best


def engines_markdown(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> str | None:
    """The section's Markdown; None when no dataset has baselines on two engines."""
    best = strongest_baselines(rows, records)
    if not best:
        return None
    reqs = _requests(records)
    by_cell = {(r["cell_id"], r["dataset"]): r for r in rows if alone(r)}
    base_of = {(r["engine"], r["dataset"], r["temperature"]): r["cell_id"] for r in by_cell.values()
               if r["method"] == "baseline"}
    lines = ["Each engine's AR baseline and methods on the same prompt ids. **over own AR**: speedup over the same "
             "engine's baseline; **over strongest**: over the fastest baseline of the run on this dataset (lowest "
             "geometric-mean AR TPOT), paired on the same prompts, 95 % CI; **slower** marks a cell slower than "
             "that baseline.", "",
             "| dataset | T | engine | method | AR TPOT ms | TPOT ms | τ | over own AR | over strongest | |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (dataset, t), best_id in sorted(best.items()):
        strongest = reqs[(best_id, dataset)]
        for (cell_id, ds), row in sorted(by_cell.items(), key=lambda kv: (kv[1]["engine"], kv[1]["label"])):
            if ds != dataset or row["temperature"] != t or not reqs.get((cell_id, ds)):
                continue
            own = base_of.get((row["engine"], dataset, t))
            own_tpot = by_cell[(own, dataset)]["tpot_ms_mean"] if own else None
            over_best = _speedup(strongest, reqs[(cell_id, ds)])
            slower = not math.isnan(over_best.geomean) and over_best.geomean < 1
            mark = "strongest baseline" if cell_id == best_id else ("slower" if slower else "")
            over_own = "–" if row["method"] == "baseline" or own is None else _with_ci(
                _speedup(reqs[(own, dataset)], reqs[(cell_id, ds)]))
            lines.append(f"| {dataset} | {t:g} | {row['engine']} | {row['label']} | {fmt(own_tpot, 3)} | "
                         f"{fmt(row['tpot_ms_mean'], 3)} | {fmt(row['tau'], 2)} | {over_own} | "
                         f"{_with_ci(over_best)} | {mark} |")
    lines += ["", *identity_lines(rows, records)]
    return "\n".join(lines)


def identity_lines(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> list[str]:
    """The engines' greedy AR tokens against each other on the same prompt ids: prompts identical, first
    divergence (token index) where they differ."""
    reqs = _requests(records)
    bases = [r for r in rows if r["method"] == "baseline" and r["temperature"] == 0 and alone(r)]
    out = ["| dataset | AR of | against AR of | identical | first divergence |", "|---|---|---|---|---|"]
    for a, b in combinations(sorted(bases, key=lambda r: (r["dataset"], r["engine"])), 2):
        if a["dataset"] != b["dataset"]:
            continue
        ra, rb = reqs.get((a["cell_id"], a["dataset"]), {}), reqs.get((b["cell_id"], b["dataset"]), {})
        shared = sorted(set(ra) & set(rb))
        if not shared:
            continue
        firsts = [metrics.first_divergence(ra[s]["output_ids"], rb[s]["output_ids"]) for s in shared]
        same = sum(f is None for f in firsts)
        first = min((f for f in firsts if f is not None), default=None)
        out.append(f"| {a['dataset']} | {a['engine']} | {b['engine']} | {same}/{len(shared)} | "
                   f"{'–' if first is None else first} |")
    return ["Greedy AR tokens across engines, on the same prompt ids:", "", *out] if len(out) > 2 else []
