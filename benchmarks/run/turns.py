"""The second turn of two-turn datasets (matrix key `turns`; docs/matrices.md): each conversation's first answer is
generated once, greedy and untimed, by the run's generator cell (its first baseline, on the batch engine it runs on),
and cached in the run folder as `turns/<dataset>.json`, keyed by the first turn's prompt hash and the generator's cell
id. The two-turn conversation built from it (`datasets.second_turn`) is what every cell is sent, so every cell sees the
same ids. A resumed run reads the cache; answers it lacks (other first prompts, another generator) are generated."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

from benchmarks.core import catalog
from benchmarks.core.cells import Cell
from benchmarks.core.datasets import Prompt, ids_sha256, second_turn
from benchmarks.core.engine_io import SamplingParams
from benchmarks.core.store import atomic_write_json
from benchmarks.run.model_files import with_model_files

ANSWERS_DIR = "turns"


def generator_cell(cells: list[Cell]) -> Cell | None:
    """The cell whose engine writes the first answers: the first greedy baseline, else the first baseline."""
    base = [c for c in cells if c.method == "baseline"]
    return next((c for c in base if c.temperature == 0), base[0] if base else None)


def answers_path(run_dir: Path, dataset: str) -> Path:
    return Path(run_dir) / ANSWERS_DIR / f"{dataset}.json"


def cached_answers(run_dir: Path, dataset: str, generator: Cell) -> dict[str, list[int]]:
    """The cached first answers (first prompt sha256 -> answer ids) that `generator` wrote; none from another."""
    path = answers_path(run_dir, dataset)
    data = json.loads(path.read_text()) if path.is_file() else {}
    if data.get("generator_cell_id") != generator.cell_id:
        return {}
    return {sha: list(a["ids"]) for sha, a in data["answers"].items()}


def second_turns(first: list[Prompt], answers: dict[str, list[int]], tokenizer: Any,
                 template: dict[str, Any] | None) -> list[Prompt] | None:
    """The second-turn prompts of the first-turn prompts; None unless every first answer is known."""
    if any(p.sha256 not in answers for p in first):
        return None
    return [second_turn(p, answers[p.sha256], tokenizer, template) for p in first]


def first_answers(run_dir: Path, dataset: str, generator: Cell, target: str, prompts: list[Prompt],
                  max_new_tokens: int, make_engine: Callable[[Cell], Any], tokenizer: Any) -> dict[str, list[int]]:
    """The first answers of `prompts`: the cached ones, the rest generated now by one load of the generator's batch
    engine (greedy, `max_new_tokens`), then cached with the text each decodes to."""
    have = cached_answers(run_dir, dataset, generator)
    todo = [p for p in prompts if p.sha256 not in have]
    if not todo:
        return have
    cell = dataclasses.replace(generator, engine=catalog.engine(generator.engine).base)
    engine = make_engine(cell)
    try:
        engine.load(with_model_files(cell, target))
        params = SamplingParams(0.0, max_new_tokens, generator.seed)
        for p in todo:
            have[p.sha256] = list(engine.generate(p.ids, params).output_ids)
    finally:
        engine.close()
    atomic_write_json(answers_path(run_dir, dataset), {
        "dataset": dataset, "generator_cell_id": generator.cell_id,
        "generator": {"engine": cell.engine, "label": generator.label, "temperature": 0.0,
                      "max_new_tokens": max_new_tokens},
        "answers": {sha: {"ids": ids, "sha256": ids_sha256(ids),
                          "text": tokenizer.decode(ids, skip_special_tokens=True)} for sha, ids in have.items()}})
    return have
