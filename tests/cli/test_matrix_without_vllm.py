"""`matrix` and `validate` where vLLM is absent (a TPU machine whose index has no vllm-tpu, stood in for by a venv
prefix holding set-up's vllm-absent.txt and vLLM hidden from `find_spec`), as `bench` is there
(tests/preparation/test_tpu_without_vllm.py): a matrix that names no engine runs the JAX engine and its first line
says why; one that names an engine needing vLLM is refused before any work with the reason (exit 2); where vLLM is
present nothing changes. Engine-free: the tiny models' tokenizer is read, nothing compiles."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.cli import main
from benchmarks.cli import matrix as matrix_cli
from benchmarks.config.matrix_expand import expand, run_id_for
from benchmarks.config.matrix_parse import absent_default_note, load_matrix, parse_matrix
from benchmarks.core.exit_codes import Exit
from benchmarks.engines import catalog

REASON = "vLLM is absent: the package index has no vllm-tpu==0.27.0 tpu-inference==0.27.0 for Python 3.12"
FIRST_LINE = f"engine jax, the default where vLLM is absent ({REASON})"
TINY: dict[str, Any] = {"preset": "tiny", "methods": ["baseline", "dflash"], "k": {"dflash": 7},
                        "datasets": ["humaneval"], "max_new_tokens": 8, "num_prompts": 2, "warmup_prompts": 0}


@pytest.fixture
def absent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """This environment as set-up builds it where vLLM is absent: vLLM not found, the reason in the venv."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / catalog.ABSENT_NOTE).write_text(REASON + "\n")
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setenv("DFLASH_RUNS_DIR", str(tmp_path / "runs"))
    assert catalog.vllm_absence() == REASON
    return REASON


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The matrices `matrix` went on to run (none run)."""
    matrices: list[Any] = []
    monkeypatch.setattr(matrix_cli, "run_and_report", lambda matrix, args: matrices.append(matrix) or Exit.OK)
    return matrices


def write(tmp_path: Path, **keys: Any) -> str:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**TINY, **keys}))
    return str(path)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], list[str]]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err.splitlines()


def test_the_absence_is_the_reason_set_up_recorded_else_that_vllm_is_not_installed(
        absent: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert catalog.VLLM_ENGINES == ("vllm", "vllm-serve")
    (Path(sys.prefix) / catalog.ABSENT_NOTE).unlink()
    assert catalog.vllm_absence() == f"vLLM is absent: it is not installed for {sys.executable}"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert catalog.vllm_absence() is None


def test_a_matrix_without_engine_plans_jax_cells_and_its_first_line_says_why(
        absent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path)
    rc, out, err = run(["matrix", path, "--plan"], capsys)
    assert rc == Exit.OK, err
    assert out[0] == f"matrix: {FIRST_LINE}"
    assert " jax " in "\n".join(out[1:]) and "vllm" not in "\n".join(out[1:])
    assert not (tmp_path / "runs").exists()


def test_a_matrix_without_engine_runs_the_cells_of_one_that_names_jax(
        absent: str, ran: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default taken here is the matrix `engine: jax`: the same cells, the same run folder's id."""
    rc, out, _ = run(["matrix", write(tmp_path)], capsys)
    assert rc == Exit.OK and out == [f"matrix: {FIRST_LINE}"]
    [defaulted] = ran
    named = load_matrix(write(tmp_path, engine="jax"))
    assert defaulted.engines == ["jax"] and {c.engine for c in expand(defaulted)} == {"jax"}
    assert [c.cell_id for c in expand(defaulted)] == [c.cell_id for c in expand(named)]
    assert run_id_for(defaulted) == run_id_for(named)
    assert run(["matrix", write(tmp_path, engine="jax")], capsys)[1] == []  # naming it: no note


@pytest.mark.parametrize("engine, needs", [("vllm", "vllm"), ("vllm-serve", "vllm-serve"),
                                           (["jax", "vllm"], "vllm"), (["vllm", "vllm-serve"], "vllm, vllm-serve")])
def test_a_matrix_that_names_a_vllm_engine_is_refused_before_any_work(
        engine: Any, needs: str, absent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matrix_cli, "run_and_report", lambda *a: pytest.fail("matrix did work before refusing"))
    path = write(tmp_path, engine=engine)
    rc, out, err = run(["matrix", path], capsys)
    assert rc == Exit.BAD_INPUT and out == []
    assert err == [f"error: {path}: 'engine': {needs} cannot run here: {REASON}. Give engine: jax (the default "
                   f"here), or run it in an environment with vLLM"]
    assert not (tmp_path / "runs").exists()


def test_validate_checks_as_matrix_runs_here(absent: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """One line per problem, the refused file's beside the others': a vLLM matrix is an error, a matrix naming no
    engine is the JAX engine's (its line says so before its ok line), one naming JAX is as anywhere."""
    for folder in "abc":
        (tmp_path / folder).mkdir()
    default, vllm = write(tmp_path / "a"), write(tmp_path / "b", engine="vllm")
    jax = write(tmp_path / "c", engine="jax")
    rc, out, err = run(["validate", default, vllm, jax], capsys)
    assert rc == Exit.BAD_INPUT
    assert out == [f"validate: {default}: {FIRST_LINE}", f"{default}: ok, 2 cells", f"{jax}: ok, 2 cells"]
    assert err == [f"error: {vllm}: 'engine': vllm cannot run here: {REASON}. Give engine: jax (the default here), "
                   f"or run it in an environment with vLLM"]


def test_where_vllm_is_present_nothing_changes(monkeypatch: pytest.MonkeyPatch, ran: list[Any], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(catalog, "vllm_absence", lambda: None)
    path = write(tmp_path)
    rc, out, _ = run(["matrix", path], capsys)
    assert rc == Exit.OK and out == []
    [matrix] = ran
    assert matrix.engines == ["vllm"] and matrix == load_matrix(path)
    rc, out, _ = run(["validate", path, write(tmp_path, engine="vllm-serve")], capsys)
    assert rc == Exit.OK and not [line for line in out if "absent" in line]
    assert absent_default_note(matrix, None) is None


def test_parsing_without_a_reason_is_the_same_everywhere(absent: str) -> None:
    """A matrix parsed for no run here (a study, a test) keeps vLLM as its default engine, vLLM or not."""
    matrix = parse_matrix(dict(TINY))
    assert matrix.engines == [catalog.DEFAULT_ENGINE] == ["vllm"]
    assert parse_matrix(dict(TINY), vllm_absent=absent).engines == ["jax"]
