"""The error a matrix or preset raises, the matrix being parsed as every key's parser reads it, and the value checks
the parsers share (one message per problem, naming the file and the key)."""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchmarks.core.exit_codes import BadInput


class ConfigError(BadInput):
    """A matrix or preset that cannot run; the message names the file, the key and what is allowed."""


# Names that become file or folder names (the run folder, its unit files, a preset file): one path component of a
# safe character set, so that no name can lead outside results/ or configs/presets/.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
SAFE_NAME_RULE = "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 80 characters"


def fail(source: str, key: str, msg: str) -> ConfigError:
    """The error for `key` of the file `source`."""
    return ConfigError(f"{source}: '{key}': {msg}")


def as_list(value: Any) -> list[Any]:
    """A key that takes one value or a list of them, as a list."""
    return value if isinstance(value, list) else [value]


def check_name(source: str, key: str, name: Any) -> str:
    """A name that becomes a file or folder name, if it keeps to SAFE_NAME."""
    if isinstance(name, bool) or not isinstance(name, (str, int)) or not SAFE_NAME.fullmatch(str(name)):
        raise fail(source, key, f"{name!r} becomes a file or folder name; use {SAFE_NAME_RULE}")
    return str(name)


def check_distinct(source: str, key: str, values: list[Any], where: str = "") -> None:
    """An axis of the matrix lists each value once (a repeat would run, or silently replace, the same cells)."""
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise fail(source, key, f"lists {', '.join(repeated)} more than once{where}; give each value once")


def got(value: Any) -> str:
    """A value a key refused, as the message shows it: a number that YAML read as text says so, with the spelling
    it reads as a number (YAML 1.1, which PyYAML reads, takes 1e-9 as text and 1.0e-9 as a number)."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return repr(value)
        mantissa, e, exponent = value.strip().lower().partition("e")
        fix = f"; write {mantissa}.0e{exponent}" if e and "." not in mantissa else ""
        return f"the text {value!r} (quoted, or a number YAML reads as text{fix})"
    return repr(value)


def check_int(source: str, key: str, value: Any, minimum: int) -> int:
    """An int (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise fail(source, key, f"expected an int >= {minimum}, got {got(value)}")
    return value


@dataclass
class Parsing:
    """One matrix being parsed: its file, the folder its relative paths start from, its keys merged over its
    preset's, each key's default, the values parsed so far (by key), and why vLLM cannot run where the matrix is to
    run (`catalog.vllm_absence()`; None: it can, or the matrix is not run here)."""

    source: str
    base_dir: Path | None
    merged: dict[str, Any]
    defaults: dict[str, Any]
    parsed: dict[str, Any] = field(default_factory=dict)
    vllm_absent: str | None = None

    def get(self, key: str) -> Any:
        """The key's value as given, else its declared default."""
        return self.merged[key] if key in self.merged else copy.deepcopy(self.defaults[key])


# A key's parser: its value (or, for keys parsed together, their values) from the matrix being parsed.
Parser = Callable[[Parsing], Any]


def at_least(key: str, minimum: int) -> Parser:
    """The parser of an int key of at least `minimum`."""
    return lambda p: check_int(p.source, key, p.get(key), minimum)
