"""Model references resolved to the files an engine opens (local folders, hub ids, builtin fixtures), the files'
fingerprints that enter cell ids, and the target's tokenizer."""
from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any, overload

from benchmarks.config.matrix_expand import expand
from benchmarks.config.matrix_parse import ConfigError, Matrix
from benchmarks.core.cells import Cell
from benchmarks.core.paths import CACHE_DIR, resolve_model_ref
from benchmarks.data.tiny_checkpoints import build_pair
from benchmarks.hardware import provenance
from benchmarks.hardware.provenance import ModelFingerprint

HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
BUILTIN_MODELS = {"builtin:tiny-random": CACHE_DIR / "tiny-random"}


@overload
def materialize(ref: str) -> str: ...


@overload
def materialize(ref: str | None) -> str | None: ...


def materialize(ref: str | None) -> str | None:
    """A model reference as a path an engine can open; builtin fixtures are generated once and cached."""
    if ref is None:
        return None
    if ref.startswith("builtin:"):
        name, _, part = ref.partition("/")
        if name not in BUILTIN_MODELS:
            raise ConfigError(f"unknown builtin model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
        root = BUILTIN_MODELS[name]
        if not (root / "done").is_file():

            print(f"generating {name} into {root} (once)", file=sys.stderr)
            build_pair(root, seed=0)
            (root / "done").write_text("ok\n")
        return str(root / (part or "target"))
    resolved = resolve_model_ref(ref)
    if not Path(resolved).is_dir() and not HUB_ID.fullmatch(ref):
        raise ConfigError(f"model folder {ref!r} not found (relative paths are resolved from the repository root); "
                          f"fix the path, or give a Hugging Face id such as Qwen/Qwen3-4B")
    return resolved


def load_tokenizer(target: str) -> Any:
    from transformers import AutoTokenizer  # lazy: transformers

    try:
        return AutoTokenizer.from_pretrained(target)
    except OSError as exc:
        raise ConfigError(
            f"cannot load the tokenizer of {target!r}: {exc}. A hub id needs network access to the Hugging Face "
            f"hub (or a pre-populated HF cache); offline, use a local folder or PRESET=tiny.") from exc


def fingerprint_models(matrix: Matrix, cells: list[Cell]) -> dict[str, ModelFingerprint]:
    """The files behind every model reference of a matrix: content hash, config, weight size."""
    return {ref: provenance.model_fingerprint(materialize(ref) or "", ref)
            for ref in sorted({matrix.target, *(c.draft for c in cells if c.draft)})}


def identify_weights(cells: list[Cell], models: dict[str, ModelFingerprint]) -> list[Cell]:
    """Cells whose ids include the content of the model files they load."""
    return [dataclasses.replace(c, weights=provenance.weights_id(models[c.target], models.get(c.draft or "")))
            for c in cells]


def matrix_cells(matrix: Matrix) -> tuple[list[Cell], dict[str, ModelFingerprint]]:
    """A matrix's cells with their final ids (settings and model files), and the fingerprints of those files."""
    cells = expand(matrix)
    models = fingerprint_models(matrix, cells)
    return identify_weights(cells, models), models

