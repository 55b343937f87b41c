"""Credentials kept out of what a run writes: user:password@ in a URL becomes ***@."""
from __future__ import annotations

import re
from typing import Any

URL_CREDENTIALS = re.compile(r"(\w+://)[^/@\s]+@")  # user:password@ in a URL


def redacted(value: Any) -> Any:
    """A manifest value with any credentials written into a URL replaced by '***'."""
    if isinstance(value, str):
        return URL_CREDENTIALS.sub(r"\1***@", value)
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(v) for v in value]
    return value
