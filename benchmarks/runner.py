"""Run a matrix: one engine per cell, every dataset through it, one prompt at a time, records to the store.

Cells run one after another, or, when the matrix interleaves them, all loaded at once and taking each prompt in turn
(vLLM cells then each in an engine worker process, benchmarks/engines/worker.py; every cell with `workers: true`).
One after another, each baseline runs before its speculative cells and is measured again after them on a few prompts
(the drift recheck, its own unit of records of kind "recheck"), so that a host whose speed moved is caught.
Warm-up prompts (outside the measured subset) run before each dataset and are excluded from every figure; each
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
from typing import Any, Callable

from tqdm import tqdm

from benchmarks import provenance
from benchmarks.config import (PLACEMENT_KEYS, ROOT, ConfigError, Matrix, in_worker, interleave_problem,
                               resolve_model_ref)
from benchmarks.datasets import Prompt, load_prompts
from benchmarks.engines import Engine, create_engine
from benchmarks.matrix import expand
from benchmarks.metrics import baseline_drift, tpot_ms
from benchmarks.records import SERVING_ENGINES, Cell, SamplingParams
from benchmarks.sampling import collect as collect_samples
from benchmarks.store import RUNS_DIR, RunStore, point_latest
from benchmarks.summary import baseline_cell_id

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
            from benchmarks.tiny_checkpoints import build_pair

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
    """Deterministic per matrix content, so rerunning the same matrix resumes the same run (wherever it runs: the
    placement keys are left out unless the file itself sets them)."""
    fields = {k: v for k, v in dataclasses.asdict(matrix).items() if k not in PLACEMENT_KEYS}
    blob = json.dumps(fields, sort_keys=True, default=str)
    return f"{matrix.name}-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"


def fingerprint_models(matrix: Matrix, cells: list[Cell]) -> dict[str, dict[str, Any]]:
    """The files behind every model reference of a matrix: content hash, config, weight size."""
    return {ref: provenance.model_fingerprint(materialize(ref) or "")
            for ref in sorted({matrix.target, *(c.draft for c in cells if c.draft)})}


def identify_weights(cells: list[Cell], models: dict[str, dict[str, Any]]) -> list[Cell]:
    """Cells whose ids include the content of the model files they load."""
    return [dataclasses.replace(c, weights=provenance.weights_id(models[c.target], models.get(c.draft or "")))
            for c in cells]


def matrix_cells(matrix: Matrix) -> tuple[list[Cell], dict[str, dict[str, Any]]]:
    """A matrix's cells with their final ids (settings and model files), and the fingerprints of those files."""
    cells = expand(matrix)
    models = fingerprint_models(matrix, cells)
    return identify_weights(cells, models), models


def build_manifest(matrix: Matrix, cells: list[Cell], run_id: str, models: dict[str, dict[str, Any]],
                   env: dict[str, Any]) -> dict[str, Any]:
    """The run's shape (config, cells, models); its environment fields are the latest invocation's. What each unit
    was measured with is in its provenance record."""
    return {
        "run_id": run_id,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config_path": matrix.source,
        "config": dataclasses.asdict(matrix),
        "cells": {c.cell_id: dataclasses.asdict(c) for c in cells},
        "git_sha": env["git_sha"],
        "packages": env["packages"],
        "platform": env["platform"],
        "hardware": env["hardware"],
        "models": models,
    }


def unit_provenance(env: dict[str, Any], cell: Cell, models: dict[str, dict[str, Any]],
                    describe: dict[str, Any] | None, load_error: str | None = None) -> dict[str, Any]:
    """What one engine load measures with: the environment, the model files, and the engine's own description."""
    return {"environment": env, "cell_id": cell.cell_id, "engine": cell.engine, "method": cell.method,
            "models": {"target": models[cell.target], **({"draft": models[cell.draft]} if cell.draft else {})},
            "describe": describe, "load_error": load_error}


def _describe(engine: Any) -> dict[str, Any]:
    try:
        return engine.describe()
    except Exception as exc:  # a description that fails must not cost the measurement
        return {"describe_error": f"{type(exc).__name__}: {exc}"}


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
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": getattr(exc, "remote_traceback", "") or traceback.format_exc()}  # a worker's own, if any


def run_dataset(started: list[tuple[Any, Cell]], name: str, prompts: list[Prompt], warmup: list[Prompt],
                progress: bool) -> dict[str, list[dict[str, Any]]]:
    """One dataset through started (engine, cell) pairs: each cell's warm-up, then prompt by prompt, every cell in turn.

    Returns the records by cell id. A cell that raises gets one error record instead and leaves the rotation.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    live: dict[str, tuple[Any, Cell, SamplingParams, Any]] = {}

    def fail(cell: Cell, exc: BaseException) -> None:  # called from an except block: the traceback is exc's
        out[cell.cell_id] = [_error_record(cell, name, exc)]
        live.pop(cell.cell_id, None)
        tqdm.write(f"[{cell.label}] {name} FAILED: {type(exc).__name__}: {exc}")

    for engine, cell in started:
        params = SamplingParams(cell.temperature, cell.max_new_tokens, cell.seed)
        try:
            for p in warmup:
                engine.generate(p.ids, params)
            live[cell.cell_id] = (engine, cell, params, engine.spec_counters())
            out[cell.cell_id] = []
        except Exception as exc:
            fail(cell, exc)
    who = started[0][1].label if len(started) == 1 else f"{len(started)} cells"
    for p in tqdm(prompts, desc=f"{who} {name}", unit="prompt", disable=not progress, leave=False):
        for cell_id, (engine, cell, params, _) in list(live.items()):
            try:
                out[cell_id].append(_request_record(cell, p, engine.generate(p.ids, params)))
            except Exception as exc:
                fail(cell, exc)
    for cell_id, (engine, cell, _, before) in live.items():
        after = engine.spec_counters()
        if before is not None and after is not None:
            out[cell_id].append({"kind": "spec", "cell_id": cell_id, "label": cell.label, "dataset": name,
                                 **dataclasses.asdict(after - before)})
    return out


_scorers: dict[str, Any] = {}


def _score(target: str) -> Any:
    """The target's teacher-forced log-likelihood of samples (JAX, loaded once per target)."""
    if target not in _scorers:
        from benchmarks.engines.jax.score import Scorer

        _scorers[target] = Scorer(target)
    return _scorers[target].logliks


def _samples(started: list[tuple[Any, Cell]], cell_id: str, name: str, prompts: list[Prompt],
             records: list[dict[str, Any]], target: str) -> list[dict[str, Any]]:
    """The distribution check's samples of a cell at T > 0 whose measured prompts all ran (see benchmarks.sampling)."""
    engine, cell = next((e, c) for e, c in started if c.cell_id == cell_id)
    if cell.temperature <= 0 or any(r["kind"] == "error" for r in records):
        return []
    try:
        return collect_samples(engine, cell, name, prompts, _score(target))
    except Exception as exc:
        tqdm.write(f"[{cell.label}] {name} distribution samples FAILED: {type(exc).__name__}: {exc}")
        return [_error_record(cell, name, exc)]


def worker_spec(engine: str) -> str:
    """What a worker hosts for a cell of `engine` (a registry name; tests substitute scripted "module:Class" ones)."""
    return engine


def engine_factory(matrix: Matrix) -> Callable[[Cell], Engine]:
    """How the run makes a cell's engine: in a worker process where `config.in_worker` says so, else in this one."""
    def make(cell: Cell) -> Engine:
        if not in_worker(matrix, cell.engine):
            return create_engine(cell.engine)
        from benchmarks.engines.worker import WorkerEngine

        # Interleaved, a loaded engine waits between its turns: its processes are stopped meanwhile, because vLLM's
        # CPU worker spins on its shared-memory queue for 1 s after each read (SpinCondition). Measured on 2 shared
        # cores, tiny pair, 128 tokens: the idle worker tree took 68-87 % of a core while the other cell decoded, and
        # the busy cell's TPOT was 14.7-17.4 ms (baseline) / 22-26 ms (DFlash); stopped: 0 %, 5.0-5.4 / 11.0 ms.
        # OMP_WAIT_POLICY=PASSIVE did not change it (the spin is vLLM's, not OpenMP's).
        return WorkerEngine(worker_spec(cell.engine), request_timeout_s=matrix.request_timeout_s,
                            load_timeout_s=matrix.load_timeout_s, pause_idle=matrix.interleave)
    return make


@dataclasses.dataclass
class RunContext:
    """What every group of cells of one run shares: the store (its only writer is this process), the resolved
    prompts, the environment and model fingerprints, and how engines are made."""

    matrix: Matrix
    store: RunStore
    env: dict[str, Any]
    models: dict[str, dict[str, Any]]
    target: str
    prompts: dict[str, tuple[list[Prompt], list[Prompt]]]
    progress: bool
    make_engine: Callable[[Cell], Engine] = lambda cell: create_engine(cell.engine)


def run_group(ctx: RunContext, group: list[Cell]) -> int:
    """Start the group's cells that have pending units, run every dataset through them, write their units; return
    the number of failed units. A cell that fails to start fails its pending units with the cause."""
    store, matrix = ctx.store, ctx.matrix
    pending = {c.cell_id: [d for d in matrix.datasets if not store.is_done(c.cell_id, d.name)] for c in group}
    started: list[tuple[Any, Cell]] = []
    pids: dict[str, str] = {}
    failed = 0
    try:
        for cell in (c for c in group if pending[c.cell_id]):
            engine = None
            try:
                engine = ctx.make_engine(cell)
                t0 = time.perf_counter()
                engine.load(dataclasses.replace(cell, target=ctx.target, draft=materialize(cell.draft)))
                tqdm.write(f"[{cell.label}] {cell.engine} engine ready in {time.perf_counter() - t0:.1f} s")
                env = getattr(engine, "environment", None) or ctx.env  # a remote worker's own machine
                pids[cell.cell_id] = store.write_provenance(unit_provenance(env, cell, ctx.models, _describe(engine)))
                started.append((engine, cell))
            except Exception as exc:
                failure = f"{type(exc).__name__}: {exc}"
                pid = store.write_provenance(unit_provenance(ctx.env, cell, ctx.models, None, failure))
                for d in pending[cell.cell_id]:
                    store.write_unit(cell.cell_id, d.name, [_error_record(cell, d.name, exc)], pid)
                failed += len(pending[cell.cell_id])
                tqdm.write(f"[{cell.label}] FAILED to start: {type(exc).__name__}: {exc}")
                if engine is not None:
                    engine.close()
        for d in matrix.datasets:
            todo = [(e, c) for e, c in started if d in pending[c.cell_id]]
            if todo:
                measured, warmup = ctx.prompts[d.name]
                for cell_id, records in run_dataset(todo, d.name, measured, warmup, ctx.progress).items():
                    records += _samples(todo, cell_id, d.name, measured, records, ctx.target)
                    store.write_unit(cell_id, d.name, records, pids[cell_id])
                    failed += any(r["kind"] == "error" for r in records)
    finally:
        for engine, _ in started:
            engine.close()
    return failed


def families(cells: list[Cell]) -> list[tuple[Cell, list[Cell]]]:
    """Each baseline with the speculative cells whose speedups are measured against it (the summary's pairing: same
    engine, temperature, sampling budget and options), in run order; baselines with no such cell are left out."""
    as_dicts = {c.cell_id: dataclasses.asdict(c) for c in cells}
    found: dict[str, tuple[Cell, list[Cell]]] = {c.cell_id: (c, []) for c in cells if c.method == "baseline"}
    for c in cells:
        base = baseline_cell_id(as_dicts[c.cell_id], as_dicts) if c.method != "baseline" else None
        if base in found:
            found[base][1].append(c)
    return [f for f in found.values() if f[1]]


def recheck_unit(dataset: str) -> str:
    """The store key of a baseline's drift recheck on a dataset (its records keep the dataset's own name)."""
    return f"{dataset}__recheck"


def retire_stale_rechecks(store: RunStore, fams: list[tuple[Cell, list[Cell]]], datasets: list[str]) -> None:
    """Before anything is measured: a recheck whose baseline or speculative cells are to be measured again would no
    longer follow them, so it is retired (units/superseded/) and redone after them."""
    for base, followers in fams:
        for d in datasets:
            if not all(store.is_done(c.cell_id, d) for c in (base, *followers)):
                store.retire_unit(base.cell_id, recheck_unit(d))


def _recheck_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A recheck's requests as kind "recheck" (never a baseline measurement), all of them labelled as the recheck."""
    return ([{**r, "kind": "recheck", "label": f"{r['label']} recheck"} for r in records if r["kind"] == "request"]
            + [{**r, "label": f"{r['label']} recheck", "error": f"drift recheck: {r['error']}"}
               for r in records if r["kind"] == "error"])


def spread(items: list[Any], n: int) -> list[Any]:
    """n of `items` evenly spaced from the first, in order (all of them when n >= len): the recheck's prompts, spread
    over the baseline's measurement so that a host that changed at any point of it shows."""
    return items if n >= len(items) else [items[i * len(items) // n] for i in range(n)]


def run_recheck(ctx: RunContext, baseline: Cell, followers: list[Cell]) -> int:
    """Load the baseline again and measure `drift_prompts` of the measured prompts (`spread`; warm-up first) of each
    dataset whose baseline and at least one speculative cell are done and whose recheck is not; return the number of
    failed rechecks."""
    store, matrix = ctx.store, ctx.matrix
    todo = [d.name for d in matrix.datasets
            if store.is_done(baseline.cell_id, d.name) and not store.is_done(baseline.cell_id, recheck_unit(d.name))
            and any(store.is_done(c.cell_id, d.name) for c in followers)]
    if not todo:
        return 0
    n = min(matrix.drift_prompts, matrix.num_prompts)
    engine = None
    failed = 0
    try:
        try:
            engine = ctx.make_engine(baseline)
            engine.load(dataclasses.replace(baseline, target=ctx.target))
            pid = store.write_provenance(unit_provenance(ctx.env, baseline, ctx.models, _describe(engine)))
        except Exception as exc:
            pid = store.write_provenance(unit_provenance(ctx.env, baseline, ctx.models, None,
                                                         f"{type(exc).__name__}: {exc}"))
            for name in todo:
                records = _recheck_records([_error_record(baseline, name, exc)])
                store.write_unit(baseline.cell_id, recheck_unit(name), records, pid)
            tqdm.write(f"[{baseline.label}] drift recheck FAILED to start: {type(exc).__name__}: {exc}")
            return len(todo)
        for name in todo:
            measured, warmup = ctx.prompts[name]
            records = _recheck_records(run_dataset([(engine, baseline)], name, spread(measured, n), warmup,
                                                   ctx.progress)[baseline.cell_id])
            store.write_unit(baseline.cell_id, recheck_unit(name), records, pid)
            failed += any(r["kind"] == "error" for r in records)
            before = {r["prompt_sha256"]: r["tpot_ms"] for r in store.records()
                      if r["kind"] == "request" and r["cell_id"] == baseline.cell_id and r["dataset"] == name}
            after = [r for r in records if r["kind"] == "recheck" and r["prompt_sha256"] in before]
            d = baseline_drift([before[r["prompt_sha256"]] for r in after], [r["tpot_ms"] for r in after])
            tqdm.write(f"[{baseline.label}] {name} drift recheck on {d.n} prompts: TPOT {d.before_ms:.2f} ms before, "
                       f"{d.after_ms:.2f} ms after ({100 * d.drift:+.1f} %)")
    finally:
        if engine is not None:
            engine.close()
    return failed


def run_matrix(matrix: Matrix, run_dir: Path | None = None, progress: bool = True,
               resolved: tuple[list[Cell], dict[str, dict[str, Any]]] | None = None) -> tuple[Path, int]:
    """Run every pending (cell, dataset) unit; return the run folder and the number of failed units.

    `resolved` is `matrix_cells(matrix)` when the caller has it already (fingerprinting reads every model file)."""
    cells, models = resolved or matrix_cells(matrix)
    env = provenance.environment()
    problem = interleave_problem(matrix, [c.engine for c in cells], env["platform"])
    if problem:
        raise ConfigError(problem)
    run_dir = Path(run_dir) if run_dir else RUNS_DIR / run_id_for(matrix)
    store = RunStore(run_dir)
    superseded = store.retire_units({c.cell_id for c in cells})
    if superseded:
        tqdm.write(f"{len(superseded)} units measured with other model files moved to units/superseded/; "
                   f"their cells are measured again")
    store.write_manifest(build_manifest(matrix, cells, run_dir.name, models, env))
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
    ctx = RunContext(matrix, store, env, models, target, prompts, progress, engine_factory(matrix))
    groups = [cells] if matrix.interleave else [[cell] for cell in cells]
    # one after another: each baseline is measured again once the last of its speculative cells has run (serving
    # levels are not rechecked: a level is a load, not one prompt at a time)
    batch1 = [c for c in cells if c.engine not in SERVING_ENGINES]
    fams = families(batch1) if not matrix.interleave and matrix.drift_prompts else []
    retire_stale_rechecks(store, fams, [d.name for d in matrix.datasets])
    if matrix.executor == "ray":  # cells run concurrently, on whichever node: a before/after recheck means nothing
        from benchmarks.ray_executor import run_groups

        return run_dir, run_groups(ctx, groups)
    recheck_after = {followers[-1].cell_id: (base, followers) for base, followers in fams}
    failed = 0
    bar = tqdm(total=len(cells), desc="cells", unit="cell", disable=not progress)
    for group in groups:
        if group[0].engine in SERVING_ENGINES:  # a real server per cell, under the matrix's concurrency levels
            from benchmarks.serve_runner import run_serve_group

            failed += run_serve_group(ctx, group)
        else:
            failed += run_group(ctx, group)
        bar.update(len(group))
        if group[-1].cell_id in recheck_after:
            failed += run_recheck(ctx, *recheck_after[group[-1].cell_id])
    bar.close()
    return run_dir, failed
