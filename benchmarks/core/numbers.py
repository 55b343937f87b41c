"""What counts as a number, how a missing one is shown, and a command-line number's domain: one predicate, one glyph
and one option type for every layer."""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Bounded:
    """A command-line number and its domain, declared where the option is (`type=Bounded(int, 1, 64)`): argparse
    reads the text with it, and a value that is not a finite number of `kind` within [low, high] is refused in one
    line naming the option, before any work. `many`: a comma-separated list of such numbers (a list)."""

    kind: type[int] | type[float]
    low: float
    high: float
    many: bool = False

    def __call__(self, text: str) -> Any:
        values = [self.one(part) for part in text.split(",") if part.strip()] if self.many else [self.one(text)]
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r}: {self.expected}")
        return values if self.many else values[0]

    @property
    def expected(self) -> str:
        if self.many:
            what = f"one or more {'whole numbers' if self.kind is int else 'numbers'} separated by commas, each"
        else:
            what = "an int" if self.kind is int else "a number"
        return f"expected {what} from {_shown(self.low)} to {_shown(self.high)}"

    def one(self, text: str) -> int | float:
        try:
            value = self.kind(text.strip())
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r}: {self.expected}") from None
        if not (math.isfinite(value) and self.low <= value <= self.high):
            raise argparse.ArgumentTypeError(f"{text.strip()}: {self.expected}")
        return value


def _shown(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"
