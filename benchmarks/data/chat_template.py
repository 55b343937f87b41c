"""A prompt in the target's chat template: a row's messages, the template's keyword arguments (the matrix's
`chat_template` over thinking off), the rendered text and its token ids, and what the template reads."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from benchmarks.data.dataset_registry import DATASETS, DatasetUnavailable, Row

DEFAULT_TEMPLATE: dict[str, object] = {"enable_thinking": False}  # the released Qwen3 drafts were trained without it


def render_text(name: str, row: Row, from_file: bool) -> str:
    """The user message for one row. Local JSONL rows give it in 'prompt' (or the registry's own fields)."""
    if from_file and "prompt" in row and isinstance(row["prompt"], str):
        return row["prompt"]
    if name not in DATASETS:
        raise DatasetUnavailable(f"{name}: rows of a local file need a string 'prompt' field (or 'messages', or "
                                 f"'prompt_ids'); got keys {sorted(row)}")
    return DATASETS[name].render(row)


def row_messages(name: str, row: Row, from_file: bool) -> list[dict[str, str]]:
    """The chat a row's prompt is: a local row's own `messages`, else its user message alone."""
    if from_file and "messages" in row:
        return [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
    return [{"role": "user", "content": render_text(name, row, from_file)}]


def template_kwargs(template: Mapping[str, object] | None) -> dict[str, object]:
    """The chat template's keyword arguments: the matrix's `chat_template` over DEFAULT_TEMPLATE."""
    return {**DEFAULT_TEMPLATE, **(template or {})}


def render_messages(messages: list[dict[str, str]], tokenizer: Any,
                    template: Mapping[str, object] | None = None) -> str:
    """A chat in the target's chat template, ready for the assistant's answer."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         **template_kwargs(template))


def render(text: str, tokenizer: Any, template: Mapping[str, object] | None = None) -> str:
    """A user message in the chat template (thinking off unless `template` says otherwise)."""
    return render_messages([{"role": "user", "content": text}], tokenizer, template)


def tokens(rendered: str, tokenizer: Any) -> list[int]:
    """The ids of an already templated text (the template wrote any special tokens)."""
    return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])


def encode(text: str, tokenizer: Any, template: Mapping[str, object] | None = None) -> list[int]:
    """The token ids of the rendered prompt (`render`)."""
    return tokens(render(text, tokenizer, template), tokenizer)


def template_ignores(tokenizer: Any, template: Mapping[str, object] | None) -> list[str]:
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
