"""A run summarised once: its typed records by kind, one summary row per (cell, dataset workload[, serving level])
with its columns from the registry (analysis/columns.py), the verdicts, and what the report's sections and figures
show beyond the rows, all computed here from records + manifest (recomputable from any old run). summary.csv,
report.md and the figures render this one object. A workload's rows name it by its key (`humaneval@ctx4096`,
`mt-bench@turn2`) and carry its context length or turn, so that rows of one dataset group by them and speedups pair
on the prompts one workload sent."""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from benchmarks.analysis import capacities, cost_model_compute, speculation_profile, strongest
from benchmarks.analysis import side_by_side as beside
from benchmarks.analysis.columns import row
from benchmarks.analysis.crossovers import SeriesCrossover, crossovers
from benchmarks.analysis.environments import NOT_KNOWN, UNKNOWN
from benchmarks.analysis.row_records import Key, RowRecords, prompts_sha256
from benchmarks.config.pairing import baseline_cell_id
from benchmarks.hardware.provenance import EnvironmentKey, content_id, environment_key
from benchmarks.records.manifest_read import Manifest
from benchmarks.records.records import PROBE_KINDS, ByKind, Line, RequestLine, SamplesLine
from benchmarks.records.store import ProvenanceRecord, RunStore
from benchmarks.records.summary_row import SummaryRow, label_at
from verification import distribution
from verification.lossless import Verdicts, judge


def _group(records: list[Line]) -> dict[Key, ByKind]:
    """The lines of each row; a capacity probe's feed the capacities, not a row."""
    groups: dict[Key, ByKind] = defaultdict(ByKind)
    for r in records:
        if r.kind not in PROBE_KINDS:
            groups[(r.cell_id, r.workload, r.level_of())].add(r)
    return groups


def workload_order(name: str) -> tuple[str, int, int]:
    """A workload key's place: by dataset, then context length (numerically), then turn."""
    dataset, *parts = name.split("@")
    ctx = next((int(p[3:]) for p in parts if p.startswith("ctx") and p[3:].isdigit()), -1)
    turn = next((int(p[4:]) for p in parts if p.startswith("turn") and p[4:].isdigit()), 1)
    return dataset, ctx, turn


def distribution_run(units: list[RowRecords]) -> None:
    """Each checked unit's distribution check, Holm-adjusted over all tests of the run's checked cells (one family per
    run: a run whose samplers are all correct shows a FAIL with probability at most ALPHA)."""
    checked = [u for u in units if u.check is not None]
    for u, res in zip(checked, distribution.run_family([u.check for u in checked if u.check is not None])):
        u.adjusted = res


def row_records(records: list[Line], manifest: Manifest) -> list[RowRecords]:
    """What each summary row is computed from, in the rows' order, their distribution checks adjusted over the run."""
    cells = manifest.cells
    groups = _group(records)
    # A cell's distribution samples, whichever level's unit holds them: a serving cell draws them once (at its
    # first level), and the verdict is the cell's, shared by its levels' rows.
    samples: dict[tuple[str, str], list[SamplesLine]] = defaultdict(list)
    for (cid, workload, _), kinds in groups.items():
        samples[(cid, workload)] += kinds.samples
    reqs = strongest.alone_requests(r for kinds in groups.values() for r in kinds.requests)
    best_of = strongest.strongest_baselines(cells, groups, reqs)

    def order(key: Key) -> tuple:
        c = cells[key[0]]
        return (c.engine, c.temperature, key[2] or 0, c.batch_size, c.method != "baseline", c.method, c.k,
                c.tree_budget, workload_order(key[1]))

    units = []
    for key, kinds in sorted(groups.items(), key=lambda kv: order(kv[0])):
        cid, workload, level = key
        cell = cells[cid]
        base_id = cid if cell.method == "baseline" else baseline_cell_id(cell, cells)
        best = best_of.get((workload, cell.temperature)) if level is None and cell.batch_size == 1 else None
        units.append(RowRecords(key, kinds, cell, manifest, base_id,
                                groups.get((base_id, workload, level), ByKind()) if base_id else None, samples,
                                [k[2] for k in groups if k[:2] == (cid, workload)],
                                strongest=(best, groups[(best.cell_id, workload, None)].requests) if best else None))
    distribution_run(units)
    return units


@dataclass(frozen=True)
class TimingErrors:
    """The engine's own per-request floor check on one (engine, label, workload): requests checked, those below the
    floor, and the fastest of those (its step and floor, s)."""

    engine: str
    label: str
    workload: str
    checked: int
    below: int
    worst_step_s: float | None
    worst_floor_s: float | None


@dataclass(frozen=True)
class PromptSets:
    """What each cell was sent on a workload: the hash of its set of prompts by "<engine> <label>", and the number
    of distinct prompts any cell was sent."""

    hashes: dict[str, str | None]
    prompts: int


@dataclass(frozen=True)
class Summary:
    """A run summarised once. `rows` are summary.csv's (one typed row of the registered columns each, `units` the
    records each was computed from); the cached properties are what report.md's sections show beyond the rows."""

    manifest: Manifest
    records: ByKind
    units: list[RowRecords]
    rows: list[SummaryRow]
    verdicts: Verdicts
    provenances: dict[str, ProvenanceRecord]  # the provenance records the run's units name, by id
    left_out: tuple[str, ...] = ()  # the run's own unit files its records lack (damaged), each with its reason

    @cached_property
    def requests_alone(self) -> dict[tuple[str, str], strongest.Requests]:
        return strongest.alone_requests(self.records.requests)

    @cached_property
    def side_by_side(self) -> list[beside.SideBySide]:
        """Each batch-1 cell beside the strongest baseline of its workload (runs with baselines on two engines)."""
        return beside.side_by_side(self.units, self.rows)

    @cached_property
    def across_engines(self) -> list[beside.AcrossEngines]:
        return beside.across_engines(self.units, self.requests_alone)

    @cached_property
    def prompt_sets(self) -> dict[str, PromptSets]:
        """Per workload, what each cell was sent (the speedup and the lossless check pair on the same ids)."""
        sent: dict[str, dict[str, list[RequestLine]]] = defaultdict(lambda: defaultdict(list))
        for r in self.records.requests:
            sent[r.workload][f"{r.engine} {r.label}"].append(r)
        return {key: PromptSets({cell: prompts_sha256(reqs) for cell, reqs in sent[key].items()},
                                len({r.prompt_sha256 for reqs in sent[key].values() for r in reqs}))
                for key in sorted(sent, key=workload_order)}

    @cached_property
    def timing_errors(self) -> list[TimingErrors]:
        """Per (engine, label, workload) whose requests carry the engine's per-step floor check: what it found."""
        checked: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for r in self.records.requests:
            extra = r.extra or {}
            if extra.get("step_floor_s"):
                checked.setdefault((r.engine, r.label, r.workload), []).append(extra)
        out = []
        for (engine, label, workload), extras in sorted(checked.items()):
            bad = [e for e in extras if e.get("timing_error")]
            worst = min(bad, key=lambda e: e["step_s"]) if bad else {}
            out.append(TimingErrors(engine, label, workload, len(extras), len(bad), worst.get("step_s"),
                                    worst.get("step_floor_s")))
        return out

    @cached_property
    def environments(self) -> dict[str, tuple[EnvironmentKey, set[str]]]:
        """Each environment the run's units were measured in (by its content id): its key and the units measured
        there ("<label> @B=<batch size> on <workload>", as the tables name its row); the units that name a provenance
        whose file is gone under UNKNOWN, with a key of nothing known."""
        keys = {pid: environment_key(p["environment"]) for pid, p in self.provenances.items()}
        ids = {pid: content_id(key) for pid, key in keys.items()}
        out: dict[str, tuple[EnvironmentKey, set[str]]] = {}
        for r in self.records.all():
            if r.provenance_id:
                unit = label_at(r.label, r.level_of(), self.manifest.cells[r.cell_id].batch_size)
                known = r.provenance_id in keys
                where = (ids[r.provenance_id], keys[r.provenance_id]) if known else (UNKNOWN, NOT_KNOWN)
                out.setdefault(where[0], (where[1], set()))[1].add(f"{unit} on {r.workload}")
        return out

    @cached_property
    def speculation_profiles(self) -> list[speculation_profile.Profile]:
        """Each speculative row's speculation profile, in the rows' order (speculation_profile.json)."""
        return [p for u in self.units if (p := speculation_profile.profile(u.key, u.cell, u.lines))]

    @cached_property
    def batch_crossovers(self) -> list[SeriesCrossover]:
        return crossovers(self.units, "B")

    @cached_property
    def serve_crossovers(self) -> list[SeriesCrossover]:
        return crossovers(self.units, "C")

    @cached_property
    def capacities(self) -> list[capacities.Decision]:
        """A capacity run's decisions, per workload and SLO (analysis/capacities.py); none without an SLO."""
        return capacities.decisions(self.records, self.manifest)

    @cached_property
    def cost_groups(self) -> list[cost_model_compute.Group]:
        """The cost model's (baseline, workload) groups of batch-1 dflash rows, with what each lacks."""
        requests: dict[tuple[str, str], list[RequestLine]] = defaultdict(list)
        for r in self.records.requests:
            requests[(r.cell_id, r.workload)].append(r)
        return cost_model_compute.groups(self.rows, requests, self.manifest.cells)


def summarize(records: list[Line], manifest: Manifest, provenances: dict[str, ProvenanceRecord] | None = None
              ) -> Summary:
    """A run's records summarised under its manifest: one row per (cell, dataset, serving level) (a speculative row
    whose due check could not run names why in `not_checked` and, at T > 0, has `dist_verdict` "unchecked"), and the
    verdicts. `provenances`: the run's provenance records by id (those its units name are kept)."""
    units = row_records(records, manifest)
    rows = [row(u) for u in units]
    ids = {r.provenance_id for r in records if r.provenance_id}
    used = {pid: p for pid, p in (provenances or {}).items() if pid in ids}
    return Summary(manifest, ByKind.of(records), units, rows, judge(rows, manifest), used)


def summarize_run(store: RunStore) -> Summary:
    """A run folder's records summarised (its manifest checked first, then its records read once, as typed
    lines, then the provenance files they name)."""
    manifest = store.run_manifest()
    records = store.records()
    summary = summarize(records, manifest, store.provenances({r.provenance_id for r in records if r.provenance_id}))
    return dataclasses.replace(summary, left_out=tuple(store.left_out))
