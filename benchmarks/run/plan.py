"""The run plan: everything a matrix run needs, resolved once before the first unit runs, and printable
(`matrix --plan`): the cells with their final ids and model files, the run folder and what it holds already, the
prompts every cell shares, the units (a cell on a dataset, at a serving level for a serving engine), the groups
that load together, and the families of checks that follow them (the drift recheck and the tie pass)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.core import catalog, provenance
from benchmarks.core.config import ConfigError, Matrix, interleave_problem
from benchmarks.core.datasets import Prompt, select_prompts, skipped_lines
from benchmarks.core.inputs import check_inputs
from benchmarks.core.markdown import table
from benchmarks.core.matrix import config_id, run_id_for
from benchmarks.core.models import load_tokenizer, materialize, matrix_cells
from benchmarks.core.pairing import families
from benchmarks.core.paths import RUNS_DIR
from benchmarks.core.records import Cell
from benchmarks.core.store import RunStore, level_key, recheck_key, ties_key

Family = tuple[Cell, list[Cell]]  # a baseline and the speculative cells compared with it


@dataclass(frozen=True)
class Unit:
    """What one unit file holds: a cell on a dataset, at one serving level for a serving engine."""

    cell: Cell
    dataset: str
    concurrency: int | None = None
    request_rate: float | None = None

    @property
    def key(self) -> str:
        """The unit's key in the store."""
        if self.concurrency is None:
            return self.dataset
        return level_key(self.dataset, self.concurrency, self.request_rate)


@dataclass(frozen=True)
class RunPlan:
    """A matrix resolved for one run. `prompts` maps a dataset to its (measured, warm-up) prompts."""

    matrix: Matrix
    cells: list[Cell]
    models: dict[str, dict[str, Any]]
    env: dict[str, Any]
    run_dir: Path
    target: str
    tokenizer: Any
    prompts: dict[str, tuple[list[Prompt], list[Prompt]]]
    skipped: dict[str, dict[str, Any]]  # dataset -> rows passed over as too long (`skipped_prompts`)
    units: list[Unit]
    groups: list[list[Cell]]
    drift_families: list[Family]
    tie_families: list[Family]
    done: frozenset[tuple[str, str]]  # (cell id, unit key) already measured in the run folder
    stale: list[tuple[str, str]]  # (cell id, unit key) of checks that no longer follow their units: retired first
    progress: bool = True

    def pending(self, cell: Cell) -> list[Unit]:
        """The cell's units still to measure."""
        return [u for u in self.units if u.cell == cell and (cell.cell_id, u.key) not in self.done]

    def describe(self) -> str:
        """What would run and what is already done, unit by unit, and the checks that follow."""
        body = [[u.cell.engine, u.cell.label, f"{u.cell.temperature:g}", u.dataset,
                 "" if u.concurrency is None else str(u.concurrency),
                 "done" if (u.cell.cell_id, u.key) in self.done else "to run", u.cell.cell_id] for u in self.units]
        todo = sum(row[5] == "to run" for row in body)
        m = self.matrix
        checks = [f"- {len(self.drift_families)} baseline(s) measured again on {min(m.drift_prompts, m.num_prompts)} "
                  f"prompts after their speculative cells (drift recheck)" if self.drift_families else
                  "- no drift recheck (" + ("cells interleaved" if m.interleave else "drift_prompts: 0 or no "
                                            "speculative cell") + ")",
                  f"- greedy divergences scored by {len(self.tie_families)} baseline engine(s) (tie pass)"
                  if self.tie_families else "- no tie pass (no greedy speculative cell)"]
        sampled = [c.label for c in self.cells if c.temperature > 0]
        if sampled:
            checks.append(f"- distribution samples drawn by {len(sampled)} cell(s) at T > 0")
        return "\n".join([
            f"run folder: {self.run_dir}",
            f"{len(self.cells)} cells × {len(m.datasets)} datasets: {len(self.units)} units, {todo} to run, "
            f"{len(self.units) - todo} done; {m.num_prompts} prompts each (+{m.warmup_prompts} warm-up); cells "
            + ("interleaved" if m.interleave else "one after another") + f"; executor {m.executor}",
            *[f"prompts: {line}" for line in skipped_lines(self.skipped)],
            "", table(["engine", "method", "T", "dataset", "concurrency", "status", "cell"], body),
            "", "checks after the units:", *checks])


def run_folder(matrix: Matrix, run_dir: Path | None, fresh: bool) -> Path:
    """The run folder: the one given, or the matrix's own under the runs directory (a new, time-stamped one with
    --fresh, so that the earlier run stays as it was)."""
    if run_dir is not None:
        return Path(run_dir)
    run_dir = RUNS_DIR / run_id_for(matrix)
    return run_dir.with_name(f"{run_dir.name}-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}") if fresh else run_dir


def check_run_folder(run_dir: Path, matrix: Matrix, reuse: bool) -> None:
    """A run folder the harness may write this matrix into: new, empty, or a run folder of the same matrix (of
    another one only with `reuse`); raises ConfigError otherwise, before anything is written."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise ConfigError(f"--run-dir {run_dir} is a file, not a folder; give a new or empty folder")
    if not (run_dir / "manifest.json").is_file():
        if any(p.name != ".lock" for p in run_dir.iterdir()):
            raise ConfigError(f"--run-dir {run_dir} is not empty and holds no run of the harness (no manifest.json); "
                              f"give a new or empty folder")
        return
    try:
        theirs = config_id(json.loads((run_dir / "manifest.json").read_text())["config"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--run-dir {run_dir}: its manifest.json does not read as a run's ({type(exc).__name__}: "
                          f"{exc}); give another folder") from None
    if theirs != run_id_for(matrix) and not reuse:
        raise ConfigError(f"--run-dir {run_dir} holds a run of another matrix ({theirs}, this one is "
                          f"{run_id_for(matrix)}); give another folder, or --reuse-run-dir to measure this matrix "
                          f"there (units of cells not in it move to units/superseded/)")


def units_of(matrix: Matrix, cells: list[Cell]) -> list[Unit]:
    """Every unit of the matrix, in run order: a batch cell once per dataset, a serving cell once per dataset and
    concurrency level."""
    out = []
    for cell in cells:
        for d in matrix.datasets:
            if catalog.engine(cell.engine).serves:
                out += [Unit(cell, d.name, c, matrix.request_rate) for c in matrix.concurrency]
            else:
                out.append(Unit(cell, d.name))
    return out


def resolve_prompts(matrix: Matrix, tokenizer: Any) -> tuple[dict[str, tuple[list[Prompt], list[Prompt]]],
                                                             dict[str, dict[str, Any]]]:
    """Each dataset's (measured, warm-up) prompts, rendered once with the target's tokenizer for every cell, and the
    rows passed over because prompt + max_new_tokens would not fit max_model_len (by dataset, where there are any:
    the limit and [row index, prompt tokens] of each)."""
    max_len = matrix.engine_options.get("max_model_len")
    max_prompt = max_len - matrix.max_new_tokens if max_len else None
    prompts, skipped = {}, {}
    for d in matrix.datasets:
        chosen = select_prompts(d.name, matrix.num_prompts + matrix.warmup_prompts, matrix.seed, tokenizer, d.path,
                                max_prompt)
        prompts[d.name] = (chosen.prompts[:matrix.num_prompts], chosen.prompts[matrix.num_prompts:])
        if chosen.skipped:
            skipped[d.name] = {"max_prompt_tokens": max_prompt, "rows": [list(r) for r in chosen.skipped]}
    return prompts, skipped


def stale_checks(datasets: list[str], done: frozenset[tuple[str, str]], drift_families: list[Family],
                 tie_families: list[Family]) -> list[tuple[str, str]]:
    """The checks to retire before anything is measured, because they would no longer follow their units: a drift
    recheck whose baseline or speculative cells are to be measured again, a tie unit whose speculative or baseline
    unit is. They are redone after them."""
    out = []
    for d in datasets:
        for base, followers in drift_families:
            if not all((c.cell_id, d) in done for c in (base, *followers)):
                out.append((base.cell_id, recheck_key(d)))
        for base, followers in tie_families:
            out += [(c.cell_id, ties_key(d)) for c in followers
                    if not ((base.cell_id, d) in done and (c.cell_id, d) in done)]
    return out


def build_plan(matrix: Matrix, run_dir: Path | None = None, *, fresh: bool = False, reuse: bool = False,
               progress: bool = True) -> RunPlan:
    """Resolve a matrix for a run without creating anything; raises BadInput (ConfigError, DatasetUnavailable) for
    what cannot run, one line per problem."""
    problems = check_inputs(matrix)
    if problems:
        raise ConfigError(problems)
    cells, models = matrix_cells(matrix)  # once: fingerprinting reads every model file
    env = provenance.environment()
    problem = interleave_problem(matrix, [c.engine for c in cells], env["platform"])
    if problem:
        raise ConfigError(problem)
    run_dir = run_folder(matrix, run_dir, fresh)
    check_run_folder(run_dir, matrix, reuse)
    units = units_of(matrix, cells)
    store = RunStore(run_dir)
    done = frozenset((u.cell.cell_id, u.key) for u in units if store.is_done(u.cell.cell_id, u.key))
    if done and fresh:
        raise ConfigError(f"--fresh: {run_dir} already holds {len(done)} measured unit(s); give a new --run-dir, or "
                          f"drop --run-dir to get a new folder")
    target = materialize(matrix.target)
    tokenizer = load_tokenizer(target)
    batch1 = [c for c in cells if not catalog.engine(c.engine).serves]  # a serving level is a load: no recheck
    drift_families = families(batch1) if not matrix.interleave and matrix.drift_prompts else []
    tie_families = families(batch1)
    prompts, skipped = resolve_prompts(matrix, tokenizer)
    return RunPlan(
        matrix=matrix, cells=cells, models=models, env=env, run_dir=run_dir, target=target, tokenizer=tokenizer,
        prompts=prompts, skipped=skipped, units=units,
        groups=[cells] if matrix.interleave else [[c] for c in cells], drift_families=drift_families,
        tie_families=tie_families, done=done,
        stale=stale_checks([d.name for d in matrix.datasets], done, drift_families, tie_families), progress=progress)


def say_resuming(plan: RunPlan) -> None:
    """One line when a run resumes a folder that holds measured units."""
    if plan.done:
        print(f"resuming {plan.run_dir}: {len(plan.done)} of {len(plan.units)} (cell, dataset) units already done, "
              f"not measured again ({len(plan.units) - len(plan.done)} to run); FRESH=1 (--fresh) measures everything "
              f"again into a new run folder", file=sys.stderr)
