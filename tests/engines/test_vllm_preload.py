"""The LD_PRELOAD a vLLM engine's processes start with (benchmarks/engines/vllm/vllm_preload.py): which libraries, from
which files, what happens when one is missing or the user's LD_PRELOAD already has one. Pure: no vLLM."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.engines.vllm import vllm_preload
from benchmarks.engines.vllm.vllm_preload import preload_plan, preloaded

TCMALLOC = "lib/preload/libtcmalloc_minimal.so.4"
IOMP = "lib/libiomp5.so"


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    for rel in (TCMALLOC, IOMP):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"\x7fELF")
    (tmp_path / f"{TCMALLOC}.source").write_text("Debian libtcmalloc-minimal4 2.10-1\n")
    return tmp_path


def test_both_libraries_on_x86_tcmalloc_first(venv: Path) -> None:
    p = preload_plan(True, venv, None, "x86_64", "Linux")
    assert p.value == f"{venv / TCMALLOC}:{venv / IOMP}"
    assert p.files == {"tcmalloc": str(venv / TCMALLOC), "iomp": str(venv / IOMP)} and not p.missing


def test_only_tcmalloc_where_vllm_asks_for_no_intel_openmp(venv: Path) -> None:
    assert preload_plan(True, venv, None, "aarch64", "Linux").value == str(venv / TCMALLOC)
    nothing = preload_plan(True, venv, None, "x86_64", "Darwin")
    assert nothing.value is None and not nothing.files and not nothing.missing


def test_a_missing_library_is_named_with_the_command_that_fetches_it(venv: Path) -> None:
    (venv / TCMALLOC).unlink()
    p = preload_plan(True, venv, None, "x86_64", "Linux")
    assert p.value == str(venv / IOMP)
    assert set(p.missing) == {"tcmalloc"} and "make setup" in p.missing["tcmalloc"]
    none = preload_plan(True, venv / "elsewhere", None, "x86_64", "Linux")
    assert none.value is None and set(none.missing) == {"tcmalloc", "iomp"}


def test_the_inherited_value_is_kept_after_ours_and_a_library_it_names_is_not_added_twice(venv: Path) -> None:
    p = preload_plan(True, venv, "/opt/x/libtcmalloc.so.4:/opt/y/libfoo.so", "x86_64", "Linux")
    assert p.value == f"{venv / IOMP}:/opt/x/libtcmalloc.so.4:/opt/y/libfoo.so"
    assert p.files["tcmalloc"] == "/opt/x/libtcmalloc.so.4"
    assert p.inherited == "/opt/x/libtcmalloc.so.4:/opt/y/libfoo.so"


def test_no_intel_openmp_beside_another_openmp_runtime(venv: Path) -> None:
    """vLLM's thread binding refuses libiomp and libgomp together (an assertion at start)."""
    p = preload_plan(True, venv, "/usr/lib/libgomp.so.1", "x86_64", "Linux")
    assert "libiomp" not in (p.value or "") and "libgomp" in p.missing["iomp"]


def test_turned_off_leaves_ld_preload_as_inherited_and_says_so(venv: Path) -> None:
    off = preload_plan(False, venv, None, "x86_64", "Linux")
    assert off.value is None and not off.enabled and not off.files
    assert set(off.missing) == {"tcmalloc", "iomp"} and "preload: false" in off.missing["iomp"]
    assert preload_plan(False, venv, "/a/libx.so", "x86_64", "Linux").value == "/a/libx.so"


def test_the_provenance_record_names_each_file_and_its_source(venv: Path) -> None:
    d = preload_plan(True, venv, None, "x86_64", "Linux").describe()
    assert d["enabled"] and d["ld_preload"] and d["missing"] == {}
    assert d["libraries"]["tcmalloc"]["source"] == "Debian libtcmalloc-minimal4 2.10-1"
    assert d["libraries"]["iomp"]["real_path"] == str((venv / IOMP).resolve())
    assert len(d["libraries"]["iomp"]["sha256"]) == 64


def test_preloaded_sets_the_value_only_while_the_engine_starts(venv: Path, monkeypatch) -> None:
    monkeypatch.setenv(vllm_preload.ENV, "/a/libx.so")
    p = preload_plan(True, venv, os.environ[vllm_preload.ENV], "x86_64", "Linux")
    with preloaded(p):
        assert os.environ[vllm_preload.ENV] == p.value
    assert os.environ[vllm_preload.ENV] == "/a/libx.so"
    monkeypatch.delenv(vllm_preload.ENV)
    with preloaded(preload_plan(False, venv, None, "x86_64", "Linux")):
        assert vllm_preload.ENV not in os.environ
    assert vllm_preload.ENV not in os.environ
