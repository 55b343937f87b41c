"""Hostile or careless input, case by case (the table of docs/outputs.md): each gets one clear error (exit 2, one
line per problem, no traceback), or a run that keeps every measured unit; nothing passes silently. Engine-free: the
runs use a scripted engine added through the catalog."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks import cli
from benchmarks.core import paths
from benchmarks.core.paths import MATRICES_DIR, ROOT
from benchmarks.engines import catalog
from benchmarks.engines.catalog import EngineOptions, EngineRow
from benchmarks.records import store
from benchmarks.records.store import RunLock, RunStore
from benchmarks.run.redaction import redacted

TINY = ROOT / "models" / "tiny"


@pytest.fixture(autouse=True)
def scripted(monkeypatch):
    monkeypatch.setitem(catalog.ENGINES, "scripted", EngineRow(
        "scripted", "tests.catalog_engine:CatalogEngine", ("baseline", "dflash"),
        EngineOptions(lambda: frozenset({"step_ms", "max_model_len", "dtype"}),
                      choices={"dtype": ("auto", "float32")})))


@pytest.fixture
def prompts(tmp_path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(6)))
    return path


def matrix(tmp_path: Path, prompts: Path, name: str = "m.yaml", **extra) -> Path:
    raw = {"name": "hostile", "target": str(TINY / "target"), "drafts": {"dflash": str(TINY / "dflash")},
           "engine": "scripted", "methods": ["baseline", "dflash"], "k": [3], "max_new_tokens": 8, "num_prompts": 2,
           "warmup_prompts": 1, "drift_prompts": 0, "datasets": [{"name": "local", "path": str(prompts)}],
           "engine_options": {"max_model_len": 512}, **extra}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = cli.main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own refusals (an option's type or choices)
        rc = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def clear_error(argv: list[str], capsys, *fragments: str) -> list[str]:
    """Exit 2, every stderr line an `error:` line, the fragments among them; returns the lines."""
    rc, out, err = run(argv, capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and lines and all(line.startswith("error: ") for line in lines), (rc, err)
    for f in fragments:
        assert any(f in line for line in lines), (f, lines)
    return lines


def latest() -> str | None:
    link = paths.RUNS_DIR / "latest"
    return os.readlink(link) if link.is_symlink() else None


# --- 1. a run with no results does not pass -------------------------------------------------------------------------

def test_a_missing_prompt_file_stops_before_a_run_folder_exists_or_latest_moves(tmp_path, prompts, capsys):
    before = latest()
    path = matrix(tmp_path, tmp_path / "absent.jsonl")
    clear_error(["matrix", path, "--run-dir", tmp_path / "run"], capsys, "local prompt file", "does not exist")
    assert not (tmp_path / "run").exists() and latest() == before


def test_check_lossless_and_report_on_a_run_without_records_say_not_checked(tmp_path, prompts, capsys):
    run_dir = tmp_path / "run"
    assert run(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys)[0] == 0
    for unit in (run_dir / "units").glob("*.jsonl"):
        unit.unlink()
    for command in ("check", "report"):
        argv = ["check", "lossless", run_dir] if command == "check" else ["report", run_dir]
        rc, out, err = run(argv, capsys)
        assert rc == 4 and "NOT CHECKED" in out + err and "holds no records" in out + err


@pytest.mark.parametrize("key", ["engine", "temperature", "datasets", "methods", "k"])
def test_an_empty_axis_is_bad_input(key, tmp_path, prompts, capsys):
    clear_error(["validate", matrix(tmp_path, prompts, **{key: []})], capsys, f"'{key}'")


# --- 2. one writer per run folder -----------------------------------------------------------------------------------

def test_a_second_run_into_a_folder_being_written_is_refused_naming_the_first(tmp_path, prompts, capsys):
    run_dir = tmp_path / "run"
    with RunLock(run_dir):
        clear_error(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys,
                    f"is being written by another run (pid {os.getpid()}")
    assert not (run_dir / "units").exists()


def test_a_lock_left_by_a_killed_run_does_not_stick(tmp_path, prompts, capsys):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]); "
                               "from benchmarks.records.store import RunLock; l = RunLock(sys.argv[2]).__enter__(); "
                               "print('locked', flush=True); time.sleep(600)", str(ROOT), str(run_dir)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait()
    assert run(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys)[0] == 0


# --- 3. a run folder is the harness's own ---------------------------------------------------------------------------

def test_a_run_dir_holding_the_users_files_is_refused_and_left_alone(tmp_path, prompts, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    clear_error(["matrix", matrix(tmp_path, prompts), "--run-dir", mine], capsys, "holds no run of the harness")
    assert sorted(p.name for p in mine.iterdir()) == ["report.md"] and (mine / "report.md").read_text() == "my notes"


def test_another_matrix_into_a_run_folder_is_refused_unless_asked_for(tmp_path, prompts, capsys):
    run_dir = tmp_path / "run"
    assert run(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys)[0] == 0
    manifest = (run_dir / "manifest.json").read_text()
    other = matrix(tmp_path, prompts, name="other.yaml", max_new_tokens=6)
    clear_error(["matrix", other, "--run-dir", run_dir], capsys, "holds a run of another matrix", "--reuse-run-dir")
    assert (run_dir / "manifest.json").read_text() == manifest
    rc, out, err = run(["matrix", other, "--run-dir", run_dir, "--reuse-run-dir"], capsys)
    assert rc == 0 and "units of cells that are not in this matrix" in out + err
    assert "measured with other model files" not in out + err


# --- 4. nothing measured is lost ------------------------------------------------------------------------------------

@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EROFS])
def test_a_unit_the_disk_cannot_take_stops_the_run_and_is_saved_elsewhere(error, tmp_path, prompts, capsys,
                                                                         monkeypatch):
    real = store.atomic_write_text
    monkeypatch.setattr(store, "WRITE_BACKOFF_S", 0.0)
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr(store.tempfile, "gettempdir", lambda: str(spare))

    def full_after_first_unit(path, text):
        if path.parent.name == "units" and list(path.parent.glob("*.jsonl")):
            raise OSError(error, os.strerror(error))
        return real(path, text)

    monkeypatch.setattr(store, "atomic_write_text", full_after_first_unit)
    run_dir = tmp_path / "run"
    rc, out, err = run(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys)
    assert rc == 1 and "could not write unit" in err and "The run stopped; 1 unit(s) are safe" in err
    [saved] = spare.glob("dflash-unsaved-*.jsonl")
    assert [json.loads(line)["kind"] for line in saved.read_text().splitlines()].count("request") == 2
    assert len(list((run_dir / "units").glob("*.jsonl"))) == 1  # the first unit, whole


def test_records_jsonl_emptied_or_truncated_is_rebuilt_from_the_units(tmp_path, prompts, capsys):
    run_dir = tmp_path / "run"
    assert run(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys)[0] == 0
    records = run_dir / "records.jsonl"
    whole = records.read_text()
    for damage, why in (("", "empty"), (whole[: len(whole) - 40], "truncated")):
        records.write_text(damage)
        rc, out, err = run(["report", run_dir], capsys)  # a command that reads leaves the file as it is
        assert rc == 0 and f"records.jsonl is {why}; the 5 records of units/ are read" in err
        assert records.read_text() == damage and "| local | scripted | dflash-k3 |" in out
    records.write_text("")
    rc, _, err = run(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys)
    assert rc == 0 and "2 of 2 (cell, dataset) units already done" in err and records.read_text() == whole
    assert "records.jsonl was empty; rebuilt from units/" in err


# --- 6. numbers that are not numbers --------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_temperature_that_is_not_a_finite_number_is_refused(value, tmp_path, prompts, capsys):
    clear_error(["validate", matrix(tmp_path, prompts, temperature=value)], capsys, "not a finite number")
    clear_error(["bench", "--dataset", "humaneval", "--preset", "tiny", "--temperature", str(value)], capsys,
                f"argument --temperature: {value}: expected a number from 0 to 100")


# --- 7. validate catches what the run would meet --------------------------------------------------------------------

@pytest.mark.parametrize("content, fragment", [
    (b'{"prompt": "ok"}\n{"prompt": "broken\n', ":2: not a JSON line"),
    (b'{"prompt": "ok"}\n{"prompt": "cut', ":2: not a JSON line"),
    (b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n', ":2: not UTF-8"),
    (b'{"prompt": "ok"}\n["a", "list"]\n', ":2: a row must be a JSON object"),
    (b'{"prompt": "ok"}\n{"question": "no prompt field"}\n', ":2: rows of a local file need a string 'prompt' field"),
    (b'{"prompt": "ok"}\n{"prompt": 5}\n', ":2:"),
])
def test_a_bad_prompt_file_is_named_line_by_line_by_validate_and_matrix(content, fragment, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    path = matrix(tmp_path, bad)
    clear_error(["validate", path], capsys, f"{bad}{fragment}")
    clear_error(["matrix", path, "--run-dir", tmp_path / "run"], capsys, f"{bad}{fragment}")
    assert not (tmp_path / "run").exists()


def test_rows_without_the_fields_the_registry_renders_are_named(tmp_path, capsys):
    bad = tmp_path / "he.jsonl"
    bad.write_text(json.dumps({"task_id": "x"}) + "\n")
    clear_error(["validate", matrix(tmp_path, bad, datasets=[{"name": "humaneval", "path": str(bad)}])], capsys,
                f"{bad}:1: no string 'prompt' field, and not the fields the humaneval registry renders")


@pytest.mark.parametrize("extra, fragment", [
    ({"target": "models/none-such"}, "no such model folder"),
    ({"target": "../../../../etc"}, "is not a model folder (no config.json)"),
    ({"engine_options": {"max_model_len": "abc"}}, "max_model_len: expected an int >= 2"),
    ({"engine_options": {"max_model_len": 0}}, "max_model_len: expected an int >= 2"),
    ({"engine_options": {"max_model_len": -5}}, "max_model_len: expected an int >= 2"),
    ({"max_new_tokens": 512}, "leaves no room for a prompt"),
    ({"engine_options": {"max_model_len": 4096}}, "exceeds the target's max_position_embeddings 2048"),
    ({"engine_options": {"dtype": "float8"}}, "dtype: 'float8' is not a value the scripted engine takes"),
    ({"num_prompts": 1000000000}, "which has 6 rows"),
])
def test_validate_names_what_the_run_would_fail_on(extra, fragment, tmp_path, prompts, capsys):
    path = matrix(tmp_path, prompts, **extra)
    clear_error(["validate", path], capsys, fragment)
    clear_error(["matrix", path, "--run-dir", tmp_path / "run"], capsys, fragment)
    assert not (tmp_path / "run").exists()


def test_a_matrix_file_that_is_not_utf8_or_gives_a_key_twice_is_refused(tmp_path, prompts, capsys):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    twice = tmp_path / "twice.yaml"
    twice.write_text(matrix(tmp_path, prompts).read_text() + "max_new_tokens: 4\n")
    lines = clear_error(["validate", latin, twice], capsys, "not UTF-8 text", "key 'max_new_tokens' given twice")
    assert len(lines) == 2  # both files reported: validate does not stop at the first


# --- 8. limits reported, not silent ---------------------------------------------------------------------------------

def test_prompts_passed_over_as_too_long_are_counted_in_the_report(tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": ("word " * (400 if i == 1 else 3)) + str(i)}) + "\n"
                            for i in range(5)))
    run_dir = tmp_path / "run"
    path = matrix(tmp_path, rows, engine_options={"max_model_len": 200})
    assert run(["matrix", path, "--run-dir", run_dir], capsys)[0] == 0
    report = (run_dir / "report.md").read_text()
    assert "- prompts: local: 1 row(s) longer than 192 prompt tokens" in report and "row index (tokens) 1 (" in report


# --- 9. internal unit names cannot collide with a dataset's -------------------------------------------------------

def test_a_dataset_named_like_a_recheck_keeps_its_own_unit(tmp_path, prompts, capsys):
    run_dir = tmp_path / "run"
    path = matrix(tmp_path, prompts, drift_prompts=2, datasets=[{"name": "local", "path": str(prompts)},
                                                                 {"name": "local__recheck", "path": str(prompts)}])
    assert run(["matrix", path, "--run-dir", run_dir], capsys)[0] == 0
    names = sorted(p.name.split("__", 1)[1] for p in (run_dir / "units").glob("*.jsonl"))
    assert names.count("local@recheck.jsonl") == 1 and names.count("local__recheck@recheck.jsonl") == 1
    assert names.count("local__recheck.jsonl") == 2  # baseline and dflash units of that dataset


# --- 10. make passes variables as arguments, never as commands ------------------------------------------------------

def test_make_bench_runs_no_command_a_variable_holds(tmp_path):
    marker = tmp_path / "touched"
    proc = subprocess.run(["make", "-s", "bench", f"DATASET=humaneval; touch {marker}; false"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and not marker.exists()
    assert "'datasets': 'humaneval; touch" in proc.stderr and "Traceback" not in proc.stderr


# --- 11. smaller ----------------------------------------------------------------------------------------------------

def test_figures_of_a_folder_that_is_not_a_run_is_bad_input(tmp_path, capsys):
    rc, _, err = run(["figures", "--run", tmp_path, "--out", tmp_path / "fig"], capsys)
    assert rc == 2 and "not a run folder" in err


def test_outputs_take_the_umask_like_any_file(tmp_path, prompts, capsys):
    run_dir = tmp_path / "run"
    assert run(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys)[0] == 0
    modes = {p.name: p.stat().st_mode & 0o777 for p in [run_dir / "summary.csv", run_dir / "manifest.json",
                                                       *(run_dir / "units").glob("*.jsonl")]}
    assert set(modes.values()) == {store.FILE_MODE}, modes


def test_an_unknown_key_is_one_line(tmp_path, prompts, capsys):
    [line] = clear_error(["validate", matrix(tmp_path, prompts, max_new_token=8)], capsys, "unknown key")
    assert "did you mean max_new_tokens?" in line


def test_a_relative_prompt_path_is_read_from_the_matrix_files_folder(tmp_path, prompts, capsys, monkeypatch):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "p.jsonl").write_text(prompts.read_text())
    path = matrix(sub, prompts, datasets=[{"name": "local", "path": "p.jsonl"}])
    monkeypatch.chdir(ROOT)
    rc, out, _ = run(["validate", path], capsys)
    assert rc == 0 and "ok, 2 cells" in out


def test_a_prompt_url_is_refused_without_echoing_its_credentials(tmp_path, prompts, capsys):
    path = matrix(tmp_path, prompts, datasets=[{"name": "local", "path": "https://user:secret@host/x.jsonl"}])
    [line] = clear_error(["validate", path], capsys, "is a URL; give a local JSONL file")
    assert "secret" not in line and "https://***@host/x.jsonl" in line


def test_credentials_in_a_url_never_reach_the_manifest():
    assert redacted({"path": "https://user:secret@host/x.jsonl", "n": [1, "s3://key@bucket/y"]}) == {
        "path": "https://***@host/x.jsonl", "n": [1, "s3://***@bucket/y"]}


def test_a_damaged_unit_file_is_named_left_out_and_measured_again(tmp_path, prompts, capsys):
    run_dir = tmp_path / "run"
    assert run(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys)[0] == 0
    unit = sorted((run_dir / "units").glob("*.jsonl"))[0]
    unit.write_text(unit.read_text()[:50])
    assert not RunStore(run_dir).is_done(*unit.stem.split("__", 1))
    rc, _, err = run(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys)
    assert rc == 0 and "1 of 2 (cell, dataset) units already done" in err
    assert json.loads(unit.read_text().splitlines()[0])["kind"] == "request"


@pytest.mark.parametrize("argv", [["study", "parity", "--target", "{p}"], ["study", "tpu-parity", "--target", "{p}"],
                                  ["study", "speed", "--target", "{p}", "--draft", "{p}", "dflash-vs-ar"],
                                  ["tiny", "check", "--models", "{p}"],
                                  ["study", "interleave-bias", "--config", "{p}"],
                                  ["study", "engine-ties", "{m}", "--run-dir", "{p}"]])
@pytest.mark.parametrize("kind", ["missing", "link loop"])
def test_a_study_input_that_is_not_there_is_one_line_before_anything_loads(argv, kind, tmp_path, capsys):
    path = tmp_path / "given"
    if kind == "link loop":
        path.symlink_to(path)
    shipped = str(MATRICES_DIR / "tiny-acceptance.yaml")
    lines = clear_error([a.replace("{p}", str(path)).replace("{m}", shipped) for a in argv], capsys, str(path))
    assert ("loops back" if kind == "link loop" else "does not exist") in lines[0]
