"""summary.csv: the summary rows under the column registry's header, in its order (analysis/columns.py)."""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from benchmarks.analysis.columns import NAMES
from benchmarks.records.summary_row import SummaryRow

# Columns of counts and token indices that may be empty: written as integers, not floats.
INTEGER = ("first_divergence_min", "n_identical", "n_ties", "n_violations", "first_violation")


def summary_frame(rows: Sequence[SummaryRow]) -> pd.DataFrame:
    """The rows as a table with every registered column, in the registry's order."""
    return pd.DataFrame([r.as_dict() for r in rows], columns=NAMES)


def summary_csv(rows: Sequence[SummaryRow]) -> str:
    """summary.csv's text."""
    return summary_frame(rows).astype({c: "Int64" for c in INTEGER}).to_csv(index=False)
