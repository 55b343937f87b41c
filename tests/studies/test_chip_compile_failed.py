"""study chip-compile: a study whose every point failed to compile exits 1 (no result), its failures written and
named; one point compiled beside failed ones is a result with failures (exit 3, as before)."""
from __future__ import annotations

import argparse
import json

import jax
import pytest

from benchmarks.core.exit_codes import Exit
from benchmarks.studies import chip_compile

pytestmark = pytest.mark.jax


def args(tmp_path):
    return argparse.Namespace(chip="cpu", shape="qwen3-tiny", batch=(1, 2), context=(64,), ks=(0,), dtype="float32",
                              attention="xla", out=tmp_path / "out")


def test_a_study_whose_every_point_failed_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(chip_compile, "target_device", lambda chip: jax.devices("cpu")[0])

    def refused(*a):
        raise RuntimeError("RESOURCE_EXHAUSTED: out of memory")

    monkeypatch.setattr(chip_compile, "measure", refused)
    assert chip_compile.main(args(tmp_path)) == Exit.FAILED == 1
    points = json.loads((tmp_path / "out" / "chip-compile.json").read_text())["points"]
    assert [p["status"] for p in points] == ["failed", "failed"] and "RESOURCE_EXHAUSTED" in points[0]["note"]
    assert "no point was compiled" in capsys.readouterr().out


def test_a_point_compiled_beside_failed_ones_is_a_result_with_failures(tmp_path, monkeypatch):
    monkeypatch.setattr(chip_compile, "target_device", lambda chip: jax.devices("cpu")[0])
    calls = []

    def second_fails(point, *a):
        calls.append(point)
        if len(calls) == 2:
            raise RuntimeError("refused")
        return {"cache_copies": 0, "temp_bytes": 0, "compile_s": 1.0}

    monkeypatch.setattr(chip_compile, "measure", second_fails)
    assert chip_compile.main(args(tmp_path)) == Exit.VIOLATION
