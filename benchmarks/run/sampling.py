"""The runner stage of the distribution check: many independent short samples per prompt from every cell at T > 0.

Each cell at temperature > 0 draws `distribution.SAMPLES` continuations of `distribution.POSITIONS` tokens for the
first `distribution.PROMPTS` measured prompts of each dataset, one seed per sample. The baseline and the speculative
cells use disjoint seed ranges: the two arms of the test must be independent (the JAX engine keys each position's
draw by seed, so DFlash with AR's seeds would reproduce AR's tokens and prove nothing). The target's teacher-forced
log-likelihood of every sample is stored with it, so the check itself (verification/distribution.py) is pure.
An engine whose batched draws cannot be seeded (vLLM on CPU, see its `sample_many`) records `seeds: null`.
"""
from __future__ import annotations

from typing import Any, Callable

from tqdm import tqdm

from benchmarks.core.datasets import Prompt
from benchmarks.core.records import Cell, SamplingParams
from benchmarks.run.context import error_record
from verification import distribution

SEED_BASE = {True: 2_000_000, False: 1_000_000}  # speculative arm, baseline arm: disjoint ranges


def seeds(cell: Cell, prompt_index: int, n: int) -> list[int]:
    """The seeds of one prompt's samples: distinct per prompt and per arm."""
    start = SEED_BASE[cell.method != "baseline"] + 10_000 * prompt_index + cell.seed
    return list(range(start, start + n))


def draw(engine: Any, prompt_ids: list[int], params: SamplingParams, seed_list: list[int]) -> list[list[int]]:
    """Samples with the given seeds: the engine's batched `sample_many` when it has one, else one request each."""
    if hasattr(engine, "sample_many"):
        return engine.sample_many(prompt_ids, params, seed_list)
    return [list(engine.generate(prompt_ids, SamplingParams(params.temperature, params.max_new_tokens, s)).output_ids)
            for s in seed_list]


def collect(engine: Any, cell: Cell, dataset: str, prompts: list[Prompt],
            score: Callable[[list[int], list[list[int]], float], list[float]] | None) -> list[dict[str, Any]]:
    """`samples` records of one (cell, dataset); empty for greedy cells."""
    if cell.temperature <= 0:
        return []
    params = SamplingParams(cell.temperature, distribution.POSITIONS, cell.seed)
    out = []
    for p in prompts[: distribution.PROMPTS]:
        seed_list = seeds(cell, p.index, distribution.SAMPLES)
        samples = draw(engine, p.ids, params, seed_list)
        out.append({"kind": "samples", "cell_id": cell.cell_id, "label": cell.label, "dataset": dataset,
                    "prompt_index": p.index, "prompt_sha256": p.sha256, "temperature": cell.temperature,
                    "seeds": seed_list if getattr(engine, "samples_seeded", True) else None, "samples": samples,
                    "loglik": score(p.ids, samples, cell.temperature) if score else None})
    return out


_scorers: dict[str, Any] = {}


def _score(target: str) -> Any:
    """The target's teacher-forced log-likelihood of samples (JAX, loaded once per target)."""
    if target not in _scorers:
        from benchmarks.engines.jax.score import Scorer

        _scorers[target] = Scorer(target)
    return _scorers[target].logliks


def cell_samples(engine: Any, cell: Cell, name: str, prompts: list[Prompt], records: list[dict[str, Any]],
                 target: str) -> list[dict[str, Any]]:
    """The distribution check's samples of a cell at T > 0 whose measured prompts all ran; an error record when
    drawing them failed."""
    if cell.temperature <= 0 or any(r["kind"] == "error" for r in records):
        return []
    try:
        return collect(engine, cell, name, prompts, _score(target))
    except Exception as exc:
        tqdm.write(f"[{cell.label}] {name} distribution samples FAILED: {type(exc).__name__}: {exc}")
        return [error_record(cell, name, exc)]

