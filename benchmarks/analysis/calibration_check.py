"""A roofline calibrated on a plain-decoding curve (k_schedule_compute.calibrate), checked on each of its points left
out: the point predicted by the calibration on the others, as every fit of the step model is checked
(step_model.held_out)."""
from __future__ import annotations

from collections.abc import Mapping

from benchmarks.analysis import k_schedule_compute as ksd
from benchmarks.analysis.cost_model_compute import Engine
from benchmarks.hardware import roofline
from benchmarks.hardware.step_model import Check


def roofline_held_out(ar_ms: Mapping[int, float], engine: Engine, device: roofline.Device) -> list[Check]:
    """Each batch size's AR step (ms) predicted by the roofline calibrated on the others; a point whose others
    cannot be calibrated (one batch size left) says why."""
    out = []
    for b, ms in sorted(ar_ms.items()):
        others = {x: v for x, v in ar_ms.items() if x != b}
        try:
            cal = ksd.calibrate(others, engine, device)
        except ValueError as exc:
            out.append(Check(f"B={b}", ms / 1e3, None, str(exc)))
            continue
        out.append(Check(f"B={b}", ms / 1e3, roofline.step_seconds(ksd.engine_at(engine, b, 0).ar_step(),
                                                                   cal.device(device))))
    return out
