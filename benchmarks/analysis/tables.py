"""The tables of a run's report: results, per-position acceptance, and the settings each engine load described."""
from __future__ import annotations

import json
from typing import Any

from benchmarks.core.markdown import fmt, table
from benchmarks.core.numbers import is_number


def row_label(r: dict[str, Any]) -> str:
    """A summary row's method label, with its serving level or its offline batch size above 1 when it has one."""
    return (r["label"] + (f" @C={r['concurrency']}" if r.get("concurrency") else "")
            + (f" @B={r['batch_size']}" if (r.get("batch_size") or 1) > 1 else ""))


def results_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        ci = (f"[{fmt(r['speedup_ci_low'])}, {fmt(r['speedup_ci_high'])}]"
              if r["speedup_ci_low"] is not None else "")
        ci += " DRIFT" if r.get("drift_flag") is True else ""
        body.append([r["dataset"], r["engine"], row_label(r), f"{r['temperature']:g}", str(r["n_prompts"]),
                     fmt(r["tau"]),
                     fmt(r.get("tau_prompt_mean")),
                     fmt(r["acceptance_rate"], 3), fmt(r["tpot_ms_mean"]), fmt(r["tpot_ms_p50"]),
                     fmt(r["tpot_ms_p90"]), fmt(r["ttft_ms_mean"]), fmt(r["output_tok_per_s"], 1),
                     f"{fmt(r['speedup'])} {ci}".strip(), fmt(r["n_pairs"]), fmt(r["speedup_mean_ratio"]),
                     fmt(r["identical_frac"], 3), tie_cell(r)])
    return table(["dataset", "engine", "method", "T", "n", "τ", "τ prompt mean", "α", "TPOT ms", "p50", "p90",
                   "TTFT ms", "tok/s", "speedup [95% CI]", "pairs", "mean-ratio", "identical",
                   "same/tie/viol. (widest tie)"], body)


def tie_cell(r: dict[str, Any]) -> str:
    """A greedy row's prompts identical / at a numerical tie / in violation, and the widest tie in ulps."""
    if r.get("n_identical") is None:
        return ""
    widest = f" ({r['tie_margin_max_ulps']:.2f} ulp)" if is_number(r.get("tie_margin_max_ulps")) else ""
    return f"{r['n_identical']}/{r['n_ties']}/{r['n_violations']}{widest}"


def acceptance_table(rows: list[dict[str, Any]]) -> str:
    spec = [r for r in rows if r["per_position"]]
    if not spec:
        return "No speculative rows."
    k_max = max(len(json.loads(r["per_position"])) for r in spec)
    body = [[r["dataset"], r["engine"], row_label(r)]
            + [fmt(p, 3) for p in json.loads(r["per_position"])] + [""] * (k_max - len(json.loads(r["per_position"])))
            for r in spec]
    return table(["dataset", "engine", "method"] + [f"p{i}" for i in range(1, k_max + 1)], body)


# Engine settings that change a measured number, as engines' describe() names them.
SETTINGS = ("dtype", "draft_queries", "enforce_eager", "attention_backend", "max_model_len")


def setting(describe: dict[str, Any], key: str) -> Any:
    """A setting from describe(): top level, then what the engine resolved, then anywhere nested."""
    for d in (describe, describe.get("resolved") or {}):
        if key in d:
            return d[key]
    for v in describe.values():
        if isinstance(v, dict) and (found := setting(v, key)) is not None:
            return found
    return None


def settings_table(provenances: dict[str, dict[str, Any]], cells: dict[str, dict[str, Any]]) -> str | None:
    """One row per engine load: the settings that change a number, from the engine's saved describe()."""
    rows = set()
    for p in provenances.values():
        describe = p.get("describe") or {}
        if not describe or p["cell_id"] not in cells:
            continue
        cell = cells[p["cell_id"]]
        values = [setting(describe, k) for k in SETTINGS]
        if values[3] is None:  # vLLM picks its attention backend from this variable when set
            values[3] = ((p.get("environment") or {}).get("env") or {}).get("VLLM_ATTENTION_BACKEND")
        label = "baseline" if cell["method"] == "baseline" else f"{cell['method']}-k{cell['k']}"
        rows.add((cell["engine"], label, *[fmt(v) for v in values]))
    if not rows:
        return None
    return table(["engine", "method", "dtype", "draft queries", "enforce_eager", "attention backend",
                   "max_model_len"], [list(r) for r in sorted(rows)])
