"""The hostile-input grid: every command × every argument it takes × every kind of bad value for that argument.

Each command names its arguments by slot type (a matrix file, a prompt file, a run folder, an output folder, the
runs folder of DFLASH_RUNS_DIR, a CSV table); each slot type has a valid value and the kinds of damage it can take:
path kinds for any path (missing, directory where a file is needed, regular file where a folder is needed, FIFO,
symlink loop, unreadable, read-only, very long) and content kinds for the file the slot reads (truncated, wrong
type, nan/inf, negative, zero, huge, deeply nested, non-UTF-8, and the slot's own: a cell without `method`, a
`run_id` that is a path, ...). The grid is their product. Each case runs in a folder of its own, in this process
(a scripted engine stands in for JAX and vLLM), and gets one outcome:
- `traceback`: an exception escaped, or a traceback was printed;
- `hang`: no end within HANG_S;
- `exit 0 on bad input`: a bad value was taken;
- `changed input`: a byte changed (or a file appeared) in the case's folder although the command refused its input
  (exit 2: bad input stops a command before it writes), or in a file the command only reads;
- `refused valid input`: a value that should run did not (read-only inputs, for example);
- `wrong cause`: refused, but its message does not name the kind's cause (CAUSES: a FIFO must read as a FIFO, not
  as "no such file");
- `clear error` (bad input refused without a traceback, nothing changed) or `ok` (valid input ran).
Permissions do not bite root: as root the unreadable and read-only kinds run as an unprivileged user instead
(`runuser -u nobody`, this checkout's packages on its path, the case's folder given to it; `as_user`), and are `n/a`
only where no interpreter of this Python's version is open to that user (the reason printed).

From a checkout's root: `python -m tests.cli.hostile_grid` prints the table of commands × kinds and the counts per
outcome; `--all` adds the slower cases (study kflat, matrix runs); `--cases` lists each case with its first line.
tests/cli/test_hostile_grid.py asserts the default grid holds only `clear error`, `ok` and `n/a`.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests.cli import hostile_cases
from tests.cli.hostile_cases import Outcome, call, done_run, matrix_text, prompts, scripted_engine
from tests.machine import python_path

GOOD = ("clear error", "ok", "n/a")
# What a clear error says for each kind (any one of the words, case-insensitive): the cause, not another one
CAUSES = {"missing": ("does not exist", "no such"), "FIFO": ("FIFO", "named pipe"), "symlink loop": ("loop",),
          "very long path": ("too long",), "directory": ("folder",), "regular file": ("file",),
          "under a file": ("under",), "unreadable": ("cannot be read", "cannot read", "permission"),
          "read-only": ("read-only", "cannot be written", "permission"), "non-UTF-8": ("UTF-8",),
          "deeply nested": ("nested",), "nan/inf": ("nan", "finite"), "inf": ("inf", "finite", "expected"),
          "nan in records": ("nan", "finite"), "provenance nested": ("nested",), "provenance NaN": ("finite",),
          "units unreadable": ("permission",), "provenance unreadable": ("permission",),
          "truncated": ("JSON", "YAML", "column", "CSV", "empty")}
ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0
PERMISSION_KINDS = ("unreadable", "read-only", "units unreadable", "provenance unreadable")
USER = "nobody"
REPO = str(Path(__file__).resolve().parents[2])
# What the unprivileged process runs: the CLI with the scripted engine's catalog row, the arguments after it
BOOT = ("import sys; from tests.cli.hostile_cases import scripted_engine; scripted_engine(); "
        "from benchmarks import cli; sys.exit(cli.main(sys.argv[1:]))")
HANG_S = 60  # a case still running after this long waits on something that never comes (a FIFO)
SLOW_HANG_S = 300  # the same for a case that measures (a run, a study that compiles)
NESTED = "[" * 100_000 + "]" * 100_000


@dataclass(frozen=True)
class Slot:
    """A value of one slot type: `make(folder)` writes a valid one and returns its path; `damage` maps each content
    kind to a change of that path (None: the kind is valid input)."""

    name: str
    make: Callable[[Path], Path]
    damage: dict[str, Callable[[Path], None]]
    folder: bool = False  # the slot is a folder (its path kinds differ)
    output: bool = False  # the command writes there
    reads: Callable[[Path], list[Path]] = lambda path: [path]  # what of it a command only reads


@dataclass(frozen=True)
class Case:
    command: str
    slot: str
    kind: str
    make: Callable[[Path], tuple[list[str], dict[str, str], list[Path]]]  # argv, env, paths only read
    bad: bool = True
    slow: bool = False


# --- slot values ---------------------------------------------------------------------------------------------------

def matrix_file(folder: Path) -> Path:
    path = folder / "m.yaml"
    path.write_text(matrix_text(folder))
    return path


def with_yaml(**extra: object) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        path.write_text(matrix_text(path.parent, Path(path.parent / "prompts.jsonl"), **extra))
    return change


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def write(text: str | bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(text if isinstance(text, bytes) else text.encode())


MATRIX = Slot("matrix file", matrix_file, {
    "truncated": truncate,
    "wrong type": write("- a list\n- not a matrix\n"),
    "nan/inf": with_yaml(temperature=float("nan")),
    "inf": with_yaml(max_new_tokens=float("inf")),
    "negative": with_yaml(k=[-3]),
    "zero": with_yaml(num_prompts=0),
    "huge": with_yaml(num_prompts=10**30),
    "deeply nested": lambda p: p.write_text(p.read_text() + "description: " + "[" * 5000 + "]" * 5000 + "\n"),
    "non-UTF-8": lambda p: p.write_bytes(p.read_bytes().replace(b"name: hostile", b"name: host\xff\xfeile")),
    "very long name": with_yaml(name="n" * 5000),
})


def prompt_lines(*lines: str | bytes) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        good = [json.dumps({"prompt": f"question {i}"}).encode() for i in range(6)]
        path.write_bytes(b"\n".join([ln if isinstance(ln, bytes) else ln.encode() for ln in lines] + good) + b"\n")
    return change


PROMPTS = Slot("prompt file", lambda folder: folder / "prompts.jsonl", {
    "truncated": prompt_lines('{"prompt": "cut sho'),
    "wrong type": prompt_lines('["a list", "not a row"]'),
    "nan/inf": prompt_lines('{"prompt_ids": [1, NaN, 3]}'),
    "negative": prompt_lines('{"prompt_ids": [1, -5, 3]}'),
    "zero": write(""),
    "huge": prompt_lines(json.dumps({"prompt_ids": [10**40]})),
    "deeply nested": prompt_lines(NESTED),
    "non-UTF-8": prompt_lines(b'{"prompt": "bad \xff\xfe bytes"}'),
})


def manifest_edit(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        data = json.loads((run / "manifest.json").read_text())
        data = edit(data) or data
        (run / "manifest.json").write_text(json.dumps(data))
    return change


def first_cell(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def change(data: dict) -> None:
        cid = sorted(data["cells"])[-1]
        edit(data["cells"][cid])
    return manifest_edit(change)


def cell_as_string(data: dict) -> None:
    cid = sorted(data["cells"])[-1]
    data["cells"][cid] = "dflash k=3"


def unit_nan(run: Path) -> None:
    for unit in sorted((run / "units").glob("*.jsonl")):
        lines = unit.read_text().splitlines()
        out = []
        for line in lines:
            rec = json.loads(line)
            for key in ("tpot_ms", "decode_s", "wall_s"):
                if isinstance(rec.get(key), (int, float)):
                    rec[key] = float("nan")
            out.append(json.dumps(rec))
        unit.write_text("\n".join(out) + "\n")


def unit_folder(run: Path) -> None:
    unit = sorted((run / "units").glob("*.jsonl"))[0]
    unit.unlink()
    unit.mkdir()


def run_copy(folder: Path) -> Path:
    run = folder / "run"
    shutil.copytree(done_run(), run, symlinks=True)
    return run


def set_run_id(value: str) -> Callable[[Path], None]:
    return manifest_edit(lambda d: d.__setitem__("run_id", value))


RUN = Slot("run folder", run_copy, {
    "truncated": lambda run: truncate(run / "manifest.json"),
    "wrong type": lambda run: (run / "manifest.json").write_text("[]"),
    "nan/inf": first_cell(lambda c: c.__setitem__("temperature", float("nan"))),
    "inf": first_cell(lambda c: c.__setitem__("max_new_tokens", float("inf"))),
    "nan in records": unit_nan,
    "negative": first_cell(lambda c: c.__setitem__("k", -3)),
    "zero": first_cell(lambda c: c.__setitem__("max_new_tokens", 0)),
    "huge": first_cell(lambda c: c.__setitem__("k", 10**30)),
    "deeply nested": lambda run: (run / "manifest.json").write_text('{"run_id": "x", "cells": ' + NESTED + "}"),
    "non-UTF-8": lambda run: (run / "manifest.json").write_bytes(
        (run / "manifest.json").read_bytes().replace(b'"run_id": "', b'"run_id": "\xff\xfe')),
    "cell without method": first_cell(lambda c: c.pop("method")),
    "temperature null": first_cell(lambda c: c.__setitem__("temperature", None)),
    "k as text": first_cell(lambda c: c.__setitem__("k", "three")),
    "cell as text": manifest_edit(cell_as_string),
    "run_id a path": set_run_id("../../escaped"),
    "run_id absolute": set_run_id("/tmp/hostile-grid-escaped"),
    "very long name": set_run_id("r" * 5000),
    "unit a folder": unit_folder,
    "provenance nested": lambda run: next((run / "provenance").glob("*.json")).write_text(NESTED),
    "provenance NaN": lambda run: next((run / "provenance").glob("*.json")).write_text('{"engine": NaN}'),
    "units unreadable": lambda run: os.chmod(run / "units", 0o000),
    "provenance unreadable": lambda run: os.chmod(run / "provenance", 0o000),
}, folder=True, reads=lambda run: [run / name for name in ("manifest.json", "units", "provenance", "records.jsonl")])


def out_folder(folder: Path) -> Path:
    return folder / "out"


OUT = Slot("output folder", out_folder, {}, folder=True, output=True)
RUNS_ENV = Slot("DFLASH_RUNS_DIR", lambda folder: folder / "runs", {}, folder=True, output=True)


def csv_file(folder: Path) -> Path:
    path = folder / "kflat.csv"
    path.write_text("engine,k,context_len,median_ms,below_floor\n" + "".join(
        f"jax,{k},256,{10 + k / 3:.2f},False\n" for k in (0, 1, 3, 7, 15)))
    return path


CSV = Slot("kflat.csv", csv_file, {
    "truncated": write("engine,k,context_le"),
    "wrong type": write("engine,k,context_len,median_ms,below_floor\njax,three,256,ten,False\n"),
    "nan/inf": write("engine,k,context_len,median_ms,below_floor\njax,1,256,nan,False\njax,3,256,inf,False\n"),
    "negative": write("engine,k,context_len,median_ms,below_floor\njax,-1,256,-10.0,False\n"),
    "zero": write(""),
    "non-UTF-8": write(b"engine,k,context_len,median_ms,below_floor\njax,1,256,\xff\xfe,False\n"),
})


def published_table(folder: Path) -> Path:
    from benchmarks.core.paths import REFERENCE_DIR

    src = sorted(REFERENCE_DIR.glob("*.csv"))[0]
    path = folder / src.name
    shutil.copy(src, path)
    return path


def replace_column(column: str, value: str) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        lines = path.read_text().splitlines()
        i = lines[0].split(",").index(column)
        rows = [ln.split(",") for ln in lines[1:]]
        for r in rows:
            if len(r) > i:
                r[i] = value
        path.write_text("\n".join([lines[0]] + [",".join(r) for r in rows]) + "\n")
    return change


TABLE = Slot("published table", published_table, {
    "truncated": truncate,
    "wrong type": replace_column("tau", "three"),
    "nan/inf": replace_column("tau", "nan"),
    "inf": replace_column("tau", "inf"),
    "negative": replace_column("tau", "-2.5"),
    "zero": write(""),
    "non-UTF-8": lambda p: p.write_bytes(p.read_bytes()[:40] + b"\xff\xfe" + p.read_bytes()[40:]),
})

# --- path kinds (any slot) -----------------------------------------------------------------------------------------


def path_kinds(slot: Slot) -> dict[str, tuple[Callable[[Path], Path], bool]]:
    """Each path kind: a change that turns the slot's valid path into that kind (returning the path to give), and
    whether the result is still valid input."""
    def missing(p: Path) -> Path:
        _remove(p)
        return p.with_name("none-such")

    def directory(p: Path) -> Path:
        _remove(p)
        p.mkdir()
        return p

    def regular(p: Path) -> Path:
        _remove(p)
        p.write_text("a file\n")
        return p

    def fifo(p: Path) -> Path:
        _remove(p)
        os.mkfifo(p)
        return p

    def loop(p: Path) -> Path:
        _remove(p)
        p.symlink_to(p)
        return p

    def mode(bits: int) -> Callable[[Path], Path]:
        def change(p: Path) -> Path:
            if not os.path.lexists(p):
                p.mkdir() if slot.folder else p.write_text("")
            target = p / "manifest.json" if slot.folder and not slot.output else p
            os.chmod(target, bits)
            return p
        return change

    def long(p: Path) -> Path:
        return p.parent / ("x" * 300) / ("y" * 5000)

    def under_file(p: Path) -> Path:
        (p.parent / "plain").write_text("a file\n")
        return p.parent / "plain" / "sub"

    kinds: dict[str, tuple[Callable[[Path], Path], bool]] = {
        "missing": (missing, slot.output),
        "FIFO": (fifo, False), "symlink loop": (loop, False), "very long path": (long, False),
        "unreadable": (mode(0o000), False), "read-only": (mode(0o555 if slot.folder else 0o444), not slot.output),
    }
    kinds["regular file" if slot.folder else "directory"] = (regular if slot.folder else directory, False)
    if slot.output:
        kinds["under a file"] = (under_file, False)
    return kinds


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif os.path.lexists(p):
        p.unlink()


# --- commands ------------------------------------------------------------------------------------------------------

# Each command: its argv with {slot} placeholders, the slots it takes, whether its run is slow.
COMMANDS: list[tuple[str, list[str], tuple[Slot, ...], bool]] = [
    ("validate", ["validate", "{matrix file}"], (MATRIX, PROMPTS), False),
    ("matrix --plan", ["matrix", "{matrix file}", "--plan", "--run-dir", "{output folder}"],
     (MATRIX, PROMPTS, OUT), False),
    ("matrix --plan (env)", ["matrix", "{matrix file}", "--plan"], (RUNS_ENV,), False),
    ("matrix", ["matrix", "{matrix file}", "--run-dir", "{output folder}"], (MATRIX, PROMPTS, OUT), True),
    ("matrix (env)", ["matrix", "{matrix file}"], (RUNS_ENV,), True),
    ("report", ["report", "{run folder}"], (RUN,), False),
    ("check lossless", ["check", "lossless", "{run folder}"], (RUN,), False),
    ("check published", ["check", "published", "{run folder}"], (RUN,), False),
    ("figures --run", ["figures", "--run", "{run folder}", "--out", "{output folder}"], (RUN, OUT), False),
    ("cost-model", ["cost-model", "{run folder}", "--kflat", "{kflat.csv}"], (RUN, CSV), False),
    ("cost-model --chip", ["cost-model", "--chip", "v5e", "--tau-from", "{published table}"], (TABLE,), False),
    ("study kflat", ["study", "kflat", "--random-weights", "--ks", "0,1", "--contexts", "16", "--repeats", "2",
                     "--warmup", "0", "--out", "{output folder}"], (OUT,), True),
]
SLOTS = {s.name: s for s in (MATRIX, PROMPTS, RUN, OUT, RUNS_ENV, CSV, TABLE)}


def build(argv: list[str], slots: tuple[Slot, ...], target: Slot,
          change: Callable[[Path], Path | None]) -> Callable[[Path], tuple[list[str], dict[str, str], list[Path]]]:
    """A case's maker: every slot of the command written valid, then `target` changed; the slots a command only
    reads are returned so their bytes can be compared."""
    def make(folder: Path) -> tuple[list[str], dict[str, str], list[Path]]:
        values: dict[str, Path] = {}
        prompts(folder)
        for name in sorted({a[1:-1] for a in argv if a.startswith("{")} | {s.name for s in slots}):
            values[name] = SLOTS[name].make(folder)
        given = change(values[target.name])
        if given is not None:
            values[target.name] = given
            if target is PROMPTS and MATRIX.name in values:  # the matrix names the prompt file given
                values[MATRIX.name].write_text(matrix_text(folder, given))
        env = {"DFLASH_RUNS_DIR": str(values["DFLASH_RUNS_DIR"])} if "DFLASH_RUNS_DIR" in values else {}
        out = [str(values[a[1:-1]]) if a.startswith("{") else a for a in argv]
        read = [p for n in values if not SLOTS[n].output for p in SLOTS[n].reads(values[n])]
        return out, env, read
    return make


def cases(everything: bool = False) -> list[Case]:
    """The grid: each command × each of its slots × each path and content kind of that slot."""
    found = []
    for command, argv, slots, slow in COMMANDS:
        if slow and not everything:
            continue
        for slot in slots:
            for kind, (to_kind, valid) in path_kinds(slot).items():
                found.append(Case(command, slot.name, kind, build(argv, slots, slot, to_kind), bad=not valid,
                                  slow=slow))
            for kind, damage in slot.damage.items():
                found.append(Case(command, slot.name, kind, build(argv, slots, slot, _keep(damage)), slow=slow))
    return found


def _keep(damage: Callable[[Path], None]) -> Callable[[Path], None]:
    return lambda p: (damage(p), None)[1]


# --- running -------------------------------------------------------------------------------------------------------

def snapshot(paths: list[Path]) -> dict[str, str]:
    """Every file under `paths` (not following links): its type and the hash of its bytes or link target."""
    seen: dict[str, str] = {}

    def visit(p: Path) -> None:
        if p.is_symlink():
            seen[str(p)] = "link " + os.readlink(p)
        elif p.is_dir():
            seen[str(p)] = "dir"
            try:
                for child in sorted(p.iterdir()):
                    visit(child)
            except OSError:
                pass
        elif p.is_file():
            try:
                seen[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            except OSError:
                seen[str(p)] = "unreadable"
        elif os.path.lexists(p):
            seen[str(p)] = "special"
    for p in paths:
        try:
            visit(p)
        except OSError:
            pass
    return seen


@functools.cache
def as_user() -> tuple[tuple[str, ...], str, str]:
    """As root: what runs a command as USER (`runuser ... env`, to be given its environment: `user_env`), an
    interpreter of this Python's version that USER can execute with this checkout, and "" for the reason; or
    ((), "", why there is none)."""
    runuser = shutil.which("runuser")
    if not runuser:
        return (), "", "no runuser here"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [sys.executable, os.path.realpath(sys.executable), shutil.which(f"python{version}"),
                  f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    for py in dict.fromkeys(c for c in candidates if c):
        command = (runuser, "-u", USER, "--", "env", *user_env({}), py)
        try:
            probe = subprocess.run([*command, "-c", "import benchmarks.cli, tests.cli.hostile_cases"], cwd="/",
                                   capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return (runuser, "-u", USER, "--", "env"), py, ""
    return (), "", (f"no Python {version} that {USER} may run with this checkout ({REPO}) and its packages on its path "
                "(a set-up in a private home folder: docs/setup.md)")


def user_env(extra: dict[str, str]) -> list[str]:
    """`env`'s arguments for USER's process: this checkout and this Python's packages on its path, then `extra`."""
    paths = [REPO] + list(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
    return [f"{k}={v}" for k, v in {"PYTHONPATH": python_path(*paths), "HF_HUB_OFFLINE": "1", **extra}.items()]


def applies(case: Case) -> bool:
    """Whether the kind can be made here: as root, permissions bite only a process run as another user."""
    return not (ROOT_USER and case.kind in PERMISSION_KINDS and not as_user()[0])


def _give(folder: Path, owner: str) -> None:
    """The case's folder and everything in it to `owner` (modes kept: a damaged mode still bites its owner)."""
    entry = pwd.getpwnam(owner)
    for p in [folder, *folder.rglob("*")]:
        os.chown(p, entry.pw_uid, entry.pw_gid, follow_symlinks=False)


@functools.cache
def _home() -> str:
    """A home folder of USER's for the session (matplotlib's caches go there, not into a case's folder)."""
    home = Path(tempfile.mkdtemp(prefix="hostile-grid-home-"))
    _give(home, USER)
    return str(home)


def call_as_user(argv: list[str], env: dict[str, str], folder: Path, timeout: int) -> Outcome:
    """One CLI command as USER, in a process of its own: its status and output, or a hang."""
    runner, py, _ = as_user()
    extra = user_env({"DFLASH_RUNS_DIR": str(folder / "runs"), "HOME": _home(), **env})
    try:
        done = subprocess.run([*runner, *extra, py, "-c", BOOT, *map(str, argv)], cwd=folder, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return Outcome(None, str(exc.stdout or ""), str(exc.stderr or ""), hung=True)
    return Outcome(done.returncode, done.stdout, done.stderr)


def run_case(case: Case, folder: Path) -> tuple[str, Outcome | None]:
    if not applies(case):
        return "n/a", None
    unprivileged = ROOT_USER and case.kind in PERMISSION_KINDS
    if unprivileged:  # a folder USER can reach (a test's tmp_path sits in root's own)
        folder = Path(tempfile.mkdtemp(prefix="hostile-grid-as-user-"))
        os.chmod(folder, 0o755)
    argv, env, read = case.make(folder)
    hostile_cases.HANG_S = SLOW_HANG_S if case.slow else HANG_S
    before, before_read = snapshot([folder]), snapshot(read)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        if unprivileged:
            _give(folder, USER)
            outcome = call_as_user(argv, env, folder, hostile_cases.HANG_S)
        else:
            outcome = call(argv)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    # refused as bad input (exit 2): nothing may change; otherwise the files it only reads may not
    changed = (snapshot([folder]) != before if case.bad and outcome.rc == 2 else snapshot(read) != before_read)
    text = outcome.out + outcome.err
    if outcome.hung:
        kind = "hang"
    elif outcome.error or "Traceback (most recent call last)" in text:
        kind = "traceback"
    elif case.bad and outcome.rc == 0:
        kind = "exit 0 on bad input"
    elif changed:
        kind = "changed input"
    elif not case.bad:
        kind = "ok" if outcome.rc == 0 else "refused valid input"
    elif case.kind in CAUSES and not any(w.lower() in outcome.err.lower() for w in CAUSES[case.kind]):
        kind = "wrong cause"
    else:
        kind = "clear error"
    if unprivileged:
        shutil.rmtree(folder, ignore_errors=True)
    return kind, outcome


def first_line(outcome: Outcome | None) -> str:
    if outcome is None:
        return ""
    text = outcome.error or outcome.err or outcome.out
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if outcome.error else lines[0] if lines else "")[:160]


def run_grid(everything: bool = False) -> list[tuple[Case, str, str]]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("DFLASH_RUNS_DIR", tempfile.mkdtemp(prefix="hostile-grid-runs-"))
    scripted_engine()
    found = []
    for i, case in enumerate(cases(everything)):
        folder = Path(tempfile.mkdtemp(prefix=f"hostile-grid-{i}-"))
        kind, outcome = run_case(case, folder)
        found.append((case, kind, first_line(outcome)))
        for p in folder.rglob("*"):
            if not p.is_symlink():
                os.chmod(p, 0o755)
        shutil.rmtree(folder, ignore_errors=True)
    return found


def table(found: list[tuple[Case, str, str]]) -> str:
    """Commands × kinds, each cell the worst outcome's initials over the command's slots; then the counts."""
    order = ["hang", "traceback", "exit 0 on bad input", "changed input", "refused valid input", "wrong cause",
             "clear error", "ok", "n/a"]
    short = {"hang": "H", "traceback": "T", "exit 0 on bad input": "0", "changed input": "W",
             "refused valid input": "R", "wrong cause": "C", "clear error": ".", "ok": "ok", "n/a": "-"}
    kinds = list(dict.fromkeys(c.kind for c, _, _ in found))
    commands = list(dict.fromkeys(c.command for c, _, _ in found))
    cell: dict[tuple[str, str], list[str]] = defaultdict(list)
    for c, kind, _ in found:
        cell[c.command, c.kind].append(kind)
    lines = ["| command | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for command in commands:
        marks = [",".join(short[k] for k in sorted(set(cell[command, kind]), key=order.index)) if cell[command, kind]
                 else "" for kind in kinds]
        lines.append(f"| {command} | " + " | ".join(marks) + " |")
    counts = Counter(kind for _, kind, _ in found)
    lines += ["", "legend: " + ", ".join(f"{v} {k}" for k, v in short.items()), "",
              "| outcome | cases |", "|---|---|"] + [f"| {k} | {counts[k]} |" for k in order if counts[k]]
    lines.append(f"| total | {len(found)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.cli.hostile_grid", description=__doc__.split("\n")[0])
    ap.add_argument("--all", action="store_true", help="add the slow cases (runs, study kflat)")
    ap.add_argument("--cases", action="store_true", help="list each case with its outcome and first line")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path.cwd()))
    found = run_grid(args.all)
    print(table(found))
    if args.cases:
        print()
        for case, kind, line in found:
            print(f"{case.command:20} {case.slot:16} {case.kind:20} {kind:20} {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
