"""The column registry of summary.csv: each column once, in file order, with its unit, its definition, how it is
computed from a row's records (analysis/row_records.py, metrics from core/metrics.py) and the report.md section that
shows it. summary.csv's header, the rows summarize() builds and docs/outputs.md's column table all come from it;
adding a column is one entry here (tests/analysis/test_columns.py checks the docs follow)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from benchmarks.analysis.row_records import (
    RowRecords,
    level_server_tpot,
    level_throughput,
    no_interval,
    prompts_sha256,
)
from benchmarks.analysis.tree_curve import rows_per_step
from benchmarks.core import metrics
from benchmarks.records.records import LoadLine
from benchmarks.records.summary_row import SummaryRow

# report.md sections a column appears in (None: summary.csv only)
RESULTS, ACCEPTANCE, WORKLOADS, SERVING = "Results", "Per-position acceptance", "Workloads", "Serving under load"
DRIFT, LOSSLESS, DISTRIBUTION = "Baseline drift", "Lossless check (greedy)", "Distribution check (T > 0)"
FAILED, BATCH = "Failed units", "Batch"


@dataclass(frozen=True)
class Column:
    """One summary.csv column: name, unit ("" for none), definition, its value for a row, its report section, and
    for a metric the term of docs/statistics.md that defines it."""

    name: str
    unit: str
    definition: str
    compute: Callable[[RowRecords], Any]
    section: str | None = None
    term: str | None = None  # the term docs/statistics.md's Definitions define it under (its metrics)


def _cell(key: str) -> Callable[[RowRecords], Any]:
    return lambda u: getattr(u.cell, key)


def _maybe(attr: str, field: str) -> Callable[[RowRecords], Any]:
    """A field of one of the row's computed figures (u.<attr>), None where the row has none."""
    return lambda u: None if getattr(u, attr) is None else getattr(getattr(u, attr), field)


def _item(attr: str, key: str) -> Callable[[RowRecords], Any]:
    """A value of one of the row's computed column groups (a dict; empty where they do not apply)."""
    return lambda u: getattr(u, attr).get(key)


def _levelled(f: Callable[[RowRecords], Any]) -> Callable[[RowRecords], Any]:
    """A serving row's value (it has a concurrency), None on batch-1 rows."""
    return lambda u: f(u) if u.level is not None else None


def _loaded(f: Callable[[RowRecords], Any]) -> Callable[[RowRecords], Any]:
    """A serving level's value from its load record, None without one."""
    return lambda u: f(u) if u.level is not None and u.load else None


def _batched(field: str) -> Callable[[RowRecords], Any]:
    """A field of a static batch's paired TPOT speedup (None on other rows: there it is `speedup` itself)."""
    return lambda u: getattr(u.speedup, field) if u.batch is not None and u.speedup is not None else None


def _spec(f: Callable[[RowRecords], Any]) -> Callable[[RowRecords], Any]:
    return lambda u: f(u) if u.speculative else None


def _label(u: RowRecords) -> str:
    return u.reqs[0].label if u.reqs else u.cell.label


BATCH_ONE = "at B=1"  # a static batch's row: its distribution verdict is the batch-1 row's


def _dist_verdict(u: RowRecords) -> str | None:
    if u.dist:
        return u.dist["dist_verdict"]
    if not (u.speculative and u.cell.temperature > 0):
        return None
    return BATCH_ONE if (u.batch or 1) > 1 and u.batch_one else "unchecked"


def _ttft_p(q: int) -> Callable[[RowRecords], Any]:
    return _levelled(lambda u: metrics.percentile([r.ttft_ms for r in u.reqs], q))


def _drift_flag(u: RowRecords) -> bool | None:
    if u.drift is None:
        return None
    return metrics.drift_flag(u.drift, *((u.speedup.ci_low, u.speedup.ci_high) if u.speedup else (None, None)))


def _ratio_to_base(f: Callable[[LoadLine | None], float],
                   ratio: Callable[[float, float], float]) -> Callable[[RowRecords], Any]:
    """A serving level's figure against its baseline's at the same level."""
    return _loaded(lambda u: ratio(f(u.base_load()), f(u.load)))


def _first(u: RowRecords, key: str) -> Any:
    return getattr(u.reqs[0], key) if u.reqs else None


COLUMNS: tuple[Column, ...] = (
    Column("run_id", "", "the run's name and config hash", lambda u: u.manifest.run_id or None),
    Column("cell_id", "", "the cell's content hash (its config and the hashes of the model files it loads)",
           lambda u: u.cell_id),
    Column("label", "", "the method and K (`dflash-k15`, `baseline`)", _label, RESULTS),
    Column("engine", "", "the engine that measured the cell (`vllm`, `vllm-serve`, `jax`)", _cell("engine"),
           RESULTS),
    Column("platform", "", "cpu, gpu or tpu", lambda u: u.manifest.platform),
    Column("hardware", "", "the device the run measured on",
           lambda u: u.manifest.hardware.get("device")),
    Column("target", "", "the target model", _cell("target")),
    Column("draft", "", "the draft model (empty for the baseline)", _cell("draft")),
    Column("method", "", "baseline, dflash, eagle3, ngram or ddtree", _cell("method")),
    Column("k", "tokens", "draft tokens proposed per verify step (0 for the baseline and a draft tree)", _cell("k")),
    Column("tree_budget", "nodes", "a draft tree's node budget: nodes verified per step besides the root (0 unless a "
           "tree)", _cell("tree_budget")),
    Column("rows_per_step", "rows", "rows each verify step multiplies per request, mean over the steps (a tree's "
           "budget + 1 as recorded, K + 1 for a chain, 1 for AR)", rows_per_step),
    Column("temperature", "", "the sampling temperature T (0 = greedy)", _cell("temperature"), RESULTS),
    Column("max_new_tokens", "tokens", "output tokens asked per prompt", _cell("max_new_tokens")),
    Column("dataset", "", "the dataset workload (`humaneval`, `humaneval@ctx4096`, `mt-bench@turn2`)",
           lambda u: u.workload, RESULTS),
    Column("n_prompts", "", "measured prompts (warm-up excluded)", lambda u: len(u.reqs), RESULTS),
    Column("n_errors", "", "error records of the unit", lambda u: len(u.lines.errors)),
    Column("tau", "tokens/step", "committed tokens per verify step, 1 + accepted/drafts, pooled over all steps",
           _maybe("acceptance", "tau"), RESULTS, term="tau"),
    Column("acceptance_rate", "", "α = accepted / drafted tokens", _maybe("acceptance", "alpha"), RESULTS,
           term="alpha"),
    Column("per_position", "json", "p_i = fraction of verify steps with ≥ i accepted drafts, i = 1..K",
           lambda u: None if u.acceptance is None else json.dumps(u.acceptance.per_position), ACCEPTANCE, term="p_i"),
    Column("histogram", "json", "verify steps by exact number of accepted drafts (0..K)",
           lambda u: None if u.acceptance is None else json.dumps(u.acceptance.histogram), term="hist"),
    Column("tpot_ms_mean", "ms", "mean per-request TPOT, (last − first token time)/(n_out − 1)",
           lambda u: metrics.mean(u.tpots), RESULTS, term="TPOT"),
    Column("tpot_ms_p50", "ms", "median per-request TPOT", lambda u: metrics.percentile(u.tpots, 50), RESULTS,
           term="TPOT"),
    Column("tpot_ms_p90", "ms", "90th percentile of per-request TPOT", lambda u: metrics.percentile(u.tpots, 90),
           RESULTS, term="TPOT"),
    Column("tpot_ms_p99", "ms", "99th percentile of per-request TPOT", lambda u: metrics.percentile(u.tpots, 99),
           SERVING, term="TPOT"),
    Column("ttft_ms_mean", "ms", "mean time to first token", lambda u: metrics.mean([r.ttft_ms for r in u.reqs]),
           RESULTS, term="TTFT"),
    Column("output_tok_per_s", "tok/s", "output tokens of the decode spans (each request's after its first) / decode "
           "time, summed over requests",
           lambda u: metrics.output_tok_per_s(sum(r.n_out - 1 for r in u.reqs if r.n_out > 1),
                                              sum(r.decode_s for r in u.reqs if r.n_out > 1)),
           RESULTS, term="tok/s"),
    Column("speedup", "×", "the speedup a user feels: the geometric mean over paired prompts of TPOT_AR / TPOT_M; "
           "at B > 1 the wall-clock throughput speedup of the static batches (batch_speedup; the TPOT one is "
           "tpot_speedup)", _maybe("headline", "geomean"), RESULTS, term="Speedup"),
    Column("speedup_ci_low", "×", "lower bound of the speedup's 95 % CI", _maybe("headline", "ci_low"), RESULTS,
           term="CI"),
    Column("speedup_ci_high", "×", "upper bound of the speedup's 95 % CI (over the units of independence: prompts at "
           "batch 1, batches at B > 1, waves of C requests at C > 1)", _maybe("headline", "ci_high"), RESULTS,
           term="CI"),
    Column("speedup_mean_ratio", "×", "mean TPOT_AR / mean TPOT_M over the paired prompts",
           _maybe("speedup", "mean_ratio"), RESULTS, term="Speedup"),
    Column("n_pairs", "", "prompts in the speedup (same prompt hash in both cells, with a TPOT)",
           _maybe("speedup", "n"), RESULTS),
    Column("speedup_units", "", "the independent units behind the speedup's interval (prompts, batches or waves)",
           _maybe("headline", "units")),
    Column("speedup_ci_note", "", "why the speedup has no interval (fewer than two units, or no spread between them)",
           _spec(lambda u: no_interval(u.headline, u.units)), RESULTS),
    Column("identical_frac", "", "fraction of prompts whose greedy tokens equal AR's (lossless check, C = 1)",
           lambda u: u.lossless.identical_frac if u.lossless and u.alone else None, RESULTS),
    Column("first_divergence_min", "tokens", "the earliest token index where a prompt's output differs from AR's",
           lambda u: u.lossless.first_divergence_min if u.lossless and u.alone else None, LOSSLESS),
    Column("n_identical", "", "prompts identical to AR", _item("ties", "n_identical"), RESULTS),
    Column("n_ties", "", "prompts diverging first at a numerical tie of the target", _item("ties", "n_ties"),
           RESULTS),
    Column("n_violations", "", "prompts diverging beyond a numerical tie", _item("ties", "n_violations"), RESULTS),
    Column("first_violation", "tokens", "the token index of the earliest violation",
           _item("ties", "first_violation"), LOSSLESS),
    Column("violation_reason", "", "why the earliest violation is one", _item("ties", "violation_reason"),
           LOSSLESS),
    Column("tie_margin_max", "logits", "the widest margin among the row's ties", _item("ties", "tie_margin_max"),
           LOSSLESS),
    Column("tie_margin_max_ulps", "ulps", "the widest tie margin in ulps of the dtype",
           _item("ties", "tie_margin_max_ulps"), RESULTS),
    Column("n_outliers", "", "requests whose TPOT lies far from the row's (modified z-score of ln TPOT above 3.5 and "
           "1.5× or more from its median); report.md names them after Results", lambda u: len(u.outliers) if u.reqs
           else None),
    Column("outlier_prompts", "json", "those requests as [prompt index, TPOT ms]",
           lambda u: json.dumps([[i, round(t, 4)] for i, t in u.outliers]) if u.outliers else None),
    Column("error", "", "the unit's errors, joined by '; '",
           lambda u: "; ".join(e.error for e in u.lines.errors) or None, FAILED),
    Column("tau_prompt_mean", "tokens/step", "mean over prompts of each prompt's τ (z-lab's statistic)",
           _spec(lambda u: metrics.tau_prompt_mean([r.accept_lengths for r in u.reqs])), RESULTS,
           term="tau_prompt_mean"),
    Column("dist_verdict", "", f"the distribution check at T > 0: pass, FAIL, unchecked (why: not_checked), or "
           f"{BATCH_ONE} at B > 1 (the verdict of the batch-1 row of the same cell)", _dist_verdict,
           DISTRIBUTION),
    Column("dist_p_min", "", "the smallest Holm-adjusted p-value", _item("dist", "dist_p_min"), DISTRIBUTION),
    Column("dist_p_values", "json", "every test's Holm-adjusted p-value", _item("dist", "dist_p_values")),
    Column("dist_n_base", "", "samples per prompt of the AR baseline", _item("dist", "dist_n_base"), DISTRIBUTION),
    Column("dist_n_method", "", "samples per prompt of the method", _item("dist", "dist_n_method"), DISTRIBUTION),
    Column("dist_n_tests", "", "the cell's tests", _item("dist", "dist_n_tests"), DISTRIBUTION),
    Column("dist_length", "tokens", "tokens per sample", _item("dist", "dist_length"), DISTRIBUTION),
    Column("dist_family", "", "tests in the run's Holm family", _item("dist", "dist_family"), DISTRIBUTION),
    Column("dist_power_marginal", "", "simulated power of one position's G-test",
           _item("dist", "dist_power_marginal"), DISTRIBUTION),
    Column("dist_power_sequence", "", "simulated power of a whole-sample test",
           _item("dist", "dist_power_sequence"), DISTRIBUTION),
    Column("dist_shift_detected", "SD", "the shift found with 90 % power", _item("dist", "dist_shift_detected"),
           DISTRIBUTION),
    Column("not_checked", "", "why a due check (greedy identity, distribution) could not run",
           lambda u: u.not_checked() if u.speculative and u.reqs else None, LOSSLESS),
    Column("baseline_tpot_before_ms", "ms", "geometric-mean baseline TPOT on the recheck prompts, before",
           _maybe("drift", "before_ms"), DRIFT, term="drift"),
    Column("baseline_tpot_after_ms", "ms", "the same after the speculative cells ran", _maybe("drift", "after_ms"),
           DRIFT, term="drift"),
    Column("baseline_drift", "", "after / before − 1 (geometric means over the recheck prompts)",
           _maybe("drift", "drift"), DRIFT, term="drift"),
    Column("drift_flag", "", "the drift is real and moves the speedup out of its CI", _drift_flag, RESULTS),
    Column("baseline_drift_ci_low", "", "lower bound of the drift's Student-t 95 % CI", _maybe("drift", "ci_low"),
           DRIFT),
    Column("baseline_drift_ci_high", "", "upper bound of the drift's Student-t 95 % CI",
           _maybe("drift", "ci_high"), DRIFT),
    Column("n_drift_pairs", "", "recheck prompts", _maybe("drift", "n"), DRIFT),
    # serving rows (engine vllm-serve): one per (cell, dataset, concurrency); empty on batch-1 rows
    Column("concurrency", "", "the serving level C: requests in flight at most", lambda u: u.level, SERVING),
    Column("request_rate", "req/s", "Poisson arrival rate under the cap (empty: all sent at once)",
           _loaded(lambda u: u.load.level.request_rate if u.load else None), SERVING),
    Column("ttft_ms_p50", "ms", "median TTFT of a level", _ttft_p(50), SERVING, term="TTFT"),
    Column("ttft_ms_p90", "ms", "90th percentile TTFT of a level", _ttft_p(90), SERVING, term="TTFT"),
    Column("ttft_ms_p99", "ms", "99th percentile TTFT of a level", _ttft_p(99), SERVING, term="TTFT"),
    Column("itl_ms_p50", "ms", "median time between streamed chunks", _levelled(lambda u: metrics.percentile(
        u.itls, 50)), SERVING, term="ITL"),
    Column("itl_ms_p90", "ms", "90th percentile inter-chunk time", _levelled(lambda u: metrics.percentile(u.itls, 90)),
           SERVING, term="ITL"),
    Column("itl_ms_p99", "ms", "99th percentile inter-chunk time", _levelled(lambda u: metrics.percentile(u.itls, 99)),
           SERVING, term="ITL"),
    Column("agg_output_tok_per_s", "tok/s", "output tokens of all requests / the level's wall time",
           _loaded(lambda u: u.throughput), SERVING, term="aggregate output tok/s"),
    Column("requests_per_s", "req/s", "completed requests / the level's wall time",
           _loaded(lambda u: metrics.requests_per_s(u.load.completed, u.load.duration_s) if u.load else None), SERVING,
           term="requests/s"),
    Column("throughput_speedup", "×", "aggregate tok/s of the method / the AR baseline's at the same C",
           _ratio_to_base(level_throughput, metrics.throughput_speedup), SERVING, term="throughput speedup"),
    Column("throughput_speedup_ci_low", "×", "lower bound of its 95 % CI, the width from the level's waves of C "
           "requests paired with AR's (jackknife)", _maybe("level_speedup", "ci_low"), SERVING,
           term="throughput speedup"),
    Column("throughput_speedup_ci_high", "×", "upper bound of that CI", _maybe("level_speedup", "ci_high"), SERVING,
           term="throughput speedup"),
    Column("throughput_ci_note", "", "why a throughput speedup has no interval",
           lambda u: no_interval(u.level_speedup if u.level is not None else u.batch_speedup,
                                 "waves" if u.level is not None else "batches"), BATCH),
    Column("identical_frac_batched", "", "at C > 1 or B > 1: fraction of prompts whose greedy tokens equal AR's at "
           "that C or B", lambda u: u.lossless.identical_frac if u.lossless and not u.alone else None, SERVING),
    Column("n_burst", "", "requests whose stream reached the client in one burst (no decode timing)",
           _levelled(lambda u: len(u.burst)), SERVING),
    Column("server_tpot_ms_mean", "ms", "mean of the server's own per-request TPOT (its /metrics histogram)",
           _loaded(lambda u: u.server_tpot), SERVING, term="server TPOT"),
    Column("server_tpot_speedup", "×", "server TPOT of AR / of the method at the same C (ratio of means)",
           _ratio_to_base(level_server_tpot, metrics.tpot_ratio), SERVING, term="server TPOT"),
    # workload rows: the context length or turn, the prompts sent, the step time and its parts (JAX `breakdown`)
    Column("context_tokens", "tokens", "the workload's context length (many-shot context ≥ this)",
           lambda u: _first(u, "context_tokens"), WORKLOADS),
    Column("turn", "", "the conversation turn measured", lambda u: _first(u, "turn"), WORKLOADS),
    Column("prompt_tokens_mean", "tokens", "mean prompt length",
           lambda u: metrics.mean([r.n_prompt_tokens for r in u.reqs]),
           WORKLOADS),
    Column("prompts_sha256", "", "hash of the set of prompts sent (equal for cells sent the same ids)",
           lambda u: prompts_sha256(u.reqs)),
    Column("step_ms", "ms", "mean decode step time, weighted by steps", lambda u: u.step_ms, WORKLOADS, term="step"),
    Column("draft_step_ms", "ms", "the draft's part of a step", _maybe("breakdown", "draft_ms"), WORKLOADS,
           term="step"),
    Column("verify_step_ms", "ms", "the verify forward's part of a step", _maybe("breakdown", "verify_ms"),
           WORKLOADS, term="step"),
    Column("host_step_ms", "ms", "the host's part of a step", _maybe("breakdown", "host_ms"), WORKLOADS, term="step"),
    # static batches (batch engines, `batch_size`): one row per cell, so per B; empty on serving rows
    Column("batch_size", "", "B: requests decoded together as one static batch (offline; a server's load is "
           "`concurrency`)", lambda u: u.batch, BATCH),
    Column("n_batches", "", "the row's batches (consecutive measured prompts in the run's prompt order, B at a time)",
           lambda u: len(u.batches) if u.batch is not None else None, BATCH),
    Column("tok_per_s_total", "tok/s", "tokens/s in total: output tokens of every batch / the sum of their decode "
           "spans (first token of any request to the last of any)", lambda u: u.tok_per_s_total, BATCH,
           term="tok/s in total"),
    Column("tok_per_s_user_p50", "tok/s", "tokens/s per user: the median over requests of each request's own decode "
           "rate, its tokens after the first / its first-to-last-token span", lambda u: _user_rate(u, 50), BATCH,
           term="tok/s per user"),
    Column("tok_per_s_user_p10", "tok/s", "the 10th percentile of the same (the slower users)",
           lambda u: _user_rate(u, 10), BATCH, term="tok/s per user"),
    Column("tok_per_s_user_estimated", "", "the per-user rates are estimated: the engine times a static batch as a "
           "whole (JAX), so a request's end is the batch's first token plus its own steps times the batch's step time",
           lambda u: u.user_rates[1] if u.batch is not None else None),
    Column("batch_speedup", "×", "throughput speedup at this B, wall-clock: output tokens over decode time in total, "
           "the method's / AR's, on the same batches (same prompts, same B)", _maybe("batch_speedup", "geomean"),
           BATCH, term="throughput speedup"),
    Column("batch_speedup_ci_low", "×", "lower bound of its 95 % CI over the paired batches (jackknife, Student-t "
           "with batches − 1 degrees of freedom where the batches weigh alike, fewer where not)",
           _maybe("batch_speedup", "ci_low"), BATCH, term="throughput speedup"),
    Column("batch_speedup_ci_high", "×", "upper bound of its Student-t 95 % CI", _maybe("batch_speedup", "ci_high"),
           BATCH, term="throughput speedup"),
    Column("n_batch_pairs", "", "batches in the throughput speedup", _maybe("batch_speedup", "n"), BATCH),
    Column("tpot_speedup", "×", "the per-request TPOT speedup at this B: geometric mean over paired prompts of "
           "TPOT_AR / TPOT_M (each request timed to its own last token where the engine does)",
           _batched("geomean"), BATCH, term="Speedup"),
    Column("tpot_speedup_ci_low", "×", "lower bound of its Student-t 95 % CI over the batches", _batched("ci_low"),
           BATCH, term="CI"),
    Column("tpot_speedup_ci_high", "×", "upper bound of that CI", _batched("ci_high"), BATCH, term="CI"),
    Column("wasted_row_steps", "row-steps", "steps the batch's rows rode along finished, padding rows included, "
           "summed over batches (JAX engine)", lambda u: u.wasted_row_steps, BATCH),
    # the strongest baseline of the run (report/engines_report.py), on runs with baselines on two or more engines
    Column("strongest_baseline", "", "the engine whose baseline has the lowest AR TPOT on this dataset and T, on one "
           "third of the prompts every engine's baseline measured",
           lambda u: u.manifest.cells[u.strongest[0].cell_id].engine if u.strongest else None),
    Column("speedup_vs_strongest", "×", "geometric mean over the other prompts of TPOT of the strongest "
           "baseline / TPOT_M",
           _maybe("over_strongest", "geomean")),
    Column("speedup_vs_strongest_ci_low", "×", "lower bound of its Student-t 95 % CI",
           _maybe("over_strongest", "ci_low")),
    Column("speedup_vs_strongest_ci_high", "×", "upper bound of its Student-t 95 % CI",
           _maybe("over_strongest", "ci_high")),
    Column("slower_than_strongest", "", "the cell is shown slower than the strongest baseline: its speedup over it "
           "below 1 with one-sided p < 0.025 on the prompts it was not chosen on (the split sets the size: no "
           "correction for the candidates)",
           lambda u: u.strongest[0].slower(u.over_strongest) if u.strongest else None),
    Column("n_vs_strongest", "", "prompts the comparison with the strongest baseline uses (those it was not "
           "chosen on)", _maybe("over_strongest", "n")),
    Column("vs_strongest_apart", "", "the cell ran apart from the strongest baseline (another engine, not "
           "interleaved): a change of the host's speed between them is not seen", lambda u: u.apart_from_strongest
           if u.strongest else None),
)
NAMES: list[str] = [c.name for c in COLUMNS]


def _user_rate(u: RowRecords, q: int) -> float | None:
    return metrics.percentile(u.user_rates[0], q) if u.batch is not None else None


def row(u: RowRecords) -> SummaryRow:
    """A summary row: every registered column's value for the unit."""
    return SummaryRow.of({c.name: c.compute(u) for c in COLUMNS})


def columns_markdown() -> str:
    """docs/outputs.md's table of summary.csv columns."""
    lines = ["| column | unit | definition | report.md section |", "|---|---|---|---|"]
    lines += [f"| `{c.name}` | {c.unit} | {c.definition} | {c.section or ''} |" for c in COLUMNS]
    return "\n".join(lines)
