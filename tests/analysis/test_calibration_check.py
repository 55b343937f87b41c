"""A roofline calibrated on a plain-decoding curve, checked on each point left out."""
import dataclasses

from benchmarks.analysis import k_schedule_compute as ksd
from benchmarks.analysis.calibration_check import roofline_held_out
from benchmarks.analysis.cost_model_compute import Engine
from benchmarks.core.shapes import SHAPES, released_draft
from benchmarks.hardware import roofline
from benchmarks.hardware.step_model import TOLERANCE
from benchmarks.report.cost_model_render import held_out_markdown

CFG = SHAPES["qwen3-4b"]
DCFG = released_draft(CFG, 16)
ENGINE = Engine(CFG, DCFG.layers, len(DCFG.target_layer_ids), 15, DCFG.block_size, 1024, 2)
DEVICE = roofline.Device("a device", 800e9, 200e12, "made up")


def curve(noise=None):
    """AR step ms per B from a roofline with 1 ms per pass at 10 % of the peak (what a calibration can follow)."""
    planted = dataclasses.replace(DEVICE, flops_per_s=0.1 * DEVICE.flops_per_s, overhead_s=1e-3)
    noise = noise or {}
    return {b: 1e3 * roofline.step_seconds(ksd.engine_at(ENGINE, b, 0).ar_step(), planted) * noise.get(b, 1.0)
            for b in (1, 4, 16, 64, 256)}


def test_each_point_of_a_curve_the_roofline_follows_is_predicted_left_out():
    checks = roofline_held_out(curve(), ENGINE, DEVICE)
    assert [c.label for c in checks] == ["B=1", "B=4", "B=16", "B=64", "B=256"]
    assert all(abs(c.error) < 0.02 for c in checks)
    text = held_out_markdown("each point left out", checks, TOLERANCE)
    assert text.startswith("Held out: each point left out.") and "every one within the 10 % target" in text
    assert ", median " in text


def test_a_point_off_the_curve_misses_left_out_and_a_pair_cannot_be_left_out():
    checks = roofline_held_out(curve({16: 1.4}), ENGINE, DEVICE)
    worst = max(checks, key=lambda c: abs(c.error))
    assert worst.label == "B=16" and worst.error < -0.2
    pair = roofline_held_out({1: 10.0, 8: 12.0}, ENGINE, DEVICE)
    assert all(c.predicted_s is None and "two or more batch sizes" in c.why for c in pair)
    assert "not predicted: a calibration needs" in held_out_markdown("x", pair, TOLERANCE)

