"""Where and how a matrix's cells run: the executor, a Ray cell's resources, interleaving, worker processes and
their time limits, and whether the cells can share this machine's device."""
from __future__ import annotations

from typing import Any

from benchmarks.core import catalog
from benchmarks.core.matrix_checks import fail
from benchmarks.core.matrix_schema import EXECUTORS, Matrix
from benchmarks.core.numbers import is_finite


def check_executor(source: str, executor: Any, engines: list[str]) -> str:
    """The executor, if it exists and can run every engine of the matrix."""
    if executor not in EXECUTORS:
        raise fail(source, "executor", f"unknown executor {executor!r}; allowed: {', '.join(EXECUTORS)}")
    if executor == "ray" and any(e in catalog.serving() for e in engines):
        raise fail(source, "executor", f"ray runs engines one request at a time in actors; a serving engine "
                                       f"({', '.join(catalog.serving())}) runs its server on the driver's host: drop "
                                       f"the ray executor for this matrix")
    return executor


def parse_resources(source: str, value: Any) -> dict[str, float]:
    """A cell's Ray resources: a non-empty mapping of resource name (CPU, GPU, TPU, memory or a custom one) to an
    amount > 0."""
    if not isinstance(value, dict) or not value:
        raise fail(source, "resources", f"expected a mapping such as {{TPU: 4}} or {{GPU: 1}}, got {value!r}")
    for key, amount in value.items():
        if not isinstance(key, str) or not is_finite(amount) or amount <= 0:
            raise fail(source, "resources", f"{key!r}: {amount!r}: expected a resource name and an amount > 0")
    return {key: float(amount) for key, amount in value.items()}


def check_flag(source: str, key: str, value: Any, engines: list[str]) -> bool:
    """`interleave` or `workers`: a bool, false for a serving engine (a server per cell, one cell at a time)."""
    if not isinstance(value, bool):
        raise fail(source, key, f"expected true or false, got {value!r}")
    if value and any(e in catalog.serving() for e in engines):
        raise fail(source, key, f"a serving engine ({', '.join(catalog.serving())}) runs a server per cell, one "
                                f"cell at a time, with a load of many requests: drop '{key}'")
    return value


def check_seconds(source: str, key: str, value: Any, default: float) -> float:
    """A worker's time limit: a finite number of seconds > 0."""
    if not is_finite(value) or value <= 0:
        raise fail(source, key, f"expected a number of seconds > 0 (default {default:g}), got {value!r}")
    return float(value)


def in_worker(matrix: Matrix, engine: str) -> bool:
    """Whether a cell of `engine` runs in its own worker process (else in the run's own process)."""
    return matrix.workers or (matrix.interleave and catalog.engine(engine).worker)


def start_side_by_side(matrix: Matrix, engines: list[str], platform: str) -> bool:
    """Whether a group's engines (`engines`: one entry per cell to start) load at once, each in its worker process,
    rather than one after another. Only on CPU: a TPU is owned by one process, and a vLLM engine on a GPU sizes its
    caches from the memory free while it starts, which another engine starting beside it is taking."""
    return platform == "cpu" and len(engines) > 1 and all(in_worker(matrix, e) for e in engines)


def interleave_problem(matrix: Matrix, engines: list[str], platform: str) -> str | None:
    """Why the cells (`engines`: one entry per cell) cannot be loaded side by side on `platform`, or None.

    A TPU is owned by one process, so there only cells that share the run's process (JAX) may interleave. A GPU
    is shared, but each vLLM engine takes `gpu_memory_utilization` of its memory (vLLM's default 0.9), so n engines
    need at most 1/n each; the JAX engine allocates on demand (XLA_PYTHON_CLIENT_PREALLOCATE=false unless set).
    """
    if not matrix.interleave or len(engines) < 2:
        return None
    workers = sum(in_worker(matrix, e) for e in engines)
    processes = workers + (workers < len(engines))
    where = f"{matrix.source}: 'interleave'"
    if platform == "tpu" and processes > 1:
        return (f"{where}: a TPU is owned by one process, but these {len(engines)} cells would need {processes} "
                f"({workers} in worker processes); drop 'interleave' (and 'workers') so that cells run one after "
                f"another, or use engine: jax")
    row = next((r for r in map(catalog.engine, engines) if r.gpu_share), None)  # an engine that reserves a share
    if platform == "gpu" and row is not None and processes > 1:
        option = row.gpu_share
        share = {**matrix.engine_options, **(matrix.engine_options.get(row.name) or {})}.get(option)
        if share is None or share * processes > 1.0:
            return (f"{where}: {processes} processes share the GPU, and each vLLM engine takes {option}="
                    f"{share if share is not None else '0.9 (the vLLM default)'} of it; set engine_options: "
                    f"{{{row.name}: {{{option}: {int(100 / processes) / 100:.2f}}}}} or less, "
                    f"or drop 'interleave'")
    return None
