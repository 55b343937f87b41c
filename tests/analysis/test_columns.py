"""The column registry: summary.csv and report.md of a hand-made run that fills every column stay byte-identical to
golden files (and those of its batch-1 part to the goldens of before batches existed), every registered column is
documented in docs/outputs.md, and no other column is.

To regenerate the goldens after a deliberate change: run this module's fixture (`write_run` then `write_reports` with
figures off) and copy its summary.csv and report.md over tests/analysis/golden/."""
import re
from pathlib import Path

import pytest

from benchmarks.analysis import columns
from benchmarks.report.report_write import write_reports
from tests.analysis.synthetic_run import write_run

GOLDEN = Path(__file__).parent / "golden"
DOCS = Path(__file__).parents[2] / "docs"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    import benchmarks.figures.run_figures as figures

    mp = pytest.MonkeyPatch()
    mp.setattr(figures, "run_figures", lambda *_: figures.Drawn([], []))  # figures are not the tables' business
    out = write_run(tmp_path_factory.mktemp("run"))
    write_reports(out)
    mp.undo()
    return out


@pytest.fixture(scope="module")
def batch1_dir(tmp_path_factory):
    import benchmarks.figures.run_figures as figures

    mp = pytest.MonkeyPatch()
    mp.setattr(figures, "run_figures", lambda *_: figures.Drawn([], []))
    out = write_run(tmp_path_factory.mktemp("batch1"), batches=False)
    write_reports(out)
    mp.undo()
    return out


@pytest.mark.parametrize("name", ["summary.csv", "report.md"])
def test_outputs_stay_byte_identical(run_dir, name):
    assert (run_dir / name).read_text() == (GOLDEN / name).read_text()


def test_a_batch_1_run_reads_as_before_batches_existed(batch1_dir):
    """report.md of the run without batch cells is the golden of before batches existed, byte for byte; its
    summary.csv differs only by the Batch block of columns."""
    import pandas as pd

    assert (batch1_dir / "report.md").read_text() == (GOLDEN / "report-batch1.md").read_text()
    before = (GOLDEN / "summary-batch1.csv").read_text().splitlines()
    now = pd.read_csv(batch1_dir / "summary.csv", dtype=str, keep_default_na=False)
    added = [c.name for c in columns.COLUMNS if c.section == columns.BATCH]
    assert [c for c in now.columns if c not in added] == before[0].split(",")
    assert now.drop(columns=added).to_csv(index=False).splitlines() == before


def test_every_column_is_filled_by_the_synthetic_run(run_dir):
    import csv

    rows = list(csv.DictReader((run_dir / "summary.csv").open()))
    assert list(rows[0]) == columns.NAMES
    assert [c for c in columns.NAMES if not any(r[c] for r in rows)] == []


def test_names_are_unique_and_sections_are_report_sections(run_dir):
    assert len(set(columns.NAMES)) == len(columns.NAMES)
    report = (run_dir / "report.md").read_text()
    assert all(f"## {c.section}\n" in report for c in columns.COLUMNS if c.section)


def test_outputs_md_documents_exactly_the_registered_columns():
    text = (DOCS / "outputs.md").read_text()
    assert columns.columns_markdown() in text, (
        "docs/outputs.md's summary.csv column table is out of date: paste the output of "
        "`python -c 'from benchmarks.analysis.columns import columns_markdown; print(columns_markdown())'`")
    section = text.split("## summary.csv columns\n", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, flags=re.M)
    assert documented == columns.NAMES


def test_the_row_type_holds_the_registry_s_columns_in_its_order():
    import dataclasses

    from benchmarks.records.summary_row import SummaryRow

    assert [f.name for f in dataclasses.fields(SummaryRow)] == list(columns.NAMES)
