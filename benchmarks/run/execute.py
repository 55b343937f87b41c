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
from benchmarks.core.store import RunStore, point_latest
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


def execute(plan: RunPlan) -> RunResult:
    """Run every pending unit of the plan, then the checks that follow them."""
    say_resuming(plan)
    store = RunStore(plan.run_dir)
    store.rename_legacy_keys()
    superseded = store.retire_units({c.cell_id for c in plan.cells})
    if superseded:
        tqdm.write(f"{len(superseded)} units measured with other model files moved to units/superseded/; "
                   f"their cells are measured again")
    store.write_manifest(build_manifest(plan))
    point_latest(plan.run_dir)
    for cell_id, key in plan.stale:
        store.retire_unit(cell_id, key)
    ctx = RunContext(plan, store, engine_factory(plan.matrix))
    if plan.matrix.executor == "ray":  # cells run concurrently, on whichever node: a before/after recheck means nothing
        from benchmarks.run.ray_executor import run_groups

        return RunResult(plan.run_dir, run_groups(ctx, plan.groups))
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
    return RunResult(plan.run_dir, failed)
