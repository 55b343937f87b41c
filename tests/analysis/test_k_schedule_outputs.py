"""cost-model --schedule writes its configs and tables through the one writer (never through a link: a linked
k_schedule/ folder or a link in place of a config is refused, the linked file untouched), and --calibrate-from
refuses a plain-decoding curve no chip can show, naming each batch size."""
from __future__ import annotations

import re

import pytest

from benchmarks.cli import main
from benchmarks.cli.k_schedule import published_points
from benchmarks.config.matrix_parse import ConfigError
from tests.analysis.synthetic_run import write_run


def test_a_schedule_is_never_written_through_a_link(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    assert main(["cost-model", str(run), "--schedule"]) == 0
    written = sorted((run / "k_schedule").iterdir())[0]
    users = tmp_path / "users.json"
    users.write_text("mine\n")
    (written / "vllm.json").unlink()
    (written / "vllm.json").symlink_to(users)
    capsys.readouterr()
    assert main(["cost-model", str(run), "--schedule"]) == 2
    assert "a link stands where this output goes" in capsys.readouterr().err and users.read_text() == "mine\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "k_schedule").rename(tmp_path / "moved")
    (run / "k_schedule").symlink_to(elsewhere)
    assert main(["cost-model", str(run), "--schedule"]) == 2
    assert "an output folder goes" in capsys.readouterr().err and not any(elsewhere.iterdir())


@pytest.mark.parametrize("rows, said", [
    ("1,100\n8,700\n64,300\n", "B=64: 300 tok/s, fewer than B=8's 700"),
    ("1,100\n8,8000\n", "B=8: its step (1 ms) is shorter than B=1's (10 ms)"),
    ("1,1e308\n", "tok/s above 0 and below 1e+09"),
    ("1,nan\n", "'tok_per_s_total' is 'nan', not a finite number"),
])
def test_a_curve_no_chip_can_show_is_refused_naming_its_batch(tmp_path, rows, said):
    table = tmp_path / "curve.csv"
    table.write_text("batch_size,tok_per_s_total\n" + rows)
    with pytest.raises(ConfigError, match=re.escape(f"--calibrate-from {table}")) as refused:
        published_points(table)
    assert said in str(refused.value), refused.value


def test_a_rising_curve_is_taken(tmp_path):
    table = tmp_path / "curve.csv"
    table.write_text("batch_size,tok_per_s_total\n1,100\n8,700\n64,3000\n")
    assert published_points(table) == pytest.approx({1: 10.0, 8: 8e3 / 700, 64: 64e3 / 3000})


def test_a_runs_model_this_machine_cannot_read_is_named_not_a_traceback(tmp_path, capsys):
    run = write_run(tmp_path / "run")  # its draft is named "d": no model folder, no hub id
    assert main(["cost-model", "--chip", "v5p", "--tau-from", str(run), "--shape", "qwen3-4b", "--schedule"]) == 2
    err = capsys.readouterr().err
    assert f"--tau-from {run}: draft 'd': no such model folder" in err and "Traceback" not in err
