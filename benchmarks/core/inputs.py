"""What a matrix needs from the disk, checked before anything runs or is written (by `validate` and by the run
plan): model folders and their configs (a hub id's from the cache, fetched first where the hub is online), the
DFlash draft and the target's tokenizer (`model_checks`), lengths against the target's positions, local prompt files
line by line with that tokenizer, and enough rows for the prompts asked for. No engine starts."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.core.config import Matrix
from benchmarks.core.datasets import DATASETS, DatasetUnavailable, load_rows, select_prompts
from benchmarks.core.engine_option_keys import max_model_lens
from benchmarks.core.model_checks import draft_problems, hub_problem, target_tokenizer
from benchmarks.core.model_refs import HUB_ID
from benchmarks.core.paths import ROOT, resolve_model_ref
from benchmarks.core.provenance import hub_offline, resolve_model


def model_config(ref: str, role: str, source: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The config.json of a local model folder or of a hub id's cached snapshot (None for a builtin fixture), and
    what is wrong: no such folder, no config, a hub id out of reach (`hub_problem`)."""
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
        cached = resolve_model(ref)[0]  # a Hugging Face id: the cache's snapshot, fetched first where the hub is online
        if cached is None:
            return None, [hub_problem(ref, role, source)]
        folder = cached
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
    drafts: dict[str, dict[str, Any]] = {}
    for method, ref in matrix.drafts.items():
        if method in matrix.methods:
            cfg, found = model_config(ref, f"{method} draft", source)
            problems += found
            drafts.update({method: cfg} if cfg is not None else {})
    problems += draft_problems(matrix, drafts)
    tokenizer, found = target_tokenizer(matrix, target) if target is not None else (None, [])
    problems += found
    positions = (target or {}).get("max_position_embeddings")
    for where, length in max_model_lens(matrix.engines, matrix.engine_options):
        if isinstance(positions, int) and length > positions:
            problems.append(f"{source}: '{where}': max_model_len {length} exceeds the target's "
                            f"max_position_embeddings {positions}; the model has no positions beyond it: lower "
                            f"max_model_len to {positions} or less")
    wanted = matrix.num_prompts + matrix.warmup_prompts
    for d in matrix.datasets:
        if d.path is None and not DATASETS[d.name].offline and not hub_offline():
            continue  # a hub dataset, online: its rows are known once the run loads them (offline: from the cache)
        try:
            rows = load_rows(d.name, d.path, tokenizer if d.path is not None else None, matrix.chat_template)
        except DatasetUnavailable as exc:
            problems += exc.problems
            continue
        if len(rows) < wanted:
            problems.append(f"{source}: 'num_prompts': {matrix.num_prompts} prompts + {matrix.warmup_prompts} warm-up "
                            f"asked of {d.name}, which has {len(rows)} rows; lower num_prompts")
        elif d.path is not None and tokenizer is not None:
            try:  # the run's seeded selection, rendered: two rows that render to the same ids are refused there
                select_prompts(d.name, wanted, matrix.seed, tokenizer, d.path, None, matrix.chat_template, rows)
            except DatasetUnavailable as exc:
                problems += exc.problems
    return problems

