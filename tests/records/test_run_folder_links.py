"""A run folder is read and written as it is: a link in place of units/ or provenance/ is refused (another run's
records are never read as this run's), and report never writes through a link (report.md, figures/ or a figure),
the link's target left as it was."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.engines import catalog
from tests.cli.test_hostile_input import clear_error, matrix, run, scripted  # noqa: F401 (fixtures)


@pytest.fixture(scope="module")
def one_run(tmp_path_factory) -> Path:
    """One finished scripted run for the module; each test takes a copy."""
    folder = tmp_path_factory.mktemp("links")
    data = folder / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(6)))
    with pytest.MonkeyPatch.context() as mp:
        _scripted(mp)
        from benchmarks import cli

        assert cli.main(["matrix", str(matrix(folder, data)), "--run-dir", str(folder / "run")]) == 0
    return folder / "run"


def _scripted(mp: pytest.MonkeyPatch) -> None:
    from benchmarks.engines.catalog import EngineOptions, EngineRow

    mp.setitem(catalog.ENGINES, "scripted", EngineRow(
        "scripted", "tests.catalog_engine:CatalogEngine", ("baseline", "dflash"),
        EngineOptions(lambda: frozenset({"step_ms", "max_model_len", "dtype"}),
                      choices={"dtype": ("auto", "float32")})))


@pytest.fixture
def done_run(tmp_path, one_run) -> Path:
    return Path(shutil.copytree(one_run, tmp_path / "run", symlinks=True))


def _linked(run_dir: Path, name: str, elsewhere: Path) -> None:
    (run_dir / name).rename(elsewhere)
    (run_dir / name).symlink_to(elsewhere)


@pytest.mark.parametrize("name", ["units", "provenance"])
def test_a_link_in_place_of_units_or_provenance_is_refused(tmp_path, done_run, capsys, name):
    _linked(done_run, name, tmp_path / f"other-{name}")
    before = sorted(p.name for p in (tmp_path / f"other-{name}").iterdir())
    clear_error(["report", done_run], capsys, f"{name} is a link", "not this run's own")
    assert sorted(p.name for p in (tmp_path / f"other-{name}").iterdir()) == before


@pytest.mark.parametrize("name", ["report.md", "figures", "summary.csv"])
def test_report_refuses_to_write_through_a_link(tmp_path, done_run, capsys, name):
    theirs = tmp_path / "theirs"
    if name == "figures":
        theirs.mkdir()
        (theirs / "keep.txt").write_text("mine\n")
        shutil.rmtree(done_run / "figures", ignore_errors=True)
    else:
        theirs.write_text("mine\n")
        (done_run / name).unlink()
    (done_run / name).symlink_to(theirs)
    clear_error(["report", done_run], capsys, "a link stands where")
    assert (theirs / "keep.txt" if name == "figures" else theirs).read_text() == "mine\n"
    if name == "figures":
        assert [p.name for p in theirs.iterdir()] == ["keep.txt"]


def test_a_unit_whose_provenance_file_is_gone_is_named(done_run, capsys):
    gone = sorted((done_run / "provenance").glob("*.json"))[0]
    gone.unlink()
    rc, _, err = run(["report", done_run], capsys)
    assert f"{gone.name} missing; the units that name it have no recorded environment" in err, err
