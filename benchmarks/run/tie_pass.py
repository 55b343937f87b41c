"""The lossless check's untimed tie pass (docs/lossless.md): for every greedy prompt whose speculative output differs
from its baseline's, the baseline cell's own engine is asked for the target's logits at the first divergence, with
the common prefix teacher-forced, in the run's dtype (the engine's optional `token_scores`). Timed requests never
ask for logits: that would slow the baseline and inflate every speedup.

The records (kind "tie_check") of one speculative cell and dataset are a unit of their own (`store.ties_key`), written
with the provenance of the baseline engine that answered; verification/ties.py turns them into verdicts. An interleaved
group runs the pass while its baseline is loaded (benchmarks/run/groups.py); otherwise the baseline is loaded again
after the last cell of its family, only when a divergence is due (`run_family_ties`, scheduled by
benchmarks/run/execute.py), which also picks up checks a resumed run left. A tie unit whose baseline or speculative
unit is to be measured again is retired first (the run plan's `stale_checks`) and redone after them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from tqdm import tqdm

from benchmarks.config.pairing import families
from benchmarks.core.cells import Cell
from benchmarks.core.unit_keys import ties_key
from benchmarks.data.datasets import Prompt
from benchmarks.engines import Engine, ScoreTokens, catalog, offers
from benchmarks.records.records import Line, RequestLine, TieCheckLine, cause, error_line, tie_check_line
from benchmarks.records.store import RunStore
from benchmarks.run.context import RunContext
from benchmarks.run.engine_start import start_engine
from verification.ties import divergence_key, row_ties

TOP_N = 8  # logits kept at each divergence, besides the two tokens': near-ties can involve several tokens


def _requests(store: RunStore, cell: Cell, dataset: str) -> dict[str, list[int]]:
    return {r.prompt_sha256: r.output_ids for r in store.unit(cell.cell_id, dataset) if type(r) is RequestLine}


def due(store: RunStore, base: Cell, spec: Cell, dataset: str) -> list[tuple[str, int, int, int]]:
    """The divergences to score, (prompt sha256, first divergence, baseline token, speculative token): greedy
    batch-1 cells whose units are both done and whose tie unit is not, prompts where both outputs have a token at
    the first divergence (an output that ended earlier is a violation without asking)."""
    if spec.temperature != 0 or catalog.engine(spec.engine).serves or store.is_done(spec.cell_id, ties_key(dataset)):
        return []
    if not (store.is_done(base.cell_id, dataset) and store.is_done(spec.cell_id, dataset)):
        return []
    base_out = _requests(store, base, dataset)
    keys = [divergence_key(sha, base_out[sha], out) for sha, out in _requests(store, spec, dataset).items()
            if sha in base_out]
    return [k for k in keys if k is not None and None not in k]


def score(engine: ScoreTokens, spec: Cell, dataset: str, prompts: dict[str, Prompt], base_out: dict[str, list[int]],
          todo: list[tuple[str, int, int, int]]) -> list[TieCheckLine]:
    """One tie-check record per divergence: the baseline engine's `token_scores` there."""
    out = []
    for sha, d, base_token, spec_token in todo:
        scores = engine.token_scores(prompts[sha].ids, base_out[sha][:d], [base_token, spec_token], TOP_N)
        out.append(tie_check_line(spec, dataset, prompts[sha], d, base_token, spec_token, scores))
    return out


def run_ties(ctx: RunContext, engine: Engine, pid: str, base: Cell, specs: list[Cell], dataset: str) -> int:
    """With `base`'s engine loaded: score the due divergences of each of `specs` on a dataset and write each
    cell's tie unit; return the number of tie units that failed."""
    if not offers(engine, base.engine, "token_scores"):
        return 0
    scorer = cast(ScoreTokens, engine)
    prompts = {p.sha256: p for p in ctx.prompts[dataset][0]}
    failed = 0
    for spec in specs:
        todo = due(ctx.store, base, spec, dataset)
        if not todo:
            continue
        base_out = _requests(ctx.store, base, dataset)
        records: Sequence[Line]
        try:
            ties = score(scorer, spec, dataset, prompts, base_out, todo)
        except Exception as exc:
            records = [error_line(spec, dataset, exc, message=f"tie check: {cause(exc)}")]
            failed += 1
            tqdm.write(f"[{spec.label}] {dataset} tie check FAILED: {cause(exc)}")
        else:
            records = ties
            spec_out = _requests(ctx.store, spec, dataset)
            v = row_ties([(sha, base_out[sha], spec_out[sha]) for sha in spec_out if sha in base_out], ties)
            tqdm.write(f"[{spec.label}] {dataset} tie check of {len(todo)} divergent prompt(s) on the baseline "
                       f"engine: {v.n_ties} numerical tie(s), {v.n_violations} violation(s)")
        ctx.store.write_unit(spec.cell_id, ties_key(dataset), records, pid)
    return failed


def run_loaded_ties(ctx: RunContext, started: list[tuple[Engine, Cell]], pids: dict[str, str], dataset: str) -> int:
    """The pass of a group whose engines are loaded: each loaded baseline scores its loaded followers' divergences
    (at batch size 1: a static batch's identity is a measurement, not a verdict)."""
    engines = {c.cell_id: e for e, c in started}
    return sum(run_ties(ctx, engines[base.cell_id], pids[base.cell_id], base, followers, dataset)
               for base, followers in families([c for _, c in started if c.batch_size == 1]))


def run_family_ties(ctx: RunContext, base: Cell, followers: list[Cell]) -> int:
    """Load `base` again when any follower has divergences due on any dataset, score them, close it; return the
    number of failed tie units (a baseline that does not start fails each one due)."""
    todo = {w.key: [c for c in followers if due(ctx.store, base, c, w.key)] for w in ctx.workloads()}
    todo = {name: cells for name, cells in todo.items() if cells}
    if not todo:
        return 0
    done = start_engine(ctx, base, lambda exc: [
        (c, ties_key(name), error_line(c, name, exc, message=f"tie check: baseline did not start: {exc}"))
        for name, cells in todo.items() for c in cells], "tie check ")
    if isinstance(done, int):
        return done
    engine, pid = done
    try:
        return sum(run_ties(ctx, engine, pid, base, cells, name) for name, cells in todo.items())
    finally:
        engine.close()
