"""Run a matrix: the one dispatcher that knows the executors and the run order.

Cells run one after another, or, when the matrix interleaves them, all loaded at once and taking each prompt in turn
(benchmarks/run/groups.py); serving cells each behind a server (benchmarks/run/serving.py); with `executor: ray`,
groups concurrently as Ray actors (benchmarks/run/ray_executor.py). One after another, each baseline runs before
its speculative cells and is measured again after them (benchmarks/run/drift.py). Greedy divergences are scored for
the lossless check's tie test by the baseline's engine, untimed, after its family (benchmarks/run/ties.py). Prompts
are resolved once, before any engine starts, and shared by every cell.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks.core import provenance
from benchmarks.core.config import ConfigError, Matrix, interleave_problem
from benchmarks.core.datasets import Prompt, load_prompts
from benchmarks.core.matrix import run_id_for
from benchmarks.core.models import load_tokenizer, materialize, matrix_cells
from benchmarks.core.pairing import families
from benchmarks.core.paths import RUNS_DIR
from benchmarks.core.records import SERVING_ENGINES, Cell
from benchmarks.core.store import RunStore, point_latest
from benchmarks.run.context import RunContext, build_manifest, engine_factory
from benchmarks.run.drift import retire_stale_rechecks, run_recheck
from benchmarks.run.groups import run_group
from benchmarks.run.ties import retire_stale_ties, run_family_ties


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
    ctx = RunContext(matrix, store, env, models, target, prompts, progress, engine_factory(matrix), tokenizer)
    groups = [cells] if matrix.interleave else [[cell] for cell in cells]
    # one after another: each baseline is measured again once the last of its speculative cells has run (serving
    # levels are not rechecked: a level is a load, not one prompt at a time)
    batch1 = [c for c in cells if c.engine not in SERVING_ENGINES]
    fams = families(batch1) if not matrix.interleave and matrix.drift_prompts else []
    retire_stale_rechecks(store, fams, [d.name for d in matrix.datasets])
    tie_fams = families(batch1)  # the lossless check's tie pass, after each family (benchmarks/run/ties.py)
    retire_stale_ties(store, tie_fams, [d.name for d in matrix.datasets])
    if matrix.executor == "ray":  # cells run concurrently, on whichever node: a before/after recheck means nothing
        from benchmarks.run.ray_executor import run_groups

        return run_dir, run_groups(ctx, groups)
    recheck_after = {followers[-1].cell_id: (base, followers) for base, followers in fams}
    failed = 0
    bar = tqdm(total=len(cells), desc="cells", unit="cell", disable=not progress)
    for group in groups:
        if group[0].engine in SERVING_ENGINES:  # a real server per cell, under the matrix's concurrency levels
            from benchmarks.run.serving import run_serve_group

            failed += run_serve_group(ctx, group)
        else:
            failed += run_group(ctx, group)
        bar.update(len(group))
        if group[-1].cell_id in recheck_after:
            failed += run_recheck(ctx, *recheck_after[group[-1].cell_id])
        for base, followers in tie_fams:  # loads the baseline only for divergences its group did not score
            if followers[-1] in group:
                failed += run_family_ties(ctx, base, followers)
    bar.close()
    return run_dir, failed

