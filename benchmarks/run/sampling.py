"""The run's stage of the distribution check: many independent samples per prompt from every cell at T > 0, each
scored by the cell's own engine.

Each cell at temperature > 0 draws `distribution.SAMPLES` continuations of `distribution.LENGTH` tokens for the first
`distribution.PROMPTS` measured prompts of each dataset. The baseline and the speculative arms must be independent:
- a seeded engine (JAX) draws one sample per seed, from disjoint seed ranges per arm (the JAX engine keys each
  position's draw by seed, so DFlash with AR's seeds would reproduce AR's tokens and prove nothing);
- an engine whose requests cannot be seeded (vLLM on CPU, see its `sample_many`) records `seeds: null`; its draws come
  from its own generator, which its engine seed keys, and that seed differs by arm (vllm_engine.engine_seed).
Each sample's raw (temperature 1) log-likelihood under the target comes from the engine that drew it (`score_many`:
the cell's own loaded target, so no second model is loaded) and is stored with it (`scoring` says what it holds), so
the check itself (verification/distribution.py) is pure. Both arms of a row are scored the same way: by the same target
weights through each engine's own target forward. An engine without `score_many` stores `loglik: null`, and the check
skips that test.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tqdm import tqdm

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams
from benchmarks.data.datasets import Prompt
from benchmarks.engines import Engine, SampleMany, ScoreMany, offers
from benchmarks.records.records import ErrorLine, Line, cause, error_line, samples_line
from verification import distribution

if TYPE_CHECKING:
    from benchmarks.engines.server import Server

SEED_BASE = {True: 2_000_000, False: 1_000_000}  # speculative arm, baseline arm: disjoint ranges


def seeds(cell: Cell, prompt_index: int, n: int) -> list[int]:
    """The seeds of one prompt's samples: distinct per prompt and per arm."""
    start = SEED_BASE[cell.method != "baseline"] + 10_000 * prompt_index + cell.seed
    return list(range(start, start + n))


def draw(engine: Engine | Server, cell: Cell, prompt_ids: list[int], params: SamplingParams,
         seed_list: list[int]) -> list[list[int]]:
    """Samples with the given seeds: the engine's batched `sample_many` when it offers one, else one request each (a
    batch engine's `generate`; a server has none, so one without `sample_many` fails here)."""
    if offers(engine, cell.engine, "sample_many"):
        return cast(SampleMany, engine).sample_many(prompt_ids, params, seed_list)
    generate = cast(Engine, engine).generate
    return [list(generate(prompt_ids, SamplingParams(params.temperature, params.max_new_tokens, s)).output_ids)
            for s in seed_list]


def collect(engine: Engine | Server, cell: Cell, dataset: str, prompts: list[Prompt],
            concurrency: int | None = None) -> list[Line]:
    """`samples` records of one (cell, dataset) (of a serving level's `concurrency`), scored by the engine's
    `score_many` when it offers one; empty for greedy cells."""
    if cell.temperature <= 0:
        return []
    params = SamplingParams(cell.temperature, distribution.LENGTH, cell.seed)
    scorer = cast(ScoreMany, engine) if offers(engine, cell.engine, "score_many") else None
    out: list[Line] = []
    for p in prompts[: distribution.PROMPTS]:
        seed_list = seeds(cell, p.index, distribution.SAMPLES)
        samples = draw(engine, cell, p.ids, params, seed_list)
        out.append(samples_line(cell, dataset, p, distribution.LENGTH,
                                seed_list if getattr(engine, "samples_seeded", True) else None, samples,
                                scorer.score_many(p.ids, samples) if scorer is not None else None,
                                distribution.SCORING if scorer is not None else None, concurrency))
    return out


def cell_samples(engine: Engine | Server, cell: Cell, name: str, prompts: list[Prompt], records: list[Line],
                 concurrency: int | None = None) -> list[Line]:
    """The distribution check's samples of a cell at T > 0 whose measured prompts all ran (at a serving level's
    `concurrency`); an error record when drawing or scoring them failed."""
    if cell.temperature <= 0 or any(isinstance(r, ErrorLine) for r in records):
        return []
    try:
        return collect(engine, cell, name, prompts, concurrency)
    except Exception as exc:
        tqdm.write(f"[{cell.label}] {name} distribution samples FAILED: {cause(exc)}")
        return [error_line(cell, name, exc, concurrency=concurrency)]
