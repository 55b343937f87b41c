"""Metrics against hand-computed values."""
import math

import pytest

from benchmarks.core import metrics
from benchmarks.core.records import SpecCounters


def test_tpot_excludes_prefill():
    # first token at 0.5 s (prefill), 5 tokens, last at 0.9 s: 4 decode intervals of 100 ms
    assert metrics.tpot_ms(0.5, 0.9, 5) == pytest.approx(100.0)
    assert math.isnan(metrics.tpot_ms(0.5, 0.5, 1))
    assert metrics.output_tok_per_s(5, 0.9 - 0.5) == pytest.approx(12.5)
    assert math.isnan(metrics.output_tok_per_s(1, 0.0))


def test_acceptance_from_counters():
    # three verify steps with K=3 accepting 3, 1 and 0 drafts
    c = SpecCounters.from_accept_lengths([3, 1, 0], k=3)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (3, 9, 4)
    assert c.accepted_per_pos == [2, 1, 1]
    a = metrics.acceptance(c)
    assert a.tau == pytest.approx(1 + 4 / 3)  # committed (4+3 bonus)/3 steps
    assert a.alpha == pytest.approx(4 / 9)
    assert a.per_position == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert a.histogram == [1, 1, 0, 1]  # exactly 0, 1, 2, 3 accepted


def test_counter_diff_excludes_warmup():
    warm = SpecCounters(2, 8, 5, [2, 2, 1, 0])
    total = SpecCounters(5, 20, 11, [5, 3, 2, 1])
    d = total - warm
    assert (d.num_drafts, d.num_draft_tokens, d.num_accepted_tokens, d.accepted_per_pos) == (3, 12, 6, [3, 1, 1, 1])


def test_acceptance_without_drafts_is_nan():
    assert math.isnan(metrics.acceptance(SpecCounters()).tau)


def test_paired_speedup_geomean_and_ratio_of_means():
    base, meth = [10.0, 20.0], [5.0, 5.0]  # per-prompt speedups 2 and 4
    s = metrics.paired_speedup(base, meth, seed=0)
    assert s.geomean == pytest.approx(math.sqrt(8))
    assert s.mean_ratio == pytest.approx(15.0 / 5.0)
    assert 2.0 <= s.ci_low <= s.geomean <= s.ci_high <= 4.0
    assert s.n == 2


def test_bootstrap_ci_is_seeded():
    base, meth = [10.0, 20.0, 12.0, 30.0, 9.0], [5.0, 5.0, 8.0, 6.0, 4.0]
    s0 = metrics.paired_speedup(base, meth, seed=0)
    assert metrics.paired_speedup(list(base), list(meth), seed=0) == s0  # same seed, same CI: reruns agree
    others = {(s.ci_low, s.ci_high) for s in (metrics.paired_speedup(base, meth, seed=i) for i in range(1, 6))}
    assert others != {(s0.ci_low, s0.ci_high)}  # the resampling does depend on the seed it is given


def test_paired_speedup_constant_ratio_has_tight_ci():
    s = metrics.paired_speedup([9.0, 6.0, 3.0], [3.0, 2.0, 1.0])
    assert s.geomean == pytest.approx(3.0) and s.ci_low == pytest.approx(3.0) and s.ci_high == pytest.approx(3.0)


def test_paired_speedup_skips_nan_pairs():
    s = metrics.paired_speedup([10.0, math.nan], [5.0, 1.0])
    assert s.n == 1 and s.geomean == pytest.approx(2.0)


def test_lossless_and_first_divergence():
    ref = [[1, 2, 3], [4, 5, 6], [7, 8]]
    cand = [[1, 2, 3], [4, 9, 6], [7, 8, 9]]
    ll = metrics.lossless(ref, cand)
    assert ll.identical_frac == pytest.approx(1 / 3)
    assert ll.divergent == [(1, 1), (2, 2)]
    assert ll.first_divergence_min == 1
    assert metrics.first_divergence([1, 2], [1, 2]) is None


def test_floor():
    # 8 GB of weights at 2.76 TB/s cannot be read in under ~2.9 ms: 1.31 ms is a timing error
    floor = metrics.tpot_floor_ms(8e9, 2.76e12)
    assert floor == pytest.approx(2.899, abs=1e-3)
    assert metrics.below_floor(1.31, floor)
    assert not metrics.below_floor(3.0, floor)


def test_ratio_of_two_tpots_and_of_medians():
    assert metrics.tpot_ratio(7.30, 2.66) == pytest.approx(2.7444, abs=1e-4)  # the published means' ratio
    assert math.isnan(metrics.tpot_ratio(7.3, 0.0)) and math.isnan(metrics.tpot_ratio(math.nan, 2.0))
    # medians 20 and 5 (unpaired, odd lengths, a NaN dropped): 4x, where the ratio of means would be 30/7
    assert metrics.median_speedup([10.0, 20.0, 60.0], [5.0, 4.0, 12.0, math.nan]) == pytest.approx(20.0 / 5.0)


def test_tau_from_per_position_counts_the_bonus_token():
    assert metrics.tau_from_per_position([0.9, 0.8, 0.5], 0) == 1.0
    assert metrics.tau_from_per_position([0.9, 0.8, 0.5], 2) == pytest.approx(2.7)
    with pytest.raises(ValueError, match="needs p_1..p_2"):
        metrics.tau_from_per_position([0.9], 2)
    # agrees with τ from counters when the rates come from the same steps
    c = SpecCounters.from_accept_lengths([3, 1, 0], k=3)
    assert metrics.tau_from_per_position(metrics.acceptance(c).per_position, 3) == pytest.approx(
        metrics.acceptance(c).tau)


def test_predicted_speedup_and_step_cost():
    # τ 2.8 tokens per 15 ms step against one token per 10 ms: 28/15
    assert metrics.predicted_speedup(2.8, 10.0, 15.0) == pytest.approx(28 / 15)
    # DFlash TPOT 4 ms at τ 3 against AR 10 ms: one step costs 1.2 AR steps
    assert metrics.step_cost_in_ar_steps(3.0, 4.0, 10.0) == pytest.approx(1.2)


def test_speed_checks_use_these_definitions():
    from benchmarks.core.records import RequestRecord
    from benchmarks.studies import speed

    # 3 tokens, first at 0.1 s, last at 0.3 s: two decode intervals of 100 ms; one token: no TPOT
    recs = [RequestRecord([1, 2, 3], ttft_s=0.1, last_token_s=0.3), RequestRecord([1], ttft_s=0.1, last_token_s=0.1)]
    tpots = speed.tpots_ms(recs)
    assert tpots[0] == pytest.approx(100.0) and math.isnan(tpots[1])


def test_baseline_drift_is_the_paired_geometric_mean_ratio():
    # per-prompt ratios 1.1 and 1.1 on prompts of different lengths: a drift of +10 % whatever the prompt's TPOT
    d = metrics.baseline_drift([10.0, 20.0, math.nan], [11.0, 22.0, 5.0])
    assert d.n == 2 and d.drift == pytest.approx(0.1)
    assert d.before_ms == pytest.approx(math.sqrt(200.0)) and d.after_ms == pytest.approx(math.sqrt(11.0 * 22.0))
    # ratios 2 and 0.5 cancel in the geometric mean (a ratio of means would read +25 %)
    assert metrics.baseline_drift([10.0, 10.0], [20.0, 5.0]).drift == pytest.approx(0.0)
    assert math.isnan(metrics.baseline_drift([], []).drift)
    with pytest.raises(ValueError):
        metrics.baseline_drift([10.0], [])  # unpaired lists are a caller bug


@pytest.mark.parametrize("drift, ci, flagged", [
    # CI [2.0, 2.42]: half its log width is ln(1.1) ≈ 0.0953; ln(0.9) ≈ -0.105 lies outside, ln(0.91) ≈ -0.094 not
    (0.09, (2.0, 2.42), False), (0.11, (2.0, 2.42), True), (-0.09, (2.0, 2.42), False), (-0.10, (2.0, 2.42), True),
    (0.0, (2.0, 2.42), False),
    # CI [1, 4]: the factor 2 either way; a linear half-width (3/5 = 0.6) would flag +90 % and pass -55 %
    (0.9, (1.0, 4.0), False), (1.1, (1.0, 4.0), True), (-0.45, (1.0, 4.0), False), (-0.55, (1.0, 4.0), True),
])
def test_drift_flag_compares_the_drift_with_half_the_ci_width_in_log_space(drift, ci, flagged):
    assert metrics.drift_flag(drift, *ci) is flagged


def test_drift_flag_unknown_without_a_drift_or_a_ci():
    assert metrics.drift_flag(math.nan, 2.0, 2.4) is None
    assert metrics.drift_flag(0.2, None, None) is None
    assert metrics.drift_flag(0.0, 2.5, 2.5) is False and metrics.drift_flag(0.01, 2.5, 2.5) is True  # no CI width
