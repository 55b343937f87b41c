"""Execute a run plan (benchmarks/run/plan.py): the one place that knows the executors and the run order.

The run folder is written only from here on: units measured with other model files are retired, the manifest
written, `latest` pointed. Cells run one after another, or, when the matrix interleaves them, all loaded at once and
taking each prompt in turn (benchmarks/run/groups.py); a serving engine's cells each behind a server, level by level
(benchmarks/run/serving.py); with `executor: ray`, groups concurrently as Ray actors (benchmarks/run/ray_executor.py).
One after another, each baseline is measured again after its speculative cells (benchmarks/run/drift.py), and greedy
divergences are scored for the lossless check's tie test by the baseline's engine (benchmarks/run/ties.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from benchmarks.core import catalog
from benchmarks.core.store import RunStore, StoreWriteError, point_latest
from benchmarks.run.context import RunContext, build_manifest, engine_factory
from benchmarks.run.drift import run_recheck
from benchmarks.run.groups import run_group
from benchmarks.run.plan import RunPlan, say_resuming
from benchmarks.run.serving import run_serve_group
from benchmarks.run.ties import run_family_ties


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    failed: int  # units (and checks) that failed; rerunning the plan retries them
    stopped: str | None = None  # why the run stopped before its end (a unit the run folder could not take)


def execute(plan: RunPlan) -> RunResult:
    """Run every pending unit of the plan, then the checks that follow them, holding the run folder's lock (another
    run into the same folder is refused). `latest` moves here once the folder holds a unit. A unit that cannot be
    written stops the run, its records saved elsewhere (store.StoreWriteError)."""
    store = RunStore(plan.run_dir, point_latest_on_write=not plan.done)
    with store.lock():
        say_resuming(plan)
        if plan.done:
            point_latest(plan.run_dir)
        try:
            return RunResult(plan.run_dir, _run(plan, store))
        except StoreWriteError as exc:
            safe = store.safe_units()
            return RunResult(plan.run_dir, 1, f"{exc}. The run stopped; {len(safe)} unit(s) are safe in "
                                              f"{store.units_dir}, and rerunning the same command resumes from them")


def _run(plan: RunPlan, store: RunStore) -> int:
    store.rename_legacy_keys()
    superseded = store.retire_units({c.cell_id for c in plan.cells})
    if superseded:
        tqdm.write(f"{len(superseded)} units of cells that are not in this matrix (other settings or model files) "
                   f"moved to units/superseded/")
    store.write_manifest(build_manifest(plan))
    for cell_id, key in plan.stale:
        store.retire_unit(cell_id, key)
    ctx = RunContext(plan, store, engine_factory(plan.matrix))
    if plan.matrix.executor == "ray":  # cells run concurrently, on whichever node: a before/after recheck means nothing
        from benchmarks.run.ray_executor import run_groups

        return run_groups(ctx, plan.groups)
    recheck_after = {followers[-1].cell_id: (base, followers) for base, followers in plan.drift_families}
    failed = 0
    bar = tqdm(total=len(plan.cells), desc="cells", unit="cell", disable=not plan.progress)
    for group in plan.groups:
        run = run_serve_group if catalog.engine(group[0].engine).serves else run_group
        failed += run(ctx, group)
        bar.update(len(group))
        if group[-1].cell_id in recheck_after:
            failed += run_recheck(ctx, *recheck_after[group[-1].cell_id])
        for base, followers in plan.tie_families:  # loads the baseline only for divergences its group did not score
            if followers[-1] in group:
                failed += run_family_ties(ctx, base, followers)
    bar.close()
    return failed
