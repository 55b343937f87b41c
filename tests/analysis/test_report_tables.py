"""report.md's tables are declared over the column registry (report/shown.py): each draws registered columns only,
every column the registry places in a report section is drawn there, every term a table header leans on is in the
report's Definitions, and every metric column is defined in docs/statistics.md."""
import re
from pathlib import Path

import pytest

from benchmarks.analysis import columns
from benchmarks.report import batch_report, drift_report, serve_report, tables, workloads_report
from benchmarks.report.report_write import DEFINITIONS
from benchmarks.report.shown import drawn

# Each report section with tables: what its tables (and, for serving, its lines) draw.
SECTIONS = {
    columns.RESULTS: drawn(tables.RESULTS_TABLE),
    columns.ACCEPTANCE: drawn(tables.acceptance_spec(1)),
    columns.SERVING: drawn(serve_report.SERVE_TABLE) | set(serve_report.SERVE_LINES),
    columns.WORKLOADS: drawn(workloads_report.CONTEXT_TABLE, workloads_report.STEP_TABLE, workloads_report.TURN_TABLE),
    columns.DRIFT: drawn(drift_report.DRIFT_TABLE),
    columns.BATCH: drawn(batch_report.BATCH_TABLE),
}
SPECS = [tables.RESULTS_TABLE, tables.acceptance_spec(3), serve_report.SERVE_TABLE, workloads_report.CONTEXT_TABLE,
         workloads_report.STEP_TABLE, workloads_report.TURN_TABLE, drift_report.DRIFT_TABLE, batch_report.BATCH_TABLE]
METRIC_UNITS = {"ms", "×", "tokens/step", "tok/s"}
STATISTICS = Path(__file__).parents[2] / "docs" / "statistics.md"


def test_tables_draw_registered_columns_only():
    assert drawn(*SPECS) - set(columns.NAMES) == set()


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_column_of_a_section_is_drawn_there(section):
    placed = {c.name for c in columns.COLUMNS if c.section == section}
    assert placed - SECTIONS[section] == set(), f"registered for '{section}' but shown by none of its tables"


def test_the_results_headers_terms_are_defined_in_the_report():
    terms = [s.term for s in tables.RESULTS_TABLE if s.term]
    assert terms and [t for t in terms if f"**{t}**" not in DEFINITIONS] == []


def test_every_metric_column_is_defined_in_statistics_md():
    block = STATISTICS.read_text().split("## Definitions", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    metrics = [c for c in columns.COLUMNS if c.unit in METRIC_UNITS and c.section is not None]
    assert [c.name for c in metrics if c.term is None] == [], "a metric column without the term that defines it"
    undefined = sorted({c.term for c in columns.COLUMNS if c.term
                        and not re.search(rf"^\s*{re.escape(c.term)}\b", block, flags=re.M)})
    assert undefined == [], f"terms not defined in docs/statistics.md's Definitions block: {undefined}"
