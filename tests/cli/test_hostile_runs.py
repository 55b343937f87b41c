"""Hostile run folders and careless options, family by family (docs/outputs.md, "Shared runs directories"): a
command that reads never writes; no file is written through a link; units copied in from another run are set aside,
never merged; tools refuse to overwrite; Ctrl-C is one line; options are not taken at face value; messages fit;
anything else is one `error:` line with its exit status. Engine-free: runs use the scripted catalog engine."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.core import paths
from benchmarks.core.cells import cell_label
from benchmarks.core.paths import ROOT
from benchmarks.figures import run_figures
from benchmarks.figures.figure_style import save_figure, subtitle
from benchmarks.figures.serve_figures import serve_figures
from benchmarks.records import store
from tests.cli.test_hostile_input import clear_error, matrix, prompts, run, scripted  # noqa: F401 (fixtures)


@pytest.fixture
def done_run(tmp_path, prompts, capsys) -> Path:  # noqa: F811
    run_dir = tmp_path / "run"
    assert run(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys)[0] == 0
    return run_dir


def foreign_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "theirs"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"schemaVersion": 2}')
    (folder / "records.jsonl").write_text('{"my": "data"}\n')
    (folder / "summary.csv").write_text("a,b\n1,2\n")
    return folder


# --- 1. commands that read never write ------------------------------------------------------------------------------

def test_a_copied_run_is_reported_from_its_records_and_left_as_it_is(tmp_path, done_run, capsys):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("manifest.json", "records.jsonl"):
        (copy / name).write_bytes((done_run / name).read_bytes())
    records = (copy / "records.jsonl").read_bytes()
    for argv in (["report", copy], ["check", "lossless", copy], ["cost-model", copy]):
        rc, out, err = run(argv, capsys)
        assert rc == 0 and "rebuilt" not in err and (copy / "records.jsonl").read_bytes() == records, (argv, err)
    assert "| local | scripted | dflash-k3 |" in run(["report", copy], capsys)[1]
    with open(copy / "records.jsonl", "a") as f:
        f.write('{"my": "data"}\n')
    rc, out, err = run(["report", copy], capsys)
    assert rc == 0 and "1 record(s) of no cell of the manifest left out" in err


@pytest.mark.parametrize("command", [["report"], ["check", "lossless"], ["check", "published"], ["cost-model"]])
def test_another_tools_folder_is_one_line_and_left_alone(command, tmp_path, capsys):
    folder = foreign_folder(tmp_path)
    clear_error([*command, folder], capsys, "of this harness")
    assert (folder / "records.jsonl").read_text() == '{"my": "data"}\n'
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "records.jsonl", "summary.csv"]


def test_records_out_of_step_are_named_by_report_and_rebuilt_by_a_run_keeping_the_old(tmp_path, prompts,  # noqa: F811
                                                                                  done_run, capsys):
    records = done_run / "records.jsonl"
    whole = records.read_text()
    records.write_text('{"edited": true}\n')
    rc, out, err = run(["check", "lossless", done_run], capsys)
    assert rc == 0 and "records.jsonl is out of step with units/" in err and records.read_text() == '{"edited": true}\n'
    rc, _, err = run(["matrix", matrix(tmp_path, prompts), "--run-dir", done_run], capsys)
    assert rc == 0 and "kept as records.jsonl.old" in err
    assert records.read_text() == whole and (done_run / "records.jsonl.old").read_text() == '{"edited": true}\n'


# --- 2. no file written through a link -----------------------------------------------------------------------------

def test_a_lock_that_is_a_link_is_refused_and_its_target_untouched(tmp_path, prompts, done_run, capsys):  # noqa: F811
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (done_run / ".lock").unlink()
    (done_run / ".lock").symlink_to(target)
    clear_error(["matrix", matrix(tmp_path, prompts), "--run-dir", done_run], capsys, ".lock is a link")
    assert target.read_text() == "keep me"


def test_a_folder_holding_only_a_lock_link_is_not_a_new_run_folder(tmp_path, prompts, capsys):  # noqa: F811
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").symlink_to(target)
    clear_error(["matrix", matrix(tmp_path, prompts), "--run-dir", run_dir], capsys, "holds no run of the harness")
    assert target.read_text() == "keep me"


def test_a_lock_that_is_a_folder_is_one_line(tmp_path, prompts, done_run, capsys):  # noqa: F811
    (done_run / ".lock").unlink()
    (done_run / ".lock").mkdir()
    clear_error(["matrix", matrix(tmp_path, prompts), "--run-dir", done_run], capsys, ".lock is a folder")


# --- 3. foreign units set aside, never merged -----------------------------------------------------------------------

def test_a_unit_copied_in_under_another_dataset_is_set_aside_not_merged(tmp_path, prompts, done_run,  # noqa: F811
                                                                      capsys):
    unit = sorted((done_run / "units").glob("*__local.jsonl"))[0]
    cell = unit.name.split("__")[0]
    foreign = unit.with_name(f"{cell}__elsewhere.jsonl")
    foreign.write_text("".join(json.dumps({**json.loads(line), "dataset": "elsewhere"}) + "\n"
                               for line in unit.read_text().splitlines()))
    rc, out, err = run(["report", done_run], capsys)
    assert rc == 0 and "dataset 'elsewhere' is not in the matrix" in err and "elsewhere" not in out
    assert foreign.is_file()  # reading moves nothing
    rc, out, err = run(["matrix", matrix(tmp_path, prompts), "--run-dir", done_run], capsys)
    assert rc == 0 and f"moved to units/foreign/, not merged: {foreign.name}" in out + err
    assert not foreign.exists() and (done_run / "units" / "foreign" / foreign.name).is_file()


def test_a_unit_whose_records_name_another_cell_is_measured_again(tmp_path, prompts, done_run, capsys):  # noqa: F811
    base, spec = sorted((done_run / "units").glob("*__local.jsonl"))
    spec.write_text(base.read_text())  # the baseline's records under the speculative cell's name
    rc, out, err = run(["matrix", matrix(tmp_path, prompts), "--run-dir", done_run], capsys)
    assert rc == 0 and "1 of 2 (cell, dataset) units already done" in err and "units/foreign/" in out + err
    assert {json.loads(line)["cell_id"] for line in spec.read_text().splitlines()} == {spec.name.split("__")[0]}


def test_a_prompt_twice_in_a_cell_fails_pairing_loudly(done_run, capsys):
    unit = sorted((done_run / "units").glob("*__local.jsonl"))[1]
    lines = unit.read_text().splitlines()
    request = next(line for line in lines if json.loads(line)["kind"] == "request")
    unit.write_text("\n".join([*lines, request]) + "\n")
    rc, _, err = run(["report", done_run], capsys)
    assert rc == 2 and "appears twice, so its requests cannot pair" in err


# --- 4. tools that would overwrite, summaries of nothing ------------------------------------------------------------

def test_tiny_build_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "model.safetensors").write_text("trained")
    clear_error(["tiny", "build", tmp_path], capsys, "is not empty", "--force")
    assert (tmp_path / "target" / "model.safetensors").read_text() == "trained"


@pytest.mark.parametrize("kind", ["empty", "missing", "foreign"])
def test_device_summary_of_no_results_is_bad_input(kind, tmp_path, capsys):
    folder = {"empty": tmp_path, "missing": tmp_path / "none", "foreign": foreign_folder(tmp_path)}[kind]
    clear_error(["device", "summary", folder], capsys, "no device-check results here")


# --- 5. Ctrl-C ------------------------------------------------------------------------------------------------------

def test_ctrl_c_is_one_line_saying_how_many_units_are_safe(tmp_path, prompts, monkeypatch, capsys):  # noqa: F811
    real = store.RunStore.write_unit

    def interrupt_after_first(self, *args, **kwargs):
        real(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(store.RunStore, "write_unit", interrupt_after_first)
    rc, out, err = run(["matrix", matrix(tmp_path, prompts), "--run-dir", tmp_path / "run"], capsys)
    [line] = [line for line in err.splitlines() if "interrupted" in line]  # after the progress bars' last redraw
    assert rc == 130 and line.endswith(f"interrupted: 1 unit(s) are safe in {tmp_path / 'run' / 'units'}; "
                                       f"rerunning the same command resumes from them")


# --- 6. options not taken at face value -----------------------------------------------------------------------------

@pytest.mark.parametrize("option, fragment", [
    (["--context", "-1"], "argument --context: -1: expected an int from 1 to 16777216"),
    (["--context", str(10 ** 12)], "expected an int from 1 to 16777216"),
    (["--overhead-ms", "nan"], "argument --overhead-ms: nan: expected a number from 0 to 1000000000"),
    (["--overhead-ms", "-1000"], "argument --overhead-ms: -1000: expected a number from 0 to 1000000000"),
    (["--tau-from", "results/reference"], "--tau-from is read only with --chip"),
])
def test_cost_model_options_out_of_range_are_refused(option, fragment, done_run, capsys):
    clear_error(["cost-model", done_run, *option], capsys, fragment)


@pytest.mark.parametrize("option", [["--overhead-ms", "1"], ["--batch", "1,2"], ["--shape", "qwen3-4b"], ["--k", "3"],
                                    ["--context", "512"], ["--dtype", "float32"], ["--block-size", "8"],
                                    ["--ar-draft-ms", "0.5"]])
def test_cost_model_chip_options_without_chip_are_refused(option, done_run, capsys):
    [line] = clear_error(["cost-model", done_run, *option], capsys, f"{option[0]} is read only with --chip",
                         "give --chip X --tau-from RUN, or drop")


def test_cost_model_chip_options_refused_together_in_one_line(done_run, capsys):
    [line] = clear_error(["cost-model", done_run, "--k", "3", "--batch", "1,2"], capsys,
                         "--batch, --k are read only with --chip")
    clear_error(["cost-model", "--chip", "v5p", "--tau-from", done_run, "--cost-ks", "1,3", "--schedule"], capsys,
                "--cost-ks picks a run's measured step times")
    clear_error(["cost-model", done_run, "--cost-ks", "1,3"], capsys, "--cost-ks goes with --schedule")


def test_cost_model_options_it_would_not_use_are_refused(done_run, capsys):
    published = str(ROOT / "results" / "reference" / "tpu_v5p_qwen3_4b.csv")
    clear_error(["cost-model", "--chip", "v5p", "--tau-from", published, "--ar-draft-ms", "0.5"], capsys,
                "--ar-draft-ms prices the draft of --schedule's steps: add --schedule")
    clear_error(["cost-model", done_run, "--chip", "v5p", "--tau-from", published], capsys,
                "is not read with --chip (its τ comes from --tau-from)")
    kflat = ROOT / "results" / "measured" / "kflat.csv"  # never read: refused before
    clear_error(["cost-model", done_run, "--schedule", "--kflat", kflat], capsys,
                "--kflat shapes the verify of a run's cost table; a run's schedule, a calibration and a fit price the "
                "steps themselves and would ignore it")


@pytest.mark.parametrize("option, fragment", [
    (["--repeats", "0"], "argument --repeats: 0: expected an int from 1 to 10000"),
    (["--random-weights", "--warmup", "-1"], "argument --warmup: -1: expected an int from 0 to 10000"),
    (["--model", "."], "not a model folder (no config.json)"),
])
def test_kflat_options_are_checked_before_anything_loads(option, fragment, capsys):
    argv = ["study", "kflat", *option] if "--model" in option or "--random-weights" in option else [
        "study", "kflat", "--random-weights", *option]
    clear_error(argv, capsys, fragment)


def test_out_being_a_file_is_one_line(tmp_path, capsys):
    out = tmp_path / "file"
    out.write_text("x")
    clear_error(["figures", "--published", "--out", out], capsys, "is a file; give a folder")
    clear_error(["study", "vllm-start", "--out", tmp_path], capsys, "is a folder, not a file; give a file")
    clear_error(["study", "kflat", "--random-weights", "--out", out], capsys, "is a file; give a folder")


@pytest.mark.parametrize("variable", ["ALL", "FRESH"])
@pytest.mark.parametrize("value, on", [("TRUE", True), ("On", True), ("yes", True), ("1", True), ("", False),
                                       ("0", False), ("OFF", False), ("No", False), ("maybe", None), ("2", None)])
def test_make_booleans_take_the_usual_spellings_and_refuse_others(variable, value, on):
    # `bools` is what make test, bench and matrix check first; BOOL_ON is how their recipes read the variable
    probe = f'probe: bools ; @$(call BOOL_ON,{variable}) && echo "[on]" || echo "[off]"'
    proc = subprocess.run(["make", "-s", "--no-print-directory", "--eval", probe, "probe", f"{variable}={value}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    if on is None:
        assert proc.returncode != 0 and proc.stderr.startswith(f"error: {variable}={value}: give {variable}=1")
    else:
        assert proc.returncode == 0 and proc.stdout.strip() == ("[on]" if on else "[off]"), proc


def test_make_test_all_on_runs_the_heavy_tests():
    proc = subprocess.run(["make", "-s", "--no-print-directory", "-o", "setup", "-o", "lint", "test", "ALL=on",
                           "PY=echo", "PYTEST_ARGS="], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "not heavy" not in proc.stdout and "llamacpp_build" in proc.stdout, proc


# --- 7. messages ----------------------------------------------------------------------------------------------------

def test_bench_errors_name_the_command_run_and_cut_long_values(capsys):
    lines = clear_error(["bench", "--dataset", "x" * 5000, "--preset", "tiny"], capsys, "bench --dataset xxx")
    assert all(len(line) < 600 for line in lines) and not any("make bench" in line for line in lines)


def summary_frame(temps=(0.0,), contexts=(None,), levels=(None,)) -> pd.DataFrame:
    """Hand-made summary rows: three datasets, a baseline and two DFlash Ks, a long hardware name."""
    rows = []
    for dataset in ("humaneval", "math500", "a-dataset-with-a-rather-long-name"):
        for method, k in (("baseline", None), ("dflash", 3), ("dflash", 15)):
            for temp in temps:
                for ctx in contexts:
                    for level in levels:
                        spec = k is not None
                        rows.append(dict(
                            run_id="bench-humaneval-0123456789abcdef-20260101T000000", cell_id=f"{method}{k}{temp}",
                            label=cell_label(method, k), engine="scripted", platform="cpu",
                            hardware="An Accelerator With A Long Marketing Name 141GB HBM3e (x1)",
                            target="models/tiny/target", method=method, k=k, temperature=temp, dataset=dataset,
                            n_prompts=4, tau=2.5 if spec else None, per_position=json.dumps([0.9, 0.7, 0.5][:k or 0]),
                            speedup=1.7 if spec else None, speedup_ci_low=1.5 if spec else None,
                            speedup_ci_high=1.9 if spec else None, tpot_ms_mean=5.0, context_tokens=ctx,
                            prompt_tokens_mean=ctx or 100, step_ms=3.0, draft_step_ms=1.0, verify_step_ms=1.5,
                            host_step_ms=0.5, tau_prompt_mean=2.4, concurrency=level, dist_verdict="pass",
                            agg_output_tok_per_s=100.0 * (level or 1), throughput_speedup=1.3 if spec else None,
                            ttft_ms_p90=20.0 * (level or 1)))
    return pd.DataFrame(rows)


def drawn_texts(fig) -> list:
    """Every text the figure draws: titles, axis labels, legends, annotations, tick labels inside the view."""
    out = list(fig.texts)
    for ax in fig.axes:
        out += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        out += ax.get_legend().get_texts() if ax.get_legend() else []
        for axis, i in ((ax.xaxis, 0), (ax.yaxis, 1)):
            low, high = sorted(axis.get_view_interval())
            pad = (high - low) * 1e-6
            out += [t for t in axis.get_ticklabels() if low - pad <= t.get_position()[i] <= high + pad]
    return [t for t in out if t.get_visible() and t.get_text()]


def test_every_figures_text_fits_its_canvas(tmp_path):
    one = summary_frame()
    single = one[one["dataset"] == "humaneval"]
    requests = pd.DataFrame([dict(label=label, method=label.split("-")[0], engine="scripted", dataset="humaneval",
                                  k=3 if "k3" in label else None, tpot_ms=t, concurrency=1)
                             for label in ("baseline", "dflash-k3") for t in (1.0, 2.0, 3.0)])
    made = {"speedup": run_figures.speedup_figure(single), "speedup3": run_figures.speedup_figure(one),
            "tau_vs_k": run_figures.tau_vs_k_figure(one), "per_position": run_figures.per_position_figure(one),
            "tpot_cdf": run_figures.tpot_cdf_figure(requests, subtitle(one)),
            "temperature": run_figures.temperature_figure(summary_frame(temps=(0.0, 1.0))),
            "context": run_figures.context_figure(summary_frame(contexts=(1024, 4096))),
            "step_time": run_figures.step_time_figure(summary_frame(contexts=(1024, 4096))),
            **serve_figures(summary_frame(levels=(1, 4)))}
    assert all(fig is not None for fig in made.values()), made
    for name, fig in made.items():
        save_figure(fig, tmp_path / f"{name}.png")
        fig.canvas.draw()  # at the figure's own dpi again, as fig.bbox is
        renderer = fig.canvas.get_renderer()
        for text in drawn_texts(fig):
            box = text.get_window_extent(renderer)
            assert box.x0 >= -1 and box.y0 >= -1 and box.x1 <= fig.bbox.width + 1 and box.y1 <= fig.bbox.height + 1, (
                name, text.get_text()[:60], box)


def test_a_run_folder_named_run_is_not_titled_run_run():
    frame = summary_frame().assign(run_id="run")
    assert not subtitle(frame).startswith("run run")


# --- 8. one error line, never a traceback ---------------------------------------------------------------------------

def test_output_in_an_ascii_only_encoding_prints(done_run):
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "LANG": "C", "LC_ALL": "C"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "report", str(done_run)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "dflash-k3" in proc.stdout


@pytest.mark.parametrize("content, fragment", [
    ('["a", "list"]\n', "a record must be a JSON object"),
    ('{"kind": "request"}\n', "a record names no cell_id"),
    ("[" * 100000 + "]" * 100000 + "\n", "nested too deeply to read"),
])
def test_a_unit_file_that_is_not_the_harnesss_is_named_and_left_out(content, fragment, done_run, capsys):
    unit = sorted((done_run / "units").glob("*__local.jsonl"))[0]
    unit.write_text(content)
    rc, out, err = run(["report", done_run], capsys)
    assert rc != 2 and fragment in err and "left out of the records" in err


def test_a_unit_of_a_cell_not_in_the_manifest_is_left_out(done_run, capsys):
    unit = sorted((done_run / "units").glob("*__local.jsonl"))[0]
    (unit.parent / "0000other__local.jsonl").write_text(unit.read_text())
    rc, out, err = run(["report", done_run], capsys)
    assert rc == 0 and "cell 0000other is not in the manifest" in err


def test_a_nested_line_in_a_copied_runs_records_is_one_line(tmp_path, done_run, capsys):
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "manifest.json").write_bytes((done_run / "manifest.json").read_bytes())
    (copy / "records.jsonl").write_text('{"a": ' * 100000 + "1" + "}" * 100000 + "\n")
    clear_error(["report", copy], capsys, "records.jsonl: line 1: nested too deeply")


@pytest.mark.parametrize("content", ['{"cells": {', "[]", ""])
def test_a_manifest_that_is_not_a_runs_is_one_line(content, done_run, capsys):
    (done_run / "manifest.json").write_text(content)
    for argv in (["report", done_run], ["check", "lossless", done_run], ["check", "published", done_run]):
        clear_error(argv, capsys, "manifest.json")


def test_a_run_folder_that_is_a_link_loop_is_one_line(tmp_path, prompts, capsys):  # noqa: F811
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    clear_error(["matrix", matrix(tmp_path, prompts), "--run-dir", loop], capsys)
    clear_error(["report", loop], capsys)


def test_a_runs_directory_that_is_a_file_is_one_line(tmp_path, prompts, monkeypatch, capsys):  # noqa: F811
    runs = tmp_path / "runs-file"
    runs.write_text("x")
    monkeypatch.setattr(paths, "RUNS_DIR", runs)
    monkeypatch.setattr("benchmarks.run.plan.RUNS_DIR", runs)
    clear_error(["matrix", matrix(tmp_path, prompts)], capsys, "give a folder")


def test_a_run_folder_that_cannot_be_written_is_one_line(tmp_path, prompts, monkeypatch, capsys):  # noqa: F811
    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "run"))

    monkeypatch.setattr(store.RunStore, "write_manifest", refused)
    clear_error(["matrix", matrix(tmp_path, prompts), "--run-dir", tmp_path / "run"], capsys,
                "Permission denied; this user (", "may not write there: give a folder you may write")


# --- units measured again, and `latest` -----------------------------------------------------------------------------

def test_a_unit_of_a_newer_schema_is_measured_again_and_moved_aside(tmp_path, done_run, prompts, capsys):  # noqa: F811
    unit = sorted((done_run / "units").glob("*.jsonl"))[0]
    newer = "".join(json.dumps({**json.loads(line), "schema_version": 99}) + "\n"
                    for line in unit.read_text().splitlines())
    unit.write_text(newer)
    assert run(["matrix", matrix(tmp_path, prompts), "--run-dir", done_run], capsys)[0] == 0
    assert (done_run / "units" / "superseded" / unit.name).read_text() == newer  # kept whole, not overwritten
    assert '"schema_version": 99' not in unit.read_text()  # measured again by this harness


def test_each_of_two_runs_in_one_runs_folder_says_the_truth_about_latest(tmp_path, prompts, capsys):  # noqa: F811
    from benchmarks.cli.run import latest_note

    first, second = tmp_path / "first", tmp_path / "second"
    assert run(["matrix", matrix(tmp_path, prompts), "--run-dir", first], capsys)[0] == 0
    assert latest_note(first).endswith("points here")
    assert run(["matrix", matrix(tmp_path, prompts, name="n.yaml", seed=1), "--run-dir", second], capsys)[0] == 0
    # the first run holds units; a run that started after it moved `latest`, as two runs at once do
    assert latest_note(first) == f"{store.latest_link()} points at {second.resolve()}: another run moved it since " \
                                 f"this one wrote its first unit"
    assert latest_note(second).endswith("points here")
    empty = tmp_path / "empty"
    (empty / "units").mkdir(parents=True)
    assert latest_note(empty).endswith("not moved: the run holds no unit")


@pytest.mark.parametrize("manifest", ['{"config": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                      '{"config": {"temperature": NaN}, "cells": {}}', b'{"run_id": "\xff"}'])
def test_a_run_folder_resumed_with_a_manifest_of_no_run_is_one_line(manifest, tmp_path, done_run, prompts,  # noqa: F811
                                                                   capsys):
    (done_run / "manifest.json").write_bytes(manifest if isinstance(manifest, bytes) else manifest.encode())
    clear_error(["matrix", matrix(tmp_path, prompts), "--run-dir", done_run], capsys,
                "its manifest.json does not read as a run's")


def test_a_damaged_provenance_file_stops_a_reader_only_while_a_record_names_it(tmp_path, done_run,  # noqa: F811
                                                                               prompts, capsys):  # noqa: F811
    provenance = sorted((done_run / "provenance").glob("*.json"))
    provenance[0].write_text('{"engine": NaN')
    clear_error(["report", done_run], capsys, provenance[0].name, "restore it from its run")
    for unit in (done_run / "units").glob("*.jsonl"):
        unit.unlink()  # measured again: the new loads write provenance files of their own
    rc, _, err = run(["matrix", matrix(tmp_path, prompts), "--run-dir", done_run], capsys)
    assert rc == 0 and f"{provenance[0].name}: NaN is not a finite number; no record names it: left out" in err
    assert provenance[0].read_text() == '{"engine": NaN'  # a reader leaves it as it is


def test_a_report_on_units_it_may_not_read_says_so_and_overwrites_nothing(done_run, capsys, monkeypatch):
    written = {name: (done_run / name).read_bytes() for name in ("summary.csv", "report.md")}
    units = done_run / "units"
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != units and real_access(p, mode))  # root reads all
    clear_error(["report", done_run], capsys, f"{units}: permission denied, its units cannot be read")
    monkeypatch.setattr(os, "access", real_access)

    def denied(path, check=True):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(store, "read_jsonl", denied)
    clear_error(["report", done_run], capsys, "permission denied, the unit cannot be read; give read access")
    assert {name: (done_run / name).read_bytes() for name in written} == written


def test_unreadable_provenance_and_files_are_named_as_unreadable_and_overwrite_nothing(done_run, capsys, monkeypatch,
                                                                                      tmp_path):
    """An unreadable provenance/ is named (it read as "a run from before they were recorded"); a file this user may
    not read asks for read access, naming the user; a write refused in a folder names the file to be written, never
    the temporary name of an atomic write."""
    from benchmarks.cli import os_error_line
    from benchmarks.core import atomic

    written = {name: (done_run / name).read_bytes() for name in ("summary.csv", "report.md")}
    folder = done_run / "provenance"
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != folder and real_access(p, mode))  # root reads all
    clear_error(["report", done_run], capsys, f"{folder}: permission denied, its records cannot be read")
    assert {name: (done_run / name).read_bytes() for name in written} == written
    unit = next((done_run / "units").iterdir())
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != unit and real_access(p, mode))
    line = os_error_line(PermissionError(13, "Permission denied", str(unit)))
    assert line.startswith(f"error: {unit}: Permission denied; this user (") and "may not read it: give read " \
        "access to it" in line
    monkeypatch.setattr(os, "access", real_access)

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".summary.csv.x1y2.tmp"))

    monkeypatch.setattr(atomic.tempfile, "mkstemp", refused)
    with pytest.raises(PermissionError) as caught:
        atomic.atomic_write_text(tmp_path / "summary.csv", "x")
    assert caught.value.filename == str(tmp_path / "summary.csv")


def test_tiny_check_on_a_file_or_a_folder_without_the_pair_names_what_it_lacks(tmp_path, capsys):
    from benchmarks.cli import main

    a_file = tmp_path / "models.txt"
    a_file.write_text("")
    assert main(["tiny", "check", "--models", str(a_file)]) == 2
    assert f"--models {a_file} is not a folder; give the folder of a tiny pair" in capsys.readouterr().err
    (tmp_path / "target").mkdir()
    assert main(["tiny", "check", "--models", str(tmp_path)]) == 2
    assert "lacks target/config.json, dflash/config.json, eagle3/config.json" in capsys.readouterr().err
