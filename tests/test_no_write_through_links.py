"""No output is written through a link: every writer of the package goes through benchmarks/core/atomic.py (a scan
fails on a new plain write), a link in place of a command's output file is refused before any work, the user's file
untouched, and a linked folder or figure in place of a run's figures is refused before any figure is drawn."""
from __future__ import annotations

import re

import pytest

from benchmarks.cli import main
from benchmarks.core.exit_codes import BadInput
from benchmarks.core.paths import ROOT

PLAIN_WRITE = re.compile(r"\.write_text\(|\.write_bytes\(|\bopen\([^)]*[\"'][wax]b?\+?[\"']|save_file\(")
# Writers into files the harness makes for itself, never a command's output: a generated model's done-mark, a
# build's staging folder and lock, a server's log and prompts in its work folder, a study's temporary folder.
OWN_FILES = {"benchmarks/config/model_refs.py", "benchmarks/engines/llamacpp/llamacpp_gguf.py",
             "benchmarks/engines/llamacpp/llamacpp_build.py", "benchmarks/engines/vllm/vllm_serve.py",
             "benchmarks/engines/server.py", "benchmarks/studies/vllm_sampled_spec.py"}


def test_every_output_goes_through_the_one_writer():
    plain = sorted(f"{p.relative_to(ROOT)}:{n}" for p in (ROOT / "benchmarks").rglob("*.py")
                   if p.relative_to(ROOT).as_posix() not in OWN_FILES | {"benchmarks/core/atomic.py"}
                   for n, line in enumerate(p.read_text().splitlines(), 1) if PLAIN_WRITE.search(line))
    assert not plain, f"write through benchmarks/core/atomic.py: {plain}"
    assert all(PLAIN_WRITE.search((ROOT / p).read_text()) for p in OWN_FILES), \
        "a listed file writes through atomic.py now"


@pytest.mark.parametrize("argv", [["study", "vllm-start", "--out"], ["study", "vllm-preload", "--out"],
                                  ["study", "first-table", "--out"], ["tiny", "check", "--json"],
                                  ["study", "device", "env", "--json"]])
def test_a_link_where_an_output_file_goes_is_refused_before_any_work(argv, tmp_path, capsys):
    users = tmp_path / "users.json"
    users.write_text("mine\n")
    link = tmp_path / "out.json"
    link.symlink_to(users)
    assert main([*argv, str(link)]) == 2
    out, err = capsys.readouterr()
    assert f"{argv[-1]} {link} is a link, and the harness never writes through one" in err and out == ""
    assert len(err.strip().splitlines()) == 1 and users.read_text() == "mine\n"


def test_a_linked_figures_folder_or_figure_is_refused_before_any_is_written(tmp_path):
    from benchmarks.analysis.summary import summarize_run
    from benchmarks.figures.run_figures import run_figures
    from benchmarks.records.store import RunStore
    from tests.analysis.synthetic_run import write_run

    summary = summarize_run(RunStore(write_run(tmp_path / "run")))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "figures").symlink_to(elsewhere)
    with pytest.raises(BadInput, match="a link stands where an output folder goes"):
        run_figures(summary, tmp_path / "figures")
    folder = tmp_path / "real"
    folder.mkdir()
    users = tmp_path / "users.png"
    users.write_bytes(b"mine")
    (folder / "speedup_per_dataset.png").symlink_to(users)
    with pytest.raises(BadInput, match="a link stands where a figure goes"):
        run_figures(summary, folder)
    assert users.read_bytes() == b"mine" and not any(elsewhere.iterdir())
    assert [p.name for p in folder.iterdir()] == ["speedup_per_dataset.png"]  # no figure written beside it


def test_kflat_refuses_a_link_among_its_outputs_before_the_weights_load(tmp_path, capsys):
    users = tmp_path / "users.json"
    users.write_text("mine\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "kflat.json").symlink_to(users)
    argv = ["study", "kflat", "--random-weights", "--shape", "qwen3-tiny", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "kflat.json: a link stands where this output goes" in err and "kflat:" not in out
    assert users.read_text() == "mine\n"
