"""What every group of cells of one run shares (`RunContext`: the plan, the store, how engines are made), how a
cell's engine is made (in this process or in a worker), and the records and provenance the run writes for each unit."""
from __future__ import annotations

import dataclasses
import re
import traceback
from datetime import datetime, timezone
from typing import Any, Callable

from benchmarks.core.config import Matrix
from benchmarks.core.datasets import Prompt
from benchmarks.core.metrics import tpot_ms
from benchmarks.core.placement import in_worker
from benchmarks.core.records import Cell
from benchmarks.core.store import RunStore
from benchmarks.engines import Engine, create_engine, implementation
from benchmarks.run.plan import RunPlan

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


def build_manifest(plan: RunPlan) -> dict[str, Any]:
    """The run's shape (config, cells, models); its environment fields are the latest invocation's. What each unit
    was measured with is in its provenance record. Credentials written into a URL are not kept."""
    env = plan.env
    return redacted({
        "run_id": plan.run_dir.name,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config_path": plan.matrix.source,
        "config": dataclasses.asdict(plan.matrix),
        "cells": {c.cell_id: dataclasses.asdict(c) for c in plan.cells},
        "git_sha": env["git_sha"],
        "packages": env["packages"],
        "platform": env["platform"],
        "hardware": env["hardware"],
        "models": plan.models,
        "prompts_skipped": plan.skipped,
        "prompts": prompt_manifest(plan),
    })


def prompt_manifest(plan: RunPlan) -> dict[str, Any]:
    """How the run's prompts were made: the chat template's keyword arguments and hash, warnings about the drafts,
    and per workload each measured prompt's row, hash, length and construction (context rows, first answer)."""
    setup = plan.setup
    return {
        "chat_template": setup.template if setup else None,
        "chat_template_sha256": setup.template_sha256 if setup else None,
        "template_ignores": setup.template_ignores if setup else [],
        "max_prompt_tokens": setup.max_prompt_tokens if setup else None,
        "trained_lengths": setup.trained_lengths if setup else None,
        "warnings": setup.warnings if setup else [],
        "first_answers_by": {"cell_id": setup.generator.cell_id, "engine": setup.generator.engine,
                             "label": setup.generator.label} if setup and setup.generator else None,
        "workloads": {key: [{"index": p.index, "sha256": p.sha256, "tokens": len(p.ids), **p.workload_fields(),
                             **p.construction} for p in measured]
                      for key, (measured, _) in plan.prompts.items()},
    }


def unit_provenance(env: dict[str, Any], cell: Cell, models: dict[str, dict[str, Any]],
                    describe: dict[str, Any] | None, load_error: str | None = None) -> dict[str, Any]:
    """What one engine load measures with: the environment, the model files, and the engine's own description."""
    return {"environment": env, "cell_id": cell.cell_id, "engine": cell.engine, "method": cell.method,
            "models": {"target": models[cell.target], **({"draft": models[cell.draft]} if cell.draft else {})},
            "describe": describe, "load_error": load_error}


def describe_engine(engine: Any) -> dict[str, Any]:
    try:
        return engine.describe()
    except Exception as exc:  # a description that fails must not cost the measurement
        return {"describe_error": f"{type(exc).__name__}: {exc}"}


def request_record(cell: Cell, prompt: Prompt, rec: Any) -> dict[str, Any]:
    n_out = len(rec.output_ids)
    return {
        "kind": "request", "cell_id": cell.cell_id, "label": cell.label, "engine": cell.engine,
        "method": cell.method, "k": cell.k, "dataset": prompt.key, **prompt.workload_fields(),
        "prompt_index": prompt.index,
        "prompt_sha256": prompt.sha256, "n_prompt_tokens": len(prompt.ids), "n_out": n_out,
        "ttft_ms": 1000.0 * rec.ttft_s, "tpot_ms": tpot_ms(rec.ttft_s, rec.last_token_s, n_out),
        "decode_s": rec.last_token_s - rec.ttft_s, "output_ids": list(rec.output_ids),
        "accept_lengths": rec.accept_lengths, **({"extra": rec.extra} if rec.extra else {}),
    }


def error_record(cell: Cell, dataset: str, exc: BaseException) -> dict[str, Any]:
    return {"kind": "error", "cell_id": cell.cell_id, "label": cell.label, "dataset": dataset,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": getattr(exc, "remote_traceback", "") or traceback.format_exc()}  # a worker's own, if any


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
        return WorkerEngine(implementation(cell.engine), request_timeout_s=matrix.request_timeout_s,
                            load_timeout_s=matrix.load_timeout_s, pause_idle=matrix.interleave)
    return make


@dataclasses.dataclass
class RunContext:
    """What every group of cells of one run shares: the plan, the store (its only writer is this process), and how
    engines are made."""

    plan: RunPlan
    store: RunStore
    make_engine: Callable[[Cell], Engine]

    def provenance(self, cell: Cell, engine: Any = None, failure: BaseException | None = None) -> str:
        """Store what a load of `cell` measures with (the loaded engine's description, or the failure that stopped
        it) and return its id; a remote worker's own machine is its environment."""
        env = getattr(engine, "environment", None) or self.plan.env
        describe = describe_engine(engine) if engine is not None and failure is None else None
        error = f"{type(failure).__name__}: {failure}" if failure is not None else None
        return self.store.write_provenance(unit_provenance(env, cell, self.plan.models, describe, error))

