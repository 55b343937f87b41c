"""The "Batch" section of report.md: per engine, dataset and method, each offline batch size's τ, tokens/s per user and
in total, throughput speedup with its interval, wasted row-steps and token identity; and the crossover batch size.

Pure: summary rows in, markdown out. Shown only for a run with a batch size above 1 (`batch_rows`).
"""
from __future__ import annotations

from benchmarks.analysis.crossovers import SeriesCrossover
from benchmarks.core.markdown import fmt
from benchmarks.records.summary_row import SummaryRow
from benchmarks.report.shown import DATASET, ENGINE, TEMPERATURE, Shown, method_only, render, value, with_interval

EXPLAIN = """\
B is the **offline batch size**: B measured prompts (consecutive in the run's prompt order, the same batches for
every cell) decoded together as one static batch by a batch engine (JAX: the batch-1 step under vmap; vLLM: B
prompts in one `generate` call, max_num_seqs = B). It is not a server's **concurrency** C (requests in flight,
Serving under load). Requests of one batch share its steps, so the **batch** is the unit of independence: every
interval at B > 1 is over batches (Student-t, batches − 1 degrees of freedom), and a B with a single batch has none.
**tok/s total** = the output tokens of every batch's decode span (each request's tokens after its first) / the sum
of those spans (first token of any request to the last of any); **tok/s per user** = each request's own decode rate
(its tokens after the first / its first-to-last-token span), p50 and p10 over requests (p10: the slower users);
*est.* where the engine times a batch only as a whole (JAX: a request ends at the batch's first token plus its own
steps times the batch's step time); **batches** = the baseline's batches, a method's batches paired with the
baseline's; **thr. speedup** = wall-clock: tok/s total of the method / of AR on the same batches, its 95 % CI over
the paired batches by the jackknife (the `speedup` of Results at B > 1); **TPOT speedup** = the geometric mean over
paired prompts of TPOT_AR / TPOT_M, its CI over the batches (a request that ends early counts, though its batch
waits for its slowest); **wasted row-steps** = steps the batch's rows rode along finished, padding
rows included (JAX). **identical**: at B = 1 the lossless check; at B > 1 the measured fraction of prompts whose
greedy tokens equal AR's at the same B. The **crossover** is the smallest B whose throughput speedup is shown below
1: one-sided at 2.5 % (a single B: its interval lies below 1), Holm-corrected over the B levels scanned; a B without
an interval is inconclusive, named, never counted as above 1."""


def _speedup(r: SummaryRow) -> str:
    return with_interval(r.batch_speedup, r.batch_speedup_ci_low, r.batch_speedup_ci_high,
                         r.throughput_ci_note)


def _user(r: SummaryRow) -> str:
    if r.tok_per_s_user_p50 is None:
        return fmt(None)
    est = " est." if r.tok_per_s_user_estimated else ""
    return f"{fmt(r.tok_per_s_user_p50, 1)} / {fmt(r.tok_per_s_user_p10, 1)}{est}"


BATCH_TABLE: tuple[Shown, ...] = (
    ENGINE, DATASET, value("method", "label"), TEMPERATURE, Shown("B", ("batch_size",), lambda r: fmt(r.batch_size)),
    value("n", "n_prompts"),
    value("τ", "tau"), value("TPOT ms", "tpot_ms_mean"),
    Shown("tok/s per user p50 / p10", ("tok_per_s_user_p50", "tok_per_s_user_p10", "tok_per_s_user_estimated"), _user),
    value("tok/s total", "tok_per_s_total", 1),
    method_only(Shown("thr. speedup [95% CI]", ("batch_speedup", "batch_speedup_ci_low", "batch_speedup_ci_high",
                                                "throughput_ci_note"), _speedup)),
    method_only(Shown("TPOT speedup [95% CI]", ("tpot_speedup", "tpot_speedup_ci_low", "tpot_speedup_ci_high"),
                      lambda r: with_interval(r.tpot_speedup, r.tpot_speedup_ci_low, r.tpot_speedup_ci_high))),
    Shown("batches", ("n_batches", "n_batch_pairs"),
          lambda r: fmt(r.n_batch_pairs if r.method != "baseline" else r.n_batches)),
    value("wasted row-steps", "wasted_row_steps"),
    method_only(Shown("identical", ("identical_frac", "identical_frac_batched"), lambda r: fmt(
        r.identical_frac if r.batch_size == 1 else r.identical_frac_batched, 3))),
)


def batch_rows(rows: list[SummaryRow]) -> list[SummaryRow]:
    """The rows of every (engine, dataset, temperature) measured at a batch size above 1, at each batch size."""
    axis = {(r.engine, r.dataset, r.temperature) for r in rows if r.batched}
    return [r for r in rows if r.batch_size is not None and (r.engine, r.dataset, r.temperature)
            in axis]


def crossover_lines(found: list[SeriesCrossover]) -> list[str]:
    """One line per method's series: where its throughput speedup is shown below 1, or that it is not, and which
    levels had no interval to decide from (inconclusive, never counted as above 1)."""
    out = []
    for c in found:
        r, ax = c.result, c.axis
        where = f"- {c.engine} {c.label} on {c.workload}: "
        holm = (f"one-sided, Holm over the {len(r.tested)} {ax} levels with an interval"
                if len(r.tested) > 1 else "one-sided")
        if r.level is not None:
            p = r.adjusted[r.level]
            line = where + (f"below 1 already at {ax} = {r.level}, the smallest measured" if r.level == c.levels[0]
                            else f"the speedup is shown below 1 from {ax} = {r.level}") + f" (p = {p:.2g}, {holm})"
        elif r.tested:
            line = where + f"not shown below 1 at any {ax} with an interval ({', '.join(map(str, r.tested))}; {holm})"
        else:
            line = where + f"no {ax} level has an interval to decide from"
        if r.inconclusive:
            line += (f"; {ax} = {', '.join(map(str, r.inconclusive))} inconclusive (no interval: fewer than two "
                     f"{c.units}, or no spread between them)")
        out.append(line)
    return out or ["- no speculative series along the axis"]


def batch_markdown(rows: list[SummaryRow], found: list[SeriesCrossover]) -> str | None:
    """The section's body; None when the run has no batch size above 1."""
    batched = batch_rows(rows)
    if not batched:
        return None
    ordered = sorted(batched, key=lambda r: (r.engine, r.dataset, r.temperature, r.method != "baseline",
                                             r.label, r.batch_size))
    serving = sorted({r.engine for r in rows if r.concurrency is not None})
    both = ([f"This run also served a load ({', '.join(serving)}): its axis is the concurrency C of Serving under",
             "load, requests in flight against a server, not a static batch."] if serving else [])
    return "\n".join([EXPLAIN, *(["", *both] if both else []), "", render(BATCH_TABLE, ordered), "",
                      "Crossover batch size (the smallest B whose throughput speedup is shown below 1):",
                      *crossover_lines(found)])
