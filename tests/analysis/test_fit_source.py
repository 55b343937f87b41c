"""cost-model reads its sources for what they are before it fits or prices: a --fit-from that is not there says so, a
device grid timed on another platform or chip than the one priced is refused naming both, a grid's bad line is named
with its file, and a --tau-from table that mixes targets or temperatures is refused naming the pairs."""
from __future__ import annotations

import json
import shutil

import pytest

from benchmarks.cli import main
from benchmarks.core.paths import ROOT

V5E_GRID = ROOT / "results" / "measured" / "tpu-v5e-2026-12-05" / "grid-before-attention-change.csv"
PUBLISHED = ROOT / "results" / "reference" / "tpu_v5p_qwen3_4b.csv"
MIXED = ROOT / "results" / "reference" / "gpu_h200_ddtree.csv"


def grid(tmp_path, **recorded):
    """The v5e's grid as `study device-grid` leaves it: grid.csv beside a grid.json recording `recorded`."""
    folder = tmp_path / "grid"
    folder.mkdir()
    shutil.copy(V5E_GRID, folder / "grid.csv")
    (folder / "grid.json").write_text(json.dumps({"shape": "qwen3-4b", "dtype": "bfloat16", **recorded}))
    return folder


def fit(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["cost-model", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_a_fit_source_that_is_not_there_says_so(tmp_path, capsys):
    for path in (tmp_path / "nonexist", tmp_path):  # a path, and a folder without grid.csv
        code, _, err = fit(capsys, "--fit-from", str(path))
        assert code == 2 and "does not exist; give a device grid" in one_line(err)
        assert "shape" not in err


@pytest.mark.parametrize("chip, platform, device, said", [
    ("v5e", "cpu", "cpu", "the grid was timed on cpu (cpu), not a TPU; --chip v5e prices a TPU v5e"),
    ("h200", "tpu", "TPU v5 lite", "timed on tpu (TPU v5 lite), not a GPU; --chip h200 prices a NVIDIA H200"),
    ("v5e", "tpu", "TPU v6 lite", "the grid was timed on a TPU v6e (TPU v6 lite); --chip v5e prices a TPU v5e"),
])
def test_a_grid_timed_on_another_platform_or_chip_is_refused(tmp_path, capsys, chip, platform, device, said):
    folder = grid(tmp_path, platform=platform, device=device)
    code, _, err = fit(capsys, "--chip", chip, "--fit-from", str(folder), "--tau-from", str(PUBLISHED), "--batch", "1")
    assert code == 2 and said in one_line(err) and str(folder / "grid.csv") in err


def test_a_chips_grid_without_chip_is_not_fitted_as_this_cpu(tmp_path, capsys):
    code, _, err = fit(capsys, "--fit-from", str(grid(tmp_path, platform="tpu", device="TPU v5 lite")))
    assert code == 2 and "timed on tpu (TPU v5 lite); without --chip it is fitted as this CPU's: give --chip v5e" \
        in one_line(err)


def test_the_grid_of_the_chip_priced_is_fitted(tmp_path, capsys):
    folder = grid(tmp_path, platform="tpu", device="TPU v5 lite")
    code, out, _ = fit(capsys, "--chip", "v5e", "--fit-from", str(folder), "--tau-from", str(PUBLISHED), "--batch", "1")
    assert code == 0 and str(folder / "grid.csv") in out


def test_a_grids_bad_line_is_named_with_its_file(tmp_path, capsys):
    folder = grid(tmp_path, platform="tpu", device="TPU v5 lite")
    header, *rows = (folder / "grid.csv").read_text().splitlines()
    cells = rows[1].split(",")
    cells[header.split(",").index("step_ms")] = "0.001"  # far below a smaller point's: a falling curve
    (folder / "grid.csv").write_text("\n".join([header, rows[0], ",".join(cells), *rows[2:]]) + "\n")
    code, _, err = fit(capsys, "--chip", "v5e", "--fit-from", str(folder), "--tau-from", str(PUBLISHED), "--batch", "1")
    assert code == 2 and one_line(err).startswith(f"error: --fit-from {folder / 'grid.csv'}: ")
    assert "which no chip does" in err


def test_a_tau_table_of_several_targets_or_temperatures_is_refused_naming_them(capsys):
    code, _, err = fit(capsys, "--chip", "h200", "--tau-from", str(MIXED))
    assert code == 2 and "mix 6 (target, temperature) pairs" in one_line(err)
    assert "Qwen/Qwen3-8B at T = 0" in err and "Qwen/Qwen3-4B at T = 1" in err
