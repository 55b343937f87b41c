"""The drift guard of cells run one after another: each baseline is loaded again after the last speculative cell
compared with it and measured on `drift_prompts` of its prompts (its own unit of records of kind "recheck"), so that
a host whose speed moved between cells shows. The summary pairs the recheck with the baseline's measurement prompt by
prompt and flags a speedup by `metrics.drift_flag` (docs/statistics.md). Under Ray cells run concurrently on any node
and nothing is rechecked; report.md says so."""
from __future__ import annotations

from typing import TypeVar

from tqdm import tqdm

from benchmarks.core.cells import Cell
from benchmarks.core.metrics import baseline_drift
from benchmarks.core.unit_keys import recheck_key
from benchmarks.records.records import ErrorLine, Line, RecheckLine, RequestLine, error_line, recheck_of
from benchmarks.run.context import RunContext
from benchmarks.run.engine_start import start_engine
from benchmarks.run.groups import run_dataset

T = TypeVar("T")


def recheck_records(records: list[Line]) -> list[RecheckLine | ErrorLine]:
    """A recheck's requests as kind "recheck" (never a baseline measurement), then its errors, all of them labelled
    as the recheck."""
    return ([recheck_of(r) for r in records if isinstance(r, RequestLine)]
            + [recheck_of(r) for r in records if isinstance(r, ErrorLine)])


def spread(items: list[T], n: int) -> list[T]:
    """n of `items` evenly spaced from the first, in order (all of them when n >= len): the recheck's prompts, spread
    over the baseline's measurement so that a host that changed at any point of it shows."""
    return items if n >= len(items) else [items[i * len(items) // n] for i in range(n)]


def run_recheck(ctx: RunContext, baseline: Cell, followers: list[Cell]) -> int:
    """Load the baseline again and measure `drift_prompts` of the measured prompts (`spread`; warm-up first) of each
    dataset whose baseline and at least one speculative cell are done and whose recheck is not; return the number of
    failed rechecks."""
    store, matrix = ctx.store, ctx.plan.matrix
    todo = [w.key for w in ctx.workloads()
            if store.is_done(baseline.cell_id, w.key) and not store.is_done(baseline.cell_id, recheck_key(w.key))
            and any(store.is_done(c.cell_id, w.key) for c in followers)]
    if not todo:
        return 0
    n = min(matrix.drift_prompts, matrix.num_prompts)
    done = start_engine(ctx, baseline, lambda exc: [
        (baseline, recheck_key(name), recheck_of(error_line(baseline, name, exc))) for name in todo],
        "drift recheck ")
    if isinstance(done, int):
        return done
    engine, pid = done
    failed = 0
    try:
        for name in todo:
            measured, warmup = ctx.prompts[name]
            records = recheck_records(run_dataset([(engine, baseline)], name, spread(measured, n), warmup,
                                                   ctx.plan.progress)[baseline.cell_id])
            store.write_unit(baseline.cell_id, recheck_key(name), records, pid)
            failed += any(isinstance(r, ErrorLine) for r in records)
            before = {r.prompt_sha256: r.tpot_ms for r in store.unit(baseline.cell_id, name)
                      if isinstance(r, RequestLine) and not isinstance(r, RecheckLine)}
            after = [r for r in records if isinstance(r, RecheckLine) and r.prompt_sha256 in before]
            d = baseline_drift([before[r.prompt_sha256] for r in after], [r.tpot_ms for r in after])
            ci = f", 95 % CI {100 * d.ci_low:+.1f} % to {100 * d.ci_high:+.1f} %" if d.n >= 2 else ", no CI"
            tqdm.write(f"[{baseline.label}] {name} drift recheck on {d.n} prompts: TPOT {d.before_ms:.2f} ms before, "
                       f"{d.after_ms:.2f} ms after ({100 * d.drift:+.1f} %{ci})")
    finally:
        engine.close()
    return failed

