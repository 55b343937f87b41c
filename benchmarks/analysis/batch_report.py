"""The "Batch" section of report.md: per engine, dataset and method, each offline batch size's τ, tokens/s per user and
in total, throughput speedup with its interval, wasted row-steps and token identity; and the crossover batch size.

Pure: summary rows in, markdown out. Shown only for a run with a batch size above 1 (`batch_rows`).
"""
from __future__ import annotations

from typing import Any

from benchmarks.analysis.shown import DATASET, ENGINE, TEMPERATURE, Shown, method_only, render, value
from benchmarks.core import metrics
from benchmarks.core.markdown import fmt

EXPLAIN = """\
B is the **offline batch size**: B measured prompts (consecutive in the run's prompt order, the same batches for
every cell) decoded together as one static batch by a batch engine (JAX: the batch-1 step under vmap; vLLM: B
prompts in one `generate` call, max_num_seqs = B). It is not a server's **concurrency** C (requests in flight,
Serving under load). **tok/s total** = output tokens of every batch / the sum of their decode spans (first token of
any request to the last of any); **tok/s per user** = the mean over requests of 1000 / TPOT, each request timed as
its batch gave it (a request that finished early waits for its batch in the JAX engine: docs/engine-findings.md);
**batches** = the baseline's batches, a method's batches paired with the baseline's; **thr. speedup** = geometric
mean over paired batches (same prompts, same B) of tok/s_M / tok/s_AR, with its Student-t 95 % CI (one log ratio per
batch: few batches at large B give wide intervals); **wasted row-steps** = steps the batch's rows rode along
finished, padding rows included (JAX). **identical**: at B = 1 the lossless check; at B > 1 the measured fraction of
prompts whose greedy tokens equal AR's at the same B. The **crossover** is the smallest B whose speedup interval
lies wholly below 1."""


def _speedup(r: dict[str, Any]) -> str:
    ci = (f" [{fmt(r['batch_speedup_ci_low'])}, {fmt(r['batch_speedup_ci_high'])}]"
          if r.get("batch_speedup_ci_low") is not None else "")
    return fmt(r["batch_speedup"]) + ci


BATCH_TABLE: tuple[Shown, ...] = (
    ENGINE, DATASET, value("method", "label"), TEMPERATURE, value("B", "batch_size"), value("n", "n_prompts"),
    value("τ", "tau"), value("TPOT ms", "tpot_ms_mean"), value("tok/s per user", "tok_per_s_user", 1),
    value("tok/s total", "tok_per_s_total", 1),
    method_only(Shown("thr. speedup [95% CI]", ("batch_speedup", "batch_speedup_ci_low", "batch_speedup_ci_high"),
                       _speedup)),
    Shown("batches", ("n_batches", "n_batch_pairs"),
          lambda r: fmt(r["n_batch_pairs"] if r["method"] != "baseline" else r["n_batches"])),
    value("wasted row-steps", "wasted_row_steps"),
    method_only(Shown("identical", ("identical_frac", "identical_frac_batched"), lambda r: fmt(
        r["identical_frac"] if r["batch_size"] == 1 else r.get("identical_frac_batched"), 3))),
)


def batch_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of every (engine, dataset, temperature) measured at a batch size above 1, at each batch size."""
    axis = {(r["engine"], r["dataset"], r["temperature"]) for r in rows if (r.get("batch_size") or 1) > 1}
    return [r for r in rows if r.get("batch_size") is not None and (r["engine"], r["dataset"], r["temperature"])
            in axis]


def crossovers(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, int | None, int, int]]:
    """(engine, dataset, method label, crossover batch size or None, smallest and largest B measured) per speculative
    series of batch rows at one temperature."""
    series: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for r in batch_rows(rows):
        if r["method"] != "baseline" and r.get("batch_speedup_ci_high") is not None:
            label = r["label"] + (f" T={r['temperature']:g}" if r["temperature"] else "")
            series.setdefault((r["engine"], r["dataset"], label), []).append(
                (int(r["batch_size"]), float(r["batch_speedup_ci_high"])))
    return [(e, d, label, metrics.batch_crossover(points), min(b for b, _ in points), max(b for b, _ in points))
            for (e, d, label), points in sorted(series.items())]


def crossover_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for engine, dataset, label, b, low, top in crossovers(rows):
        where = f"- {engine} {label} on {dataset}: "
        if b is None:
            out.append(where + f"not reached (the speedup interval reaches 1 or above at every B up to {top})")
        elif b == low:
            out.append(where + f"the speedup interval lies below 1 already at B = {b}, the smallest measured")
        else:
            out.append(where + f"the speedup interval lies below 1 from B = {b}")
    return out or ["- no speculative row has a speedup interval (fewer than two batches per B, or no baseline)"]


def batch_markdown(rows: list[dict[str, Any]]) -> str | None:
    """The section's body; None when the run has no batch size above 1."""
    batched = batch_rows(rows)
    if not batched:
        return None
    ordered = sorted(batched, key=lambda r: (r["engine"], r["dataset"], r["temperature"], r["method"] != "baseline",
                                             r["label"], r["batch_size"]))
    serving = sorted({r["engine"] for r in rows if r.get("concurrency") is not None})
    both = ([f"This run also served a load ({', '.join(serving)}): its axis is the concurrency C of Serving under",
             "load, requests in flight against a server, not a static batch."] if serving else [])
    return "\n".join([EXPLAIN, *(["", *both] if both else []), "", render(BATCH_TABLE, ordered), "",
                      "Crossover batch size:", *crossover_lines(rows)])
