"""The libraries vLLM's CPU docs preload into its processes (their `set LD_PRELOAD` section): tcmalloc, and Intel
OpenMP on x86. vLLM's CPU worker warns without them, and says speculative decoding without Intel OpenMP "will cause
significant performance loss" (`vllm/v1/worker/cpu_worker.py`); its thread binding sets Intel OpenMP's own variables
when libiomp is preloaded (`vllm/utils/ompmultiprocessing.py`). preparation/cpu_preload.sh puts them in the venv.

`preload_plan` finds them and builds the LD_PRELOAD a vLLM engine's processes start with; `preloaded` sets it in
this process's environment only while the engine starts, since vLLM spawns its engine core and worker (and a
server's process is started) with that environment, while the harness itself runs without.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import sys
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

from benchmarks.core.cells import CellOptions
from benchmarks.engines.vllm.vllm_options import PRELOAD_OPTION as OPTION

ENV = "LD_PRELOAD"
# Names of an OpenMP runtime in LD_PRELOAD, as vLLM's CPU code tells them apart: it refuses two of them at once.
OPENMP_MARKERS = ("libiomp", "libomp", "libgomp")


@dataclass(frozen=True)
class Library:
    """One library to preload: what vLLM looks for in LD_PRELOAD, the file in the venv (relative to sys.prefix), and
    the machines (`platform.machine()`) on which vLLM asks for it."""

    name: str
    marker: str
    file: str
    machines: tuple[str, ...]


LIBRARIES = (
    Library("tcmalloc", "libtcmalloc", "lib/preload/libtcmalloc_minimal.so.4", ("x86_64", "aarch64", "s390x")),
    Library("iomp", "libiomp", "lib/libiomp5.so", ("x86_64",)),
)


class LibraryFile(TypedDict):
    """A preloaded library's file: as given, its real path, its sha256 (None where unreadable), and the package it
    came from where preparation/cpu_preload.sh recorded it."""

    path: str
    real_path: str
    sha256: str | None
    source: NotRequired[str]


class PreloadInfo(TypedDict):
    """`Preload.describe`: the LD_PRELOAD set and as inherited, each library's file, and why any is missing."""

    enabled: bool
    ld_preload: str | None
    inherited: str | None
    libraries: dict[str, LibraryFile]
    missing: dict[str, str]


@dataclass(frozen=True)
class Preload:
    """What a vLLM engine's processes start with: `value` is their LD_PRELOAD (None: unset), `files` each library
    preloaded and its file, `missing` each library vLLM asks for that is not, and why; `inherited` is LD_PRELOAD as
    the harness found it (kept, after ours)."""

    enabled: bool
    value: str | None
    files: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    inherited: str | None = None

    def describe(self) -> PreloadInfo:
        """The provenance record: the LD_PRELOAD set, and each library's file (real path, sha256) or why it is
        missing."""
        return {"enabled": self.enabled, "ld_preload": self.value, "inherited": self.inherited,
                "libraries": {name: _file_record(path) for name, path in self.files.items()},
                "missing": dict(self.missing)}


def _file_record(path: str) -> LibraryFile:
    real = Path(path).resolve()
    try:
        sha256: str | None = hashlib.sha256(real.read_bytes()).hexdigest()
    except OSError:
        sha256 = None
    record: LibraryFile = {"path": path, "real_path": str(real), "sha256": sha256}
    source = Path(f"{path}.source")  # written by preparation/cpu_preload.sh: the package it came from
    if source.is_file():
        record["source"] = source.read_text().strip()
    return record


def preload_plan(enabled: bool, prefix: Path, inherited: str | None, machine: str, system: str) -> Preload:
    """The preloads for a vLLM engine on this machine: each library of LIBRARIES vLLM asks for on `machine`, from the
    venv at `prefix`, ahead of the LD_PRELOAD the harness inherited. A library the inherited value already names is
    left to it; Intel OpenMP is not added beside another OpenMP runtime there. `enabled` False (a cell's `preload:
    false`) leaves LD_PRELOAD as inherited, every library then missing."""
    wanted = [lib for lib in LIBRARIES if system == "Linux" and machine in lib.machines]
    given = [entry for entry in (inherited or "").replace(" ", ":").split(":") if entry]
    if not enabled:
        return Preload(False, inherited, missing={lib.name: f"turned off ({OPTION}: false)" for lib in wanted},
                       inherited=inherited)
    files: dict[str, str] = {}
    missing: dict[str, str] = {}
    for lib in wanted:
        own = next((entry for entry in given if lib.marker in Path(entry).name), None)
        other = next((entry for entry in given for m in OPENMP_MARKERS if m in Path(entry).name), None)
        path = prefix / lib.file
        if own is not None:
            files[lib.name] = own
        elif lib.name == "iomp" and other is not None:
            missing[lib.name] = f"LD_PRELOAD already names another OpenMP runtime ({other})"
        elif path.exists():
            files[lib.name] = str(path)
        else:
            missing[lib.name] = f"{path} does not exist (make setup fetches it: preparation/cpu_preload.sh)"
    ours = [path for name, path in files.items() if path not in given]
    value = ":".join(ours + given) or None
    return Preload(True, value, files, missing, inherited)


def engine_preload(options: CellOptions) -> Preload | None:
    """The preloads of a vLLM engine with these engine options, in this interpreter's venv on this machine; None off
    CPU (vLLM asks for them on CPU only)."""
    from vllm.platforms import current_platform  # lazy: vllm

    if not current_platform.is_cpu():
        return None
    return preload_plan(bool(options.get(OPTION, True)), Path(sys.prefix), os.environ.get(ENV), platform.machine(),
                        platform.system())


def set_preload(preload: Preload, env: MutableMapping[str, str]) -> None:
    """Put the preload's LD_PRELOAD in `env` (a child process's environment), or remove it where it has none."""
    if preload.value is None:
        env.pop(ENV, None)
    else:
        env[ENV] = preload.value


@contextlib.contextmanager
def preloaded(preload: Preload) -> Iterator[None]:
    """This process's LD_PRELOAD set to the preload's while the block starts a vLLM engine, and restored after: the
    engine's processes keep it, this process and what it starts later do not."""
    saved = os.environ.get(ENV)
    set_preload(preload, os.environ)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = saved
