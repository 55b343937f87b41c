"""The run plan: everything a matrix run needs, resolved once before the first unit runs, and printable
(`matrix --plan`): the cells with their final ids and model files, the run folder and what it holds already, the
prompts every cell shares, the units (a cell on a dataset's workload — its prompts, at a context length, or at a
turn — at a serving level for a serving engine), the stages that run before the units they feed, the groups that
load together, and the families of checks that follow them (the drift recheck and the tie pass). A second turn whose
first answers the run folder does not hold yet waits on a stage that generates them (`Stage`,
benchmarks/run/turns.py); the plan itself never changes during the run."""
from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.config.engine_option_keys import engine_max_model_len
from benchmarks.config.inputs import check_inputs
from benchmarks.config.matrix_expand import config_id, legacy_run_id, run_id_for
from benchmarks.config.matrix_parse import ConfigError, Matrix
from benchmarks.config.model_refs import load_tokenizer, materialize, matrix_cells
from benchmarks.config.pairing import families
from benchmarks.config.placement import interleave_problem
from benchmarks.core.cells import Cell, has_batch_one
from benchmarks.core.guarded import read_json_file
from benchmarks.core.markdown import table
from benchmarks.core.paths import RUNS_DIR
from benchmarks.core.shapes import HfConfig
from benchmarks.core.unit_keys import level_key, recheck_key, ties_key
from benchmarks.data import datasets as ds
from benchmarks.data.datasets import Prompt, Workload, skipped_lines
from benchmarks.data.drafts import thinking_warnings
from benchmarks.data.prompts import SkippedRows
from benchmarks.decide.capacity import space_of
from benchmarks.decide.slo import slos_of
from benchmarks.engines import catalog
from benchmarks.hardware import provenance
from benchmarks.hardware.batch_memory import batch_memory_problem, device_memory_bytes
from benchmarks.hardware.provenance import Environment, ModelFingerprint
from benchmarks.records.manifest_read import TrainedLengths
from benchmarks.records.records import RequestLine
from benchmarks.records.store import RunStore
from benchmarks.run.capacity_search import Search, capacity_line, on_other_prompts, paths
from benchmarks.run.turns import answers_path, cached_answers, generator_cell, second_turns

Family = tuple[Cell, list[Cell]]  # a baseline and the speculative cells compared with it
Prompts = tuple[list[Prompt], list[Prompt]]  # a workload's (measured, warm-up) prompts


@dataclass(frozen=True)
class Unit:
    """What one unit file holds: a cell on a dataset's workload, at one serving level for a serving engine."""

    cell: Cell
    workload: Workload
    concurrency: int | None = None
    request_rate: float | None = None

    @property
    def workload_key(self) -> str:
        """The workload's key, which its records name as their dataset (`unit_keys.workload_key`)."""
        return self.workload.key

    @property
    def store_key(self) -> str:
        """The unit's key in the store."""
        if self.concurrency is None:
            return self.workload_key
        return level_key(self.workload_key, self.concurrency, self.request_rate)


@dataclass(frozen=True)
class Stage:
    """What the executor runs before the units that wait on it, handing them its output: the first answers of a
    dataset's conversations, generated once by the generator cell (greedy, untimed; benchmarks/run/turns.py), make the
    prompts of its second turn (`second_turn_prompts`)."""

    generator: Cell
    workload: Workload  # the second turn it feeds
    first: list[Prompt]  # the first turn's prompts it answers, measured then warm-up
    units: list[Unit]  # the workload's units, which wait on it

    @property
    def name(self) -> str:
        return f"first answers of {self.workload.dataset}"


@dataclass(frozen=True)
class PromptSetup:
    """How the run's prompts are made, beyond the datasets: the chat template's keyword arguments (and which of them
    the target's template ignores), the template's hash, the prompt length limit, warnings about the drafts, and the
    cell that writes a second turn's first answers."""

    template: dict[str, object]
    template_sha256: str | None
    template_ignores: list[str]
    max_prompt_tokens: int | None
    warnings: list[str]
    generator: Cell | None = None
    trained_lengths: TrainedLengths | None = None

    def lines(self) -> list[str]:
        kwargs = ", ".join(f"{k}={v!r}" for k, v in self.template.items())
        ignored = (f" (the target's template ignores {', '.join(self.template_ignores)})"
                   if self.template_ignores else "")
        return [f"chat template: {kwargs}{ignored}; template sha256 {self.template_sha256}",
                *[f"warning: {w}" for w in self.warnings]]


@dataclass(frozen=True)
class RunPlan:
    """A matrix resolved for one run. `prompts` maps a workload key to its (measured, warm-up) prompts; a second turn
    whose first answers are not in the run folder yet has none: a stage makes them (`stages`, `awaiting_answers`)."""

    matrix: Matrix
    cells: list[Cell]
    models: dict[str, ModelFingerprint]
    env: Environment
    run_dir: Path
    target: str
    tokenizer: Any
    prompts: dict[str, Prompts]
    skipped: dict[str, SkippedRows]  # workload key -> rows passed over as too long (manifest `prompts_skipped`)
    units: list[Unit]
    groups: list[list[Cell]]
    drift_families: list[Family]
    tie_families: list[Family]
    done: frozenset[tuple[str, str]]  # (cell id, unit key) already measured in the run folder
    stale: list[tuple[str, str]]  # (cell id, unit key) of checks that no longer follow their units: retired first
    progress: bool = True
    workloads: list[Workload] = field(default_factory=list)
    setup: PromptSetup | None = None
    redo: list[tuple[str, str]] = field(default_factory=list)  # done units measured on other prompt ids: run again
    stages: list[Stage] = field(default_factory=list)  # run before the units, in this order
    searches: list[Search] = field(default_factory=list)  # capacity searches, after each cell's levels
    builds: list[str] = field(default_factory=list)  # what the run builds before its units, with the expected time

    def server_sequences(self) -> int:
        """The most requests a server will have in flight: the largest concurrency level, or of a capacity search
        the largest concurrency it may probe (on the request-rate axis, a whole round)."""
        space = self.searches[0].space if self.searches else None
        top = [] if space is None else [int(max(space.grid))] if space.axis == "concurrency" else [space.requests]
        return max([1, *self.matrix.concurrency, *top])

    def search_lines(self) -> list[str]:
        """A table of the capacity searches: each SLO's probes stored, and its capacity or its next probe."""
        rows, store = [], RunStore(self.run_dir)
        for search in self.searches:
            for slo, path in zip(search.slos, paths(store, search)):
                nxt = path.pending
                rows.append([search.cell.engine, search.cell.label, search.workload.key, slo.text(),
                             str(len(path.probes)),
                             capacity_line(search.space, path) if nxt is None else
                             f"to run: next {search.space.text(nxt.load)} round {nxt.round} ({nxt.why})"])
        space = self.searches[0].space if self.searches else None
        if space is None:
            return []
        loads = ", ".join(space.text(x) for x in (space.grid[0], space.grid[-1]))
        return [f"capacity searches ({space.mode}) over {len(space.grid)} loads from {loads}, rounds of "
                f"{space.requests} requests (at most {space.rounds} per load):", "",
                table(["engine", "method", "workload", "SLO", "probes stored", "status"], rows)]

    def awaiting_answers(self) -> list[Workload]:
        """The second turns whose prompts wait for a stage's first answers."""
        return [s.workload for s in self.stages]

    def workload_lines(self) -> list[str]:
        """One line per workload: its prompts' lengths and how they were made."""
        out = []
        staged = {s.workload.key: s.generator for s in self.stages}
        for w in self.workloads:
            if w.key in staged:
                gen = staged[w.key]
                out.append(f"{w.key}: second turn, after the first answers that {gen.engine} {gen.label} generates "
                           f"once before the units run (greedy, untimed; cached in "
                           f"{answers_path(self.run_dir, w.dataset)})")
                continue
            measured = self.prompts[w.key][0]
            lengths = [len(p.ids) for p in measured]
            if not lengths:
                out.append(f"{w.key}: no prompt fits")
                continue
            how = ", ".join(sorted({p.construction.get("form", "prompt") for p in measured}))
            if w.context_tokens:
                shots = [len(p.construction.get("shot_rows", [])) for p in measured]
                how += f" + many-shot context ({min(shots)}-{max(shots)} shots of other rows with their answers)"
            if w.turn == 2:
                how = f"second turn after the cached first answers ({answers_path(self.run_dir, w.dataset)})"
            out.append(f"{w.key}: {len(measured)} prompts of {min(lengths)}-{max(lengths)} tokens ({how})")
        return out

    def stage_lines(self) -> list[str]:
        """One line per stage: what it makes, who makes it, and the units that wait on it."""
        out = []
        for s in self.stages:
            todo = sum((u.cell.cell_id, u.store_key) not in self.done for u in s.units)
            out.append(f"- {s.name}: {s.generator.engine} {s.generator.label} answers {len(s.first)} first turns "
                       f"(greedy, untimed; cached in {answers_path(self.run_dir, s.workload.dataset)}); they make the "
                       f"prompts of {s.workload.key}, whose {len(s.units)} unit(s) wait on them ({todo} to run)")
        return out

    def sampling_lines(self) -> list[str]:
        """What the plan promises of the distribution check: the batch-1 cells at T > 0 draw samples; a static
        batch's cell draws none, its verdict being its batch-1 cell's (NOT CHECKED where the matrix has none)."""
        sampled = [c for c in self.cells if c.temperature > 0]
        one = [c for c in sampled if c.batch_size == 1]
        batched = [c for c in sampled if c.batch_size > 1 and c.method != "baseline"]
        orphans = [c for c in batched
                   if not has_batch_one(c, one)]
        lines = [f"- distribution samples drawn by {len(one)} cell(s) at T > 0 and batch size 1"] if one else []
        if len(batched) > len(orphans):
            lines.append(f"- {len(batched) - len(orphans)} speculative cell(s) at T > 0 and B > 1 draw none: a static "
                         f"batch's distribution verdict is its batch-1 cell's (dist_verdict 'at B=1')")
        if orphans:
            lines.append(f"- NOT CHECKED: {len(orphans)} speculative cell(s) at T > 0 and B > 1 have no batch-1 cell "
                         f"whose distribution check stands for them ({', '.join(sorted({c.label for c in orphans}))}; "
                         f"add 1 to 'batch_size'): the run exits 4 unless --allow-unchecked")
        return lines

    def describe(self) -> str:
        """What would run and what is already done: the stages first, then unit by unit, and the checks that
        follow."""
        redo = set(self.redo)
        body = [[u.cell.engine, u.cell.label + (f" B={u.cell.batch_size}" if u.cell.batch_size > 1 else ""),
                 f"{u.cell.temperature:g}", u.workload_key,
                 "" if u.concurrency is None else str(u.concurrency),
                 "done" if (u.cell.cell_id, u.store_key) in self.done else "to run" + (
                     " again (measured on other prompt ids)" if (u.cell.cell_id, u.store_key) in redo else ""),
                 u.cell.cell_id] for u in self.units]
        todo = sum(row[5].startswith("to run") for row in body)
        m = self.matrix
        ties = [f for f in self.tie_families if f[0].temperature == 0]  # the tie pass scores greedy divergences only
        checks = [f"- {len(self.drift_families)} baseline(s) measured again on {min(m.drift_prompts, m.num_prompts)} "
                  f"prompts after their speculative cells (drift recheck)" if self.drift_families else
                  "- no drift recheck (" + ("cells interleaved" if m.interleave else "drift_prompts: 0 or no "
                                            "speculative cell") + ")",
                  f"- greedy divergences scored by {len(ties)} baseline engine(s) (tie pass)"
                  if ties else "- no tie pass (no greedy speculative cell)"]
        checks += self.sampling_lines()
        return "\n".join([
            f"run folder: {self.run_dir}",
            f"{len(self.cells)} cells × {len(self.workloads)} workloads of {len(m.datasets)} datasets: "
            f"{len(self.units)} units, {todo} to run, {len(self.units) - todo} done; {m.num_prompts} prompts each "
            f"(+{m.warmup_prompts} warm-up); cells " + ("interleaved" if m.interleave else "one after another")
            + f"; executor {m.executor}",
            *[f"prompts: {line}" for line in (self.setup.lines() if self.setup else [])],
            *[f"prompts: {line}" for line in self.workload_lines()],
            *[f"prompts: {line}" for line in skipped_lines(self.skipped)],
            *(["", "builds before the units:", *[f"- {line}" for line in self.builds]] if self.builds else []),
            *(["", "stages before the units:", *self.stage_lines()] if self.stages else []),
            *(["", table(["engine", "method", "T", "workload", "concurrency", "status", "cell"], body)]
              if body else []),
            *(["", *self.search_lines()] if self.searches else []),
            "", "checks after the units:", *checks])


def run_folder(matrix: Matrix, run_dir: Path | None, fresh: bool) -> Path:
    """The run folder: the one given, or the matrix's own under the runs directory (a new, time-stamped one with
    --fresh, so that the earlier run stays as it was; the folder of its id before IDENTITY_VERSION 1 where only that
    one exists)."""
    if run_dir is not None:
        return Path(run_dir)
    run_dir = RUNS_DIR / run_id_for(matrix)
    if not fresh and not run_dir.exists() and (RUNS_DIR / legacy_run_id(matrix)).is_dir():
        return RUNS_DIR / legacy_run_id(matrix)
    return run_dir.with_name(f"{run_dir.name}-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}") if fresh else run_dir


def check_run_folder(run_dir: Path, matrix: Matrix, reuse: bool) -> None:
    """A run folder the harness may write this matrix into: new, empty, or a run folder of the same matrix (of
    another one only with `reuse`); raises ConfigError otherwise, before anything is written."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise ConfigError(f"--run-dir {run_dir} is a file, not a folder; give a new or empty folder")
    if not (run_dir / "manifest.json").is_file():
        if any(p.name != ".lock" or p.is_symlink() or not p.is_file() for p in run_dir.iterdir()):
            raise ConfigError(f"--run-dir {run_dir} is not empty and holds no run of the harness (no manifest.json); "
                              f"give a new or empty folder")
        return
    try:
        manifest = read_json_file(run_dir / "manifest.json")  # guarded: depth, size, non-finite numbers
        theirs = config_id(manifest["config"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--run-dir {run_dir}: its manifest.json does not read as a run's ({type(exc).__name__}: "
                          f"{exc}); give another folder") from None
    if manifest.get("run_id") == legacy_run_id(matrix) != run_id_for(matrix):
        print(f"note: {run_dir} holds this matrix's run under its former id {legacy_run_id(matrix)}; resuming it "
              f"there (a new run of it would go to {run_id_for(matrix)})", file=sys.stderr)
        return
    if theirs != run_id_for(matrix) and not reuse:
        raise ConfigError(f"--run-dir {run_dir} holds a run of another matrix ({theirs}, this one is "
                          f"{run_id_for(matrix)}); give another folder, or --reuse-run-dir to measure this matrix "
                          f"there (units of cells not in it move to units/superseded/)")


def workloads_of(matrix: Matrix) -> list[Workload]:
    """Every dataset's workloads, in run order (`datasets.workloads`)."""
    return ds.workloads([d.name for d in matrix.datasets], matrix.context_tokens, matrix.turns)


def units_of(matrix: Matrix, cells: list[Cell], workloads: list[Workload]) -> list[Unit]:
    """Every unit of the matrix, in run order: a batch cell once per workload, a serving cell once per workload and
    concurrency level."""
    out = []
    for cell in cells:
        for w in workloads:
            if catalog.engine(cell.engine).serves:
                out += [Unit(cell, w, c, matrix.request_rate) for c in matrix.concurrency]
            else:
                out.append(Unit(cell, w))
    return out


def searches_of(matrix: Matrix, cells: list[Cell], workloads: list[Workload]) -> list[Search]:
    """A capacity search per serving cell and workload, under the matrix's SLOs (none without `slo`)."""
    space = space_of(vars(matrix))
    if space is None:
        return []
    slos = tuple(slos_of(vars(matrix)))
    return [Search(cell, w, slos, space) for cell in cells if catalog.engine(cell.engine).serves for w in workloads]


def prompt_limit(matrix: Matrix, target_config: HfConfig | None) -> int | None:
    """The most prompt tokens every engine of the matrix holds with max_new_tokens after them: the smallest
    max_model_len its engines get (the target's max_position_embeddings where an engine takes the model's own)."""
    own = (target_config or {}).get("max_position_embeddings")
    lens = [engine_max_model_len(e, matrix.engine_options) or own for e in matrix.engines]
    known = [n for n in lens if n]
    return min(known) - matrix.max_new_tokens if known else None


def resolve_prompts(matrix: Matrix, tokenizer: Any, limit: int | None, workloads: list[Workload],
                    answers: dict[str, dict[str, list[int]]]
                    ) -> tuple[dict[str, Prompts], dict[str, SkippedRows], dict[str, list[Prompt]]]:
    """Each workload's (measured, warm-up) prompts, rendered once with the target's tokenizer and chat template for
    every cell, and the rows passed over because they would not fit `limit` prompt tokens (by workload key, where
    there are any: the limit and [row index, prompt tokens] of each). A context workload precedes each prompt with
    many-shot context (raises ConfigError when a prompt cannot hold it within the limit, naming the largest context
    that fits); a second turn is resolved when `answers` (dataset -> first prompt sha256 -> answer ids) hold every
    first answer, else left out and returned with the first turn's prompts it waits on (by workload key)."""
    template = matrix.chat_template
    prompts: dict[str, Prompts] = {}
    skipped: dict[str, SkippedRows] = {}
    waiting: dict[str, list[Prompt]] = {}
    n = matrix.num_prompts + matrix.warmup_prompts
    for d in matrix.datasets:
        chosen = ds.select_prompts(d.name, n, matrix.seed, tokenizer, d.path, limit, template)
        if chosen.skipped:
            skipped[d.name] = {"max_prompt_tokens": limit, "rows": [list(r) for r in chosen.skipped]}
        own = [w for w in workloads if w.dataset == d.name]
        first = chosen.prompts
        if any(w.turn == 2 for w in own):
            follow_up = ds.DATASETS[d.name].second_turn
            assert follow_up is not None  # the matrix check gives turns only to datasets with a second turn
            first = [dataclasses.replace(p, turn=1, follow_up=follow_up(chosen.rows[p.index])) for p in first]
        pool = (ds.Shots(d.name, chosen.rows, tokenizer, template)
                if any(w.context_tokens is not None for w in own) else None)
        for w in own:
            if w.turn == 2:
                known = answers.get(d.name, {})
                if any(p.sha256 not in known for p in first):
                    waiting[w.key] = first
                    continue
                prompts[w.key], passed = second_turn_prompts(matrix, tokenizer, limit, first, known)
                if passed:
                    skipped[w.key] = passed
                continue
            if w.context_tokens is None:
                built = first
            else:
                assert pool is not None  # made above for every context workload
                built = with_context(first, pool, w, limit if limit is not None else w.context_tokens, matrix,
                                     tokenizer)
            prompts[w.key] = measured_first(built, first, matrix.num_prompts)
    return prompts, skipped, waiting


def measured_first(built: list[Prompt], first: list[Prompt], num_prompts: int) -> Prompts:
    """A workload's (measured, warm-up) prompts: those built on the first `num_prompts` of `first` are measured."""
    measured = {p.index for p in first[:num_prompts]}
    return [p for p in built if p.index in measured], [p for p in built if p.index not in measured]


def second_turn_prompts(matrix: Matrix, tokenizer: Any, limit: int | None, first: list[Prompt],
                        answers: dict[str, list[int]]) -> tuple[Prompts, SkippedRows | None]:
    """A second turn's (measured, warm-up) prompts after the first turn's `answers` (first prompt sha256 -> answer
    ids, one for each of `first`), and the rows passed over as longer than `limit` tokens (None where none were)."""
    built = second_turns(first, answers, tokenizer, matrix.chat_template)
    fit = [p for p in built if limit is None or len(p.ids) <= limit]
    passed: SkippedRows | None = None if len(fit) == len(built) else {
        "max_prompt_tokens": limit, "instead": "not replaced (the first turn fixes the conversations)",
        "rows": [[p.index, len(p.ids)] for p in built if p not in fit]}
    return measured_first(fit, first, matrix.num_prompts), passed


def with_context(first: list[Prompt], pool: ds.Shots, w: Workload, limit: int, matrix: Matrix,
                 tokenizer: Any) -> list[Prompt]:
    """The prompts of a context workload; ConfigError when one cannot hold its context within `limit` tokens."""
    assert w.context_tokens is not None
    out = [ds.with_context(p, pool, w.context_tokens, limit, matrix.seed, tokenizer, matrix.chat_template)
           for p in first]
    missing = [p for p, q in zip(first, out) if q is None]
    if missing:
        reach = min(len(ds.fill(p, pool, limit, limit, matrix.seed, tokenizer, matrix.chat_template)[1])
                    for p in first)
        raise ConfigError(f"{w.key}: {len(missing)} prompt(s) (rows {', '.join(str(p.index) for p in missing)}) "
                          f"cannot be given {w.context_tokens} tokens with whole shots from the other rows of "
                          f"{w.dataset} that have answers ({len(pool.rows)}), within {limit} prompt tokens "
                          f"(max_model_len - max_new_tokens); the largest context that fits every prompt is "
                          f"{reach} tokens: lower 'context_tokens' to it, or raise max_model_len")
    return [q for q in out if q is not None]


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
    what cannot run, one line per problem, and Lacking where only what this machine lacks stops it."""
    check_inputs(matrix).raise_any()
    cells, models = matrix_cells(matrix)  # once: fingerprinting reads every model file
    env = provenance.environment()
    problem = interleave_problem(matrix, [c.engine for c in cells], env["platform"]) or batch_problem(
        matrix, cells, models, env["platform"])
    if problem:
        raise ConfigError(problem)
    builds = builds_of(cells)
    run_dir = run_folder(matrix, run_dir, fresh)
    check_run_folder(run_dir, matrix, reuse)
    workloads = workloads_of(matrix)
    units = units_of(matrix, cells, workloads)
    store = RunStore(run_dir)
    done = frozenset((u.cell.cell_id, u.store_key) for u in units if store.is_done(u.cell.cell_id, u.store_key))
    if done and fresh:
        raise ConfigError(f"--fresh: {run_dir} already holds {len(done)} measured unit(s); give a new --run-dir, or "
                          f"drop --run-dir to get a new folder")
    target = materialize(matrix.target)
    tokenizer = load_tokenizer(target)
    # a serving level is a load, a static batch a measurement of batching: the recheck and tie pass are batch 1's
    batch1 = [c for c in cells if not catalog.engine(c.engine).serves and c.batch_size == 1]
    drift_families = families(batch1) if not matrix.interleave and matrix.drift_prompts else []
    tie_families = families(batch1)
    setup = prompt_setup(matrix, cells, tokenizer, prompt_limit(matrix, models[matrix.target].get("config")))
    answers = {w.dataset: cached_answers(run_dir, w.dataset, setup.generator)
               for w in workloads if w.turn == 2 and setup.generator is not None}
    prompts, skipped, waiting = resolve_prompts(matrix, tokenizer, setup.max_prompt_tokens, workloads, answers)
    stages = [Stage(setup.generator, w, waiting[w.key], [u for u in units if u.workload == w])
              for w in workloads if w.key in waiting and setup.generator is not None]
    redo = measured_on_other_ids(units, done, prompts, store)
    done = done - set(redo)
    searches = searches_of(matrix, cells, workloads)
    redo += [(s.cell.cell_id, key) for s in searches if s.workload.key in prompts
             for key in on_other_prompts(store, s, prompts[s.workload.key][0])]
    return RunPlan(
        matrix=matrix, cells=cells, models=models, env=env, run_dir=run_dir, target=target, tokenizer=tokenizer,
        prompts=prompts, skipped=skipped, units=units,
        groups=[cells] if matrix.interleave else [[c] for c in cells], drift_families=drift_families,
        tie_families=tie_families, done=done,
        stale=redo + stale_checks([w.key for w in workloads], done, drift_families, tie_families),
        progress=progress, workloads=workloads, setup=setup, redo=redo, stages=stages, searches=searches,
        builds=builds)


def builds_of(cells: list[Cell]) -> list[str]:
    """The builds the run will start before its units, announced with their expected time, as the pre-run checks of
    its cells' engines find them (llama-server where a llama.cpp cell runs and none is built). Raises ConfigError
    where a check finds that the engine's cells cannot run (a llama.cpp build cache that cannot be a folder)."""
    found = catalog.pre_run_checks([c.engine for c in cells])
    problem = next((f.problem for f in found if f.problem), None)
    if problem:
        raise ConfigError(problem)
    return [line for f in found for line in f.builds]


def batch_problem(matrix: Matrix, cells: list[Cell], models: Mapping[str, ModelFingerprint], platform: str
                  ) -> str | None:
    """Why a cell's static batch would not fit this machine's device memory (hardware/batch_memory.py), or None."""
    if not matrix.batch_size:
        return None
    own = (models[matrix.target].get("config") or {}).get("max_position_embeddings") or 2048
    max_len = {e: engine_max_model_len(e, matrix.engine_options) or own for e in matrix.engines}
    memory, what = device_memory_bytes(platform)
    problem = batch_memory_problem(cells, models, max_len, memory, what)
    return f"{matrix.source}: {problem}" if problem else None


def prompt_setup(matrix: Matrix, cells: list[Cell], tokenizer: Any, limit: int | None) -> PromptSetup:
    """How the run's prompts are made (`PromptSetup`)."""
    template = ds.template_kwargs(matrix.chat_template)
    drafts = {m: matrix.drafts[m] for m in matrix.methods if m in matrix.drafts}
    return PromptSetup(template, ds.template_sha256(tokenizer), ds.template_ignores(tokenizer, template), limit,
                       thinking_warnings(drafts, template),
                       generator_cell(cells) if matrix.turns and 2 in matrix.turns else None,
                       trained_lengths(materialize(matrix.target)))


def trained_lengths(target: str) -> TrainedLengths | None:
    """The sequence lengths a model set trained by `benchmarks tiny train` was trained on, from the training.json it
    writes beside its target: the target's training rows, and the drafts' prompt + regenerated tokens."""
    path = Path(target).parent / "training.json"
    cfg = json.loads(path.read_text()).get("config") or {} if path.is_file() else {}
    if not {"seq_len", "regen_max_prompt_tokens", "regen_new_tokens"} <= set(cfg):
        return None
    return {"target": cfg["seq_len"], "drafts": cfg["regen_max_prompt_tokens"] + cfg["regen_new_tokens"],
            "source": f"{path.parent.name}/training.json"}


def measured_on_other_ids(units: list[Unit], done: frozenset[tuple[str, str]], prompts: dict[str, Prompts],
                          store: RunStore
                          ) -> list[tuple[str, str]]:
    """Done units whose requests were sent other prompt ids than the plan's for their workload (another context,
    chat template or first answer): they are measured again, so that every cell of a workload pairs on the same ids."""
    out = []
    for u in units:
        if (u.cell.cell_id, u.store_key) in done and u.workload_key in prompts:
            sent = {r.prompt_sha256 for r in store.unit(u.cell.cell_id, u.store_key) if type(r) is RequestLine}
            if sent != {p.sha256 for p in prompts[u.workload_key][0]}:
                out.append((u.cell.cell_id, u.store_key))
    return out


def say_resuming(plan: RunPlan) -> None:
    """One line when a run resumes a folder that holds measured units (or capacity probes)."""
    store = RunStore(plan.run_dir)
    probes = sum(store.is_done(cell_id, key) for cell_id in {s.cell.cell_id for s in plan.searches}
                 for key in store.unit_keys(cell_id) if "@p" in key)
    if plan.done or probes:
        searches = f"; {probes} capacity probe(s) stored, which the searches walk again without measuring" \
            if probes else ""
        print(f"resuming {plan.run_dir}: {len(plan.done)} of {len(plan.units)} (cell, dataset) units already done, "
              f"not measured again ({len(plan.units) - len(plan.done)} to run){searches}; FRESH=1 (--fresh) measures "
              f"everything again into a new run folder", file=sys.stderr)
