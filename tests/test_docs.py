"""Every command the README and docs/ show runs as written: each `python -m benchmarks …` command path answers
--help, each `make` target exists, and every page the README links to exists."""
from __future__ import annotations

import re
import shlex

import pytest

from benchmarks.cli import COMMANDS, main
from benchmarks.core.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "models" / "tiny" / "README.md",
         ROOT / "results" / "reference" / "README.md"]
CLI = re.compile(r"python -m benchmarks((?: [a-z][a-z0-9-]*)*)")
MAKE = re.compile(r"(?:`|^|\$ )make ([a-z][a-z0-9-]*)", re.M)


def documented(pattern: re.Pattern[str]) -> set[tuple[str, str]]:
    return {(p.relative_to(ROOT).as_posix(), m.group(1).strip())
            for p in PAGES for m in pattern.finditer(p.read_text())}


def command_path(words: list[str]) -> list[str]:
    """The leading words of a command line that name a command (and its sub-command) of the CLI table."""
    path, table = [], COMMANDS
    for w in words:
        if not isinstance(table, dict) or w not in table:
            break
        path.append(w)
        entry = table[w]
        table = entry[1] if isinstance(entry[1], dict) else None
    return path


@pytest.mark.parametrize("page, words", sorted(documented(CLI)))
def test_documented_cli_commands_answer_help(page, words, capsys):
    path = command_path(shlex.split(words))
    with pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0, (page, words)
    assert "usage:" in capsys.readouterr().out


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name, entry in COMMANDS.items():
        assert name in out
        if isinstance(entry[1], dict):
            assert all(f"{name} {sub}" in out for sub in entry[1])
    assert "quick start" in out and "exit status" in out


@pytest.mark.parametrize("page, target", sorted(documented(MAKE)))
def test_documented_make_targets_exist(page, target):
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), flags=re.M))
    assert target in targets, f"{page}: make {target} is not a target of the Makefile"


def test_every_linked_page_exists():
    for page in PAGES:
        for link in re.findall(r"\]\(([^)#]+\.md)\)", page.read_text()):
            assert (page.parent / link).is_file(), f"{page.relative_to(ROOT)} links to {link}, which does not exist"


def test_readme_fits_on_a_page():
    assert len((ROOT / "README.md").read_bytes()) <= 10 * 1024
