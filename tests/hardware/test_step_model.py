"""The step model's terms from scripted step times: a fit recovers the terms planted in them, a point left out is
predicted within its tolerance, and measurements that cannot tell the terms apart are refused with what to add."""
import re

import pytest

from benchmarks.core.shapes import SHAPES, released_draft
from benchmarks.hardware import step_cost
from benchmarks.hardware import step_model as sm

PEAK, NOMINAL = 197e12, 819e9
PLANTED = sm.Terms(pass_s=0.6e-3, request_s=0.25e-3, bytes_per_s=760e9, kv_bytes_per_s=420e9,
                   attention_flops_per_s=20e12, rows_half=120.0, peak_flops=PEAK)
CFG = SHAPES["qwen3-4b"]
DRAFT = released_draft(CFG)


def step(batch: int, context: int, k: int) -> step_cost.Step:
    if k == 0:
        return step_cost.ar_step(CFG, context, 2, batch)
    return step_cost.dflash_step(CFG, DRAFT.layers, len(DRAFT.target_layer_ids), k, DRAFT.block_size, context, 2,
                                 batch)


def grid(terms: sm.Terms = PLANTED, points=None) -> list[sm.Measured]:
    points = points or [(b, c, k) for k in (0, 15) for b in (1, 4, 16, 64) for c in (256, 2048, 8192)
                        if b * c <= 32768]
    return [sm.Measured(f"B={b} ctx={c} K={k}", step(b, c, k), b, terms.step_seconds(step(b, c, k), b))
            for b, c, k in points]


def test_a_fit_recovers_the_planted_terms():
    fitted = sm.fit(grid(), PEAK, NOMINAL, {"pass_s": "scripted"})
    for name in sm.TERMS:
        assert getattr(fitted, name) == pytest.approx(getattr(PLANTED, name), rel=0.02), name
    assert fitted.sources == {"pass_s": "scripted"} and any("per pass 0.600 ms (scripted)" in x for x in fitted.lines())


def test_a_point_left_out_is_predicted_within_its_tolerance():
    checks = sm.held_out(grid(), PEAK, NOMINAL)
    assert len(checks) == len(grid()) and all(abs(c.error) < 0.01 for c in checks)
    between = sm.held_out(grid(points=[(b, 256, k) for b in (1, 4, 16, 64) for k in (0, 3, 7, 15)]
                               + [(b, 2048, k) for b in (1, 4) for k in (0, 15)]), PEAK, NOMINAL,
                          fitted_on=lambda p: p.label.endswith(("K=0", "K=15")))
    assert {c.label for c in between} == {f"B={b} ctx=256 K={k}" for b in (1, 4, 16, 64) for k in (3, 7)}
    assert all(abs(c.error) < 0.01 for c in between)
    table = sm.check_table(between, 0.10)
    assert table[-1].startswith("held out: worst error") and "every one within the 10 % target" in table[-1]


def test_noise_shows_in_the_held_out_errors_and_the_verdict_names_the_points_above_target():
    noisy = [sm.Measured(p.label, p.step, p.batch, p.seconds * (1.3 if p.label == "B=4 ctx=256 K=15" else 1.0))
             for p in grid()]
    checks = sm.held_out(noisy, PEAK, NOMINAL)
    worst = max(checks, key=lambda c: abs(c.error))
    assert worst.label == "B=4 ctx=256 K=15" and worst.error < -0.15
    assert "ABOVE the 10 % target at B=4 ctx=256 K=15" in sm.check_table(checks, 0.10)[-1]


@pytest.mark.parametrize("points, says", [
    ([(1, 256, 0), (4, 256, 0), (16, 256, 15)], "3 step(s): add steps to make 6 or more"),
    ([(4, 256, 0), (4, 2048, 0), (4, 8192, 0), (4, 256, 15), (4, 2048, 15), (4, 8192, 15)],
     "all at one batch size: add one at another batch size"),
    ([(1, 256, 0), (4, 256, 0), (1, 2048, 0), (4, 2048, 0), (64, 256, 0), (16, 2048, 0)],
     "all read the same weights"),
    ([(16, 256, 0), (16, 2048, 0), (8, 256, 0), (8, 2048, 0), (1, 256, 3), (1, 2048, 3)],
     "every step multiplies about as many rows"),
])
def test_a_fit_the_points_cannot_make_is_refused_with_what_to_add(points, says):
    with pytest.raises(sm.FitError, match=re.escape(says)):
        sm.fit(grid(points=points), PEAK, NOMINAL)
    checks = sm.held_out(grid(points=points), PEAK, NOMINAL)
    assert all(c.predicted_s is None and c.why for c in checks)
    assert "not predicted:" in sm.check_table(checks, 0.10)[2]


def test_a_chips_fit_holds_its_bandwidths_to_the_datasheets():
    """With the ceiling no bandwidth comes out above the nominal one, even from steps made faster than it, and planted
    terms within it are still recovered."""
    fast = sm.Terms(pass_s=0.2e-3, request_s=0.03e-3, bytes_per_s=900e9, kv_bytes_per_s=850e9,
                    attention_flops_per_s=40e12, rows_half=80.0, peak_flops=PEAK)
    free = sm.fit(grid(fast), PEAK, NOMINAL)
    held = sm.fit(grid(fast), PEAK, NOMINAL, ceiling=True)
    assert free.bytes_per_s == pytest.approx(900e9, rel=0.02)
    assert held.bytes_per_s <= NOMINAL * (1 + 1e-9) and held.kv_bytes_per_s <= NOMINAL * (1 + 1e-9)
    assert held.pass_s < free.pass_s  # steps faster than the ceiling allows: the fixed costs give way
    within = sm.fit(grid(), PEAK, NOMINAL, ceiling=True)
    for name in sm.TERMS:
        assert getattr(within, name) == pytest.approx(getattr(PLANTED, name), rel=0.02), name
