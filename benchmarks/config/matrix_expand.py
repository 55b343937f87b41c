"""Expand a validated matrix into cells: engine × temperature × batch size × (baseline, method × K or tree budget);
the run id of a matrix (and the one run folders written before IDENTITY_VERSION 1 are named by)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

from benchmarks.config.engine_option_keys import own_options
from benchmarks.config.matrix_schema import IDENTITY_FIELDS, Matrix
from benchmarks.core.cells import TREE_METHODS, Cell, CellOptions, KRange, KSchedule, Shape, TreeBudget
from benchmarks.decide.k_schedules import Schedule, looks_like
from benchmarks.engines import catalog

IDENTITY_VERSION = 1  # raise it when `identity` changes what it hashes
_LEGACY_PLACEMENT = ("executor", "resources", "workers", "request_timeout_s", "load_timeout_s")
# The fields of that time that the legacy id hashes unset too; any other unset field (a workload key of that time, or
# a key added since) is left out, as if it were not there.
_LEGACY_UNSET_HASHED = ("block_size", "request_rate")


def options_for(engine: str, options: CellOptions) -> CellOptions:
    """Shared engine options plus the engine's own sub-mapping (e.g. `vllm: {enforce_eager: true}`); a serving
    engine also takes the sub-mapping of the engine it serves (`vllm-serve` takes `vllm:`), its own winning."""
    shared = {k: v for k, v in options.items() if k not in catalog.ENGINES}
    return {**shared, **own_options(options, catalog.engine(engine).serves), **own_options(options, engine)}


def expand(m: Matrix) -> list[Cell]:
    """Cells in run order: for each engine, temperature and batch size the baseline comes first, so a crash late in
    a run still leaves the reference that every speedup and lossless check needs. A matrix over several engines gives
    each engine only the methods it runs (a single engine asked for a method it lacks fails with its own error)."""
    cells: list[Cell] = []
    for engine in m.engines:
        for temperature in m.temperatures:
            for batch_size in m.batch_size or [1]:
                baseline = Cell(engine=engine, target=m.target, method="baseline", draft=None, k=0,
                                temperature=temperature, max_new_tokens=m.max_new_tokens, seed=m.seed,
                                engine_options=options_for(engine, m.engine_options), batch_size=batch_size)
                if "baseline" in m.methods:
                    cells.append(baseline)
                for method in m.methods:
                    if method == "baseline" or (len(m.engines) > 1 and method not in catalog.engine(engine).methods):
                        continue
                    shapes = (_budgets_at(m.tree_budget, batch_size) if method in TREE_METHODS
                              else _ks_at(m.k[method], engine, batch_size))
                    cells += [dataclasses.replace(baseline, method=method, draft=m.drafts.get(method), k=k,
                                                  shape=shape) for k, shape in shapes]
    return cells


def _at(values: list[int] | Schedule, batch_size: int) -> list[int]:
    """A method's Ks (or budgets) at one batch size: each of a list; a schedule's value at that B (none where it is
    0, but at B = 1, which runs the schedule's largest: the greedy-identity verdict its cells at larger B take)."""
    if not isinstance(values, Schedule):
        return values
    value = values.k_at(batch_size) or (values.max_k() if batch_size == 1 else 0)
    return [value] if value else []


def _ks_at(ks: list[int] | Schedule, engine: str, batch_size: int) -> list[tuple[int, Shape]]:
    """The (K, shape) of a chain method's cells at one batch size: a fixed K, or a schedule's with its ranges closed
    at that B, which an engine that takes a schedule whole runs whole."""
    if not isinstance(ks, Schedule):
        return [(k, None) for k in ks]
    shape = KSchedule(ranges_at(ks, batch_size), whole=catalog.engine(engine).whole_k_schedule)
    return [(k, shape) for k in _at(ks, batch_size)]


def _budgets_at(budgets: list[int] | Schedule | None, batch_size: int) -> list[tuple[int, Shape]]:
    """The (K = 0, shape) of a tree method's cells at one batch size: one per budget."""
    if budgets is None:
        raise ValueError("a tree method's cells need the matrix's tree_budget")
    return [(0, TreeBudget(b, scheduled=isinstance(budgets, Schedule))) for b in _at(budgets, batch_size)]


def ranges_at(schedule: Schedule, batch_size: int) -> tuple[KRange, ...]:
    """A schedule's ranges (first B, last B, K) up to a batch size, the last one closed there."""
    return tuple((r.first, min(r.last or batch_size, batch_size), r.k) for r in schedule.ranges
                 if r.first <= batch_size)


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """What a matrix (given as its fields: `dataclasses.asdict` of it, or a run manifest's `config`) measures: its
    declared identity keys that are set (an unset one leaves the id as it was before the key existed), a local
    prompt file by its absolute path, and IDENTITY_VERSION. Never the matrix file's path, wording or description,
    nor where and how its cells run (the placement keys)."""
    fields: dict[str, Any] = {f: config.get(f) for f in IDENTITY_FIELDS if config.get(f) is not None}
    fields["datasets"] = [{**d, "path": os.path.abspath(d["path"]) if d.get("path") else None}
                          for d in fields.get("datasets", [])]
    return {"identity_version": IDENTITY_VERSION, **fields}


def run_id_for(matrix: Matrix) -> str:
    """`<name>-<8 hex>`: the same for the same measurement, so that rerunning a matrix resumes its run wherever the
    file lies and however it is worded."""
    return config_id(dataclasses.asdict(matrix))


def config_id(config: dict[str, Any]) -> str:
    """`run_id_for` of a matrix given as its fields (a run manifest's `config`)."""
    return _hashed(config["name"], identity(config))


def legacy_run_id(matrix: Matrix) -> str:
    """The run id before IDENTITY_VERSION 1, which names the run folders written then: a hash of every field (the
    file's path and raw mapping too) but the placement keys of that time and the unset fields of no weight then (its
    unset workload keys, any key added since)."""
    config = dataclasses.asdict(matrix)
    return _hashed(config["name"], {k: v for k, v in config.items() if k not in _LEGACY_PLACEMENT
                                    and (v is not None or k in _LEGACY_UNSET_HASHED)})


def _hashed(name: str, fields: dict[str, Any]) -> str:
    blob = json.dumps(fields, sort_keys=True, default=str)
    return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"


MIN_BATCHES = 4  # independent batches at the largest batch size below which its interval is too wide to decide


def _past_written_ranges(matrix: Matrix) -> list[str]:
    """A line per schedule written as vLLM's ranges (a method's K, or the tree budget) that ends below a batch size of
    the matrix: that B runs the last range's value (as vLLM carries it upwards), which the ranges as written do not
    say."""
    raw = matrix.raw.get("k")
    written = raw if isinstance(raw, dict) and not looks_like(raw) else dict.fromkeys(matrix.k, raw)
    schedules = [("k", f"the ranges of {method}", "K", "as vLLM carries it upwards", matrix.k.get(method), value)
                 for method, value in written.items()]
    schedules.append(("tree_budget", "the ranges", "budget", "the last range holds upwards", matrix.tree_budget,
                      matrix.raw.get("tree_budget")))
    out = []
    for key, ranges, what, why, schedule, value in schedules:
        if not (isinstance(schedule, Schedule) and isinstance(value, list) and looks_like(value)):
            continue
        end = max(entry[1] for entry in value)
        past = [b for b in matrix.batch_size or [] if b > end]
        if past:
            out.append(f"{key}: {ranges} end at B = {end}, so batch_size {', '.join(map(str, past))} "
                       f"run{'s' if len(past) == 1 else ''} the last range's {what} = {schedule.k_at(max(past))} "
                       f"({why}); add a range to run another {what} there")
    return out


def matrix_warnings(matrix: Matrix) -> list[str]:
    """What a valid matrix will measure too thinly or leave unchecked: a largest batch size with fewer than
    MIN_BATCHES batches of the measured prompts (at B > 1 a batch, not a prompt, is the unit of independence), and
    batch sizes without 1, whose speculative cells' checks (a verdict of batch 1's) are then NOT CHECKED, and batch
    sizes past the last range a schedule's [[first B, last B, K], ...] writes, which run its last K."""
    if not matrix.batch_size:
        return []
    out = _past_written_ranges(matrix)
    if 1 not in matrix.batch_size and any(m != "baseline" for m in matrix.methods):
        out.append(f"batch_size {matrix.batch_size} has no 1: greedy identity and the distribution check are verdicts "
                   f"of a batch-1 cell, so the speculative cells are NOT CHECKED and the run exits 4 (unless "
                   f"--allow-unchecked); add 1 to 'batch_size'")
    top = max(matrix.batch_size)
    n = matrix.num_prompts // top
    if n >= MIN_BATCHES:
        return out
    thin = (f"no interval at B = {top}, whose crossover is then inconclusive" if n < 2
            else f"a very wide interval at B = {top}")
    return out + [f"batch_size {top} makes {n} batch{'es' if n != 1 else ''} of the {matrix.num_prompts} measured "
                  f"prompts: {thin}; num_prompts: {MIN_BATCHES * top} gives {MIN_BATCHES} batches (study "
                  f"crossover-power estimates the power)"]

