"""A device grid is read for what it says before a fit takes it: a step time that is no number, not finite, absurd,
or that falls as the batch or the context grows (which no chip does) is refused in one line naming its CSV line."""
from __future__ import annotations

import pytest

from benchmarks.cli import main
from benchmarks.core.paths import ROOT

V5E_GRID = ROOT / "results" / "measured" / "tpu-v5e-2026-12-05" / "grid-before-attention-change.csv"
PUBLISHED = ROOT / "results" / "reference" / "tpu_v5p_qwen3_4b.csv"


def _grid(tmp_path, line: int, column: str, value: str):
    header, *rows = V5E_GRID.read_text().splitlines()
    cells = rows[line - 2].split(",")
    cells[header.split(",").index(column)] = value
    rows[line - 2] = ",".join(cells)
    path = tmp_path / "grid.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.mark.parametrize("column, value, said", [
    ("step_ms", "nan", "line 3: step_ms nan is no step time"),
    ("step_ms", "1e308", "line 3: step_ms 1e+308 is no step time"),
    ("step_ms", "-1", "line 3: step_ms -1 is no step time"),
    ("batch", "2.5", "line 3: batch 2.5"),
    ("step_ms", "0.5", "which no chip does"),  # B=1 context=2048 K=0 far below context 256's step: a falling curve
])
def test_a_grid_no_chip_can_produce_is_refused_naming_its_line(tmp_path, capsys, column, value, said):
    grid = _grid(tmp_path, 3, column, value)
    assert main(["cost-model", "--chip", "v5e", "--fit-from", str(grid), "--shape", "qwen3-4b",
                 "--tau-from", str(PUBLISHED), "--batch", "1"]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_plain_decoding_curve_no_chip_can_show_is_named_per_batch():
    from benchmarks.analysis.cost_model_compute import curve_problems

    assert curve_problems({1: 10.0, 8: 11.0, 32: 20.0, 64: 36.0}) == []  # rising step, rising tok/s: a curve
    assert curve_problems({1: 10.0, 8: 4.0}) == ["B=8: its step (4 ms) is shorter than B=1's (10 ms)"]
    assert curve_problems({1: 10.0, 8: 200.0}) == ["B=8: 40 tok/s, fewer than B=1's 100"]
    assert curve_problems({1: float("nan"), 8: 1e308}) == ["B=1: step nan ms is no step time",
                                                           "B=8: step 1e+308 ms is no step time"]
