"""A plain-decoding calibration's speculative curve as a range over the measured per-row terms: each device's term
read from its grid (matmul rates, or its fitted steps), the curve calibrated once with each, and the table says so."""
import json

import pytest

from benchmarks.analysis import per_row
from benchmarks.analysis.cost_model_compute import Engine, Tau
from benchmarks.core.paths import ROOT
from benchmarks.core.shapes import SHAPES, released_draft
from benchmarks.hardware.chips import CHIPS
from benchmarks.report.cost_model_render import range_markdown

CFG = SHAPES["qwen3-4b"]
DCFG = released_draft(CFG, 16)
ENGINE = Engine(CFG, DCFG.layers, len(DCFG.target_layer_ids), 15, DCFG.block_size, 1024, 2)
V5E = CHIPS["v5e"]
CURVE = {1: 11.0, 8: 12.5, 16: 14.0, 32: 17.5}  # AR step ms per B: a plain-decoding curve


def test_a_grid_json_with_matmul_rates_gives_its_own_term_and_one_without_is_fitted_from_its_steps(tmp_path):
    mm = {"rows_half": 42.0, "rows_half_of": "the fastest rate measured", "by_rows": {"16": 1e12, "64": 3e12}}
    (tmp_path / "grid.json").write_text(json.dumps({"matmul": mm}))
    found = per_row.measured(tmp_path, [per_row.Measurement("a device", "grid.json")])
    assert [(p.device, p.rows_half) for p in found] == [("a device", 42.0)]
    assert "16 rows 1 TFLOP/s, 64 rows 3 TFLOP/s" in found[0].how
    assert per_row.of_matmul_rates("x", {"matmul": None}, "grid.json") is None


@pytest.mark.parametrize("m", per_row.MEASURED, ids=lambda m: m.device)
def test_the_grids_we_hold_give_a_per_row_term(m):
    found = per_row.measured(ROOT, [m])[0]
    assert found.device == m.device and 0 < found.rows_half < 1e6 and m.path in found.how


def test_the_curve_is_calibrated_once_per_term_and_the_table_is_a_range():
    terms = [per_row.PerRow("fast", 10.0, "made up"), per_row.PerRow("slow", 400.0, "made up")]
    steps = per_row.curve_range(ENGINE, CURVE, V5E.bf16_flops_per_s, V5E.bytes_per_s, terms, [1, 8, 32])
    assert sorted(steps) == [1, 8, 32] and [pr.device for pr, _, _ in steps[8]] == ["fast", "slow"]
    for b in (1, 8, 32):
        (_, ar_fast, spec_fast), (_, ar_slow, spec_slow) = steps[b]
        assert spec_slow > spec_fast  # the later half-peak prices the verify's many rows higher
        assert ar_fast == pytest.approx(CURVE[b] / 1e3, rel=0.15)  # each calibration follows the curve
    text = range_markdown(ENGINE, steps, [Tau("humaneval", 6.0)], "a table")
    assert "cannot show a matmul's efficiency at the many rows a verify multiplies" in text
    assert "- fast: rows / (rows + 10) of the peak (made up)" in text and "- slow: rows / (rows + 400)" in text
    (_, a1, s1), (_, a2, s2) = steps[32]
    row = next(line for line in text.splitlines() if line.startswith("| humaneval |"))
    low, high = sorted([6.0 * a1 / s1, 6.0 * a2 / s2])
    assert f"{low:.2f}–{high:.2f}" in row and row.split(" | ")[2].endswith("(1.00)")  # B = 1 against itself
