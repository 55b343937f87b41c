"""The keys a run's units are stored under: a dataset's workload, a serving level, a capacity probe's round, a drift
recheck and a tie check (benchmarks/records/store.py names the unit files with them; '@' never occurs in a dataset
name)."""
from __future__ import annotations


def level_key(dataset: str, concurrency: int, request_rate: float | None) -> str:
    """The unit key of one serving level of a dataset."""
    return f"{dataset}@c{concurrency}" + (f"@r{request_rate:g}" if request_rate is not None else "")


def probe_key(dataset: str, concurrency: int, request_rate: float | None, at_round: int) -> str:
    """The unit key of one round of a capacity probe at a serving level of a dataset."""
    return f"{level_key(dataset, concurrency, request_rate)}@p{at_round}"


def workload_key(dataset: str, context_tokens: int | None = None, turn: int | None = None) -> str:
    """The key of a dataset's workload: `<dataset>@ctx<N>` at a context length, `<dataset>@turn2` for the second turn
    of its conversations, the dataset's own name otherwise (its plain prompts, or their first turn)."""
    return (dataset + (f"@ctx{context_tokens}" if context_tokens is not None else "")
            + (f"@turn{turn}" if turn is not None and turn > 1 else ""))


def recheck_key(dataset: str) -> str:
    """The unit key of a baseline's drift recheck on a dataset (its records keep the dataset's own name)."""
    return f"{dataset}@recheck"


def ties_key(dataset: str) -> str:
    """The unit key of a speculative cell's tie checks on a dataset (its records keep the dataset's own name)."""
    return f"{dataset}@ties"
