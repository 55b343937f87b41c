"""The environment variables with a domain of values that the harness reads itself are checked before any command
runs: a bad value ends the command in one line naming the variable, exit 2, and nothing runs; every such declared
variable the package reads is among those checked."""
from __future__ import annotations

import re

import pytest

from benchmarks.cli import READ_VARIABLES, main
from benchmarks.core.environment import ENVIRONMENT
from benchmarks.core.paths import ROOT

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
