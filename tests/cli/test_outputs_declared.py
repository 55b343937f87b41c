"""Every command and study declares what it writes (issue 62), as benchmarks/cli/__init__.py says: OUTPUT_ARGS (the
options naming its output folders), OUTPUT_FILE_ARGS (those naming its output files) and OUTPUTS (the files it
writes inside its output folder, `*` within one path part). A module of the CLI's table that declares none of them,
an option a declaration names that its parser lacks, or an option that names an output and is declared nowhere
fails here; the cheap commands are then run into temporary folders and every file they write must be declared
(tiny build and the studies: tests/cli/test_study_outputs_written.py, with these helpers)."""
from __future__ import annotations

import importlib
from fnmatch import fnmatchcase
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks.cli import COMMANDS, OneLineParser, main
from tests.analysis.synthetic_run import write_run

KINDS = ("OUTPUT_ARGS", "OUTPUT_FILE_ARGS", "OUTPUTS")
# Commands that write into the run folder they read (an input, not one of their OUTPUT_ARGS): their OUTPUTS are
# relative to it.
INTO_THE_RUN = {"report", "cost-model"}
# The names an option that writes is given; one of them that a command only reads is listed in READ.
OUTPUT_NAMES = {"out", "out_dir", "output", "json", "keep", "save", "dest"}
READ = {("device summary", "out")}  # the device check's folder that `device summary` reads


def modules() -> dict[str, tuple[ModuleType, OneLineParser]]:
    """Every command's module and parser, by its words on the command line (each imports without its optional
    packages: tests/cli/test_option_grid.py)."""
    found: dict[str, tuple[ModuleType, OneLineParser]] = {}
    for name, entry in COMMANDS.items():
        table = entry[1] if isinstance(entry[1], dict) else {"": entry}
        for sub, (module_name, _) in table.items():
            words = f"{name} {sub}".strip()
            module = importlib.import_module(module_name)
            ap = OneLineParser(prog=f"python -m benchmarks {words}")
            module.add_cli_args(ap)
            found[words] = module, ap
    return found


MODULES = modules()


def declared(path: str, patterns: tuple[str, ...]) -> bool:
    """Whether a path relative to an output folder is one of `patterns` (`*` within one part, part by part)."""
    parts = path.split("/")
    return any(len(p.split("/")) == len(parts) and all(fnmatchcase(a, b) for a, b in zip(parts, p.split("/")))
               for p in patterns)


def written(folder: Path, before: dict[str, int] | None = None) -> list[str]:
    """The files under `folder` (relative, '/'-separated) that are new or changed since `before`."""
    now = {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    return sorted(name for name, stamp in now.items() if (before or {}).get(name) != stamp)


def snapshot(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_every_command_declares_its_outputs() -> None:
    assert len(MODULES) >= 25 and "report" in MODULES and "study device-grid" in MODULES
    bare = [f"{words} ({module.__name__}: {', '.join(k for k in KINDS if not hasattr(module, k))})"
            for words, (module, _) in MODULES.items() if not all(hasattr(module, k) for k in KINDS)]
    assert not bare, ("declare what these write (OUTPUT_ARGS, OUTPUT_FILE_ARGS and OUTPUTS, empty where nothing: "
                      f"benchmarks/cli/__init__.py): {bare}")
    for words, (module, _) in MODULES.items():
        for kind in KINDS:
            value = getattr(module, kind)
            assert isinstance(value, tuple) and all(isinstance(v, str) and v for v in value), (words, kind, value)


@pytest.mark.parametrize("words", sorted(MODULES))
def test_a_declared_option_is_one_the_command_has(words: str) -> None:
    module, ap = MODULES[words]
    dests = {a.dest for a in ap._actions}
    for kind in ("OUTPUT_ARGS", "OUTPUT_FILE_ARGS"):
        missing = [name for name in getattr(module, kind) if name not in dests]
        assert not missing, f"{words}: {kind} names {missing}, which its parser does not have"


@pytest.mark.parametrize("words", sorted(MODULES))
def test_an_option_that_names_an_output_is_declared(words: str) -> None:
    """A new --out, --json, ... is declared or it fails here (one a command only reads is listed in READ)."""
    module, ap = MODULES[words]
    named = {a.dest for a in ap._actions if a.dest in OUTPUT_NAMES and a.type is Path}
    undeclared = sorted(named - set(module.OUTPUT_ARGS) - set(module.OUTPUT_FILE_ARGS)
                        - {d for w, d in READ if w == words})
    assert not undeclared, f"{words}: declare {undeclared} in OUTPUT_ARGS or OUTPUT_FILE_ARGS (or list it in READ)"


@pytest.mark.parametrize("words", sorted(MODULES))
def test_outputs_are_paths_inside_a_folder_the_command_writes(words: str) -> None:
    module, _ = MODULES[words]
    for pattern in module.OUTPUTS:
        parts = pattern.split("/")
        assert all(p not in ("", ".", "..") for p in parts) and not pattern.startswith("/"), (words, pattern)
    has_folder = bool(module.OUTPUT_ARGS) or words in INTO_THE_RUN
    assert bool(module.OUTPUTS) == has_folder, (
        f"{words}: OUTPUTS {module.OUTPUTS} but output folders {module.OUTPUT_ARGS}: a folder it writes names its "
        f"files, and files need a folder")


def test_the_report_declares_what_report_write_writes() -> None:
    from benchmarks.cli import report
    from benchmarks.records import store
    from benchmarks.report import report_write

    for name in report_write.OUTPUTS:
        assert declared(name, report.OUTPUTS) or any(p.startswith(f"{name}/") for p in report.OUTPUTS), name
    assert set(report.OUTPUTS) <= set(store.RUN_OUTPUTS)


def test_the_pattern_rule() -> None:
    assert declared("k_schedule/jax-humaneval/vllm.json", ("k_schedule/*/vllm.json",))
    assert not declared("k_schedule/vllm.json", ("k_schedule/*/vllm.json",))
    assert not declared("k_schedule/a/b/vllm.json", ("k_schedule/*/vllm.json",))
    assert not declared("figures", ("figures/*.png",)) and declared("figures/tau.png", ("figures/*.png",))


# --- run into temporary folders: every file written is declared ----------------------------------------------------

def undeclared(files: list[str], patterns: tuple[str, ...]) -> list[str]:
    return [f for f in files if not declared(f, patterns)]


def test_report_writes_only_what_it_declares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.cli import report

    run = write_run(tmp_path / "run")
    before = snapshot(run)
    assert main(["report", str(run)]) != 2, capsys.readouterr().err
    new = written(run, before)
    assert {"summary.csv", "report.md"} <= set(new) and any(f.startswith("figures/") for f in new), new
    assert not undeclared(new, report.OUTPUTS), undeclared(new, report.OUTPUTS)


def test_figures_writes_only_what_it_declares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.cli import figures

    run = write_run(tmp_path / "run")
    before = snapshot(run)
    out = tmp_path / "out"
    assert main(["figures", "--published", "--run", str(run), "--out", str(out)]) != 2, capsys.readouterr().err
    new = written(out)
    assert any("/" not in f for f in new) and any(f.startswith("runs/run/") for f in new), new
    assert not undeclared(new, figures.OUTPUTS), undeclared(new, figures.OUTPUTS)
    assert written(run, before) == [], "figures only reads the run"


def test_cost_model_schedule_writes_only_what_it_declares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.cli import cost_model

    run = write_run(tmp_path / "run")
    before = snapshot(run)
    assert main(["cost-model", str(run), "--schedule"]) == 0, capsys.readouterr().err
    new = written(run, before)
    assert any(f.endswith("/matrix.yaml") for f in new) and any(f.endswith("/schedule.md") for f in new), new
    assert not undeclared(new, cost_model.OUTPUTS), undeclared(new, cost_model.OUTPUTS)
    capsys.readouterr()
    before = snapshot(run)
    assert main(["cost-model", str(run)]) != 2 and written(run, before) == [], "without --schedule it only prints"


def test_print_only_commands_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "run")
    before = snapshot(run)
    for argv in (["check", "lossless", str(run)], ["check", "published", str(run)]):
        assert main(argv) != 2, capsys.readouterr().err
        assert not MODULES[" ".join(argv[:2])][0].OUTPUTS
    assert written(run, before) == []


def test_a_declared_output_folder_is_checked_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    """tiny build's folder and interleave-bias's --keep, declared, are refused in one line when a file stands there."""
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("mine\n")
    for argv in (["tiny", "build", str(in_the_way)], ["study", "interleave-bias", "--keep", str(in_the_way)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{in_the_way} is a file" in err and len(err.strip().splitlines()) == 1, err
    assert in_the_way.read_text() == "mine\n"


def test_device_summary_reads_its_folder_without_checking_it_as_an_output(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "env.json").write_text('{"lines": ["python 3", "jax 0"]}\n')
    tmp_path.chmod(0o555)
    try:
        assert main(["device", "summary", str(tmp_path)]) == 0, capsys.readouterr().err
    finally:
        tmp_path.chmod(0o755)

