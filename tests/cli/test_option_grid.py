"""The command options' half of the hostile grid, drawn from the parsers themselves: every command of the CLI's table
is built as `python -m benchmarks` builds it, and each of its options is given values at and past the edges of its
declared domain, alone, and each pair of options that its parser declares exclusive together. A new command or
option is covered by being declared; a number without a declared domain fails here. Parse only: nothing runs."""
from __future__ import annotations

import argparse
import importlib
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cli import COMMANDS, OneLineParser, main
from benchmarks.core.exit_codes import Exit
from benchmarks.core.numbers import Bounded
from tests.machine import without

# The packages an environment of the harness may lack (a TPU's JAX-only venv has no torch, vLLM or MT-Bench wheel): a
# command's module imports them in its `main`, so that its parser, --help and its input checks need none of them.
OPTIONAL_PACKAGES = ("torch", "vllm", "mtbench_evaluator")


def commands() -> dict[str, OneLineParser]:
    """Every command's parser, by its words on the command line."""
    found: dict[str, OneLineParser] = {}
    for name, entry in COMMANDS.items():
        table = entry[1] if isinstance(entry[1], dict) else {"": entry}
        for sub, (module, _) in table.items():
            words = f"{name} {sub}".strip()
            ap = OneLineParser(prog=f"python -m benchmarks {words}")
            importlib.import_module(module).add_cli_args(ap)
            found[words] = ap
    return found


PARSERS = commands()
OPTIONS = [(words, a) for words, ap in PARSERS.items() for a in ap._actions if a.option_strings and a.type is not None]
BOUNDED = [(words, a) for words, a in OPTIONS if isinstance(a.type, Bounded)]
EXCLUSIVE = [(words, a, b) for words, ap in PARSERS.items() for group in ap._mutually_exclusive_groups
             for i, a in enumerate(group._group_actions) for b in group._group_actions[i + 1:]]


def required(ap: argparse.ArgumentParser) -> list[str]:
    """The arguments a parse cannot do without, each given a value its parser takes (paths are not opened here)."""
    argv: list[str] = []
    for a in ap._actions:
        if a.option_strings and not a.required or a.nargs in ("?", "*") or isinstance(a, argparse._HelpAction):
            continue
        value = str(next(iter(a.choices))) if a.choices else "x"
        argv += [a.option_strings[0], value] if a.option_strings else [value]
    return argv


def parse(capsys: pytest.CaptureFixture[str], words: str, argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    """The parsed arguments, or None with the one line a refusal printed."""
    try:
        return PARSERS[words].parse_args(required(PARSERS[words]) + argv), ""
    except SystemExit as exc:
        err = capsys.readouterr().err
        assert exc.code == 2 and len(err.strip().splitlines()) == 1, (words, argv, exc.code, err)
        return None, err.strip()


def flag(a: argparse.Action) -> str:
    return max(a.option_strings, key=len)


def test_every_number_an_option_takes_declares_its_domain() -> None:
    """int and float read any value (nan, inf, -1, 10**30); a `Bounded` type says which it takes."""
    bare = [f"{words} {flag(a)}" for words, a in OPTIONS if a.type in (int, float)]
    assert not bare, f"declare these options' domains with benchmarks.core.numbers.Bounded: {bare}"
    assert len(BOUNDED) >= 50 and {"bench", "cost-model", "study kflat", "study crossover-power"} <= {
        w for w, _ in BOUNDED}


def edges(b: Bounded) -> tuple[list[str], list[str]]:
    """Values at its edges (taken) and past them, of the wrong kind, or no number (refused)."""
    step = 1 if b.kind is int else max(abs(b.low), 1.0) / 10
    below = b.low - step if b.low - step < b.low else -1
    taken = [f"{b.low:g}" if b.kind is float else str(int(b.low)), str(int(b.high)) if b.kind is int else repr(b.high)]
    refused = [str(int(below)) if b.kind is int else repr(below), str(int(b.high) + 1) if b.kind is int
               else repr(b.high * 10), "nan", "inf", "-inf", "x", "", "1e400"]
    if b.kind is int:
        refused.append("2.5")
    return taken, refused


@pytest.mark.parametrize("words, action", BOUNDED, ids=[f"{w} {flag(a)}" for w, a in BOUNDED])
def test_each_number_is_taken_at_its_edges_and_refused_past_them_in_one_line(words, action, capsys) -> None:
    b: Bounded = action.type
    taken, refused = edges(b)
    for value in taken:
        args, err = parse(capsys, words, [flag(action), value])
        assert args is not None, (value, err)
        got = getattr(args, action.dest)
        got = got[0] if isinstance(got, list) else got
        assert math.isclose(got, float(value)) and type(got) is b.kind, (value, got)
    for value in refused:
        args, err = parse(capsys, words, [flag(action), value])
        assert args is None, f"{words} {flag(action)} {value!r} was taken as {getattr(args, action.dest)!r}"
        assert f"argument {flag(action)}" in err and "expected" in err, err
    if b.many:
        args, err = parse(capsys, words, [flag(action), f"{taken[0]},x"])
        assert args is None and f"argument {flag(action)}: 'x'" in err, err


@pytest.mark.parametrize("words, a, b", EXCLUSIVE, ids=[f"{w} {flag(a)} {flag(b)}" for w, a, b in EXCLUSIVE])
def test_each_pair_a_parser_declares_exclusive_is_refused_naming_both(words, a, b, capsys) -> None:
    def given(action: argparse.Action) -> list[str]:
        if action.nargs == 0:
            return [flag(action)]
        return [flag(action), str(next(iter(action.choices))) if action.choices else "1"]

    args, err = parse(capsys, words, given(a) + given(b))
    assert args is None and flag(a) in err and flag(b) in err and "not allowed with" in err, err


def test_every_command_answers_help_without_the_optional_packages() -> None:
    """Every command's module imports, and its --help answers, in a Python where OPTIONAL_PACKAGES do not import (as
    on a TPU's JAX-only venv): a module that imports one of them at its top fails here, naming it."""
    words = [f"{name} {sub}".strip() for name, entry in COMMANDS.items()
             for sub in (entry[1] if isinstance(entry[1], dict) else {"": entry})]
    script = "\n".join([
        "import contextlib, io, sys",
        "from tests.machine import without",
        f"without(*{OPTIONAL_PACKAGES!r}).__enter__()  # an import of one: ModuleNotFoundError",
        "from benchmarks.cli import main",
        "for words in sys.argv[1:]:",
        "    out = io.StringIO()",
        "    with contextlib.redirect_stdout(out):",
        "        try:",
        "            main([*words.split(), '--help'])",
        "        except SystemExit as exc:",
        "            assert exc.code == 0 and 'usage:' in out.getvalue(), (words, exc.code, out.getvalue())",
        "        else:",
        "            raise AssertionError(f'{words} --help did not answer: {out.getvalue()}')",
    ])
    proc = subprocess.run([sys.executable, "-c", script, *words], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_package_a_command_imports_once_its_input_is_checked_is_named_after_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tiny train imports torch in its `main`: without it, a bad --out is still bad input (exit 2, nothing about
    torch), and a good one is one `lacking:` line naming torch (exit 5), nothing written."""
    (tmp_path / "a-file").write_text("")
    with without("benchmarks.tiny.training", missing={"benchmarks.tiny.training": "torch"}):  # as without torch
        assert main(["tiny", "train", "--out", str(tmp_path / "a-file")]) == Exit.BAD_INPUT
        bad = capsys.readouterr().err.strip().splitlines()
        assert main(["tiny", "train", "--out", str(tmp_path / "out")]) == Exit.LACKING
    assert len(bad) == 1 and bad[0].startswith("error: --out") and "torch" not in bad[0], bad
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lacking: python -m benchmarks tiny train needs the package torch"), err
    assert not (tmp_path / "out").exists()


def test_a_command_module_that_needs_an_absent_package_exits_lacking_naming_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.import_module

    def without_torch(name: str, package: str | None = None):  # type: ignore[no-untyped-def]
        if name == "benchmarks.tiny.train":
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return real(name, package)

    monkeypatch.setattr("benchmarks.cli.importlib.import_module", without_torch)
    assert main(["tiny", "train"]) == Exit.LACKING
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lacking: python -m benchmarks tiny train needs the package torch")
