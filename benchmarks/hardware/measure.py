"""What this machine's CPU does, measured once per machine and cached (.cache/machine/<machine>.json).

- read_bytes_per_s: the fastest read stream found (numpy sums on every usable core, one thread per chunk, and XLA's
  own reduction): a CPU floor's bandwidth, which no honest forward can beat;
- matmul_table((rows, n_in, n_out), ...): XLA's time for one matmul of that shape, weights streamed from DRAM (copies
  rotated) unless resident in the cache: a CPU matmul reads a weight at a rate that depends on its row count, so
  the roofline needs each shape, not one FLOP/s figure; matmul_flops_per_s: a large square matmul.
Bandwidths are the best of several runs, measured again when the machine is quieter (a floor must not be beaten);
matmul times are medians (as a forward's times are). Delete the file to measure everything again.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.core.atomic import atomic_write_text
from benchmarks.core.paths import CACHE_DIR

BUFFER_BYTES = 1 << 30  # larger than any CPU cache
STREAM_BYTES = 256 << 20  # weights rotated per matmul measurement: far beyond the last-level cache


def cpu_threads() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine_id() -> str:
    """The CPU model, usable cores and memory size: what the cached figures depend on."""
    name = platform.processor() or platform.machine()
    try:
        name = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    text = f"{name}|{cpu_threads()}|{memory >> 30}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_file() -> Path:
    return CACHE_DIR / "machine" / f"{machine_id()}.json"


def _figures(path: Path) -> dict[str, float]:
    return json.loads(path.read_text()) if path.exists() else {}


def load_average() -> float:
    """The 1-minute load average: how busy the machine is while a figure is measured (0 where unknown)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def cached(key: str, measure: Callable[[], float], best: bool = False) -> float:
    """A figure from this machine's cache, measured and stored when absent. A `best` figure (a bandwidth: the
    machine can do at least what it once did) is measured again when the machine is quieter, by a load of 1 or more,
    than when its stored value was measured, and keeps the larger value: a busy machine measures a floor's bandwidth
    too low, and so the floor too high."""
    path = cache_file()
    figures = _figures(path)
    load = load_average()
    if key in figures and not (best and load + 1.0 <= figures.get(f"{key}/load", 0.0)):
        return float(figures[key])
    value = float(measure())
    path.parent.mkdir(parents=True, exist_ok=True)
    figures = _figures(path)  # another run's figures kept
    if best:
        value = max(value, figures.get(key, 0.0))
        figures[f"{key}/load"] = min(load, figures.get(f"{key}/load", load))
    atomic_write_text(path, json.dumps(figures | {key: value}, indent=1, sort_keys=True))
    return value


def on_threads(threads: int, work: Callable[[int, int], None], n: int) -> None:
    """work(lo, hi) over [0, n) in one contiguous chunk per thread, all threads released at once."""
    bounds = np.linspace(0, n, threads + 1).astype(int)
    start = threading.Barrier(threads)

    def run(lo: int, hi: int) -> None:
        start.wait()
        work(lo, hi)

    workers = [threading.Thread(target=run, args=(lo, hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure_read_bytes_per_s(nbytes: int = BUFFER_BYTES, repeats: int = 10) -> float:
    """The fastest read stream: numpy reductions on 1..all usable threads, XLA's reduction and XLA's 1-row matmul
    over an [n, 4096] weight (how a decode step reads its weights), each the best of `repeats`."""
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax

    x = np.ones(nbytes // 4, np.float32)
    rates = [x.nbytes / best_seconds(lambda: on_threads(t, lambda lo, hi: np.add.reduce(x[lo:hi]), len(x)),
                                     repeats) for t in range(1, cpu_threads() + 1)]
    y = jnp.asarray(x)
    w = y.reshape(-1, 4096)
    v = jnp.ones((1, 4096), jnp.float32)
    for fn, args in ((jax.jit(jnp.sum), (y,)), (jax.jit(linear("oi")), (v, w))):
        fn(*args).block_until_ready()
        rates.append(y.nbytes / best_seconds(lambda: fn(*args).block_until_ready(), repeats))
    return max(rates)


def read_bytes_per_s() -> float:
    return cached(f"read_bytes_per_s/{cpu_threads()}", measure_read_bytes_per_s, best=True)


def linear(layout: str) -> Callable:
    """x [T, n_in] times a weight stored [n_out, n_in] ("oi", HF's layout) or [n_in, n_out] ("io")."""
    import jax.numpy as jnp  # lazy: jax

    return (lambda x, w: jnp.einsum("ti,oi->to", x, w)) if layout == "oi" else \
        (lambda x, w: jnp.einsum("ti,io->to", x, w))


def matmul_chain(layout: str, n_in: int) -> Callable:
    """A jitted chain of matmuls, one per weight, each on the previous one's output (cut or tiled back to n_in
    columns, as a layer feeds the next): a forward's matmuls without a dispatch between them."""
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax

    mm = linear(layout)

    def chain(x: Any, weights: list[Any]) -> Any:
        for w in weights:
            y = mm(x, w)
            x = x + 1e-3 * jnp.tile(y, (1, -(-n_in // y.shape[1])))[:, :n_in]
        return x

    return jax.jit(chain)


def measure_matmul_seconds(rows: list[int], n_in: int, n_out: int, dtype: str, layout: str, resident: bool,
                           repeats: int = 7) -> dict[int, float]:
    """Median time of one XLA matmul [r, n_in] x weight for each r in rows (a forward's times are medians too), timed
    in a chain of 16 or more (`matmul_chain`) over enough weight copies that each streams from DRAM, or over one
    weight when `resident` (a model that fits the cache)."""
    import jax.numpy as jnp  # lazy: jax

    shape = (n_out, n_in) if layout == "oi" else (n_in, n_out)
    copies = 1 if resident else -(-STREAM_BYTES // (n_in * n_out * jnp.dtype(dtype).itemsize))
    distinct = [jnp.full(shape, 0.01 * (i + 1), dtype) for i in range(copies)]
    streams_alone = copies == 1 and not resident  # a weight of STREAM_BYTES or more: one call is long enough
    weights = distinct * (1 if streams_alone else -(-16 // copies))
    fn = matmul_chain(layout, n_in)
    xs = {r: jnp.ones((r, n_in), dtype) for r in rows}
    for x in xs.values():
        fn(x, weights).block_until_ready()
    times: dict[int, list[float]] = {r: [] for r in rows}
    for _ in range(repeats):  # the row counts in turn, so that a busy spell falls on all of them alike
        for r, x in xs.items():
            times[r].append(best_seconds(lambda: fn(x, weights).block_until_ready(), 1) / len(weights))
    return {r: float(np.median(t)) for r, t in times.items()}


def matmul_table(shapes: Iterable[tuple[int, int, int]], dtype: str, layout: str = "oi",
                 resident: bool = False) -> dict[tuple[int, int, int], float]:
    """Seconds of one matmul per (rows, n_in, n_out), from the cache or measured (one weight allocation per
    (n_in, n_out)); keyed by the JAX release, whose compiler makes the figure. Never less for more rows of one
    weight (the fewer rows' figure, where noise put the more rows' below it: more rows could run as fewer, padded)."""
    import jax  # lazy: jax

    def key(r: int, n_in: int, n_out: int) -> str:
        where = "resident" if resident else "stream"
        return f"matmul_s/jax{jax.__version__}/{dtype}/{layout}/{where}/{r}x{n_in}x{n_out}"

    shapes = sorted(set(shapes))
    figures = _figures(cache_file())
    todo: dict[tuple[int, int], list[int]] = {}
    for r, n_in, n_out in shapes:
        if key(r, n_in, n_out) not in figures:
            todo.setdefault((n_in, n_out), []).append(r)
    for (n_in, n_out), rows in todo.items():
        measured = measure_matmul_seconds(rows, n_in, n_out, dtype, layout, resident)
        for r in rows:
            cached(key(r, n_in, n_out), lambda: measured[r])
    figures = _figures(cache_file())
    table: dict[tuple[int, int, int], float] = {}
    fewer: dict[tuple[int, int], float] = {}  # per weight shape, the most its fewer rows took
    for r, n_in, n_out in shapes:  # sorted: rows ascending
        fewer[(n_in, n_out)] = table[(r, n_in, n_out)] = max(float(figures[key(r, n_in, n_out)]),
                                                               fewer.get((n_in, n_out), 0.0))
    return table


def matmul_flops_per_s(dtype: str = "float32", n: int = 1024) -> float:
    """FLOP/s of an n x n x n XLA matmul: the CPU's compute peak as the engine's compiler reaches it."""
    import jax  # lazy: jax

    key = f"matmul_flops_per_s/jax{jax.__version__}/{dtype}/{n}"
    return cached(key, lambda: 2.0 * n ** 3 / measure_matmul_seconds([n], n, n, dtype, "io", True)[n])


def available_memory_bytes() -> float | None:
    """The host memory a new allocation can take without swapping (Linux's MemAvailable), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
