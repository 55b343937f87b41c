"""The formatting every Markdown table of the harness shares: numbers with a dash for missing ones, and tables."""
from __future__ import annotations

import math
from typing import Any


def is_number(x: Any) -> bool:
    """A float that is not NaN (what a table prints as a number)."""
    return isinstance(x, float) and not math.isnan(x)


def fmt(x: Any, digits: int = 2) -> str:
    """A float to `digits` places, other values as text, a dash for None and NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)
