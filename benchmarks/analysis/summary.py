"""Records + manifest → one summary row per (cell, dataset workload[, serving level]), its columns from the registry
(analysis/columns.py). Pure: recomputable from any old run. A workload's rows name it by its key (`humaneval@ctx4096`,
`mt-bench@turn2`) and carry its context length or turn, so that rows of one dataset group by them and speedups pair on
the prompts one workload sent."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from benchmarks.analysis.columns import NAMES, row
from benchmarks.analysis.engines_report import strongest_baselines
from benchmarks.analysis.unit import Key, Kinds, Unit
from benchmarks.core.pairing import baseline_cell_id, batch_size
from verification import distribution

COLUMNS = NAMES  # summary.csv's header, in order


def _group(records: list[dict[str, Any]]) -> dict[Key, Kinds]:
    groups: dict[Key, Kinds] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[(r["cell_id"], r["dataset"], r.get("concurrency"))][r["kind"]].append(r)
    return groups


def workload_order(name: str) -> tuple[str, int, int]:
    """A workload key's place: by dataset, then context length (numerically), then turn."""
    dataset, *parts = name.split("@")
    ctx = next((int(p[3:]) for p in parts if p.startswith("ctx") and p[3:].isdigit()), -1)
    turn = next((int(p[4:]) for p in parts if p.startswith("turn") and p[4:].isdigit()), 1)
    return dataset, ctx, turn


def _distribution_run(units: list[Unit]) -> None:
    """Each checked unit's distribution check, Holm-adjusted over all tests of the run's checked cells (one family per
    run: a run whose samplers are all correct shows a FAIL with probability at most ALPHA)."""
    checked = [u for u in units if u.check is not None]
    for u, res in zip(checked, distribution.run_family([u.check for u in checked])):
        u.adjusted = res


def summarize(records: list[dict[str, Any]], manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (cell, dataset, serving level); a speculative row whose due check could not run names why in
    `not_checked` (and, at T > 0, has `dist_verdict` "unchecked")."""
    cells = manifest["cells"]
    groups = _group(records)
    # A cell's distribution samples, whichever level's unit holds them: a serving cell draws them once (at its
    # first level), and the verdict is the cell's, shared by its levels' rows.
    samples: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for (cid, dataset, _), kinds in groups.items():
        samples[(cid, dataset)] += kinds.get("samples", [])

    strongest = strongest_baselines([{"cell_id": cid, "dataset": ds, "concurrency": level, **cells[cid]}
                                     for cid, ds, level in groups], records)

    def order(key: Key) -> tuple:
        c = cells[key[0]]
        return (c["engine"], c["temperature"], key[2] or 0, batch_size(c), c["method"] != "baseline", c["method"],
                c["k"], workload_order(key[1]))

    units = []
    for key, kinds in sorted(groups.items(), key=lambda kv: order(kv[0])):
        cid, dataset, level = key
        cell = cells[cid]
        base_id = cid if cell["method"] == "baseline" else baseline_cell_id(cell, cells)
        best = strongest.get((dataset, cell["temperature"])) if level is None and batch_size(cell) == 1 else None
        units.append(Unit(key, kinds, cell, manifest, base_id, groups.get((base_id, dataset, level), {})
                          if base_id else None, samples, [k[2] for k in groups if k[:2] == (cid, dataset)],
                          strongest=(cells[best]["engine"], groups[(best, dataset, None)]["request"])
                          if best else None))
    _distribution_run(units)
    return [row(u) for u in units]
