"""What a matrix needs from the disk, checked before anything runs or is written (by `validate` and by the run
plan): model folders and their configs (a hub id's from the cache, fetched first where the hub is online), the
DFlash draft and the target's tokenizer (`model_checks`), lengths against the target's positions, local prompt files
line by line with that tokenizer, and enough rows for the prompts asked for. No engine starts. What the matrix gets
wrong is told apart from what this machine lacks for it (a hub model or dataset neither cached nor in reach), which
`validate` and the runs report under an exit status of its own (LACKING), naming the command that fetches it."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.config.engine_option_keys import max_model_lens
from benchmarks.config.matrix_parse import ConfigError, Matrix
from benchmarks.config.model_checks import draft_problems, hub_out_of_reach, hub_problem, target_tokenizer
from benchmarks.config.model_refs import HUB_ID
from benchmarks.core.exit_codes import Lacking
from benchmarks.core.paths import ROOT, resolve_model_ref
from benchmarks.data.dataset_registry import DatasetSpec
from benchmarks.data.datasets import DATASETS, DatasetUnavailable, load_rows, select_prompts
from benchmarks.hardware.provenance import hub_offline, resolve_model


@dataclass
class InputProblems:
    """What a matrix meets on this disk, one line each: its own errors (`wrong`, exit BAD_INPUT) and what this machine
    lacks for it (`lacking`, exit LACKING)."""

    wrong: list[str] = field(default_factory=list)
    lacking: list[str] = field(default_factory=list)

    def raise_any(self) -> None:
        """Stop on any problem: a matrix error (with the lacking lines after it) before a lack."""
        if self.wrong:
            raise ConfigError(self.wrong + self.lacking)
        if self.lacking:
            raise Lacking(self.lacking)


def model_config(ref: str, role: str, source: str, found: InputProblems) -> dict[str, Any] | None:
    """The config.json of a local model folder or of a hub id's cached snapshot (None for a builtin fixture, or where
    it cannot be had); what is wrong (no such folder, no config, a hub id the hub does not give) or lacking (a hub id
    neither cached nor in reach) is added to `found`."""
    if ref.startswith("builtin:"):
        return None
    folder = Path(resolve_model_ref(ref))
    if not folder.is_dir():
        first = ref.split("/", 1)[0]
        path_like = not HUB_ID.fullmatch(ref) or ref.startswith(".") or any(
            (base / first).is_dir() for base in (ROOT, Path.cwd()))
        if path_like:
            found.wrong.append(f"{source}: {role} {ref!r}: no such model folder (relative paths are resolved from "
                               f"the repository root); fix the path, or give a Hugging Face id such as Qwen/Qwen3-4B")
            return None
        cached = resolve_model(ref)[0]  # a Hugging Face id: the cache's snapshot, fetched first where the hub is online
        if cached is None:
            line, lacking = hub_problem(ref, role, source)
            (found.lacking if lacking else found.wrong).append(line)
            return None
        folder = cached
    path = folder / "config.json"
    try:
        cfg = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        found.wrong.append(f"{source}: {role} {ref!r}: {folder} is not a model folder (no config.json)")
        return None
    except (OSError, ValueError) as exc:
        found.wrong.append(f"{source}: {role} {ref!r}: {path} does not read as a JSON config "
                           f"({type(exc).__name__}: {exc})")
        return None
    if not isinstance(cfg, dict):
        found.wrong.append(f"{source}: {role} {ref!r}: {path} is not a JSON object")
        return None
    return cfg


def hub_dataset_cached(spec: DatasetSpec) -> bool:
    """Whether a hub dataset's files or prepared rows are in this machine's caches (the run then loads it offline)."""
    from huggingface_hub import constants as hf  # lazy: huggingface_hub

    folders = [Path(hf.HF_HUB_CACHE) / f"datasets--{spec.hf_id.replace('/', '--')}"]
    datasets_cache = os.environ.get("HF_DATASETS_CACHE") or Path(hf.HF_HOME) / "datasets"
    folders.append(Path(datasets_cache) / spec.hf_id.replace("/", "___"))
    return any(f.is_dir() for f in folders)


def fetch_dataset(spec: DatasetSpec) -> str:
    """The command that puts a hub dataset in this machine's cache, as the run loads it."""
    return (f"python -c \"import datasets; datasets.load_dataset('{spec.hf_id}', {spec.hf_config!r}, "
            f"split='{spec.split}')\"")


def check_inputs(matrix: Matrix) -> InputProblems:
    """Every problem the run would meet on this disk, one line each (none when there is none)."""
    source = matrix.source
    found = InputProblems()
    target = model_config(matrix.target, "target", source, found)
    drafts: dict[str, dict[str, Any]] = {}
    for method, ref in matrix.drafts.items():
        if method in matrix.methods:
            cfg = model_config(ref, f"{method} draft", source, found)
            drafts.update({method: cfg} if cfg is not None else {})
    found.wrong += draft_problems(matrix, drafts)
    tokenizer, wrong = target_tokenizer(matrix, target) if target is not None else (None, [])
    found.wrong += wrong
    positions = (target or {}).get("max_position_embeddings")
    for where, length in max_model_lens(matrix.engines, matrix.engine_options):
        if isinstance(positions, int) and isinstance(length, int) and length > positions:
            found.wrong.append(f"{source}: '{where}': max_model_len {length} exceeds the target's "
                               f"max_position_embeddings {positions}; the model has no positions beyond it: lower "
                               f"max_model_len to {positions} or less")
    wanted = matrix.num_prompts + matrix.warmup_prompts
    for d in matrix.datasets:
        spec = DATASETS.get(d.name) if d.path is None else None
        from_hub = spec is not None and not spec.offline
        if spec is not None and from_hub:
            why = hub_out_of_reach(spec.hf_id, "dataset")
            if why is None:
                continue  # a hub dataset, online: its rows are known once the run loads them
            if not hub_dataset_cached(spec):
                found.lacking.append(f"{source}: dataset {d.name!r} ({spec.hf_id}) is not in this machine's caches "
                                     f"and the hub is out of reach ({why}): fetch it where the hub is in reach with "
                                     f"`{fetch_dataset(spec)}`, or use an offline dataset (humaneval, mt-bench, a "
                                     f"local JSONL)")
                continue
            if not hub_offline():
                continue  # cached, the hub silent: the run reads the cache once the hub's retries give up
        try:
            rows = load_rows(d.name, d.path, tokenizer if d.path is not None else None, matrix.chat_template)
        except DatasetUnavailable as exc:
            if isinstance(exc, Lacking):  # an offline dataset's package, not installed here
                found.lacking += [f"{source}: {line}" for line in exc.problems]
            elif from_hub and spec is not None:
                found.lacking += [f"{line}; fetch it where the hub is in reach with `{fetch_dataset(spec)}`"
                                  for line in exc.problems]
            else:
                found.wrong += exc.problems
            continue
        if len(rows) < wanted:
            found.wrong.append(f"{source}: 'num_prompts': {matrix.num_prompts} prompts + {matrix.warmup_prompts} "
                               f"warm-up asked of {d.name}, which has {len(rows)} rows; lower num_prompts or "
                               f"warmup_prompts")
        elif d.path is not None and tokenizer is not None:
            try:  # the run's seeded selection, rendered: two rows that render to the same ids are refused there
                select_prompts(d.name, wanted, matrix.seed, tokenizer, d.path, None, matrix.chat_template, rows)
            except DatasetUnavailable as exc:
                found.wrong += exc.problems
    return found
