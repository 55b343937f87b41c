"""Metrics against hand-computed values, and the speedup and drift intervals against simulation."""
import math

import numpy as np
import pytest
from scipy.special import ndtri, stdtrit

from benchmarks.config.matrix_schema import KEY
from benchmarks.core import metrics
from benchmarks.core.engine_io import SpecCounters


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


T1 = math.tan(math.pi * 0.475)  # t_{0.975} at 1 d.f. (the Cauchy quantile), 12.706
T2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # t_{0.975} at 2 d.f., (2p - 1) / sqrt(2p(1 - p)) = 4.303


def test_paired_speedup_geomean_ratio_of_means_and_t_interval():
    base, meth = [10.0, 20.0], [5.0, 5.0]  # per-prompt speedups 2 and 4: log sd ln(2)/sqrt(2)
    s = metrics.paired_speedup(base, meth)
    assert s.geomean == pytest.approx(math.sqrt(8))
    assert s.mean_ratio == pytest.approx(15.0 / 5.0)
    half = T1 * (math.log(2) / math.sqrt(2)) / math.sqrt(2)  # at n = 2 the interval spans a factor of ~6,000
    assert (s.ci_low, s.ci_high) == pytest.approx((math.sqrt(8) * math.exp(-half), math.sqrt(8) * math.exp(half)))
    assert s.n == 2
    # n = 3, speedups 1, 2, 4: logs 0, ln 2, 2 ln 2 (sd ln 2), geometric mean 2
    s = metrics.paired_speedup([1.0, 2.0, 4.0], [1.0, 1.0, 1.0])
    half = T2 * math.log(2) / math.sqrt(3)
    assert (s.geomean, s.ci_low, s.ci_high) == pytest.approx((2.0, 2.0 * math.exp(-half), 2.0 * math.exp(half)))
    assert metrics.paired_speedup([1.0, 2.0, 4.0], [1.0, 1.0, 1.0]) == s  # no resampling: reruns agree exactly


def test_paired_speedup_of_a_constant_ratio_has_no_interval_of_zero_width():
    s = metrics.paired_speedup([9.0, 6.0, 3.0], [3.0, 2.0, 1.0])
    assert s.geomean == pytest.approx(3.0) and not s.has_interval and s.units == 3


def test_paired_speedup_skips_nan_pairs_and_has_no_interval_at_one_prompt():
    s = metrics.paired_speedup([10.0, math.nan], [5.0, 1.0])
    assert s.n == 1 and s.geomean == pytest.approx(2.0) and s.mean_ratio == pytest.approx(2.0)
    assert math.isnan(s.ci_low) and math.isnan(s.ci_high)  # one ratio has no spread to estimate


@pytest.mark.parametrize("spread", ["log-normal", "t3"])
@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_speedup_interval_covers_the_true_speedup_95_percent_of_the_time(spread, n):
    """20,000 seeded repetitions per case (binomial error ±0.15 %): per-prompt log ratios around ln 2 with a normal
    (log-normal ratios) or a heavy-tailed Student-t (3 d.f.) spread; the nominal 95 % interval must cover 2.
    The percentile bootstrap this replaced covered 50 % at n = 2 and 79 % at n = 4 (docs/statistics.md)."""
    rng = np.random.default_rng(1000 * n + (spread == "t3"))
    reps = 20_000
    noise = rng.normal(0.0, 0.3, (reps, n)) if spread == "log-normal" else 0.1 * rng.standard_t(3, (reps, n))
    logs = math.log(2.0) + noise
    _, low, high = metrics.log_mean_interval(logs)
    coverage = np.mean((np.exp(low) <= 2.0) & (2.0 <= np.exp(high)))
    assert 0.93 <= coverage <= 0.97, coverage
    for row, lo, hi in zip(logs[:200], low, high):  # the vectorised interval is paired_speedup's own
        s = metrics.paired_speedup(list(np.exp(row)), [1.0] * n)
        assert (s.ci_low, s.ci_high) == pytest.approx((math.exp(lo), math.exp(hi)), rel=1e-12)


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
    from benchmarks.core.engine_io import RequestRecord
    from benchmarks.studies import speed

    # 3 tokens, first at 0.1 s, last at 0.3 s: two decode intervals of 100 ms; one token: no TPOT
    recs = [RequestRecord([1, 2, 3], ttft_s=0.1, last_token_s=0.3), RequestRecord([1], ttft_s=0.1, last_token_s=0.1)]
    tpots = speed.tpots_ms(recs)
    assert tpots[0] == pytest.approx(100.0) and math.isnan(tpots[1])


def test_baseline_drift_is_the_paired_geometric_mean_ratio():
    # per-prompt ratios 1.1 and 1.1 on prompts of different lengths: a drift of +10 % whatever the prompt's TPOT
    d = metrics.baseline_drift([10.0, 20.0, math.nan], [11.0, 22.0, 5.0])
    assert d.n == 2 and d.drift == pytest.approx(0.1) and (d.ci_low, d.ci_high) == pytest.approx((0.1, 0.1))
    assert d.before_ms == pytest.approx(math.sqrt(200.0)) and d.after_ms == pytest.approx(math.sqrt(11.0 * 22.0))
    # ratios 2 and 0.5 cancel in the geometric mean (a ratio of means would read +25 %)
    assert metrics.baseline_drift([10.0, 10.0], [20.0, 5.0]).drift == pytest.approx(0.0)
    assert math.isnan(metrics.baseline_drift([], []).drift)
    with pytest.raises(ValueError):
        metrics.baseline_drift([10.0], [])  # unpaired lists are a caller bug


def test_baseline_drift_interval_is_the_t_interval_of_the_per_prompt_log_ratios():
    # ratios 1, 2, 4: log mean ln 2, sd ln 2 over 3 prompts
    d = metrics.baseline_drift([10.0, 10.0, 10.0], [10.0, 20.0, 40.0])
    half = T2 * math.log(2) / math.sqrt(3)
    assert d.drift == pytest.approx(1.0)
    assert (d.ci_low, d.ci_high) == pytest.approx((2.0 * math.exp(-half) - 1.0, 2.0 * math.exp(half) - 1.0))
    one = metrics.baseline_drift([10.0], [15.0])  # one prompt: a drift, but no interval
    assert one.drift == pytest.approx(0.5) and math.isnan(one.ci_low) and math.isnan(one.ci_high)


def _drift(drift: float, low: float | None = None, high: float | None = None, n: int = 8) -> metrics.Drift:
    """A drift with its CI (by default a CI of zero width: a drift the recheck's noise cannot explain)."""
    return metrics.Drift(10.0, 10.0 * (1 + drift), drift, drift if low is None else low,
                         drift if high is None else high, n)


@pytest.mark.parametrize("drift, ci, flagged", [
    # CI [2.0, 2.42]: half its log width is ln(1.1) ≈ 0.0953; ln(0.9) ≈ -0.105 lies outside, ln(0.91) ≈ -0.094 not
    (0.09, (2.0, 2.42), False), (0.11, (2.0, 2.42), True), (-0.09, (2.0, 2.42), False), (-0.10, (2.0, 2.42), True),
    (0.0, (2.0, 2.42), False),
    # CI [1, 4]: the factor 2 either way; a linear half-width (3/5 = 0.6) would flag +90 % and pass -55 %
    (0.9, (1.0, 4.0), False), (1.1, (1.0, 4.0), True), (-0.45, (1.0, 4.0), False), (-0.55, (1.0, 4.0), True),
])
def test_a_real_drift_is_flagged_when_it_exceeds_half_the_speedup_ci_in_log_space(drift, ci, flagged):
    assert metrics.drift_flag(_drift(drift), *ci) is flagged


def test_a_drift_within_the_rechecks_own_noise_is_not_flagged():
    # +30 % against a speedup CI of zero width, which the old rule flagged; its CI [-5 %, +70 %] holds no drift
    assert metrics.drift_flag(_drift(0.3, -0.05, 0.7), 2.5, 2.5) is False
    assert metrics.drift_flag(_drift(0.3, 0.05, 0.7), 2.5, 2.5) is True  # the same drift, measured well enough
    assert metrics.drift_flag(_drift(-0.3, -0.5, 0.01), 2.0, 2.4) is False
    assert metrics.drift_flag(_drift(0.0), 2.5, 2.5) is False and metrics.drift_flag(_drift(0.01), 2.5, 2.5) is True


def test_drift_flag_unknown_without_either_interval():
    assert metrics.drift_flag(_drift(math.nan), 2.0, 2.4) is None
    assert metrics.drift_flag(_drift(0.5, math.nan, math.nan, n=1), 2.0, 2.4) is None  # one recheck prompt
    assert metrics.drift_flag(_drift(0.2), None, None) is None
    assert metrics.drift_flag(_drift(0.2), math.nan, math.nan) is None  # a speedup of one prompt


@pytest.mark.parametrize("n", [4, 8, 16])
def test_the_default_recheck_flags_a_large_drift_and_rarely_a_steady_baseline(n):
    """Through paired_speedup, baseline_drift and drift_flag, 2,000 seeded runs per case. Per-prompt log TPOTs carry
    run-to-run noise (sd 1 per ln(after/before), 1/√2 per measurement), and the speedup a prompt-to-prompt spread of
    twice that. With the default drift_prompts (at most n), a steady baseline is flagged in under 5 % of runs, and a
    drift of twice the speedup CI's expected log half-width h in over 95 %."""
    m = min(KEY["drift_prompts"].default, n)
    rng = np.random.default_rng(n)
    sd_one, spread = 1 / math.sqrt(2), 2.0
    h = stdtrit(n - 1, 0.975) * math.sqrt(spread ** 2 + 2 * sd_one ** 2) / math.sqrt(n)
    for drift, (lo, hi) in ((0.0, (0.0, 0.05)), (2 * h, (0.95, 1.0))):
        flags = []
        for _ in range(2000):
            before = rng.normal(0.0, sd_one, n)  # log TPOT of the baseline per prompt (prompt effects cancel)
            method = -1.0 + rng.normal(0.0, spread, n) + rng.normal(0.0, sd_one, n)
            after = drift + rng.normal(0.0, sd_one, m)  # the recheck: the same prompts, fresh noise
            s = metrics.paired_speedup(list(np.exp(before)), list(np.exp(method)))
            d = metrics.baseline_drift(list(np.exp(before[:m])), list(np.exp(after)))
            flags.append(metrics.drift_flag(d, s.ci_low, s.ci_high))
        assert lo <= np.mean(flags) <= hi, (drift, np.mean(flags))


def test_acceptance_is_counted_within_the_output():
    """τ counts only tokens within the limit: a last step that would commit past the request's n_out tokens counts
    only the drafts still wanted; a step after the last token is not counted."""
    from benchmarks.core.metrics import accepted_within

    # 1 (prefill) + 4 + 4 = 9 committed; the third step accepted 3 but only 1 token was left to want: 0 drafts count
    assert accepted_within([3, 3, 3], 10) == [3, 3, 0]
    assert accepted_within([3, 3, 3], 11) == [3, 3, 1]
    assert accepted_within([3, 3, 3], 13) == [3, 3, 3]
    assert accepted_within([3, 3, 3, 3], 9) == [3, 3]  # a step after the last token is not counted
    assert accepted_within([], 1) == []
    counters = SpecCounters.from_accept_lengths(accepted_within([7, 7], 12), k=7)  # 1 + 8 + 3 = 12 tokens
    assert (counters.num_drafts, counters.num_accepted_tokens) == (2, 9)
    assert metrics.acceptance(counters).tau == 5.5  # the 11 tokens the two steps committed


def test_every_engine_counts_steps_and_drafts_within_the_output_alike():
    """One rule for τ and α: steps and drafts counted within the output (EOS or the limit), so τ = (n_out - 1)/steps.
    An engine that drafts K to the end (JAX, vLLM) and one that caps its drafts at the tokens still wanted and takes
    the one-token last step without drafting (llama.cpp) count the same steps, drafts and accepted drafts."""
    from benchmarks.core.metrics import accepted_within, drafted_within

    def counted(accepted: list[int], drafted: list[int], n_out: int) -> metrics.Acceptance:
        return metrics.acceptance(SpecCounters.from_accept_lengths(
            accepted_within(accepted, n_out), 15, drafted_within(accepted, drafted, n_out)))

    # K = 15, accepted [15, 15, 12], EOS the 35th token: the third step's 12 count only as the 1 draft before EOS
    assert accepted_within([15, 15, 12], 35) == [15, 15, 1]
    assert drafted_within([15, 15, 12], [15] * 3, 35) == [15, 15, 1]
    eos = counted([15, 15, 12], [15] * 3, 35)
    assert eos.tau == pytest.approx(34 / 3) and eos.alpha == 1.0
    # 18 tokens wanted: the 2nd step has one token left; JAX and vLLM draft 15 there, llama.cpp takes a plain step
    drafts_to_the_end, plain_last_step = counted([15, 15], [15, 15], 18), counted([15, 0], [15, 0], 18)
    assert drafts_to_the_end == plain_last_step and plain_last_step.tau == 17 / 2 and plain_last_step.alpha == 1.0
    # 20 tokens wanted, a rejection near the end: llama.cpp drafts 2 where 3 tokens are left, JAX 15; both count 2,
    # then the one-token step
    assert drafted_within([15, 1, 15], [15, 15, 15], 20) == [15, 2, 0]
    capped = counted([15, 1, 0], [15, 2, 0], 20)
    assert counted([15, 1, 15], [15, 15, 15], 20) == capped and capped.tau == 19 / 3 and capped.alpha == 16 / 17
    # drafts for positions past the output do not count, even in a step that rejected before them
    assert drafted_within([2, 0, 3], [4, 4, 4], 7) == [4, 2, 1] and accepted_within([2, 0, 3], 7) == [2, 0, 1]
    assert metrics.acceptance(SpecCounters.from_accept_lengths([2, 0, 1], 4, [4, 2, 1])).tau == (7 - 1) / 3


def test_counters_add_and_subtract_per_position():
    a = SpecCounters.from_accept_lengths([3, 1], k=3)
    b = SpecCounters.from_accept_lengths([2], k=3, drafted=[2])
    assert (a + b).accepted_per_pos == [3, 2, 1] and (a + b).num_draft_tokens == 8
    assert (a + b) - b == a


def test_quantile_interval_ranks_and_the_requests_a_bound_needs():
    med, low, high = metrics.quantile_interval(list(range(1, 31)), 0.5)  # n = 30: ranks 10 and 21 (binomial 95 %)
    assert (med, low, high) == (15.5, 10.0, 21.0)
    assert metrics.quantile_interval(list(range(1, 37)), 0.9)[1:] == (29.0, 36.0)  # the slowest is p90's upper end
    assert metrics.quantile_interval(list(range(1, 36)), 0.9)[2] == math.inf  # one fewer: no upper end
    assert [metrics.min_values_for_bound(q) for q in (0.5, 0.9, 0.95, 0.99)] == [6, 36, 72, 368]
    assert all(math.isnan(x) for x in metrics.quantile_interval([math.nan], 0.9))


@pytest.mark.parametrize("q, n", [(0.5, 20), (0.9, 40), (0.9, 200), (0.99, 400)])
def test_quantile_interval_covers_the_true_quantile_at_least_95_percent_of_the_time(q, n):
    """Log-normal latencies (skewed, as request latencies are): distribution-free, so never below 95 % (± 3 SE of
    2,000 seeded runs), and not far above it."""
    rng = np.random.default_rng(7)
    truth = math.exp(float(ndtri(q)))
    hits = 0
    for _ in range(2000):
        _, low, high = metrics.quantile_interval(list(np.exp(rng.standard_normal(n))), q)
        hits += low <= truth <= high
    assert 0.95 - 3 * math.sqrt(0.05 * 0.95 / 2000) <= hits / 2000 <= 0.99


def test_accepted_at():
    assert metrics.accepted_at([0, 3, 5, 1], 2) == [0, 2, 2, 1]


def test_mean_and_rate_intervals():
    m = metrics.mean_interval([1.0, 2.0, 3.0])
    assert (m.value, m.units) == (2.0, 3)
    assert m.low == pytest.approx(2 * math.exp(-4.302653 / math.sqrt(3) / 2), rel=1e-5)
    assert m.low > 0 and m.high == pytest.approx(4 / m.low)  # positive units: on the log scale, never below 0
    two = metrics.mean_interval([1.0, 30.0])  # two far-apart batches: the linear interval reached -171
    assert 0 < two.low < 15.5 < two.high
    assert metrics.mean_interval([-1.0, 1.0, 3.0]).low < 0  # values of either sign: the linear interval
    assert not metrics.mean_interval([5.0]).has_interval
    r = metrics.rate_interval([10, 20, 30], [1, 2, 3])  # every unit at the same rate: no spread
    assert (r.value, r.low, r.high) == pytest.approx((10.0, 10.0, 10.0))
    r = metrics.rate_interval([10, 30, 20, 0], [1, 2, 2, 0])  # the unit without a span is dropped
    assert r.units == 3 and r.value == pytest.approx(12.0) and r.low < 12.0 < r.high
    wide = metrics.rate_interval([100, 2000], [1, 1])  # two batches 20x apart: a positive low bound
    assert 0 < wide.low < wide.value < wide.high
    assert metrics.exact(3.0) == metrics.Interval(3.0, 3.0, 3.0, 0)


def test_rate_interval_covers_the_true_rate():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(400):
        spans = rng.uniform(1, 3, 12)
        counts = rng.poisson(5.0 * spans)
        r = metrics.rate_interval(list(counts), list(spans))
        hits += r.low <= 5.0 <= r.high
    assert 0.92 <= hits / 400 <= 0.985


def test_the_design_effect_counts_waves_that_differ_and_ignores_chance():
    rng = np.random.default_rng(3)
    waves = np.repeat(np.arange(6), 8)
    alone = [metrics.design_effect(0.3 * rng.standard_normal(48), waves) for _ in range(400)]
    assert np.mean(np.array(alone) > 1) == pytest.approx(0.2, abs=0.06)  # the F-test's 20 %: a false alarm's rate
    shared = [metrics.design_effect(0.25 * rng.standard_normal(6)[waves] + 0.1 * rng.standard_normal(48), waves)
              for _ in range(100)]
    assert np.mean(np.array(shared) > 3) > 0.9  # ρ ≈ 0.86 in waves of 8: D = 1 + 7 ρ
    assert metrics.design_effect([0.1, 0.2, 0.3], [0, 1, 2]) == 1.0  # no wave of two
    # being below the median of jointly normal values with correlation 1/2: 2/π · asin(1/2) = 1/3
    assert metrics._indicator_correlation(0.5, 0.5) == pytest.approx(1 / 3, abs=1e-3)


def test_a_quantile_interval_of_values_worth_fewer_is_the_fewer_values_ranks_placed_among_all():
    x = list(np.arange(1.0, 101.0))
    _, low, high = metrics.quantile_interval(x, 0.5, 0.95)
    _, low2, high2 = metrics.quantile_interval(x, 0.5, 0.95, design_effect=2.0)
    ranks = metrics._quantile_ranks(50, 0.5, 0.95)
    assert (low2, high2) == (x[2 * ranks[0] - 1], x[2 * ranks[1] - 1])
    assert low2 < low < high < high2
    assert metrics.quantile_interval(x, 0.99, 0.95, design_effect=4.0)[2] == math.inf  # 25 values bound no p99


def test_waves_whose_requests_are_alike_are_worth_one_request_each():
    assert metrics.design_effect([1.0, 1.0, 2.0, 2.0, 3.0, 3.0], [0, 0, 1, 1, 2, 2]) == 2.0
    assert metrics.design_effect([1.0] * 6, [0, 0, 1, 1, 2, 2]) == 1.0
    assert metrics.design_effect([1.0, 1.0, 2.0, 2.0], [0, 0, 1, 1]) == 1.0  # two waves leave ρ untold
