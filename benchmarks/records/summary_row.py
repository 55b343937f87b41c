"""A row of summary.csv as a type: one field per column of the registry (benchmarks/analysis/columns.py, which
computes them), in its order, so that the report, the figures and the verdicts read attributes that mypy checks
(tests/analysis/test_columns.py checks the fields against the registry). A field is None where its column does not
apply to the row (a baseline's τ, a batch-1 row's batch figures). Every computed row has the fields with other
defaults; the stand-in rows the lossless check makes for units that hold no records carry their identity and why
(`not_checked`) alone, and those defaults elsewhere."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class SummaryRow:
    run_id: str | None = None
    cell_id: str = ""
    label: str
    engine: str
    platform: str | None = None
    hardware: str | None = None
    target: str = ""
    draft: str | None = None
    method: str
    k: int = 0
    tree_budget: int = 0
    rows_per_step: float | None = None
    temperature: float
    max_new_tokens: int = 0
    dataset: str
    n_prompts: int = 0
    n_errors: int = 0
    tau: float | None = None
    acceptance_rate: float | None = None
    per_position: str | None = None
    histogram: str | None = None
    tpot_ms_mean: float = math.nan
    tpot_ms_p50: float = math.nan
    tpot_ms_p90: float = math.nan
    tpot_ms_p99: float = math.nan
    ttft_ms_mean: float = math.nan
    output_tok_per_s: float = math.nan
    speedup: float | None = None
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    speedup_mean_ratio: float | None = None
    n_pairs: int | None = None
    speedup_units: int | None = None
    speedup_ci_note: str | None = None
    identical_frac: float | None = None
    first_divergence_min: int | None = None
    n_identical: int | None = None
    n_ties: int | None = None
    n_violations: int | None = None
    first_violation: int | None = None
    violation_reason: str | None = None
    tie_margin_max: float | None = None
    tie_margin_max_ulps: float | None = None
    n_outliers: int | None = None
    outlier_prompts: str | None = None
    error: str | None = None
    tau_prompt_mean: float | None = None
    dist_verdict: str | None = None
    dist_p_min: float | None = None
    dist_p_values: str | None = None
    dist_n_base: int | None = None
    dist_n_method: int | None = None
    dist_n_tests: int | None = None
    dist_length: int | None = None
    dist_family: int | None = None
    dist_power_marginal: float | None = None
    dist_power_sequence: float | None = None
    dist_shift_detected: float | None = None
    not_checked: str | None = None
    baseline_tpot_before_ms: float | None = None
    baseline_tpot_after_ms: float | None = None
    baseline_drift: float | None = None
    drift_flag: bool | None = None
    baseline_drift_ci_low: float | None = None
    baseline_drift_ci_high: float | None = None
    n_drift_pairs: int | None = None
    concurrency: int | None = None
    request_rate: float | None = None
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    ttft_ms_p99: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p90: float | None = None
    itl_ms_p99: float | None = None
    agg_output_tok_per_s: float | None = None
    requests_per_s: float | None = None
    throughput_speedup: float | None = None
    throughput_speedup_ci_low: float | None = None
    throughput_speedup_ci_high: float | None = None
    throughput_ci_note: str | None = None
    identical_frac_batched: float | None = None
    n_burst: int | None = None
    server_tpot_ms_mean: float | None = None
    server_tpot_speedup: float | None = None
    context_tokens: int | None = None
    turn: int | None = None
    prompt_tokens_mean: float = math.nan
    prompts_sha256: str | None = None
    step_ms: float | None = None
    draft_step_ms: float | None = None
    verify_step_ms: float | None = None
    host_step_ms: float | None = None
    batch_size: int | None = None
    n_batches: int | None = None
    tok_per_s_total: float | None = None
    tok_per_s_user_p50: float | None = None
    tok_per_s_user_p10: float | None = None
    tok_per_s_user_estimated: bool | None = None
    batch_speedup: float | None = None
    batch_speedup_ci_low: float | None = None
    batch_speedup_ci_high: float | None = None
    n_batch_pairs: int | None = None
    tpot_speedup: float | None = None
    tpot_speedup_ci_low: float | None = None
    tpot_speedup_ci_high: float | None = None
    wasted_row_steps: int | None = None
    strongest_baseline: str | None = None
    speedup_vs_strongest: float | None = None
    speedup_vs_strongest_ci_low: float | None = None
    speedup_vs_strongest_ci_high: float | None = None
    slower_than_strongest: bool | None = None
    n_vs_strongest: int | None = None
    vs_strongest_apart: bool | None = None

    @property
    def batched(self) -> bool:
        """A static batch's row (B > 1); batch 1 otherwise."""
        return (self.batch_size or 1) > 1

    def as_dict(self) -> dict[str, Any]:
        """The row as summary.csv holds it, column by column in the registry's order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def of(cls, values: dict[str, Any]) -> SummaryRow:
        """The row of a mapping that holds every column (a computed row, or one read back from summary.csv)."""
        return cls(**values)


def label_at(label: str, concurrency: int | None, batch_size: int | None) -> str:
    """A method label with a serving level, or an offline batch size above 1, where there is one."""
    return (label + (f" @C={concurrency}" if concurrency else "")
            + (f" @B={batch_size}" if (batch_size or 1) > 1 else ""))
