"""When a run's row and a published row were measured under the same conditions: the keys of MATCH_KEYS (hardware,
target, draft, method, K, temperature, max_new_tokens, dataset), names normalised first (`model_key`,
`hardware_words`, `dataset_key`). A condition the publication does not state never blocks a match."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from benchmarks.data.reference import present

MATCH_KEYS = ("hardware", "target", "draft", "method", "k", "temperature", "max_new_tokens", "dataset")


def model_key(name: Any) -> str:
    """Comparable model name: 'Qwen/Qwen3-4B' and '/models/Qwen3-4B' give 'qwen34b'.

    The last path component of an HF id or local folder (for an HF cache folder ``models--Org--Name/...``, ``Name``),
    lower-cased, without ``-``, ``_``, ``.`` and spaces, and with a leading ``meta`` dropped before ``llama``:
    ``LLaMA3.1-8B-Instruct`` matches ``Meta-Llama-3.1-8B-Instruct``. The organisation is ignored, so a differently
    trained model published under the same name would match too.
    """
    if not present(name):
        return ""
    text = str(name).strip().rstrip("/\\")
    cached = re.search(r"models--[^/\\]+?--([^/\\]+)", text)
    base = cached.group(1) if cached else re.split(r"[/\\]", text)[-1]
    key = re.sub(r"[-_. ]", "", base.lower())
    return key[len("meta"):] if key.startswith("metallama") else key


_HARDWARE_ALIASES = {"tpu v5": "tpu v5p", "tpu v5 lite": "tpu v5e", "tpu v6 lite": "tpu v6e"}
_VENDOR_WORDS = {"nvidia", "google", "geforce"}


def hardware_words(name: Any) -> frozenset[str]:
    """The words that identify a device: lower-cased, vendor words (nvidia, google, geforce) and a TPU slice size
    (``v5p-8``) dropped; JAX's device kinds ``TPU v5``/``TPU v5 lite``/``TPU v6 lite`` read as v5p/v5e/v6e. A device
    matches when every word of the published name occurs in ours (``H100`` matches ``NVIDIA H100 80GB HBM3``)."""
    if not present(name):
        return frozenset()
    text = re.sub(r"\b(v\d+[a-z]*)-\d+\b", r"\1", str(name).lower().replace("_", " "))
    text = " ".join(text.split())
    text = _HARDWARE_ALIASES.get(text, text)
    return frozenset(w for w in re.split(r"[\s(),/]+", text) if w and w not in _VENDOR_WORDS)


def hardware_matches(ours: Any, published: Any) -> bool:
    want = hardware_words(published)
    return bool(want) and want <= hardware_words(ours)


def dataset_key(name: Any) -> str:
    """Comparable dataset name: lower-cased, without ``-``, ``_`` and spaces."""
    return re.sub(r"[-_ ]", "", str(name).lower()) if present(name) else ""


@dataclass(frozen=True)
class Check:
    """One condition of a run row against one published row: 'same', 'unstated' (by the publication) or 'differs'."""

    key: str
    ours: Any
    published: Any
    status: str


def _same(key: str, ours: Any, published: Any) -> bool:
    if key == "hardware":
        return hardware_matches(ours, published)
    if key in ("target", "draft"):
        return model_key(ours) == model_key(published)
    if key == "dataset":
        return dataset_key(ours) == dataset_key(published)
    if key == "method":
        return str(ours) == str(published)
    return math.isclose(float(ours), float(published), abs_tol=1e-9)


def compare_conditions(ours: dict[str, Any], published: pd.Series, keys: tuple[str, ...] = MATCH_KEYS) -> list[Check]:
    """Check every key of `keys`; a published condition that is empty is 'unstated'."""
    checks = []
    for key in keys:
        o, p = ours.get(key), published[key]
        if not present(p):
            status = "unstated"
        elif present(o) and _same(key, o, p):
            status = "same"
        else:
            status = "differs"
        checks.append(Check(key, o, p, status))
    return checks
