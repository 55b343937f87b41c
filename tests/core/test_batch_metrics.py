"""The static-batch metrics: tokens/s per user, the throughput speedup paired over batches with the same Student-t
interval as the TPOT speedup, and the crossover batch size (a batch's tokens/s is output_tok_per_s over its span)."""
import math

import numpy as np
import pytest
from scipy import stats

from benchmarks.core import metrics


def test_tokens_per_second_per_user_is_the_mean_decode_rate():
    assert metrics.user_tok_per_s([10.0, 20.0, math.nan]) == pytest.approx((100 + 50) / 2)
    assert math.isnan(metrics.user_tok_per_s([math.nan]))


def test_throughput_speedup_pairs_batches_and_uses_the_student_t_interval():
    base = [100.0, 120.0, 90.0, 110.0]
    meth = [150.0, 150.0, 120.0, 170.0]
    s = metrics.paired_throughput_speedup(base, meth)
    logs = np.log(np.array(meth) / np.array(base))
    half = stats.t.ppf(0.975, 3) * logs.std(ddof=1) / 2
    assert s.n == 4
    assert s.geomean == pytest.approx(math.exp(logs.mean()))
    assert (s.ci_low, s.ci_high) == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)))
    assert s.mean_ratio == pytest.approx(np.mean(meth) / np.mean(base))
    # the TPOT speedup is the same ratio of the inverse quantity
    tpot = metrics.paired_speedup([1 / b for b in base], [1 / m for m in meth])
    assert (tpot.geomean, tpot.ci_low, tpot.ci_high) == pytest.approx((s.geomean, s.ci_low, s.ci_high))


def test_one_batch_has_no_interval_and_unusable_pairs_are_dropped():
    one = metrics.paired_throughput_speedup([100.0], [80.0])
    assert one.geomean == pytest.approx(0.8) and math.isnan(one.ci_low) and math.isnan(one.ci_high)
    kept = metrics.paired_throughput_speedup([100.0, math.nan, 0.0], [80.0, 50.0, 40.0])
    assert kept.n == 1


def test_crossover_is_the_smallest_batch_whose_interval_lies_below_one():
    assert metrics.batch_crossover([(1, 2.1), (2, 1.4), (4, 0.95), (8, 0.8)]) == 4
    assert metrics.batch_crossover([(8, 0.7), (4, 0.9), (16, math.nan)]) == 4
    assert metrics.batch_crossover([(1, 1.3), (2, 1.0), (4, math.nan)]) is None  # an upper bound of 1 is not below
