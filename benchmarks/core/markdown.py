"""The formatting every Markdown table of the harness shares: numbers with a dash for missing ones, and tables."""
from __future__ import annotations

import math
from typing import Any

from benchmarks.core.numbers import MISSING


def fmt(x: Any, digits: int = 2) -> str:
    """A float to `digits` places, other values as text, a dash for None and NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)
