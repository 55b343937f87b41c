"""Every output a study declares (its OUTPUTS) is checked before any work: a link in its place, to a user's file, is
refused in one line (exit 2) and the file is left as it was; so is an output folder that is a link or a file."""
from __future__ import annotations

import pytest

from benchmarks.cli import main
from benchmarks.studies import chip_compile, device, device_grid

# Each study with the options that make it run quickly up to its first work, and its declared outputs
STUDIES = {
    "device-grid": (["study", "device-grid", "--shape", "qwen3-tiny"], device_grid.OUTPUTS),
    "chip-compile": (["study", "chip-compile", "--chip", "cpu", "--shape", "qwen3-tiny", "--check-only"],
                     chip_compile.OUTPUTS),
    "device run": (["study", "device", "run", "--shape", "qwen3-tiny"], device.OUTPUTS),
}
CASES = [(study, name) for study, (_, outputs) in STUDIES.items() for name in outputs]


@pytest.mark.parametrize("study, name", CASES, ids=[f"{s}: {n}" for s, n in CASES])
def test_a_link_where_a_declared_output_goes_is_refused_and_its_target_kept(tmp_path, capsys, study, name):
    argv, _ = STUDIES[study]
    users = tmp_path / "users.txt"
    users.write_text("mine\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(users)
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out / name}: a link stands where this output goes" in err and len(err.strip().splitlines()) == 1
    assert users.read_text() == "mine\n" and [p.name for p in out.iterdir()] == [name]


@pytest.mark.parametrize("study", STUDIES)
@pytest.mark.parametrize("kind", ["link", "file"])
def test_an_output_folder_that_is_a_link_or_a_file_is_refused(tmp_path, capsys, study, kind):
    argv, _ = STUDIES[study]
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    out = tmp_path / "out"
    out.symlink_to(theirs) if kind == "link" else out.write_text("mine\n")
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert ("a link stands where the output folder goes" if kind == "link" else "is a file") in err
    assert list(theirs.iterdir()) == [] and (kind == "link" or out.read_text() == "mine\n")
