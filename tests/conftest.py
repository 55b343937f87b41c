"""Shared fixtures: tiny checkpoints built once per test session (no network); run folders in a temporary folder."""
from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# Every run the suite makes without a run folder of its own (the CLI, the notebook's `make bench`) goes here, never
# into the user's results/runs; set before any benchmarks module is imported.
TEST_RUNS_DIR = Path(tempfile.mkdtemp(prefix="dflash-test-runs-"))
os.environ["DFLASH_RUNS_DIR"] = str(TEST_RUNS_DIR)
USER_LATEST = Path(__file__).resolve().parent.parent / "results" / "runs" / "latest"
_LATEST_KEY = pytest.StashKey[tuple[str, int] | None]()


def _latest_state() -> tuple[str, int] | None:
    """Where the user's results/runs/latest points and when it was last replaced; None when there is none."""
    if not USER_LATEST.is_symlink():
        return None
    return os.readlink(USER_LATEST), os.lstat(USER_LATEST).st_mtime_ns


# Engines every platform's environment installs: a test marked with one fails (never skips) when it does not import.
REQUIRED_ENGINE_PACKAGES = {"vllm": "vllm", "jax": "jax"}


# XLA compilations seen so far (jax.monitoring), to find a test that compiles JAX without an engine marker: such a
# test would slow `make test-fast`, which selects by marker. jax is imported here only where it is installed.
COMPILES: Counter[str] = Counter()
MEASURING = threading.Event()  # set while the machine's own bandwidth is measured (`_machine_figures`)
ENGINE_MARKERS = ("jax", "vllm", "slow", "heavy")
_COMPILES_BEFORE = pytest.StashKey[int]()
try:
    import jax.monitoring

    def _count(event: str, duration: float, **_: object) -> None:
        # the main thread's only: a thread an earlier test left running must not be charged to the next test
        if (event.endswith("backend_compile_duration") and threading.current_thread() is threading.main_thread()
                and not MEASURING.is_set()):
            COMPILES.update([event])

    jax.monitoring.register_event_duration_secs_listener(_count)
except ImportError:
    pass


def _compiles() -> int:
    return sum(COMPILES.values())


# `make test ALL=1` builds llama-server first and sets this: a test marked llamacpp then fails without the build.
LLAMACPP_REQUIRED_ENV = "DFLASH_REQUIRE_LLAMACPP"


def _llamacpp_build(item: pytest.Item) -> None:
    """Skip (with the reason) a llamacpp test when llama-server is not built here, or fail where it is required; skip
    one where it is built but no TCP socket opens (the server listens on the loopback)."""
    from benchmarks.engines.llamacpp.llamacpp_build import installed

    if installed() is not None:
        from tests.machine import loopback_problem

        if loopback_problem():  # llama-server serves on the loopback address
            pytest.skip(f"llama-server serves over TCP, and {loopback_problem()}")
        return
    why = ("llama-server is not built here (make test ALL=1 builds it; or python -m "
           "benchmarks.engines.llamacpp.llamacpp_build)")
    if os.environ.get(LLAMACPP_REQUIRED_ENV, "") not in ("", "0"):
        pytest.fail(f"{why}, and {LLAMACPP_REQUIRED_ENV} requires it", pytrace=False)
    pytest.skip(why)


def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_COMPILES_BEFORE] = _compiles()
    if item.get_closest_marker("llamacpp") is not None:
        _llamacpp_build(item)
    for marker, package in REQUIRED_ENGINE_PACKAGES.items():
        if item.get_closest_marker(marker) is None:
            continue
        try:
            importlib.import_module(package)
        except Exception as exc:  # noqa: BLE001 - any import failure means the environment is broken
            from benchmarks.engines.catalog import ABSENT_NOTE

            absent = Path(sys.prefix) / ABSENT_NOTE  # set-up built this environment without it, and said why
            if isinstance(exc, ModuleNotFoundError) and absent.is_file():
                pytest.skip(f"{package} is not installed here: {absent.read_text().strip()}")
            pytest.fail(f"{package} does not import ({type(exc).__name__}: {exc}); every platform's environment "
                        f"needs it: rerun `bash preparation/bootstrap.sh`", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Fail a passing test that compiled JAX (in its set-up or its body) without one of ENGINE_MARKERS."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.passed or any(item.get_closest_marker(m) for m in ENGINE_MARKERS):
        return
    compiled = _compiles() - item.stash.get(_COMPILES_BEFORE, _compiles())
    if compiled:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} compiled {compiled} XLA program(s) but carries none of the markers "
                           f"{', '.join(ENGINE_MARKERS)}: mark it `jax` (or `slow`), so that `make test-fast` leaves "
                           f"it out")


def _mappings() -> tuple[int, int]:
    """(memory mappings this process holds, the kernel's limit on them); (0, 0) where /proc does not say."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            held = sum(1 for _ in maps)
        return held, int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return 0, 0


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs() -> Iterator[None]:
    """Drop JAX's compiled programs after a test module once the process holds half the kernel's memory mappings
    (vm.max_map_count, 65,530 by default). On CPU each cached program keeps about three mappings of its JIT code, and
    the whole suite in one process passed the limit during tests/run: XLA's next compile could not map its code and
    the process aborted. Dropped only then, since the modules that follow reuse many of the programs."""
    yield
    held, limit = _mappings()
    if "jax" in sys.modules and held > limit // 2:
        sys.modules["jax"].clear_caches()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_LATEST_KEY] = _latest_state()
    _machine_figures()
    _children_off_the_chip()


def _children_off_the_chip() -> None:
    """Where this process holds a chip (JAX's backend is a TPU or GPU), the commands tests start run JAX on the CPU:
    a TPU takes one program at a time, and a second one would fail to open it or fall back to the CPU with a
    warning on its stderr. This process's own backend is chosen already, so only its children see the variable."""
    if "jax" in sys.modules and sys.modules["jax"].default_backend() != "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"


def _machine_figures() -> None:
    """This machine's measured read bandwidth and matmul peaks (cached per machine in .cache/): a run's manifest names
    the first, the cost model prices this CPU with the others, and measuring them compiles XLA programs. Measured once
    before any test, and never charged to a test by the marker guard, even when the cache measures the bandwidth again
    (on a quieter machine): they are the machine's figures, not the test's work."""
    try:
        import jax  # noqa: F401 - only where the JAX engine is installed
    except ImportError:
        return
    from benchmarks.hardware import measure

    def uncounted(*args: Any, _measure: Any = measure.measure_read_bytes_per_s, **kwargs: Any) -> float:
        MEASURING.set()
        try:
            return _measure(*args, **kwargs)
        finally:
            MEASURING.clear()

    measure.measure_read_bytes_per_s = uncounted
    measure.read_bytes_per_s()
    MEASURING.set()  # the matmul peaks the cost model and the K schedule price this CPU with: cached once measured
    try:
        for dtype in ("float32", "bfloat16"):
            measure.matmul_flops_per_s(dtype)
    finally:
        MEASURING.clear()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when any test moved the user's results/runs/latest (tests write to temporary folders)."""
    shutil.rmtree(TEST_RUNS_DIR, ignore_errors=True)
    if _latest_state() != session.config.stash.get(_LATEST_KEY, None):
        print(f"\nERROR: the test session moved {USER_LATEST.relative_to(USER_LATEST.parents[2])}; a test wrote a "
              f"run outside its temporary folders (or a run finished elsewhere meanwhile)")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED



@pytest.fixture(scope="session")
def random_pair(tmp_path_factory) -> dict[str, Path]:
    """Random-weight Qwen3 target + DFlash + EAGLE-3 drafts: τ ≈ 1, greedy output must still equal AR."""
    from benchmarks.data.tiny_checkpoints import build_pair

    return build_pair(tmp_path_factory.mktemp("random_pair"), seed=0)


@pytest.fixture(scope="session")
def oracle_pair(tmp_path_factory) -> dict[str, Path]:
    """Target and DFlash draft that always emit the same token: every draft is accepted, τ == K+1."""
    from benchmarks.data.tiny_checkpoints import build_pair

    return build_pair(tmp_path_factory.mktemp("oracle_pair"), seed=0, oracle=True)
