"""The placement keys parsed: where a matrix's cells run (executor, a Ray cell's resources), whether they share one
process or run in worker processes (interleave, workers), and the workers' time limits."""
from __future__ import annotations

from typing import Any

from benchmarks.config.matrix_checks import Parser, Parsing, fail, got
from benchmarks.core.numbers import is_finite
from benchmarks.engines import catalog

REQUEST_TIMEOUT_S = 600.0
LOAD_TIMEOUT_S = 1800.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a worker's time limit at most: longer waits overflow the platform's clock
EXECUTORS = ("local", "ray")
# What one cell's actor asks of a Ray cluster by default, per platform (benchmarks.hardware.provenance.detect_platform).
DEFAULT_RESOURCES: dict[str, dict[str, float]] = {"tpu": {"TPU": 4}, "gpu": {"GPU": 1}, "cpu": {"CPU": 1}}


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
    """A worker's time limit: a number of seconds > 0 and at most MAX_TIMEOUT_S (a wait of more overflows the
    platform's clock)."""
    if not is_finite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise fail(source, key, f"expected a number of seconds > 0 and at most {MAX_TIMEOUT_S:g} (a week; default "
                                f"{default:g}), got {got(value)}")
    return float(value)


def flag(key: str) -> Parser:
    """The parser of `interleave` or `workers` (`check_flag`)."""
    return lambda p: check_flag(p.source, key, p.get(key), p.parsed["engine"])


def seconds(key: str) -> Parser:
    """The parser of a worker's time limit (`check_seconds`)."""
    return lambda p: check_seconds(p.source, key, p.get(key), p.defaults[key])


def resources(p: Parsing) -> dict[str, float] | None:
    """A Ray cell's resources; None for the platform's default (`DEFAULT_RESOURCES`)."""
    value = p.get("resources")
    return parse_resources(p.source, value) if value is not None else None


def executor(p: Parsing) -> str:
    """The executor (`check_executor`)."""
    return check_executor(p.source, p.get("executor"), p.parsed["engine"])
