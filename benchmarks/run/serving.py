"""Serving units: one server per cell (its catalog row's `Server`, benchmarks/engines/server.py), each (dataset,
concurrency) level driven through it by the server's load generator.

A unit of the run plan is (cell, dataset, concurrency[, request rate]); its store key is `unit_keys.level_key(...)`, so
resume and atomic writes work as for batch-1 units. A capacity search's probes are measured the same way, each
round a unit of its own, in the order benchmarks/run/capacity_search.py decides.

Per level the warm-up prompts go first and are thrown away; the measured prompts' results become the records the rest
of the harness reads (`level_records`: one `request` record per prompt, one `spec` record of the /metrics diff, one
`load` record). Before a dataset's first level, the server's own ids of every prompt text are compared with the
harness's (`check_prompt_ids`): a prompt the server tokenises otherwise fails the level rather than pairing different
prompts. At T > 0 the unit of the matrix's first concurrency level also
holds the cell's distribution-check samples, drawn through the server (benchmarks/run/sampling.py). What each figure
means: docs/serving.md.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import LoadResult, RequestRecord, SpecCounters
from benchmarks.data.datasets import Prompt, sent_text
from benchmarks.decide.capacity import Step
from benchmarks.engines import catalog, engine_class
from benchmarks.engines.server import Load
from benchmarks.records.records import (
    ErrorLine,
    Level,
    Line,
    cause,
    error_line,
    load_line,
    probe_of,
    request_line,
    served_spec_line,
)
from benchmarks.records.store import StoreWriteError
from benchmarks.run.capacity_search import Search, paths, run_search
from benchmarks.run.sampling import cell_samples

if TYPE_CHECKING:
    from benchmarks.engines.server import Server
    from benchmarks.run.context import RunContext
    from benchmarks.run.plan import Unit

# A request whose stream reached the client in one burst (mean gap between its chunks under this, far below any
# decode step) carries no decode timing: the client, or the server's frontend, was not scheduled while its tokens were
# made (docs/engine-findings.md). Its tpot_ms is None, its raw value stays in extra.client_tpot_ms.
BURST_ITL_MS = 0.5


def check_prompt_ids(prompts: list[Prompt], server_ids: list[list[int]]) -> None:
    """Raise unless the server made each prompt's text into exactly the harness's token ids."""
    for p, ids in zip(prompts, server_ids, strict=True):
        if list(ids) != list(p.ids):
            at = next((i for i, (a, b) in enumerate(zip(ids, p.ids)) if a != b), min(len(ids), len(p.ids)))
            raise RuntimeError(f"prompt {p.index} reached the server as other token ids than the harness's (first "
                               f"difference at token {at}; {len(ids)} vs {len(p.ids)} tokens): the server's "
                               f"tokenizer or template differs")


def level_records(cell: Cell, prompts: list[Prompt], result: LoadResult, tokenizer: Any, concurrency: int,
                  request_rate: float | None, spec: SpecCounters | None,
                  server_tpot: tuple[float, float] | None = None) -> list[Line]:
    """One level's load-generator result (`--save-detailed`) as our records; raises on a failed request or a request
    whose prompt the server counted as another length than the harness's ids (`check_prompt_ids` compares the ids).
    `server_tpot` is the (sum s, count) diff of the server's per-request TPOT histogram around the level (None where
    the server does not export it).

    - one `request` record per prompt: TTFT, TPOT (from the first-token and last-token times, as for batch-1
      records) and ITLs from the load generator's streamed timings, the output length the server counted, and the
      output ids: `vllm bench serve` keeps only the text, so they are that text tokenised again with the target's
      tokenizer (`extra.output_ids_from = "text"`); a load generator that returns the ids (`output_ids`) gives them
      as they are (`"server"`). Identical texts give identical ids, so token identity between
      two serving cells is exact; the first-divergence index is in re-tokenised tokens;
    - one `spec` record for speculative cells: the requests' verify steps, each counted within its output, where
      the load generator sees them (`accept_lengths`, which the request records carry too: llama.cpp's), else `spec`,
      the server's /metrics diff (vLLM's, which counts past each output: report.md's caveat);
    - one `load` record: the level's wall time, completed and failed requests, output tokens, and the server's own
      TPOT sum and count (engine-core clock, the offline engine's definition): the load generator sees only the
      client side, which on a starved host includes the server frontend's and its own scheduling delays.
    """
    failed = [(p.index, e) for p, e in zip(prompts, result.errors) if e]
    if failed or len(result.ttfts) != len(prompts):
        raise RuntimeError(f"{len(failed)} of {len(prompts)} requests failed; first: prompt {failed[0][0]}: "
                           f"{failed[0][1]}" if failed
                           else f"{len(result.ttfts)} results for {len(prompts)} prompts")
    level = Level(concurrency, request_rate)
    records: list[Line] = []
    for i, p in enumerate(prompts):
        if result.input_lens[i] != len(p.ids):
            raise RuntimeError(f"prompt {p.index} was counted by the server as {result.input_lens[i]} tokens, "
                               f"not the harness's {len(p.ids)}: the server's tokenizer or template differs")
        ttft_s, last_s, n_out = result.ttfts[i], result.latencies[i], result.output_lens[i]
        itl_ms = [1000.0 * x for x in result.itls[i]]
        if result.output_ids is not None:  # a load generator that returns the server's ids
            output = RequestRecord(list(result.output_ids[i]), ttft_s, last_s, extra={"output_ids_from": "server"})
        else:
            text = (result.generated_texts or [])[i]
            output = RequestRecord(list(tokenizer(text, add_special_tokens=False)["input_ids"]), ttft_s, last_s,
                                   extra={"output_ids_from": "text", "output_text": text})
        if result.accept_lengths is not None and result.draft_lengths is not None:  # its verify steps, as counted
            output.accept_lengths = result.accept_lengths[i]
            output.extra["draft_lengths"] = result.draft_lengths[i]
        line = request_line(cell, p, output, n_out=n_out, level=level, itl_ms=itl_ms,
                            start_s=result.start_times[i])
        if len(itl_ms) > 1 and sum(itl_ms) / len(itl_ms) < BURST_ITL_MS:  # a burst: no decode timing
            line = dataclasses.replace(line, tpot_ms=None, extra={**(line.extra or {}), "delivery_burst": True,
                                                                  "client_tpot_ms": line.tpot_ms})
        records.append(line)
    if result.accept_lengths is not None and result.draft_lengths is not None:
        spec = sum((SpecCounters.from_accept_lengths(a, cell.k, d)
                    for a, d in zip(result.accept_lengths, result.draft_lengths)), SpecCounters())
    if spec is not None:
        records.append(served_spec_line(cell, prompts[0], level, spec))
    records.append(load_line(cell, prompts[0], level, result, server_tpot))
    return records


def run_serve_group(ctx: RunContext, group: list[Cell]) -> int:
    """Serve each cell of the group that has pending levels or an unfinished capacity search: start its server (the
    catalog's class for the cell's engine), run the levels, then the searches (benchmarks/run/capacity_search.py),
    stop it. A server that does not start fails the cell's pending levels and its searches' next probes with its log
    tail as the cause; returns failed units."""
    from benchmarks.run.cell_files import with_model_files  # lazy: imports yaml
    from benchmarks.run.engine_start import fail_units  # lazy: imports yaml

    def error(unit: Unit, exc: BaseException) -> ErrorLine:
        return error_line(unit.cell, unit.workload_key, exc, concurrency=unit.concurrency)

    store, plan = ctx.store, ctx.plan
    failed = 0
    for cell in group:
        pending, searches = ctx.pending(cell), ctx.pending_searches(cell)
        if not pending and not searches:
            continue
        who = f"{catalog.engine(cell.engine).base} server"
        server: Server = engine_class(cell.engine)(with_model_files(cell, plan.target),
                                                   store.run_dir / "logs" / f"{cell.cell_id}.server.log",
                                                   sequences=plan.server_sequences())
        level = LevelRunner(ctx, cell, server)
        try:
            with server:
                tqdm.write(f"[{cell.label}] {who} healthy on port {server.port}")
                pid = ctx.provenance(cell, server)
                failed += level.run_levels(pending, pid)
                for search in searches:
                    failed += not run_search(store, search, level.probe, pid)
        except StoreWriteError:
            raise
        except Exception as exc:  # the server did not start (or died between levels): the rest fail with its cause
            rest: list[tuple[Cell, str, Line]] = [(cell, u.store_key, error(u, exc)) for u in pending
                                                  if u.store_key not in level.written]
            for search in searches:
                step = next((p.pending for p in paths(store, search) if p.pending is not None), None)
                if step is not None and search.key(step) not in level.written:
                    rest.append((cell, search.key(step), error_line(cell, search.workload.key, exc,
                                                                    concurrency=search.level(step)[0])))
            failed += fail_units(ctx, cell, exc, rest, f"[{cell.label}] {who} FAILED: {cause(exc).splitlines()[0]}")
    return failed


class LevelRunner:
    """One cell's server measuring serving levels and capacity probes: the load generator's pass over the warm-up
    prompts (thrown away), then over the measured ones between two reads of the server's counters; a dataset's prompt
    ids are checked against the server's before its first level or probe."""

    def __init__(self, ctx: RunContext, cell: Cell, server: Server):
        self.ctx, self.cell, self.server = ctx, cell, server
        tokenizer = ctx.plan.tokenizer
        self.texts = {name: ([sent_text(p, tokenizer) for p in measured], [sent_text(p, tokenizer) for p in warmup])
                      for name, (measured, warmup) in ctx.prompts.items()}  # the chat-templated prompts sent
        self.work = ctx.store.run_dir / "serve" / cell.cell_id
        self.written: set[str] = set()
        self.ids_checked: set[str] = set()

    def measure(self, name: str, prompts: slice, concurrency: int, request_rate: float | None,
                tag: str) -> tuple[list[Line], LoadResult]:
        """One pass at a level over the workload's measured prompts `prompts` (after its warm-up prompts): its
        records and the load generator's result."""

        cell, server = self.cell, self.server
        measured, (texts, warmup_texts) = self.ctx.prompts[name][0][prompts], self.texts[name]
        if name not in self.ids_checked:
            check_prompt_ids(self.ctx.prompts[name][0], [server.prompt_ids(t) for t in texts])
            self.ids_checked.add(name)
        load = Load(texts[prompts], cell.max_new_tokens, cell.temperature, concurrency, request_rate, cell.seed)
        if warmup_texts:
            server.run_load(dataclasses.replace(load, prompts=warmup_texts), self.work, f"{tag}.warmup")
        before = server.counters()
        result = server.run_load(load, self.work, tag)
        level = server.counters() - before
        return level_records(cell, measured, result, self.ctx.plan.tokenizer, concurrency, request_rate, level.spec,
                             level.tpot), result

    def run_levels(self, pending: list[Unit], provenance_id: str) -> int:
        """Measure the cell's pending serving levels, one unit each; returns those that failed."""

        ctx, cell, failed = self.ctx, self.cell, 0
        first_level = ctx.plan.matrix.concurrency[0] if ctx.plan.matrix.concurrency else None
        for unit in pending:
            name, c = unit.workload_key, unit.concurrency
            assert c is not None  # a serving unit is a level
            try:
                records, result = self.measure(name, slice(None), c, unit.request_rate, unit.store_key)
                if c == first_level:  # a cell's samples once, with its first level (T > 0 only)
                    records += cell_samples(self.server, cell, name, ctx.prompts[name][0], records, c)
                tqdm.write(f"[{cell.label}] {name} at concurrency {c}: {result.completed} requests in "
                           f"{result.duration:.1f} s")
            except Exception as exc:
                failure = error_line(cell, name, self.server.explain(exc), concurrency=c)
                records = [failure]
                tqdm.write(f"[{cell.label}] {name} at concurrency {c} FAILED: {failure.error}")
            ctx.store.write_unit(cell.cell_id, unit.store_key, records, provenance_id)
            self.written.add(unit.store_key)
            failed += any(isinstance(r, ErrorLine) for r in records)
        return failed

    def probe(self, search: Search, step: Step) -> list[Line]:
        """One capacity probe round: the round's prompts at the step's level, as probe records (a failure raises,
        with the server's log tail when it is no longer running)."""
        concurrency, rate = search.level(step)
        try:
            records, _ = self.measure(search.workload.key, search.space.round_prompts(step.round), concurrency, rate,
                                      search.key(step))
        except Exception as exc:
            raise self.server.explain(exc) from exc
        return probe_of(records, step.round)
