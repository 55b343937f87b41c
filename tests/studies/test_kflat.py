"""K-flat measurement: the command's outputs on the tiny shape, the order-statistic CI, and the floor verdict."""
from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.cli import main
from benchmarks.hardware import detect
from benchmarks.studies import kflat


def test_median_ci_order_statistics():
    med, lo, hi = kflat.median_ci(list(range(1, 31)))  # n = 30: ranks 10 and 21 (binomial 95 %)
    assert (med, lo, hi) == (15.5, 10.0, 21.0)
    assert kflat.median_ci([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)  # too few samples: min and max


def test_rows_flag_points_below_the_floor_and_keep_every_ratio():
    from benchmarks.core.shapes import SHAPES

    shape = SHAPES["qwen3-4b"]
    floor = kflat.Floor(shape, 2, 2765e9, True, "datasheet")
    points = [kflat.Point(0, 256, (1.31, 1.31, 1.31)), kflat.Point(7, 256, (3.0, 3.1, 3.2))]
    rows = kflat.rows_from_points(points, floor, {(0, 256): 2.0, (7, 256): 2.2})
    weights_and_kv = 8.04e9 + 256 * 147456  # the forward's weights and the context's KV rows
    assert rows[0]["floor_ms"] == pytest.approx(1000 * weights_and_kv / 2765e9, rel=1e-3)
    assert rows[1]["floor_ms"] > rows[0]["floor_ms"]  # 8 rows computed and written instead of 1
    assert [r["below_floor"] for r in rows] == [True, False]
    assert [r["verdict"] for r in rows] == ["IMPOSSIBLE", "ok"]
    # K=0 below its floor still normalises the others: the verdict says what it is worth
    assert rows[1]["normalised_to_k0"] == pytest.approx(3.1 / 1.31)
    assert rows[1]["predicted_normalised"] == pytest.approx(1.1)
    assert rows[1]["normalised_error"] == pytest.approx(1.1 / (3.1 / 1.31) - 1)
    (line,) = kflat.impossible_lines(rows)
    assert line.startswith("IMPOSSIBLE: K=0") and "below the HBM floor — timing error, not a result" in line


@pytest.mark.jax
def test_command_writes_csv_and_figure(tmp_path, capsys):
    assert main(["study", "kflat", "--quick", "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "kflat.csv")
    assert list(df.columns) == list(kflat.CSV_COLUMNS)
    assert sorted(df["k"]) == sorted(kflat.QUICK_KS)
    assert (df["median_ms"] > 0).all() and (df["ci_low"] <= df["median_ms"]).all()
    assert df.loc[df["k"] == 0, "normalised_to_k0"].tolist() == [1.0]
    assert (df["predicted_ms"] > 0).all() and df.loc[df["k"] == 0, "predicted_normalised"].tolist() == [1.0]
    assert (tmp_path / "kflat.png").stat().st_size > 10_000
    assert "kflat.csv" in capsys.readouterr().out


@pytest.mark.jax
def test_command_reports_an_injected_impossible_time(tmp_path, capsys, monkeypatch):
    """A timer that returns a time far below any memory-bandwidth floor must be flagged, not reported."""
    monkeypatch.setenv("DFLASH_BANDWIDTH_GBS", "100")
    monkeypatch.setattr(detect.Hardware, "floor_applies", lambda hw, working_set: (True, ""))  # tiny fits a cache

    def fake(params, cfg, ks, context_len, repeats, warmup, dtype, tap_ids):  # the timer of a broken clock
        return {k: [1e-6] * repeats if k == 1 else [50.0] * repeats for k in ks}

    monkeypatch.setattr(kflat, "time_forwards", fake)
    assert main(["study", "kflat", "--quick", "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "kflat.csv").set_index("k")
    assert bool(df.loc[1, "below_floor"]) and df.loc[1, "verdict"] == "IMPOSSIBLE"
    assert not bool(df.loc[0, "below_floor"]) and df.loc[0, "verdict"] == "ok"
    assert df.loc[1, "normalised_to_k0"] == pytest.approx(1e-6 / 50.0)  # printed beside its verdict
    out = capsys.readouterr().out
    assert "IMPOSSIBLE: K=1" in out and "timing error, not a result" in out
    assert "x0.000 of K=0, predicted x" in out


@pytest.mark.jax
def test_command_times_a_batched_verify_per_batch_size(tmp_path, capsys):
    assert main(["study", "kflat", "--quick", "--batch", "1,2", "--ks", "0,3", "--repeats", "3",
                 "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "kflat.csv")
    assert list(df.columns) == list(kflat.BATCH_CSV_COLUMNS)
    assert sorted(zip(df["batch"], df["k"])) == [(1, 0), (1, 3), (2, 0), (2, 3)]
    assert (df["median_ms"] > 0).all() and (df["predicted_ms"] > 0).all()
    assert df.loc[df["k"] == 0, "normalised_to_k0"].tolist() == [1.0, 1.0]  # each B against its own K=0
    by_b = df[df["k"] == 3].set_index("batch")["predicted_ms"]
    assert by_b[2] > by_b[1]  # step_cost at the batch: two requests' rows and KV
    assert "B=  2 K=   3" in capsys.readouterr().out


def test_batch_floor_counts_every_request():
    from benchmarks.core.shapes import SHAPES

    one = kflat.Floor(SHAPES["qwen3-4b"], 2, 2765e9, True, "datasheet")
    four = kflat.Floor(SHAPES["qwen3-4b"], 2, 2765e9, True, "datasheet", batch=4)
    kv = 1000 * 3 * 256 * 147456 / 2765e9  # three more requests' KV rows; the weights are read once
    assert four.bound_ms(0, 256) == pytest.approx(one.bound_ms(0, 256) + kv, rel=1e-2)


@pytest.mark.parametrize("option, fragment", [
    (["--ks", "0,-3"], "python -m benchmarks study kflat: argument --ks: -3: expected one or more whole numbers "
                       "separated by commas, each from 0 to 1024 (see --help)"),
    (["--contexts", "-5"], "python -m benchmarks study kflat: argument --contexts: -5: expected one or more whole "
                           "numbers separated by commas, each from 0 to 16777216 (see --help)"),
])
def test_a_negative_k_or_context_is_one_line_before_anything_loads(option, fragment, capsys):
    with pytest.raises(SystemExit) as refused:  # as the option is parsed
        main(["study", "kflat", "--random-weights", "--quick", *option])
    err = capsys.readouterr().err
    assert refused.value.code == 2
    assert err.strip().splitlines() == [f"error: {fragment}"]
