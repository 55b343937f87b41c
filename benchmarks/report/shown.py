"""What a report.md table shows, declared: each of its columns is a header, the summary.csv columns it draws (names
of the registry, analysis/columns.py) and how it renders one row. A table is rendered from that tuple, so the
report's tables name registered columns only; tests/analysis/test_report_tables.py checks that, and that every column
the registry places in a section is drawn by that section's tables or lines."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.core.markdown import fmt, table
from benchmarks.core.numbers import is_number
from benchmarks.records.summary_row import SummaryRow, label_at


@dataclass(frozen=True)
class Shown:
    """One column of a report table. `term` is the bold term of the report's Definitions that explains it."""

    header: str
    draws: tuple[str, ...]
    render: Callable[[SummaryRow], str]
    term: str | None = None


def value(header: str, name: str, digits: int = 2, term: str | None = None) -> Shown:
    """A registered column's value, formatted (a dash where it has none)."""
    return Shown(header, (name,), lambda r: fmt(getattr(r, name), digits), term)


def method_only(shown: Shown) -> Shown:
    """A figure against the baseline: a dash on the baseline's own rows."""
    return Shown(shown.header, shown.draws, lambda r: shown.render(r) if r.method != "baseline" else "–")


def with_interval(x: Any, low: Any, high: Any, note: str | None = None) -> str:
    """A figure with its 95 % interval, "[–, –]" without one, and why where a note says (its part before the
    colon: "one batch", "no spread between the 3 waves")."""
    if not is_number(x):
        return fmt(x)
    ci = f" [{fmt(low)}, {fmt(high)}]" if is_number(low) and is_number(high) else " [–, –]"
    return fmt(x) + (ci if not note else f" (no CI: {note.split(':')[0]})")


def row_speedup(r: SummaryRow) -> str:
    """A row's paired TPOT speedup with its interval; a baseline's own (1, paired with itself) plain."""
    if r.method == "baseline":
        return fmt(r.speedup)
    return with_interval(r.speedup, r.speedup_ci_low, r.speedup_ci_high, r.speedup_ci_note)


def render(spec: Sequence[Shown], rows: Iterable[SummaryRow]) -> str:
    """The Markdown table of `rows` under `spec`."""
    return table([s.header for s in spec], [[s.render(r) for s in spec] for r in rows])


def drawn(*specs: Sequence[Shown]) -> set[str]:
    """Every summary.csv column the tables of `specs` draw."""
    return {name for spec in specs for s in spec for name in s.draws}


def row_label(r: SummaryRow) -> str:
    """A summary row's method label, with its serving level or its offline batch size above 1 when it has one."""
    return label_at(r.label, r.concurrency, r.batch_size)


# Columns most tables share.
DATASET, ENGINE = value("dataset", "dataset"), value("engine", "engine")
METHOD = Shown("method", ("label", "concurrency", "batch_size"), row_label)
TEMPERATURE = Shown("T", ("temperature",), lambda r: f"{r.temperature:g}")
