"""Capacity searches driven through a server: a plan whose next unit depends on the last one's verdict.

A `Search` is one serving cell on one workload under the matrix's SLOs. Each probe round is a unit of its own
(`unit_keys.probe_key`: the level and the round), measured like a serving level and written atomically; which round to
measure next is `capacity.replay` over the rounds already stored, so a search that resumes walks the same path and
measures only what is missing. The SLOs are searched one after another over the same stored rounds: a probe one of
them measured is never measured again for another. What the search assumes and decides: docs/serving.md."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tqdm import tqdm

from benchmarks.core.cells import Cell
from benchmarks.core.unit_keys import probe_key
from benchmarks.data.datasets import Prompt, Workload
from benchmarks.decide.capacity import Path, Round, Space, Step, read_load, replay
from benchmarks.decide.slo import Slo
from benchmarks.records.probe_rounds import round_of, rounds_by_load
from benchmarks.records.records import ErrorLine, Line, ProbeRequestLine, error_line
from benchmarks.records.store import RunStore, StoreWriteError


@dataclass(frozen=True)
class Search:
    """One serving cell's capacity search on one workload, under each SLO of the matrix in turn."""

    cell: Cell
    workload: Workload
    slos: tuple[Slo, ...]
    space: Space

    def level(self, step: Step) -> tuple[int, float | None]:
        """A probe's serving level: its concurrency, or (every request of a round may be in flight) its rate."""
        if self.space.axis == "concurrency":
            return int(step.load), None
        return self.space.requests, float(step.load)

    def key(self, step: Step) -> str:
        """The unit key of a probe round."""
        return probe_key(self.workload.key, *self.level(step), step.round)

    def prompts(self, measured: list[Prompt], step: Step) -> list[Prompt]:
        """The measured prompts a round sends."""
        return measured[self.space.round_prompts(step.round)]


def stored_rounds(store: RunStore, search: Search) -> dict[float, list[Round]]:
    """The rounds of a search the run folder holds whole (no error record), by load."""
    lines: list[Line] = []
    prefix = f"{search.workload.key}@"
    for key in store.unit_keys(search.cell.cell_id):
        if key.startswith(prefix) and "@p" in key and store.is_done(search.cell.cell_id, key):
            lines += store.unit(search.cell.cell_id, key)
    return rounds_by_load(search.space, lines)


def paths(store: RunStore, search: Search) -> list[Path]:
    """Each SLO's path over the rounds stored now."""
    stored = stored_rounds(store, search)
    return [replay(search.space, slo, stored) for slo in search.slos]


def on_other_prompts(store: RunStore, search: Search, measured: list[Prompt]) -> list[str]:
    """The search's stored probe rounds whose requests were sent other prompts than their round's (another prompt
    set, or other rounds): they are measured again."""
    out = []
    prefix = f"{search.workload.key}@"
    for key in store.unit_keys(search.cell.cell_id):
        if not (key.startswith(prefix) and "@p" in key):
            continue
        reqs = [r for r in store.unit(search.cell.cell_id, key) if isinstance(r, ProbeRequestLine)]
        if reqs:
            want = {p.sha256 for p in measured[search.space.round_prompts(reqs[0].round)]}
            if {r.prompt_sha256 for r in reqs} != want:
                out.append(key)
    return out


Measure = Callable[[Search, Step], list[Line]]  # a probe round's records (probe kinds), measured through the server


def run_search(store: RunStore, search: Search, measure: Measure, provenance_id: str) -> bool:
    """Walk each SLO's path, measuring every probe it asks for that is not stored, one unit each; a progress line per
    probe (its load, round, requests, each threshold's percentile with its interval, the verdict, and why it was
    chosen) and per capacity found. False when a probe failed (its error is its unit; the search stops there)."""
    cell, space = search.cell, search.space
    stored = stored_rounds(store, search)
    who = f"[{cell.label}] {search.workload.key}"
    for slo in search.slos:
        while (path := replay(space, slo, stored)).pending is not None:
            step = path.pending
            key = search.key(step)
            try:
                lines = measure(search, step)
            except StoreWriteError:
                raise
            except Exception as exc:
                failure: ErrorLine = error_line(cell, search.workload.key, exc, concurrency=search.level(step)[0])
                store.write_unit(cell.cell_id, key, [failure], provenance_id)
                tqdm.write(f"{who}: probe at {space.text(step.load)} round {step.round} FAILED: {failure.error}")
                return False
            store.write_unit(cell.cell_id, key, lines, provenance_id)
            stored.setdefault(step.load, []).append(round_of(space, lines))
            reading = read_load(space, slo, stored[step.load])
            tqdm.write(f"{who}: probe {len(path.probes) + 1} at {space.text(step.load)}, round {step.round} "
                       f"({len(reading.requests)} requests; {step.why}): {reading.judgment.text()}; the SLO: "
                       f"{reading.verdict.upper()}")
        tqdm.write(f"{who}: capacity under {slo.text()}: {capacity_line(space, path)}")
    return True


def capacity_line(space: Space, path: Path) -> str:
    """A search's answer in one line: the capacity, how many probes it took, why it stopped, and any contradiction
    of its assumption."""
    unit = "" if space.axis == "concurrency" else " req/s"
    return (f"{path.capacity.text(space)}{unit} after {len(path.probes)} probes ({path.stopped})"
            + (f"; NOT MONOTONE: {path.non_monotone[0]}" + (f" (and {len(path.non_monotone) - 1} more)"
                                                              if len(path.non_monotone) > 1 else "")
               if path.non_monotone else ""))
