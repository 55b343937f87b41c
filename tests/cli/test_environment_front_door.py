"""The environment variables with a domain of values that the harness reads itself are checked before any command
runs: a bad value ends the command in one line naming the variable, exit 2, and nothing runs; every such declared
variable the package reads is among those checked."""
from __future__ import annotations

import re

import pytest
import yaml

from benchmarks.cli import READ_VARIABLES, main
from benchmarks.core.environment import ENVIRONMENT, FOLDER_CAUSES
from benchmarks.core.paths import ROOT
from tests.test_ways_in import WORDS, folder_cases

READS = re.compile(r'(?:environ(?:\.get|\.setdefault|\.pop)?\s*[\[(]\s*|getenv\(\s*|read_number\(\s*|'
                   r'\b[A-Z_]*ENV[A-Z_]*\s*=\s*)"([A-Z][A-Z0-9_]*)"')  # a read, or a constant naming what is read
MATRIX = ROOT / "configs" / "matrices" / "tiny-acceptance.yaml"
PUBLISHED = ROOT / "results" / "reference" / "tpu_v5p_qwen3_4b.csv"


def test_every_declared_variable_the_package_reads_is_checked_at_the_front_door():
    read = {m.group(1) for p in (ROOT / "benchmarks").rglob("*.py") if p.name != "environment.py"
            for m in READS.finditer(p.read_text())}
    checked = {n for n in read if n in ENVIRONMENT and ENVIRONMENT[n].kind in ("number", "choice", "bool", "pattern")}
    assert {"DFLASH_BANDWIDTH_GBS", "RAY_ADDRESS", "PLATFORM"} <= checked  # the scan sees them
    assert checked <= set(READ_VARIABLES), f"add to READ_VARIABLES: {sorted(checked - set(READ_VARIABLES))}"
    assert set(READ_VARIABLES) <= set(ENVIRONMENT)


@pytest.mark.parametrize("name, value", [("DFLASH_BANDWIDTH_GBS", "abc"), ("DFLASH_BANDWIDTH_GBS", "-5"),
                                         ("DFLASH_BANDWIDTH_GBS", "0"), ("RAY_ADDRESS", "nothing"),
                                         ("PLATFORM", "foo"), ("RAY_ADDRESS", "host:port\nmore")])
def test_a_bad_value_ends_any_command_in_one_line_before_it_runs(name, value, monkeypatch, capsys):
    monkeypatch.setenv(name, value)
    assert main(["validate", str(MATRIX)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: {name}=") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_good_values_pass_the_front_door(monkeypatch, capsys, tmp_path):
    for name, value in (("DFLASH_BANDWIDTH_GBS", "819"), ("RAY_ADDRESS", "auto"), ("PLATFORM", "cpu"),
                        ("DFLASH_RUNS_DIR", str(tmp_path / "runs"))):
        monkeypatch.setenv(name, value)
    assert main(["cost-model", "--chip", "v5p", "--tau-from", str(PUBLISHED)]) == 0
    assert "Predicted on TPU v5p" in capsys.readouterr().out


FOLDER_CASES = [c for c in FOLDER_CAUSES if c != "read-only"]  # read-only: as another user, tests/test_ways_in.py


@pytest.mark.parametrize("cause", FOLDER_CASES)
def test_a_runs_folder_that_cannot_be_one_stops_the_commands_that_make_runs_before_any_work(cause, tmp_path,
                                                                                          monkeypatch, capsys):
    """DFLASH_RUNS_DIR, for each cause of the declarations (FOLDER_CAUSES), at the front door of bench and matrix
    (their output run_dir): one line naming the variable, exit 2, nothing made."""
    path = folder_cases(tmp_path)[cause]
    before = sorted(tmp_path.rglob("*"))
    monkeypatch.setenv("DFLASH_RUNS_DIR", str(path))
    for argv in (["matrix", str(MATRIX), "--plan"], ["bench", "--dataset", "humaneval", "--preset", "tiny"]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"error: DFLASH_RUNS_DIR {path} ") and len(err.strip().splitlines()) == 1, err
        assert WORDS[cause].removeprefix("the path ") in err, err
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("cause", FOLDER_CASES)
def test_a_llamacpp_cache_that_cannot_be_one_stops_a_llamacpp_matrix_before_any_work(cause, tmp_path, monkeypatch,
                                                                                    capsys):
    """DFLASH_LLAMACPP_CACHE, for each cause, where a command uses it (a matrix with a llama.cpp cell): validate and
    the run itself refuse it in one line naming the variable, exit 2, nothing made."""
    path = folder_cases(tmp_path)[cause]
    matrix = tmp_path / "llama.yaml"
    matrix.write_text(yaml.safe_dump({"preset": "tiny", "engine": "llama.cpp", "methods": ["baseline"],
                                      "datasets": ["humaneval"], "max_new_tokens": 8, "num_prompts": 2,
                                      "warmup_prompts": 0}))
    before = sorted(tmp_path.rglob("*"))
    monkeypatch.setenv("DFLASH_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("DFLASH_LLAMACPP_CACHE", str(path))
    for argv in (["validate", str(matrix)], ["matrix", str(matrix)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "DFLASH_LLAMACPP_CACHE" in err[0] and str(path) in err[0], err
        assert ("is a file" if cause in ("a file", "under a file") else WORDS[cause].removeprefix("the path ")) \
            in err[0], err
    assert sorted(tmp_path.rglob("*")) == before
