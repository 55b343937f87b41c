"""Run a matrix: one engine per cell, every dataset through it, one prompt at a time, records to the store.

Warm-up prompts (outside the measured subset) run before each dataset and are excluded from every figure; the
engine's cumulative speculative counters are diffed around the measured prompts only. A cell that raises is
recorded with its error and the others go on.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks import provenance
from benchmarks.config import ROOT, ConfigError, Matrix, resolve_model_ref
from benchmarks.datasets import Prompt, load_prompts
from benchmarks.engines import create_engine
from benchmarks.matrix import expand
from benchmarks.metrics import tpot_ms
from benchmarks.records import Cell, SamplingParams
from benchmarks.store import RUNS_DIR, RunStore, point_latest

HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
BUILTIN_MODELS = {"builtin:tiny-random": ROOT / ".cache" / "tiny-random"}


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
            from preparation.tiny_models import build_pair

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
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(target)
    except OSError as exc:
        raise ConfigError(
            f"cannot load the tokenizer of {target!r}: {exc}. A hub id needs network access to the Hugging Face "
            f"hub (or a pre-populated HF cache); offline, use a local folder or PRESET=tiny.") from exc


def run_id_for(matrix: Matrix) -> str:
    """Deterministic per matrix content, so rerunning the same matrix resumes the same run."""
    blob = json.dumps(dataclasses.asdict(matrix), sort_keys=True, default=str)
    return f"{matrix.name}-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"


def build_manifest(matrix: Matrix, cells: list[Cell], run_id: str) -> dict[str, Any]:
    models = {ref: provenance.model_fingerprint(materialize(ref) or "")
              for ref in {matrix.target, *(c.draft for c in cells if c.draft)}}
    return {
        "run_id": run_id,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config_path": matrix.source,
        "config": dataclasses.asdict(matrix),
        "cells": {c.cell_id: dataclasses.asdict(c) for c in cells},
        "git_sha": provenance.git_sha(),
        "packages": provenance.package_versions(),
        "platform": provenance.detect_platform(),
        "hardware": provenance.describe_hardware(),
        "models": models,
    }


def _request_record(cell: Cell, prompt: Prompt, rec: Any) -> dict[str, Any]:
    n_out = len(rec.output_ids)
    return {
        "kind": "request", "cell_id": cell.cell_id, "label": cell.label, "engine": cell.engine,
        "method": cell.method, "k": cell.k, "dataset": prompt.dataset, "prompt_index": prompt.index,
        "prompt_sha256": prompt.sha256, "n_prompt_tokens": len(prompt.ids), "n_out": n_out,
        "ttft_ms": 1000.0 * rec.ttft_s, "tpot_ms": tpot_ms(rec.ttft_s, rec.last_token_s, n_out),
        "decode_s": rec.last_token_s - rec.ttft_s, "output_ids": list(rec.output_ids),
        "accept_lengths": rec.accept_lengths, **({"extra": rec.extra} if rec.extra else {}),
    }


def _error_record(cell: Cell, dataset: str, exc: BaseException) -> dict[str, Any]:
    return {"kind": "error", "cell_id": cell.cell_id, "label": cell.label, "dataset": dataset,
            "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def run_cell_dataset(engine: Any, cell: Cell, name: str, prompts: list[Prompt], warmup: list[Prompt],
                     progress: bool) -> list[dict[str, Any]]:
    params = SamplingParams(cell.temperature, cell.max_new_tokens, cell.seed)
    for p in warmup:
        engine.generate(p.ids, params)
    before = engine.spec_counters()
    records = []
    for p in tqdm(prompts, desc=f"{cell.label} {name}", unit="prompt", disable=not progress, leave=False):
        records.append(_request_record(cell, p, engine.generate(p.ids, params)))
    after = engine.spec_counters()
    if before is not None and after is not None:
        d = after - before
        records.append({"kind": "spec", "cell_id": cell.cell_id, "label": cell.label, "dataset": name,
                        **dataclasses.asdict(d)})
    return records


def run_matrix(matrix: Matrix, run_dir: Path | None = None, progress: bool = True) -> tuple[Path, int]:
    """Run every pending (cell, dataset) unit; return the run folder and the number of failed units."""
    cells = expand(matrix)
    run_dir = Path(run_dir) if run_dir else RUNS_DIR / run_id_for(matrix)
    store = RunStore(run_dir)
    store.write_manifest(build_manifest(matrix, cells, run_dir.name))
    point_latest(run_dir)

    target = materialize(matrix.target)
    tokenizer = load_tokenizer(target)
    max_len = matrix.engine_options.get("max_model_len")
    max_prompt = max_len - matrix.max_new_tokens if max_len else None
    prompts: dict[str, tuple[list[Prompt], list[Prompt]]] = {}
    for d in matrix.datasets:  # resolved once, before any engine starts, and shared by every cell
        ps = load_prompts(d.name, matrix.num_prompts + matrix.warmup_prompts, matrix.seed, tokenizer, d.path,
                          max_prompt)
        prompts[d.name] = (ps[:matrix.num_prompts], ps[matrix.num_prompts:])
    failed = 0
    for cell in tqdm(cells, desc="cells", unit="cell", disable=not progress):
        pending = [d for d in matrix.datasets if not store.is_done(cell.cell_id, d.name)]
        if not pending:
            continue
        engine = None
        try:
            engine = create_engine(cell.engine)
            t0 = time.perf_counter()
            engine.load(dataclasses.replace(cell, target=target, draft=materialize(cell.draft)))
            tqdm.write(f"[{cell.label}] {cell.engine} engine ready in {time.perf_counter() - t0:.1f} s")
        except Exception as exc:
            for d in pending:
                store.write_unit(cell.cell_id, d.name, [_error_record(cell, d.name, exc)])
            failed += len(pending)
            tqdm.write(f"[{cell.label}] FAILED to start: {type(exc).__name__}: {exc}")
            if engine is not None:
                engine.close()
            continue
        try:
            for d in pending:
                measured, warmup = prompts[d.name]
                try:
                    records = run_cell_dataset(engine, cell, d.name, measured, warmup, progress)
                except Exception as exc:
                    records = [_error_record(cell, d.name, exc)]
                    failed += 1
                    tqdm.write(f"[{cell.label}] {d.name} FAILED: {type(exc).__name__}: {exc}")
                store.write_unit(cell.cell_id, d.name, records)
        finally:
            engine.close()
    return run_dir, failed
