"""Where a matrix's cells run, decided from its placement keys (parsed in `benchmarks.config.placement_keys`): in
worker processes or the run's own, and whether they can share this machine's device."""
from __future__ import annotations

from benchmarks.config.engine_option_keys import own_options
from benchmarks.config.matrix_schema import Matrix
from benchmarks.engines import catalog


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
    if platform == "gpu" and row is not None and row.gpu_share and processes > 1:
        option = row.gpu_share
        share = {**matrix.engine_options, **own_options(matrix.engine_options, row.name)}.get(option)
        if not isinstance(share, (int, float)) or share * processes > 1.0:
            return (f"{where}: {processes} processes share the GPU, and each vLLM engine takes {option}="
                    f"{share if share is not None else '0.9 (the vLLM default)'} of it; set engine_options: "
                    f"{{{row.name}: {{{option}: {int(100 / processes) / 100:.2f}}}}} or less, "
                    f"or drop 'interleave'")
    return None
