"""Records + manifest → one summary row per (cell, dataset workload[, serving level]). Pure: recomputable from any
old run. A workload's rows name it by its key (`humaneval@ctx4096`, `mt-bench@turn2`) and carry its context length or
turn, so that rows of one dataset group by them and speedups pair on the prompts one workload sent."""
from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from typing import Any

from benchmarks.analysis.cost_model import breakdown
from benchmarks.core import metrics
from benchmarks.core.exit_codes import BadInput
from benchmarks.core.pairing import baseline_cell_id
from benchmarks.core.records import SpecCounters
from verification import distribution, ties

COLUMNS = [
    "run_id", "cell_id", "label", "engine", "platform", "hardware", "target", "draft", "method", "k", "temperature",
    "max_new_tokens", "dataset", "n_prompts", "n_errors", "tau", "acceptance_rate", "per_position", "histogram",
    "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99", "ttft_ms_mean", "output_tok_per_s",
    "speedup", "speedup_ci_low", "speedup_ci_high", "speedup_mean_ratio", "n_pairs", "identical_frac",
    "first_divergence_min",
    "n_identical", "n_ties", "n_violations", "first_violation", "violation_reason", "tie_margin_max",
    "tie_margin_max_ulps",
    "error", "tau_prompt_mean", "dist_verdict", "dist_p_min", "dist_p_values", "dist_n_base", "dist_n_method",
    "dist_n_tests", "dist_length", "dist_family", "dist_power_marginal", "dist_power_sequence", "dist_shift_detected",
    "not_checked",
    "baseline_tpot_before_ms", "baseline_tpot_after_ms", "baseline_drift", "drift_flag",
    "baseline_drift_ci_low", "baseline_drift_ci_high", "n_drift_pairs",
]
# Serving rows (engine vllm-serve): one per (cell, dataset, concurrency); empty on batch-1 rows.
SERVE_COLUMNS = [
    "concurrency", "request_rate", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p90",
    "itl_ms_p99", "agg_output_tok_per_s", "requests_per_s", "throughput_speedup", "identical_frac_batched",
    "n_burst", "server_tpot_ms_mean", "server_tpot_speedup",
]
COLUMNS += SERVE_COLUMNS
# Workload rows: the context length or turn, the prompts' mean length and the hash of the set sent; the step time and,
# with the JAX engine's `breakdown`, its draft / verify / host parts per step.
WORKLOAD_COLUMNS = ["context_tokens", "turn", "prompt_tokens_mean", "prompts_sha256", "step_ms", "draft_step_ms",
                    "verify_step_ms", "host_step_ms"]
COLUMNS += WORKLOAD_COLUMNS



Key = tuple[str, str, "int | None"]  # (cell, dataset, concurrency: None for batch-1 records)


def _group(records: list[dict[str, Any]]) -> dict[Key, dict[str, list[dict[str, Any]]]]:
    groups: dict[Key, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[(r["cell_id"], r["dataset"], r.get("concurrency"))][r["kind"]].append(r)
    return groups


def _serve_columns(kinds: dict[str, list[dict[str, Any]]], base: dict[str, list[dict[str, Any]]] | None,
                   reqs: list[dict[str, Any]]) -> dict[str, Any]:
    """Latency percentiles and the level's throughput (and its ratio to the baseline's at the same load)."""
    ttfts = [r["ttft_ms"] for r in reqs]
    burst = [r for r in reqs if (r.get("extra") or {}).get("delivery_burst")]  # no decode timing (serve_runner)
    itls = [x for r in reqs if r not in burst for x in r.get("itl_ms") or []]
    out: dict[str, Any] = {"ttft_ms_p50": metrics.percentile(ttfts, 50), "ttft_ms_p90": metrics.percentile(ttfts, 90),
                           "ttft_ms_p99": metrics.percentile(ttfts, 99), "itl_ms_p50": metrics.percentile(itls, 50),
                           "itl_ms_p90": metrics.percentile(itls, 90), "itl_ms_p99": metrics.percentile(itls, 99),
                           "n_burst": len(burst)}

    def server_tpot(k: dict[str, list[dict[str, Any]]] | None) -> float:
        load = (k or {}).get("load")
        if not load or load[0].get("server_tpot_count") is None:
            return math.nan
        return 1000.0 * metrics.histogram_mean(load[0]["server_tpot_sum_s"], load[0]["server_tpot_count"])

    def throughput(k: dict[str, list[dict[str, Any]]] | None) -> float:
        load = (k or {}).get("load")
        return metrics.aggregate_tok_per_s(load[0]["total_output_tokens"], load[0]["duration_s"]) if load else math.nan

    load = kinds.get("load")
    if load:
        out.update(request_rate=load[0].get("request_rate"), agg_output_tok_per_s=throughput(kinds),
                   requests_per_s=metrics.requests_per_s(load[0]["completed"], load[0]["duration_s"]))
        out["throughput_speedup"] = metrics.throughput_speedup(throughput(base), out["agg_output_tok_per_s"])
        out["server_tpot_ms_mean"] = server_tpot(kinds)
        out["server_tpot_speedup"] = metrics.tpot_ratio(server_tpot(base), out["server_tpot_ms_mean"])
    return out


def workload_order(name: str) -> tuple[str, int, int]:
    """A workload key's place: by dataset, then context length (numerically), then turn."""
    dataset, *parts = name.split("@")
    ctx = next((int(p[3:]) for p in parts if p.startswith("ctx") and p[3:].isdigit()), -1)
    turn = next((int(p[4:]) for p in parts if p.startswith("turn") and p[4:].isdigit()), 1)
    return dataset, ctx, turn


def prompts_sha256(reqs: list[dict[str, Any]]) -> str | None:
    """A short hash of the set of prompts some requests were sent: equal for two cells sent the same prompt ids."""
    shas = sorted({r["prompt_sha256"] for r in reqs})
    return hashlib.sha256("\n".join(shas).encode()).hexdigest()[:12] if shas else None


def _workload_columns(reqs: list[dict[str, Any]]) -> dict[str, Any]:
    """The workload columns of a row (WORKLOAD_COLUMNS) from its requests."""
    first = reqs[0] if reqs else {}
    out: dict[str, Any] = {"context_tokens": first.get("context_tokens"), "turn": first.get("turn"),
                           "prompt_tokens_mean": metrics.mean([r["n_prompt_tokens"] for r in reqs
                                                               if r.get("n_prompt_tokens") is not None]),
                           "prompts_sha256": prompts_sha256(reqs)}
    timed = [e for e in (r.get("extra") or {} for r in reqs) if e.get("step_s") is not None and e.get("decode_steps")]
    if timed:
        out["step_ms"] = 1000.0 * sum(e["step_s"] * e["decode_steps"] for e in timed) / sum(
            e["decode_steps"] for e in timed)
    parts = breakdown(reqs)
    if parts is not None:
        out.update(draft_step_ms=parts.draft_ms, verify_step_ms=parts.verify_ms, host_step_ms=parts.host_ms)
    return out


def _paired(base: list[dict[str, Any]], meth: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    """Requests paired by the sha256 of the prompt actually sent (identical prompts only); BadInput when a prompt
    appears twice in one side (records of two runs merged: they cannot pair one to one)."""
    for side in (base, meth):
        seen: set[str] = set()
        for r in side:
            if r["prompt_sha256"] in seen:
                raise BadInput(f"{r['label']} on {r['dataset']}: prompt {r['prompt_sha256'][:12]} appears twice, so "
                               f"its requests cannot pair with the baseline's; remove the unit file copied in from "
                               f"another run")
            seen.add(r["prompt_sha256"])
    by_sha = {r["prompt_sha256"]: r for r in base}
    return [(by_sha[r["prompt_sha256"]], r) for r in meth if r["prompt_sha256"] in by_sha]


def _distribution(res: distribution.Check) -> dict[str, Any]:
    """The distribution-check columns of a checked speculative row at T > 0: the verdict, the Holm-adjusted p-values,
    the sizes, and the power simulated at those sizes and the check's family."""
    pw = distribution.power(res.n_base, res.n_method, res.family)
    return {"dist_verdict": "pass" if res.passed else "FAIL", "dist_p_min": res.p_min,
            "dist_p_values": json.dumps({k: round(v, 6) for k, v in res.p_values.items()}),
            "dist_n_base": res.n_base, "dist_n_method": res.n_method, "dist_n_tests": res.n_tests,
            "dist_length": res.length, "dist_family": res.family, "dist_power_marginal": pw.marginal,
            "dist_power_sequence": pw.sequence, "dist_shift_detected": pw.shift_detected}


def _distribution_run(rows: list[dict[str, Any]], checks: dict[tuple[str, str], distribution.Check]) -> None:
    """The distribution columns of every checked row, Holm-adjusted over all tests of the run's checked cells (one
    family per run: a run whose samplers are all correct shows a FAIL with probability at most ALPHA)."""
    adjusted = dict(zip(checks, distribution.run_family(list(checks.values()))))
    for row in rows:
        res = adjusted.get((row["cell_id"], row["dataset"]))
        if res is not None:
            row.update(_distribution(res))


def _drift(base: dict[str, list[dict[str, Any]]], row: dict[str, Any]) -> dict[str, Any]:
    """The drift columns of a speculative row: its baseline's TPOT on the recheck prompts before and after its
    speculative cells ran (records of kind "recheck"), the drift with its CI, and whether it is both real and large
    against the row's speedup CI (`metrics.drift_flag`)."""
    pairs = _paired(base.get("request", []), base.get("recheck", []))
    if not pairs:
        return {}
    d = metrics.baseline_drift([b["tpot_ms"] for b, _ in pairs], [a["tpot_ms"] for _, a in pairs])
    return {"baseline_tpot_before_ms": d.before_ms, "baseline_tpot_after_ms": d.after_ms, "baseline_drift": d.drift,
            "baseline_drift_ci_low": d.ci_low, "baseline_drift_ci_high": d.ci_high, "n_drift_pairs": d.n,
            "drift_flag": metrics.drift_flag(d, row["speedup_ci_low"], row["speedup_ci_high"])}


def _ties(pairs: list[tuple[dict, dict]], checks: list[dict[str, Any]]) -> dict[str, Any]:
    """The greedy verdict columns: prompts identical, numerical ties at their first divergence, and violations
    (verification/ties.py, from the row's tie-check records), the first violation and why, the widest tie."""
    t = ties.row_ties([(m["prompt_sha256"], b["output_ids"], m["output_ids"]) for b, m in pairs], checks)
    first = min(t.violations, key=lambda v: v[0], default=None)
    return {**t.columns(), "first_violation": first[0] if first else None,
            "violation_reason": first[1].reason if first else None}


def _not_checked(row: dict[str, Any], cell: dict[str, Any], base_id: str | None,
                 groups: dict[Key, dict[str, list[dict[str, Any]]]],
                 samples: dict[tuple[str, str], list[dict[str, Any]]]) -> str | None:
    """Why a speculative row's due check could not run (greedy identity at T = 0 at concurrency 1, the distribution
    check at T > 0), or None when it ran or is not due."""
    cid, dataset, level, t = row["cell_id"], row["dataset"], row["concurrency"], cell["temperature"]
    no_base = (f"the run has no baseline cell on engine {cell['engine']} at T={t:g} to compare with (add "
               f"'baseline' to 'methods')")
    if t == 0:
        if (level or 1) > 1:  # batched identity is a measurement; the verdict is the concurrency-1 level's
            levels = [k[2] for k in groups if k[:2] == (cid, dataset)]
            if 1 in levels or level != min(levels):
                return None
            return ("greedy identity is a verdict at concurrency 1 only (batching changes the numerics), and the "
                    "matrix has no concurrency-1 level: add 1 to 'concurrency'")
        if row["identical_frac"] is not None:
            return None
        if base_id is None:
            return no_base
        if not groups.get((base_id, dataset, level), {}).get("request"):
            return f"its baseline has no measured requests on {dataset} (its unit failed or has not run)"
        return "no baseline request was sent the same prompt (prompt hashes differ)"
    if row["dist_verdict"] in ("pass", "FAIL"):
        return None
    if base_id is None:
        return no_base
    if not samples.get((cid, dataset)):
        return "the cell drew no distribution samples" + (" (see Failed units)" if row["n_errors"] else "")
    if not samples.get((base_id, dataset)):
        return f"its baseline drew no distribution samples on {dataset} (its unit failed or has not run)"
    return "no prompt was sampled by both the cell and its baseline"


def summarize(records: list[dict[str, Any]], manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (cell, dataset, serving level); a speculative row whose due check could not run names why in
    `not_checked` (and, at T > 0, has `dist_verdict` "unchecked")."""
    cells = manifest["cells"]
    groups = _group(records)
    # A cell's distribution samples, whichever level's unit holds them: a serving cell draws them once (at its
    # first level), and the verdict is the cell's, shared by its levels' rows.
    samples: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for (cid, dataset, _), kinds in groups.items():
        samples[(cid, dataset)] += kinds.get("samples", [])
    checks: dict[tuple[str, str], distribution.Check] = {}  # one per checked (cell, dataset), shared by its levels
    rows = []
    def order(key: Key) -> tuple:
        c = cells[key[0]]
        return (c["engine"], c["temperature"], key[2] or 0, c["method"] != "baseline", c["method"], c["k"],
                workload_order(key[1]))

    for (cid, dataset, level), kinds in sorted(groups.items(), key=lambda kv: order(kv[0])):
        cell = cells[cid]
        reqs = sorted(kinds.get("request", []), key=lambda r: r["prompt_index"])
        tpots = [r["tpot_ms"] if r["tpot_ms"] is not None else math.nan for r in reqs]
        decode_s = sum(r["decode_s"] for r in reqs)
        row: dict[str, Any] = {c: None for c in COLUMNS}
        row.update({
            "run_id": manifest.get("run_id"), "cell_id": cid, "label": reqs[0]["label"] if reqs else None,
            "engine": cell["engine"], "platform": manifest.get("platform"),
            "hardware": (manifest.get("hardware") or {}).get("device"), "target": cell["target"],
            "draft": cell["draft"], "method": cell["method"], "k": cell["k"], "temperature": cell["temperature"],
            "max_new_tokens": cell["max_new_tokens"], "dataset": dataset, "n_prompts": len(reqs),
            "n_errors": len(kinds.get("error", [])),
            "error": "; ".join(e["error"] for e in kinds.get("error", [])) or None,
            "tpot_ms_mean": metrics.mean(tpots), "tpot_ms_p50": metrics.percentile(tpots, 50),
            "tpot_ms_p90": metrics.percentile(tpots, 90), "tpot_ms_p99": metrics.percentile(tpots, 99),
            "ttft_ms_mean": metrics.mean([r["ttft_ms"] for r in reqs]),
            "output_tok_per_s": metrics.output_tok_per_s(sum(r["n_out"] for r in reqs), decode_s),
            "concurrency": level, **_workload_columns(reqs),
        })
        row["label"] = row["label"] or ("baseline" if cell["method"] == "baseline"
                                        else f"{cell['method']}-k{cell['k']}")
        spec = kinds.get("spec")
        if spec:
            s = spec[0]
            acc = metrics.acceptance(SpecCounters(s["num_drafts"], s["num_draft_tokens"], s["num_accepted_tokens"],
                                                  s["accepted_per_pos"]))
            row.update(tau=acc.tau, acceptance_rate=acc.alpha, per_position=json.dumps(acc.per_position),
                       histogram=json.dumps(acc.histogram))
        if cell["method"] != "baseline":
            row["tau_prompt_mean"] = metrics.tau_prompt_mean([r.get("accept_lengths") for r in reqs])
        base_id = cid if cell["method"] == "baseline" else baseline_cell_id(cell, cells)
        if cell["method"] != "baseline" and cell["temperature"] > 0:
            res = distribution.check(samples.get((base_id, dataset), []) if base_id else [],
                                     samples.get((cid, dataset), []))
            if res is not None:
                checks[(cid, dataset)] = res
            row["dist_verdict"] = "unchecked" if res is None else "pass" if res.passed else "FAIL"  # _distribution_run
        if level is not None:
            row.update(_serve_columns(kinds, groups.get((base_id, dataset, level)) if base_id else None, reqs))
        if base_id is not None and reqs:
            base_reqs = groups.get((base_id, dataset, level), {}).get("request", [])
            pairs = _paired(base_reqs, reqs)
            if pairs:
                nan = math.nan  # a request without a TPOT (None) leaves the pairing
                sp = metrics.paired_speedup([nan if b["tpot_ms"] is None else b["tpot_ms"] for b, _ in pairs],
                                            [nan if m["tpot_ms"] is None else m["tpot_ms"] for _, m in pairs])
                row.update(speedup=sp.geomean, speedup_ci_low=sp.ci_low, speedup_ci_high=sp.ci_high,
                           speedup_mean_ratio=sp.mean_ratio, n_pairs=sp.n)
                if cell["temperature"] == 0 and cell["method"] != "baseline":
                    ll = metrics.lossless([b["output_ids"] for b, _ in pairs], [m["output_ids"] for _, m in pairs])
                    if (level or 1) > 1:  # batched: measured against AR at the same load, not a lossless verdict
                        row.update(identical_frac_batched=ll.identical_frac)
                    else:
                        row.update(identical_frac=ll.identical_frac, first_divergence_min=ll.first_divergence_min)
                        row.update(_ties(pairs, kinds.get("tie_check", [])))
        if base_id is not None and cell["method"] != "baseline":
            row.update(_drift(groups.get((base_id, dataset, level), {}), row))
        if cell["method"] != "baseline" and reqs:
            row["not_checked"] = _not_checked(row, cell, base_id, groups, samples)
        rows.append(row)
    _distribution_run(rows, checks)
    return rows
