"""Local JSONL prompt files: every line checked before anything runs (UTF-8, one JSON object, one prompt form, well
formed, within the vocabulary, no control token typed as text, rendered by the target's template), one line per bad
row naming its line number."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from benchmarks.core.guarded import file_problem, json_value
from benchmarks.data.chat_template import render_messages, render_text, row_messages
from benchmarks.data.dataset_registry import DatasetUnavailable, Row

FORMS = ("prompt", "messages", "prompt_ids")  # what a local file's row may carry: one of them
ROLES = ("system", "user", "assistant")
MAX_LISTED = 20  # bad rows listed one per line; the rest are counted


def read_prompt_file(name: str, path: Path, tokenizer: Any = None,
                     template: Mapping[str, object] | None = None) -> list[Row]:
    """The rows of a local JSONL prompt file, every line checked: UTF-8, one JSON object, one prompt form the dataset
    can render (`row_problem`; with the tokenizer, rendered and its ids checked too). Raises DatasetUnavailable with
    one line per bad row, naming its line number."""
    not_a_file = file_problem(path)  # found without opening it: a FIFO would wait for a writer, a device never end
    if not_a_file:
        raise DatasetUnavailable(f"{name}: local prompt file {path} {not_a_file}; give a JSONL file of prompts, one "
                                 f"JSON object per line")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetUnavailable(f"{name}: cannot read {path}: {exc.strerror}") from None
    rows: list[Row] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}  # a row's prompt (`prompt_key`) -> the line that gave it first
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            row = json_value(raw.decode("utf-8"), f"{path}:{number}", what="JSON line")
        except UnicodeDecodeError as exc:
            problems.append(f"{path}:{number}: not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1})")
            continue
        except ValueError as exc:
            problems.append(f"{exc}; each line is one object such as {{\"prompt\": \"...\"}}")
            continue
        why = (f"a row must be a JSON object such as {{\"prompt\": \"...\"}}, got a JSON {type(row).__name__}"
               if not isinstance(row, dict) else row_problem(name, cast(Row, row), tokenizer, template))
        if why:
            problems.append(f"{path}:{number}: {why}")
            continue
        key = prompt_key(name, row)
        if key in first_line:
            problems.append(f"{path}:{number}: the same prompt as line {first_line[key]}; a repeat is not a distinct "
                            f"input (docs/matrices.md, 'Your own prompts'): remove it")
            continue
        first_line[key] = number
        rows.append(row)
    if problems:
        more = len(problems) - MAX_LISTED
        raise DatasetUnavailable(problems[:MAX_LISTED] + ([f"{path}: {more} more bad rows"] if more > 0 else []))
    if not rows:
        raise DatasetUnavailable(f"{name}: local prompt file {path} holds no rows")
    return rows


def prompt_key(name: str, row: Row) -> str:
    """What a checked row asks the model, as text: two rows with the same key send the same prompt."""
    if "prompt_ids" in row:
        return json.dumps({"prompt_ids": row["prompt_ids"]})
    return json.dumps({"messages": row_messages(name, row, True)}, sort_keys=True)


def _text_problem(text: str, where: str) -> str | None:
    """A string that is not text a tokenizer can encode: a lone surrogate (JSON lets "\\ud800" through)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"{where} holds a lone surrogate {text[exc.start]!r} at character {exc.start}, which no tokenizer "
                f"encodes; fix the \\u escape (a character outside the BMP is a surrogate pair)")
    return None


def _messages_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty list of {\"role\": ..., \"content\": ...} objects"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            return f"messages[{i}] must be an object with a string 'content'"
        if m.get("role") not in ROLES:
            return f"messages[{i}]: role {m.get('role')!r} is not one of {', '.join(ROLES)}"
        why = _text_problem(m["content"], f"messages[{i}]")
        if why:
            return why
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


def control_tokens(tokenizer: Any) -> list[str]:
    """The tokenizer's control tokens (its special tokens, and added tokens marked special: `<|im_start|>`, ...),
    longest first."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    found = set(getattr(tokenizer, "all_special_tokens", None) or []) | {
        t.content for t in added.values() if getattr(t, "special", False)}
    return sorted((t for t in found if t), key=lambda t: (-len(t), t))


def control_token_problem(messages: list[dict[str, str]], tokenizer: Any, chat: bool = False) -> str | None:
    """Why a row's text would smuggle control tokens into its prompt, or None: a control token of the target's
    tokenizer typed inside a message's text is encoded as that token (a turn that ends early, a role the row does not
    give), so it is refused rather than sent (docs/matrices.md, 'Your own prompts'). `chat`: the row gave
    `messages`."""
    tokens = control_tokens(tokenizer)
    for i, m in enumerate(messages):
        hit = next((t for t in tokens if t in m["content"]), None)
        if hit is not None:
            where = f"messages[{i}]" if chat else "the prompt"
            return (f"{where} holds the control token {hit!r} of the target's tokenizer as text, which would be "
                    f"encoded as that token, not as its characters; remove it (give 'prompt_ids' to send control "
                    f"tokens on purpose)")
    return None


def row_problem(name: str, row: Row, tokenizer: Any = None,
                template: Mapping[str, object] | None = None) -> str | None:
    """Why a local file's row cannot be a prompt of dataset `name`, or None: it carries one of FORMS, well formed;
    with the tokenizer, its token ids are within the vocabulary, its text holds no control token, and the chat
    template renders it."""
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
        why = (_text_problem(text, "the prompt") if isinstance(text, str) and text.strip()
               else "the prompt is empty")
    if why is None and tokenizer is not None:
        why = control_token_problem(row_messages(name, row, True), tokenizer, "messages" in row)
    if why is None and tokenizer is not None:
        try:
            render_messages(row_messages(name, row, True), tokenizer, template)
        except Exception as exc:  # a template raises what its Jinja code raises
            why = f"the target's chat template cannot render it: {type(exc).__name__}: {exc}"
    return why
