"""Every make target and every study is run somewhere that is written down: docs/setup.md's table names, for each,
what it runs, the tests that run it (in whole or in part) and the pre-flight that runs it whole. A target renamed,
a recipe that no longer runs what the table says, or a test file that is gone fails here; `make -n` expands every
target, and `clean` removes only what git ignores."""
from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from benchmarks.cli import COMMANDS
from benchmarks.core.paths import ROOT

MAKEFILE = (ROOT / "Makefile").read_text()
SECTION = "## Every make target and study, and what runs it"


def phony() -> list[str]:
    declared = re.search(r"^\.PHONY:((?:.*\\\n)*.*)$", MAKEFILE, re.M)
    assert declared, "the Makefile declares no .PHONY targets"
    return declared.group(1).replace("\\\n", " ").split()


def recipe(target: str) -> str:
    """The target's recipe lines (those indented by a tab after its rule)."""
    found = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n?)*)", MAKEFILE, re.M)
    assert found, f"no rule for {target}"
    return found.group(1)


def table() -> dict[str, tuple[str, str, str]]:
    """docs/setup.md's rows: name -> (runs, in the tests, whole outside the tests)."""
    text = (ROOT / "docs" / "setup.md").read_text()
    assert SECTION in text
    rows = {}
    for line in text.split(SECTION, 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (cells[1], cells[2], cells[3])
    return rows


ROWS = table()
STUDY_TABLE = COMMANDS["study"][1]
assert isinstance(STUDY_TABLE, dict)
STUDIES = {f"study {name}": module for name, (module, _) in STUDY_TABLE.items()}


def quoted(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def names(text: str) -> str:
    return text.replace("_", "-").lower()


def test_the_table_names_every_target_and_study() -> None:
    assert set(ROWS) == set(phony()) | set(STUDIES), sorted(set(ROWS) ^ (set(phony()) | set(STUDIES)))


@pytest.mark.parametrize("name", sorted(ROWS))
def test_each_row_says_what_runs_it_and_its_test_files_exist(name: str) -> None:
    runs, tests, whole = ROWS[name]
    if name in STUDIES:
        assert quoted(runs) == [STUDIES[name].replace(".", "/") + ".py"], runs
    else:
        assert all(fragment in recipe(name) for fragment in quoted(runs)), (name, quoted(runs), recipe(name))
    files = [f for f in quoted(tests) if f.startswith("tests/")]
    assert files or whole != "—", f"{name}: neither a test nor a pre-flight runs it"
    subject = {names(name.split()[-1])} | {names(f.split("/")[-1].split(".")[0].split()[-1]) for f in quoted(runs)}
    for f in files:
        text = names((ROOT / f).read_text())
        assert any(s in text for s in subject), f"{f} does not name {name} ({subject})"


@pytest.mark.parametrize("target", phony())
def test_make_expands_every_target(target: str) -> None:
    done = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


def test_clean_removes_only_what_git_ignores(tmp_path) -> None:
    words = [w for line in recipe("clean").splitlines() if line.strip().startswith("rm -rf")
             for w in shlex.split(line.strip())[2:]]
    paths = [w.replace("$$VENV", ".venv").replace("$$TPU_VENV", ".venv-tpu").replace("$$CHIP_VENV", ".venv-chip")
             for w in words]
    assert {".venv", ".venv-tpu", "results/runs"} <= set(paths)
    # the checkout's .gitignore in an empty repository, where nothing stands at these paths (in a checkout a .venv
    # that is a link stops git's check); each is a folder, which git's folder patterns match given with its slash
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text((ROOT / ".gitignore").read_text())
    kept = [p for p in paths if subprocess.run(["git", "check-ignore", "-q", f"{p}/"], cwd=tmp_path).returncode != 0]
    assert not kept, f"make clean removes paths git does not ignore: {kept}"
