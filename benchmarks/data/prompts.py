"""The prompts every cell is sent: a dataset's rows, a seeded subset rendered and tokenised once, hashed, with the
rows passed over because they were too long."""
from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from benchmarks.core.unit_keys import workload_key
from benchmarks.data.chat_template import render_messages, row_messages, tokens
from benchmarks.data.dataset_registry import DatasetUnavailable, Row, source_rows
from benchmarks.data.prompt_files import read_prompt_file


class Construction(TypedDict, total=False):
    """How a prompt was built: its form, and what went into a many-shot context or a second turn."""

    form: str
    context: str
    shot_rows: list[int]
    context_tokens: int
    prompt_tokens: int
    first_prompt_sha256: str
    first_answer_tokens: int
    first_answer_sha256: str


class WorkloadFields(TypedDict, total=False):
    """What a prompt's records carry about its workload beyond the unit key (`Prompt.workload_fields`)."""

    context_tokens: int
    turn: int


class SkippedRows(TypedDict):
    """A workload's rows passed over as too long: the limit, [row index, prompt tokens] of each, and what was done
    instead where it is not the next rows of the seeded order (the manifest's `prompts_skipped`)."""

    max_prompt_tokens: int | None
    rows: list[list[int]]
    instead: NotRequired[str]


@dataclass(frozen=True)
class Prompt:
    dataset: str
    index: int  # row index in the source, so a subset can be traced back
    text: str  # the (last) user message, before the chat template; "" for ids given as they are
    ids: list[int]  # what is actually sent
    sha256: str  # of the ids
    rendered: str | None = None  # the templated text whose tokens are `ids`; None for ids given as they are
    context_tokens: int | None = None  # the context length it was built for
    turn: int | None = None  # its turn, in a run that measures turns
    construction: Construction = field(default_factory=Construction)  # how it was built (form, context rows, tokens)
    follow_up: str | None = None  # the user's next message, when its second turn is measured

    @property
    def key(self) -> str:
        return workload_key(self.dataset, self.context_tokens, self.turn)

    def workload_fields(self) -> WorkloadFields:
        """What its records carry about the workload beyond the unit key."""
        out = WorkloadFields()
        if self.context_tokens is not None:
            out["context_tokens"] = self.context_tokens
        if self.turn is not None:
            out["turn"] = self.turn
        return out


def ids_sha256(ids: list[int]) -> str:
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()



def load_rows(name: str, path: str | None = None, tokenizer: Any = None,
              template: Mapping[str, object] | None = None) -> list[Row]:
    """The raw rows of a dataset: a local JSONL when `path` is given (checked with the tokenizer when given), else the
    registry's source (`source_rows`)."""
    if path is not None:
        return read_prompt_file(name, Path(path), tokenizer, template)
    return source_rows(name)


def subset_indices(n_rows: int, n: int, seed: int) -> list[int]:
    """A seeded permutation's first n entries: the N=4 subset is a prefix of the N=8 one."""
    order = list(range(n_rows))
    random.Random(seed).shuffle(order)
    return order[:n]


def sent_text(prompt: Prompt, tokenizer: Any) -> str:
    """The text a server is sent for a prompt: its templated text, or its given ids decoded (the server's own ids of
    it are compared with the prompt's before a load runs)."""
    return prompt.rendered if prompt.rendered is not None else tokenizer.decode(prompt.ids)


def row_prompt(name: str, index: int, row: Row, from_file: bool, tokenizer: Any,
               template: Mapping[str, object] | None) -> Prompt:
    """One row as the prompt every cell is sent: templated and tokenised, or its `prompt_ids` as they are."""
    if from_file and "prompt_ids" in row:
        ids = list(row["prompt_ids"])
        return Prompt(name, index, "", ids, ids_sha256(ids), construction={"form": "prompt_ids"})
    messages = row_messages(name, row, from_file)
    rendered = render_messages(messages, tokenizer, template)
    ids = tokens(rendered, tokenizer)
    form = "messages" if from_file and "messages" in row else "prompt"
    return Prompt(name, index, messages[-1]["content"], ids, ids_sha256(ids), rendered, construction={"form": form})


@dataclass(frozen=True)
class PromptSelection:
    """A dataset's seeded prompts, the rows passed over (in seeded order) because they were too long, and the source
    rows (for many-shot context and second turns)."""

    prompts: list[Prompt]
    skipped: list[tuple[int, int]]  # (row index, prompt tokens)
    max_prompt_tokens: int | None
    rows: list[Row] = field(default_factory=list)


def select_prompts(name: str, n: int, seed: int, tokenizer: Any, path: str | None = None,
                   max_prompt_tokens: int | None = None, template: Mapping[str, object] | None = None,
                   rows: list[Row] | None = None) -> PromptSelection:
    """n seeded prompts of a dataset, rendered and tokenised (from `rows` where `load_rows` has read them already).
    A prompt longer than max_prompt_tokens (so that prompt + generation would not fit the engine's context) is passed
    over and recorded in `skipped`, in seeded order; two rows that render to the same ids are refused."""
    rows = load_rows(name, path, tokenizer, template) if rows is None else rows
    out: list[Prompt] = []
    skipped: list[tuple[int, int]] = []
    first: dict[str, int] = {}  # prompt sha256 -> the row that gave it
    for i in subset_indices(len(rows), len(rows), seed):
        p = row_prompt(name, i, rows[i], path is not None, tokenizer, template)
        if p.sha256 in first:
            raise DatasetUnavailable(repeat_problem(name, path, first[p.sha256], i))
        first[p.sha256] = i
        if max_prompt_tokens is not None and len(p.ids) > max_prompt_tokens:
            skipped.append((i, len(p.ids)))
            continue
        out.append(p)
        if len(out) == n:
            return PromptSelection(out, skipped, max_prompt_tokens, rows)
    raise DatasetUnavailable(f"{name}: asked for {n} prompts but only {len(out)} of {len(rows)} rows fit "
                             f"(max {max_prompt_tokens} prompt tokens); lower N or raise max_model_len")


def repeat_problem(name: str, path: str | None, one: int, other: int) -> str:
    """The line for two rows that render to the same token ids (refused: docs/matrices.md, 'Your own prompts')."""
    rows = sorted((one, other))
    where = (f"{path}: rows {rows[0] + 1} and {rows[1] + 1} (counting rows, not blank lines)" if path is not None
             else f"the source's rows {rows[0]} and {rows[1]}")
    fix = "remove one of them" if path is not None else "give its rows as a local JSONL file without the repeat"
    return (f"{name}: {where} render to the same token ids; a repeated prompt is not a distinct input and would be "
            f"paired twice: {fix}")


def load_prompts(name: str, n: int, seed: int, tokenizer: Any, path: str | None = None,
                 max_prompt_tokens: int | None = None) -> list[Prompt]:
    """The prompts of `select_prompts`."""
    return select_prompts(name, n, seed, tokenizer, path, max_prompt_tokens).prompts


def skipped_lines(skipped: Mapping[str, SkippedRows]) -> list[str]:
    """One line per dataset whose too-long rows were passed over (the plan, the manifest and report.md say so)."""
    return [f"{name}: {len(s['rows'])} row(s) longer than {s['max_prompt_tokens']} prompt tokens (max_model_len - "
            f"max_new_tokens) passed over, "
            + (s["instead"] if "instead" in s else "the next rows of the seeded order taken instead")
            + ": row index (tokens) " + ", ".join(f"{i} ({n})" for i, n in s["rows"]) for name, s in skipped.items()]
