"""One group of cells through every dataset: each cell's warm-up, then prompt by prompt with every cell in turn (one
cell, or an interleaved group, in an order drawn afresh each round: `round_order`); a cell of batch size B takes its
turn a batch at a time (`batches`). Warm-up prompts
are excluded from every figure; each engine's cumulative speculative counters are diffed around the measured prompts
only. A cell that raises is recorded with its error and the others go on. After each dataset, a loaded baseline runs
the lossless check's untimed tie pass for its loaded speculative cells (benchmarks/run/tie_pass.py)."""
from __future__ import annotations

import random
from typing import cast

from tqdm import tqdm

from benchmarks.config.placement import start_side_by_side
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams, SpecCounters
from benchmarks.data.datasets import Prompt
from benchmarks.engines import Engine, GenerateBatch
from benchmarks.records.records import ErrorLine, Line, cause, error_line, request_line, spec_line
from benchmarks.run.context import RunContext
from benchmarks.run.engine_start import Loading, start_engine
from benchmarks.run.sampling import cell_samples
from benchmarks.run.tie_pass import run_loaded_ties


def batches(prompts: list[Prompt], size: int) -> list[list[Prompt]]:
    """The prompts in static batches of `size`: consecutive prompts in the run's prompt order (the seeded selection's;
    the last batch may be short), the same for every cell of that size, so that a method's batch pairs with the
    baseline's."""
    return [prompts[i:i + size] for i in range(0, len(prompts), size)]


def batched(engine: Engine) -> GenerateBatch:
    """The engine of a cell of batch size B > 1 as the `generate_batch` it has: the matrix check admits batch sizes
    only for engines whose catalog row declares it."""
    return cast(GenerateBatch, engine)


def run_batch(engine: Engine, cell: Cell, prompts: list[Prompt], params: SamplingParams,
              index: int | None) -> list[Line]:
    """One turn of a cell: a prompt alone (batch 1, `index` None), or a static batch through `generate_batch`."""
    if index is None:
        return [request_line(cell, prompts[0], engine.generate(prompts[0].ids, params))]
    outputs = batched(engine).generate_batch([p.ids for p in prompts], params)
    return [request_line(cell, p, out, batch_index=index) for p, out in zip(prompts, outputs, strict=True)]


def round_order(cell_ids: list[str], dataset: str, round_index: int) -> list[str]:
    """The order an interleaved group's cells take round `round_index` of `dataset` in: a permutation seeded by the
    two, the same in every run. A fixed order would give each cell the same predecessor and place every round (the
    cache state the cell before leaves, a slowdown late in a round), a bias per cell that interleaving does not
    remove; drawn afresh each round, it becomes noise shared out among the cells."""
    order = list(cell_ids)
    random.Random(f"{dataset}/{round_index}").shuffle(order)
    return order


def warm_up(engine: Engine, cell: Cell, warmup: list[Prompt], params: SamplingParams) -> None:
    """A cell's warm-up: each prompt alone, or one batch of its size filled with the warm-up prompts in turn."""
    if cell.batch_size == 1:
        for p in warmup:
            engine.generate(p.ids, params)
    elif warmup:
        batched(engine).generate_batch([warmup[i % len(warmup)].ids for i in range(cell.batch_size)], params)


def run_dataset(started: list[tuple[Engine, Cell]], name: str, prompts: list[Prompt], warmup: list[Prompt],
                progress: bool) -> dict[str, list[Line]]:
    """One dataset's workload (`name`, its key) through started (engine, cell) pairs: each cell's warm-up, then prompt
    by prompt (batch by batch for a cell of batch size B > 1), every cell in turn.

    Returns the records by cell id. A cell that raises gets one error record instead and leaves the rotation.
    """
    out: dict[str, list[Line]] = {}
    live: dict[str, tuple[Engine, Cell, SamplingParams, SpecCounters | None]] = {}

    def fail(cell: Cell, exc: BaseException) -> None:  # called from an except block: the traceback is exc's
        out[cell.cell_id] = [error_line(cell, name, exc)]
        live.pop(cell.cell_id, None)
        tqdm.write(f"[{cell.label}] {name} FAILED: {cause(exc)}")

    for engine, cell in started:
        params = SamplingParams(cell.temperature, cell.max_new_tokens, cell.seed)
        try:
            warm_up(engine, cell, warmup, params)
            live[cell.cell_id] = (engine, cell, params, engine.spec_counters())
            out[cell.cell_id] = []
        except Exception as exc:
            fail(cell, exc)
    who = started[0][1].label if len(started) == 1 else f"{len(started)} cells"
    turns = {c.cell_id: batches(prompts, c.batch_size) for _, c in started}
    rounds = max((len(t) for t in turns.values()), default=0)
    for j in tqdm(range(rounds), desc=f"{who} {name}", unit="turn", disable=not progress, leave=False):
        for cell_id in round_order(list(live), name, j):
            engine, cell, params, _ = live[cell_id]
            if j >= len(turns[cell_id]):
                continue
            try:
                out[cell_id] += run_batch(engine, cell, turns[cell_id][j], params,
                                          j if cell.batch_size > 1 else None)
            except Exception as exc:
                fail(cell, exc)
    for cell_id, (engine, cell, _, before) in list(live.items()):
        try:  # an engine that dies after its last request (a worker killed as it returned) fails here
            after = engine.spec_counters()
        except Exception as exc:
            fail(cell, exc)
            continue
        if before is not None and after is not None:
            out[cell_id].append(spec_line(cell, name, after - before))
    return out


def run_group(ctx: RunContext, group: list[Cell]) -> int:
    """Start the group's cells that have pending units, run every workload through them, write their units; return
    the number of failed units. A cell that fails to start fails its pending units with the cause."""
    store = ctx.store
    pending = {c.cell_id: [u.workload_key for u in ctx.pending(c)] for c in group}
    started: list[tuple[Engine, Cell]] = []
    pids: dict[str, str] = {}
    failed = 0
    cells = [c for c in group if pending[c.cell_id]]
    side_by_side = start_side_by_side(ctx.plan.matrix, [c.engine for c in cells], ctx.plan.env["platform"])
    loading = {c.cell_id: Loading(ctx, c) for c in cells} if side_by_side else {}
    try:
        for cell in cells:
            done = start_engine(ctx, cell, lambda exc: [
                (cell, name, error_line(cell, name, exc)) for name in pending[cell.cell_id]], say_ready=True,
                loading=loading.get(cell.cell_id))
            if isinstance(done, int):
                failed += done
                continue
            started.append((done[0], cell))
            pids[cell.cell_id] = done[1]
        for w in ctx.plan.workloads:
            todo = [(e, c) for e, c in started if w.key in pending[c.cell_id]]
            if todo:
                measured, warmup = ctx.prompts[w.key]
                for cell_id, records in run_dataset(todo, w.key, measured, warmup, ctx.plan.progress).items():
                    engine, cell = next((e, c) for e, c in todo if c.cell_id == cell_id)
                    if cell.batch_size == 1:  # a sampler's distribution check is batch 1's
                        records += cell_samples(engine, cell, w.key, measured, records)
                    store.write_unit(cell_id, w.key, records, pids[cell_id])
                    failed += any(isinstance(r, ErrorLine) for r in records)
                failed += run_loaded_ties(ctx, started, pids, w.key)  # untimed, the baseline still loaded
    finally:
        for engine, _ in started:
            engine.close()
        for pending_load in loading.values():  # loads not taken up (the run stopped): their engines closed too
            if pending_load.engine is not None and all(pending_load.engine is not e for e, _ in started):
                pending_load.engine.close()
    return failed

