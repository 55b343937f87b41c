"""The interleave-bias study's criterion on hand-made rows: interleaved runs of one cell must agree within the
stated tolerance; sequential runs are reported, not judged."""
from __future__ import annotations

import math

from benchmarks.core.exit_codes import Exit
from benchmarks.studies.interleave_bias import CRITERION, TOLERANCE, agreement


def rows(mode: str, label: str, *speedups: float, dataset: str = "humaneval") -> list[dict]:
    return [{"mode": mode, "label": label, "dataset": dataset, "speedup": s} for s in speedups]


def test_interleaved_runs_within_the_tolerance_pass_while_sequential_spread_is_only_reported():
    result = agreement(rows("sequential", "dflash-k15", 1.2, 2.0) + rows("interleaved", "dflash-k15", 1.90, 2.00))
    assert result.status == Exit.OK and result.judged == 1 and not result.failing
    assert math.isclose(result.spreads[("interleaved", "dflash-k15", "humaneval")], 2.00 / 1.90 - 1)
    assert math.isclose(result.spreads[("sequential", "dflash-k15", "humaneval")], 2.0 / 1.2 - 1)  # not judged
    assert f"{TOLERANCE:.2f}" in CRITERION


def test_interleaved_runs_that_disagree_are_a_violation_naming_the_cell():
    result = agreement(rows("interleaved", "dflash-k15", 2.0, 2.0 * (1 + TOLERANCE) * 1.01)
                       + rows("interleaved", "eagle3-k3", 1.5, 1.52)
                       + rows("interleaved", "dflash-k15", 3.0, 3.0, dataset="mt-bench"))
    assert result.status == Exit.VIOLATION and result.failing == [("dflash-k15", "humaneval")]
    assert agreement(rows("interleaved", "x", 2.0, 2.0 * (1 + TOLERANCE) * 0.999)).status == Exit.OK


def test_a_cell_with_one_interleaved_speedup_is_not_checked_and_a_violation_still_wins():
    one = agreement(rows("interleaved", "dflash-k15", 2.0, math.nan) + rows("interleaved", "eagle3-k3", 1.5, 1.5))
    assert one.status == Exit.NOT_CHECKED and one.unchecked == [("dflash-k15", "humaneval")]
    assert agreement(rows("sequential", "dflash-k15", 1.0, 2.0)).status == Exit.NOT_CHECKED  # nothing interleaved
    both = agreement(rows("interleaved", "a", 1.0, 2.0) + rows("interleaved", "b", 1.0))
    assert both.status == Exit.VIOLATION
