"""What a matrix needs from the disk, checked before anything runs or is written (by `validate` and by the run
plan): model folders and their configs, lengths against the target's positions, local prompt files line by line,
and enough rows for the prompts asked for. No network and no engine: a Hugging Face id is left to the run."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.core.config import Matrix, max_model_lens
from benchmarks.core.datasets import DATASETS, DatasetUnavailable, load_rows
from benchmarks.core.model_refs import HUB_ID
from benchmarks.core.paths import ROOT, resolve_model_ref
from benchmarks.core.provenance import resolve_model


def hub_models(matrix: Matrix) -> list[str]:
    """The matrix's Hugging Face ids that are not in the local cache: the run fetches them (and fails, before it
    writes anything, where the hub is out of reach)."""
    refs = [matrix.target] + [ref for method, ref in matrix.drafts.items() if method in matrix.methods]
    return [ref for ref in refs if not ref.startswith("builtin:") and not Path(resolve_model_ref(ref)).is_dir()
            and HUB_ID.fullmatch(ref) and resolve_model(ref)[0] is None]


def model_config(ref: str, role: str, source: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The config.json of a local model folder (None for a hub id or a builtin fixture), and what is wrong."""
    if ref.startswith("builtin:"):
        return None, []
    folder = Path(resolve_model_ref(ref))
    if not folder.is_dir():
        first = ref.split("/", 1)[0]
        path_like = not HUB_ID.fullmatch(ref) or ref.startswith(".") or any(
            (base / first).is_dir() for base in (ROOT, Path.cwd()))
        if path_like:
            return None, [f"{source}: {role} {ref!r}: no such model folder (relative paths are resolved from the "
                          f"repository root); fix the path, or give a Hugging Face id such as Qwen/Qwen3-4B"]
        return None, []  # a Hugging Face id: `hub_models` says whether it is here
    path = folder / "config.json"
    try:
        cfg = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return None, [f"{source}: {role} {ref!r}: {folder} is not a model folder (no config.json)"]
    except (OSError, ValueError) as exc:
        return None, [f"{source}: {role} {ref!r}: {path} does not read as a JSON config ({type(exc).__name__}: "
                      f"{exc})"]
    if not isinstance(cfg, dict):
        return None, [f"{source}: {role} {ref!r}: {path} is not a JSON object"]
    return cfg, []


def check_inputs(matrix: Matrix) -> list[str]:
    """Every problem the run would meet on this disk, one line each (empty when there is none)."""
    source = matrix.source
    problems: list[str] = []
    target, found = model_config(matrix.target, "target", source)
    problems += found
    for method, ref in matrix.drafts.items():
        if method in matrix.methods:
            problems += model_config(ref, f"{method} draft", source)[1]
    positions = (target or {}).get("max_position_embeddings")
    for where, length in max_model_lens(matrix.engines, matrix.engine_options):
        if isinstance(positions, int) and length > positions:
            problems.append(f"{source}: '{where}': max_model_len {length} exceeds the target's "
                            f"max_position_embeddings {positions}; the model has no positions beyond it: lower "
                            f"max_model_len to {positions} or less")
    wanted = matrix.num_prompts + matrix.warmup_prompts
    for d in matrix.datasets:
        if d.path is None and not DATASETS[d.name].offline:
            continue  # a hub dataset: its rows are known once the run loads them
        try:
            rows = load_rows(d.name, d.path)
        except DatasetUnavailable as exc:
            problems += exc.problems
            continue
        if len(rows) < wanted:
            problems.append(f"{source}: 'num_prompts': {matrix.num_prompts} prompts + {matrix.warmup_prompts} warm-up "
                            f"asked of {d.name}, which has {len(rows)} rows; lower num_prompts")
    return problems

