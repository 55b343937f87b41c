"""The lossless check: greedy speculative decoding must reproduce the AR baseline token for token, and sampled
speculative decoding must draw from AR's distribution (verification/distribution.py). Pure: verdicts over summary
rows, the rows whose due check could not run (`not_checked`, with the reason), and report.md's lossless sentence,
which counts what was checked. `judge` computes them once for a run; the report and the exit code read them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.core.numbers import is_number
from benchmarks.data.datasets import workloads
from benchmarks.records.manifest_read import Manifest
from benchmarks.records.summary_row import SummaryRow


def divergent_rows(rows: list[SummaryRow]) -> list[SummaryRow]:
    """Greedy method rows with a lossless violation: a prompt whose first divergence from the baseline is not a
    numerical tie (verification/ties.py; a row without the tie columns: any divergence)."""
    return [r for r in rows if r.method != "baseline" and r.temperature == 0
            and is_number(r.identical_frac) and r.identical_frac < 1.0
            and not (is_number(r.n_violations) and r.n_violations == 0)]


def _compared(r: SummaryRow) -> int:
    """The prompts a tie-checked row compared with the baseline (only such rows are asked)."""
    return int((r.n_identical or 0) + (r.n_ties or 0) + (r.n_violations or 0))


def tie_rows(rows: list[SummaryRow]) -> list[SummaryRow]:
    """Greedy method rows that differ from the baseline only at numerical ties (no violation)."""
    return [r for r in rows if r.method != "baseline" and r.temperature == 0 and is_number(r.identical_frac)
            and r.identical_frac < 1.0 and not divergent_rows([r])]


def unchecked_rows(rows: list[SummaryRow]) -> list[SummaryRow]:
    """Method rows with a due check (greedy identity at T = 0, the distribution check at T > 0) that could not run:
    summary.py marks them with the reason in `not_checked`. Serving rows at concurrency > 1 carry a measured
    identity fraction instead (`identical_frac_batched`), not a verdict, so their identity is due at concurrency 1;
    so do rows of a static batch B > 1 (theirs is due at batch size 1)."""
    return [r for r in rows if r.method != "baseline" and r.not_checked]


def _per_cell(rows: list[SummaryRow]) -> list[SummaryRow]:
    """One row per (engine, cell, dataset): a serving cell's distribution verdict is shared by its levels' rows."""
    seen: dict[tuple[Any, ...], SummaryRow] = {}
    for r in rows:
        seen.setdefault((r.engine, r.label, r.dataset, r.temperature, r.not_checked), r)
    return list(seen.values())


def checked_what(r: SummaryRow) -> str:
    """The check a row is due: greedy identity, or the distribution check at its temperature."""
    return "greedy identity" if r.temperature == 0 else f"the T={r.temperature:g} distribution check"


def greedy_sentence(rows: list[SummaryRow]) -> str:
    """How many greedy speculative rows were due a check against AR, how many were checked, and what came out:
    report.md's lossless sentence, which claims nothing about rows that were not checked."""
    due = [r for r in rows if r.method != "baseline" and r.temperature == 0
           and (((r.concurrency or 1) == 1 and not r.batched) or r.not_checked)]
    if not due:
        return "No greedy row was checked: the run has no greedy speculative cell."
    checked = [r for r in due if is_number(r.identical_frac)]
    failed = sum(not r.n_prompts for r in due)
    unchecked = len(due) - len(checked) - failed
    rest = ([f"{unchecked} not checked (NOT CHECKED below)"] if unchecked else []) + (
        [f"{failed} failed to run (see Failed units)"] if failed else [])
    if not checked:
        return f"No greedy row was checked: of {len(due)} greedy rows, {' and '.join(rest)}."
    identical = sum(r.identical_frac == 1.0 for r in checked)
    violating = len(divergent_rows(checked))
    differing = len(checked) - identical - violating
    parts = ["all identical to the AR baseline" if identical == len(checked)
             else f"{identical} identical to the AR baseline"]
    parts += [f"{violating} violate it (LOSSLESS VIOLATION below)"] if violating else []
    parts += [f"{differing} differ only at numerical ties (below)"] if differing else []
    return f"{len(checked)} of {len(due)} greedy rows checked: {'; '.join(parts + rest)}."


def distribution_failures(rows: list[SummaryRow]) -> list[SummaryRow]:
    """Sampled (T > 0) method rows whose distribution check rejected equality with the AR baseline."""
    return [r for r in rows if r.dist_verdict == "FAIL"]


def verdict_lines(rows: list[SummaryRow]) -> list[str]:
    lines = []
    for r in _per_cell(distribution_failures(rows)):
        lines.append(f"DISTRIBUTION VIOLATION: {r.engine} {r.label} at T={r.temperature} on {r.dataset}: "
                     f"samples differ from AR's (smallest Holm-adjusted p = {r.dist_p_min:.2g} over "
                     f"the run's {r.dist_family or r.dist_n_tests} tests)")
    for r in divergent_rows(rows):
        ties = (f"; {r.n_violations} of {_compared(r)} prompts diverge beyond a numerical tie, the first at token "
                f"{r.first_violation} ({r.violation_reason}), {r.n_ties} at a tie"
                if is_number(r.n_violations) else "")
        lines.append(f"LOSSLESS VIOLATION: {r.engine} {r.label} on {r.dataset}: "
                     f"{r.identical_frac:.3f} of prompts identical to AR, first divergence at token "
                     f"{r.first_divergence_min}{ties}")
    for r in tie_rows(rows):
        lines.append(f"lossless up to numerical ties: {r.engine} {r.label} on {r.dataset}: {r.n_ties} of "
                     f"{_compared(r)} prompts diverge from AR at a numerical tie of the target (first at token "
                     f"{r.first_divergence_min}; widest margin {r.tie_margin_max:.3g} logits = "
                     f"{r.tie_margin_max_ulps:.2f} ulp; tokens after a tie are not compared), "
                     f"{r.n_identical} identical")
    return lines + [not_checked_line(r) for r in _per_cell(unchecked_rows(rows))]


def not_checked_line(r: SummaryRow) -> str:
    return f"NOT CHECKED: {checked_what(r)} of {r.engine} {r.label} on {r.dataset}: not checked: " \
           f"{r.not_checked}"


@dataclass(frozen=True)
class Verdicts:
    """A run's verdicts, computed once from its summary rows."""

    divergent: list[SummaryRow]  # greedy rows with a lossless violation
    distribution_failed: list[SummaryRow]  # sampled rows whose distribution check rejected
    unchecked: list[SummaryRow]  # rows whose due check could not run (or the stand-ins of units that have none)
    failed: list[SummaryRow]  # rows with a failed unit
    greedy: str  # report.md's lossless sentence
    lines: list[str]  # one line per violation, tie, and unchecked cell

    @property
    def violated(self) -> bool:
        return bool(self.divergent or self.distribution_failed)

    @property
    def unchecked_cells(self) -> int:
        """Cells (engine, method, dataset) with a due check that could not run."""
        return len({(r.engine, r.label, r.dataset) for r in self.unchecked})


def missing_rows(rows: list[SummaryRow], manifest: Manifest) -> list[SummaryRow]:
    """Stand-ins for the speculative (cell, dataset) units of the manifest that have no row at all (the run stopped
    before them, or their records are gone): a due check with nothing to check. A run without a single record is
    one stand-in of its own. A serving cell of a matrix with a capacity search and no fixed concurrency level has
    no such unit: its probes measure load, not identity (docs/serving.md)."""
    config = manifest.config
    datasets = [w.key for w in workloads([d.name for d in config.datasets], config.context_tokens, config.turns)]
    have = {(r.cell_id, r.dataset) for r in rows}
    search_only = bool(config.slo) and not config.concurrency
    out = [SummaryRow(engine=c.engine, label=c.label, method=c.method, dataset=d, temperature=c.temperature,
                      not_checked="its unit holds no records (the run stopped before it, or its records are gone)")
           for cid, c in manifest.cells.items() if c.method != "baseline" and not search_only
           for d in datasets if (cid, d) not in have]
    if not rows and not out and not search_only:
        out.append(SummaryRow(engine="every", label="cell", method="any", dataset="every dataset", temperature=0.0,
                              not_checked="the run holds no records"))
    return out


def judge(rows: list[SummaryRow], manifest: Manifest | None = None) -> Verdicts:
    """The verdicts of a run's summary rows; with its manifest, units due a check that have no row are unchecked."""
    missing = missing_rows(rows, manifest) if manifest is not None else []
    return Verdicts(divergent_rows(rows), distribution_failures(rows), unchecked_rows(rows) + missing,
                    [r for r in rows if r.n_errors], greedy_sentence(rows),
                    verdict_lines(rows) + [not_checked_line(r) for r in missing])
