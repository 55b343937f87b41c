"""What counts as a number, and how a missing one is shown: one predicate and one glyph for every layer."""
from __future__ import annotations

import math
from typing import Any, TypeGuard

MISSING = "–"  # a value a table has no number for (None, NaN, not measured)


def is_number(x: Any) -> TypeGuard[float]:
    """A real value (an int or a float, not a bool) that is not NaN."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def as_float(x: Any) -> float:
    """A value as a float, NaN where it is no number (None, a bool, text)."""
    return float(x) if is_number(x) else math.nan


def is_finite(x: Any) -> TypeGuard[float]:
    """A number that is not infinite either."""
    return is_number(x) and math.isfinite(x)
