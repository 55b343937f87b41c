"""Workloads of a dataset beyond its prompts as they are: at a context length (many-shot context of the dataset's
other rows with their reference answers) or at a turn (the conversation after the first answer)."""
from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.core.unit_keys import workload_key
from benchmarks.data.chat_template import render_messages, tokens
from benchmarks.data.dataset_registry import DATASETS, Row
from benchmarks.data.prompts import Prompt, ids_sha256


@dataclass(frozen=True)
class Workload:
    """What one unit of a dataset measures: its prompts, at a context length, or at a turn of its conversations."""

    dataset: str
    context_tokens: int | None = None
    turn: int | None = None

    @property
    def key(self) -> str:
        """Its key in the plan, the store and the records (`unit_keys.workload_key`)."""
        return workload_key(self.dataset, self.context_tokens, self.turn)


def workloads(datasets: list[str], context_tokens: list[int] | None = None,
              turns: list[int] | None = None) -> list[Workload]:
    """Every dataset's workloads, in run order: its prompts at each context length, or at each turn, or as they are
    (a matrix's `context_tokens` and `turns`)."""
    if context_tokens is not None:
        return [Workload(d, context_tokens=n) for d in datasets for n in context_tokens]
    if turns is not None:
        return [Workload(d, turn=t) for d in datasets for t in turns]
    return [Workload(d) for d in datasets]



# --- Many-shot context ------------------------------------------------------------------------------------------

class Shots:
    """The rows a dataset's many-shot context is drawn from: every row with a reference answer (a prompt never draws
    its own). Each is a (user, assistant) pair of chat turns; the tokens it adds before a question are counted when a
    prompt first needs it (a large dataset's pool is never rendered whole)."""

    def __init__(self, name: str, rows: list[Row], tokenizer: Any, template: Mapping[str, object] | None) -> None:
        self.spec, self.source, self.tokenizer, self.template = DATASETS[name], rows, tokenizer, template
        assert self.spec.answer is not None  # the matrix check gives context only to datasets with answers
        self.answer = self.spec.answer
        self.rows = [i for i, row in enumerate(rows) if str(self.answer(row) or "").strip()]
        self._probe = [{"role": "user", "content": "?"}]
        self._alone = len(tokens(render_messages(self._probe, tokenizer, template), tokenizer))
        self._added: dict[int, int] = {}

    def pair(self, i: int) -> list[dict[str, str]]:
        row = self.source[i]
        return [{"role": "user", "content": self.spec.render(row)},
                {"role": "assistant", "content": str(self.answer(row))}]

    def added(self, i: int) -> int:
        """The tokens row i's pair adds before a question (exact for templates that render turn by turn)."""
        if i not in self._added:
            rendered = render_messages(self.pair(i) + self._probe, self.tokenizer, self.template)
            self._added[i] = len(tokens(rendered, self.tokenizer)) - self._alone
        return self._added[i]


def fill(prompt: Prompt, pool: Shots, n_tokens: int, limit: int, seed: int, tokenizer: Any,
         template: Mapping[str, object] | None) -> tuple[list[int], list[int], str]:
    """Shots before the prompt's question until it holds at least n_tokens (whole shots, in a seeded order of the
    prompt's own row, so that a prompt gets the same context whichever other prompts a run has, and prompts share no
    cached prefix; a shot that would take it past `limit` is passed over). Returns the shot rows, the ids and the
    rendered text; fewer than n_tokens ids when the pool runs out."""
    order = [i for i in pool.rows if i != prompt.index]
    random.Random(seed * 1_000_003 + prompt.index).shuffle(order)
    question = [{"role": "user", "content": prompt.text}]

    def build(chosen: list[int]) -> tuple[list[int], str]:
        rendered = render_messages([m for i in chosen for m in pool.pair(i)] + question, tokenizer, template)
        return tokens(rendered, tokenizer), rendered

    chosen: list[int] = []
    estimate = len(prompt.ids)
    for i in order:
        if estimate >= n_tokens:  # the per-shot lengths are estimates: count exactly before stopping
            ids, rendered = build(chosen)
            if len(ids) >= n_tokens:
                break
            estimate = len(ids)
        if estimate + pool.added(i) <= limit:
            chosen.append(i)
            estimate += pool.added(i)
    ids, rendered = build(chosen)
    while len(ids) > limit and chosen:
        chosen.pop()
        ids, rendered = build(chosen)
    return chosen, ids, rendered


def with_context(prompt: Prompt, pool: Shots, n_tokens: int, limit: int, seed: int, tokenizer: Any,
                 template: Mapping[str, object] | None) -> Prompt | None:
    """The prompt preceded by many-shot context to at least n_tokens, within `limit`; None when it cannot be."""
    chosen, ids, rendered = fill(prompt, pool, n_tokens, limit, seed, tokenizer, template)
    if len(ids) < n_tokens:
        return None
    return replace(prompt, ids=ids, sha256=ids_sha256(ids), rendered=rendered, context_tokens=n_tokens,
                   construction={**prompt.construction, "context": "many-shot", "shot_rows": chosen,
                                 "context_tokens": len(ids) - len(prompt.ids), "prompt_tokens": len(ids)})


# --- Second turn --------------------------------------------------------------------------------------------------

def second_turn(first: Prompt, answer_ids: list[int], tokenizer: Any, template: Mapping[str, object] | None
                ) -> Prompt:
    """The conversation's second turn: the first question, the first answer (its ids decoded, special tokens
    dropped), and the user's second message."""
    if first.follow_up is None:
        raise ValueError(f"{first.dataset} row {first.index} has no second turn")
    answer = tokenizer.decode(answer_ids, skip_special_tokens=True)
    messages = [{"role": "user", "content": first.text}, {"role": "assistant", "content": answer},
                {"role": "user", "content": first.follow_up}]
    rendered = render_messages(messages, tokenizer, template)
    ids = tokens(rendered, tokenizer)
    return Prompt(first.dataset, first.index, first.follow_up, ids, ids_sha256(ids), rendered, turn=2,
                  construction={"form": "second turn", "first_prompt_sha256": first.sha256,
                                "first_answer_tokens": len(answer_ids),
                                "first_answer_sha256": ids_sha256(list(answer_ids)), "prompt_tokens": len(ids)})


