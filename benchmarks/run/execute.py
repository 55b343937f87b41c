"""Execute a run plan (benchmarks/run/plan.py): the one place that knows the executors and the run order.

The run folder is written only from here on: units measured with other model files are retired, the manifest
written, `latest` pointed. Cells run one after another, or, when the matrix interleaves them, all loaded at once and
taking each prompt in turn (benchmarks/run/groups.py); a serving engine's cells each behind a server, level by level
(benchmarks/run/serving.py); with `executor: ray`, groups concurrently as Ray actors (benchmarks/run/ray_executor.py).
One after another, each baseline is measured again after its speculative cells (benchmarks/run/recheck.py), and greedy
divergences are scored for the lossless check's tie test by the baseline's engine (benchmarks/run/tie_pass.py). The
plan's stages run before any unit (a second turn's first answers, benchmarks/run/turns.py), each handing its output to
the units that wait on it through the run context (`RunContext.staged`); the plan itself never changes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from benchmarks.engines import catalog
from benchmarks.records.records import cause, error_line
from benchmarks.records.store import RunStore, StoreWriteError, point_latest
from benchmarks.run.context import RunContext, StageOutput
from benchmarks.run.engine_start import engine_factory, fail_units
from benchmarks.run.groups import run_group
from benchmarks.run.manifest_build import build_manifest
from benchmarks.run.plan import RunPlan, Stage, measured_on_other_ids, say_resuming, second_turn_prompts, stale_checks
from benchmarks.run.recheck import run_recheck
from benchmarks.run.serving import run_serve_group
from benchmarks.run.tie_pass import run_family_ties
from benchmarks.run.turns import first_answers


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the message says how many units are safe (the CLI prints it as one line, exit 130)."""


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
        for line in plan.builds:
            tqdm.write(f"note: {line}")
        for line in plan.setup.warnings if plan.setup else []:
            tqdm.write(f"warning: {line}")
        if plan.done:
            point_latest(plan.run_dir)
        try:
            return RunResult(plan.run_dir, _run(plan, store))
        except StoreWriteError as exc:
            safe = store.safe_units()
            return RunResult(plan.run_dir, 1, f"{exc}. The run stopped; {len(safe)} unit(s) are safe in "
                                              f"{store.units_dir}, and rerunning the same command resumes from them")
        except KeyboardInterrupt:
            raise RunInterrupted(f"interrupted: {len(store.safe_units())} unit(s) are safe in {store.units_dir}; "
                                 f"rerunning the same command resumes from them") from None


def _run(plan: RunPlan, store: RunStore) -> int:
    store.rename_legacy_keys()
    foreign = store.set_aside_foreign({c.cell_id for c in plan.cells}, {d.name for d in plan.matrix.datasets})
    if foreign:
        tqdm.write(f"{len(foreign)} unit file(s) that do not belong to this run moved to units/foreign/, not merged: "
                   f"{'; '.join(foreign)}")
    if (plan.run_dir / "manifest.json").is_file():
        store.repair_records()
    superseded = store.retire_units({c.cell_id for c in plan.cells})
    if superseded:
        tqdm.write(f"{len(superseded)} units of cells that are not in this matrix (other settings or model files) "
                   f"moved to units/superseded/")
    ctx = RunContext(plan, store, engine_factory(plan.matrix))
    store.write_manifest(build_manifest(ctx))
    for cell_id, key in plan.stale:
        store.retire_unit(cell_id, key)
    failed = run_stages(ctx)
    if plan.matrix.executor == "ray":  # cells run concurrently, on whichever node: a before/after recheck means nothing
        from benchmarks.run.ray_executor import run_groups  # lazy: imports ray

        return failed + run_groups(ctx, plan.groups)
    recheck_after = {followers[-1].cell_id: (base, followers) for base, followers in plan.drift_families}
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


def run_stages(ctx: RunContext) -> int:
    """Run the plan's stages, each handing its output to the units that wait on it (`RunContext.staged`), then write
    the manifest with their prompts. When a stage fails, each of its units still to measure fails with the cause and
    leaves the run; returns the number of such units."""
    plan = ctx.plan
    failed = 0
    for stage in plan.stages:
        gen, w = stage.generator, stage.workload
        try:
            ctx.staged[w.key] = first_answers_stage(ctx, stage)
        except StoreWriteError:
            raise
        except Exception as exc:
            ctx.staged[w.key] = None
            failed += fail_units(ctx, gen, exc, [
                (u.cell, u.store_key, error_line(u.cell, w.key, exc, concurrency=u.concurrency,
                                                 message=f"first answers of the second turn: {cause(exc)}"))
                for u in stage.units if (u.cell.cell_id, u.store_key) not in plan.done],
                f"[{gen.label}] {w.dataset}: first answers FAILED: {cause(exc)}")
    if plan.stages:
        ctx.store.write_manifest(build_manifest(ctx))
    return failed


def first_answers_stage(ctx: RunContext, stage: Stage) -> StageOutput:
    """The first answers of a second turn (cached, or generated now by the generator cell) and the prompts they make;
    its units measured on other prompt ids, and the checks that would no longer follow them, are retired."""
    plan, gen, w = ctx.plan, stage.generator, stage.workload
    assert plan.setup is not None  # a plan's stages come from its prompt setup
    answers = first_answers(plan.run_dir, w.dataset, gen, plan.target, stage.first, plan.matrix.max_new_tokens,
                            ctx.make_engine, plan.tokenizer)
    tqdm.write(f"[{gen.label}] {w.dataset}: first answers of {len(answers)} conversations ready (greedy, "
               f"untimed); turn 2 sends the conversations after them")
    prompts, skipped = second_turn_prompts(plan.matrix, plan.tokenizer, plan.setup.max_prompt_tokens, stage.first,
                                           answers)
    redo = measured_on_other_ids(stage.units, plan.done, {w.key: prompts}, ctx.store)
    for cell_id, key in redo + stale_checks([w.key], plan.done - set(redo), plan.drift_families, plan.tie_families):
        ctx.store.retire_unit(cell_id, key)
    return StageOutput(prompts, skipped, tuple(redo))
