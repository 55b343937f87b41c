"""The per-row term from measured matmul rates, and a plain-decoding calibration checked on each point left out."""

import pytest

from benchmarks.core.shapes import SHAPES, released_draft
from benchmarks.hardware import step_cost
from benchmarks.hardware import step_model as sm

PEAK, BW = 197e12, 819e9
CFG = SHAPES["qwen3-4b"]


def test_rows_half_is_recovered_from_rates_that_follow_the_efficiency():
    rates = {r: PEAK * r / (r + 90.0) for r in (16, 32, 64, 128, 256, 512, 1024)}
    assert sm.rows_half_from_rates(rates, PEAK) == pytest.approx(90.0, rel=1e-3)
    slower = {r: 0.5 * v for r, v in rates.items()}  # half the rate at every row count: a later half-peak
    assert sm.rows_half_from_rates(slower, PEAK) > 2 * 90.0
    with pytest.raises(sm.FitError, match="no matmul rate measured"):
        sm.rows_half_from_rates({}, PEAK)


def curve(pass_s: float, request_s: float, batches=(1, 2, 4, 8, 16, 32), noise=None):
    planted = sm.Terms(pass_s, request_s, BW, BW, PEAK, 0.0, PEAK)
    noise = noise or {}
    return [sm.Measured(f"B={b}", step_cost.ar_step(CFG, 1024, 2, b), b,
                        planted.step_seconds(step_cost.ar_step(CFG, 1024, 2, b), b) * noise.get(b, 1.0))
            for b in batches]


def test_a_calibration_predicts_each_point_of_its_curve_left_out():
    points = curve(1e-3, 0.05e-3)
    checks = sm.calibration_held_out(points, PEAK, BW, 0.0, {})
    assert [c.label for c in checks] == [p.label for p in points]
    assert all(abs(c.error) < 1e-6 for c in checks)  # a curve the terms can follow: every point predicted
    table = sm.check_table(checks, 0.10)
    assert table[-1].startswith("held out: worst error 0.0 %, median 0.0 % over 6 point(s)")


def test_a_point_off_the_curve_shows_in_its_own_left_out_error_and_a_pair_cannot_be_left_out():
    checks = sm.calibration_held_out(curve(1e-3, 0.05e-3, noise={8: 1.3}), PEAK, BW, 0.0, {})
    worst = max(checks, key=lambda c: abs(c.error))
    assert worst.label == "B=8" and worst.error < -0.2  # predicted from the others: 1/1.3 of what was measured
    assert "ABOVE the 10 % target at B=8" in sm.check_table(checks, 0.10)[-1]
    pair = sm.calibration_held_out(curve(1e-3, 0.05e-3, batches=(1, 8)), PEAK, BW, 0.0, {})
    assert all(c.predicted_s is None and "one batch size" in c.why for c in pair)
    assert sm.check_table(pair, 0.10)[-1] == ("held out: no point could be predicted from the others (each line says "
                                              "why); not checked")


def test_a_fit_holds_the_per_row_term_where_it_was_measured():
    draft = released_draft(CFG)
    planted = sm.Terms(0.6e-3, 0.25e-3, 760e9, 420e9, 20e12, 120.0, PEAK)

    def step(b, c, k):
        return step_cost.ar_step(CFG, c, 2, b) if k == 0 else step_cost.dflash_step(
            CFG, draft.layers, len(draft.target_layer_ids), k, draft.block_size, c, 2, b)

    points = [sm.Measured(f"B={b} ctx={c} K={k}", step(b, c, k), b, planted.step_seconds(step(b, c, k), b))
              for k in (0, 15) for b in (1, 4, 16, 64) for c in (256, 2048, 8192) if b * c <= 32768]
    fitted = sm.fit(points, PEAK, BW, rows_half=120.0)  # the planted value: every other term recovered
    assert fitted.rows_half == pytest.approx(120.0, rel=1e-6)
    assert fitted.bytes_per_s == pytest.approx(760e9, rel=0.02) and fitted.pass_s == pytest.approx(0.6e-3, rel=0.02)
    held = sm.fit(points, PEAK, BW, rows_half=30.0)  # another measured value: held, the others absorb it
    assert held.rows_half == pytest.approx(30.0, rel=1e-6)
