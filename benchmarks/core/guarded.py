"""Guarded readers: every file the harness reads from a user or a run folder goes through one of these, so a file of
the wrong kind, too large, nested too deeply, not UTF-8, or holding a non-finite number ends in one line naming the
file (ValueError; the callers turn it into their own error) instead of a traceback, a hang or a silent nan.

- `file_problem`: a path that is not a regular file (missing, a folder, a FIFO, a device, a link loop, a name too
  long), or one over a size bound;
- `json_value`: JSON text with depth bounded and NaN/Infinity (and floats that overflow to them) refused;
- `read_json_file`: both, for a whole JSON file (manifests, provenance, configs);
- `read_csv_text`: a CSV table's text (published tables, kflat.csv), its numeric columns finite;
- `name_problem`: a name read from a file (a run id) that will become part of a path;
- `output_folder_problem`: a folder the command will write into, checked before any work;
- `output_file_problem`: a file the command will write, the same.
"""
from __future__ import annotations

import errno
import io
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_DEPTH = 64  # nesting of a JSON value: a manifest needs fewer than ten levels
MAX_JSON_BYTES = 256 << 20  # a manifest or a unit file; the largest runs' are a few MB
MAX_TABLE_BYTES = 16 << 20  # a CSV table: published ones are a few kB
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@-]{0,199}")


def file_problem(path: Path, limit: int | None = None) -> str | None:
    """Why `path` cannot be read as a file (phrased to follow its name), or None: missing, a folder, a FIFO, a
    device or socket, a link loop or a name too long, over `limit` bytes."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return "does not exist" if not os.path.lexists(path) else "is a link to a file which does not exist"
        if exc.errno == errno.ELOOP:
            return "is a link that loops back on itself"
        if exc.errno == errno.ENAMETOOLONG:
            return "has a name too long for the file system"
        if exc.errno == errno.ENOTDIR:
            return "lies under a file, not a folder"
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket")
        via = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
        return f"is {kind}{via}, not a file"
    if limit is not None and st.st_size > limit:
        return f"holds {st.st_size:,} bytes, over the {limit:,} this reader takes"
    return None


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} overflows to {value}")
    return value


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _depth(value: Any) -> int:
    """The nesting depth of a decoded JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack += [(v, depth + 1) for v in node.values()]
        elif isinstance(node, list):
            stack += [(v, depth + 1) for v in node]
    return deepest


def json_value(data: str | bytes, where: str, max_depth: int = MAX_DEPTH, what: str = "JSON") -> Any:
    """The JSON value of `data`; ValueError naming `where` when it is not UTF-8, not JSON, nested deeper than
    `max_depth`, or holds NaN, Infinity or a number that overflows to it."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})") from None
    try:
        value = json.loads(data, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to read (over {max_depth} levels)") from None
    except json.JSONDecodeError as exc:
        at = f"column {exc.colno}" if what.endswith("line") else f"line {exc.lineno}, column {exc.colno}"
        raise ValueError(f"{where}: not {'a ' if what.endswith('line') else ''}{what} ({exc.msg} at {at})") from None
    except ValueError as exc:  # a non-finite number, or an int of over 4,300 digits
        raise ValueError(f"{where}: {exc}") from None
    if _depth(value) > max_depth:
        raise ValueError(f"{where}: nested too deeply to read (over {max_depth} levels)")
    return value


def read_json_file(path: Path, limit: int = MAX_JSON_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """A whole JSON file (`file_problem`, then `json_value`); ValueError naming the file."""
    problem = file_problem(path, limit)
    if problem:
        raise ValueError(f"{path} {problem}")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{path} cannot be read ({exc.strerror})") from None
    return json_value(data, str(path), max_depth)


def read_csv_text(path: Path, numeric: tuple[str, ...] = (), limit: int = MAX_TABLE_BYTES) -> Any:
    """A CSV table as a DataFrame of text (empty cells ""), each `numeric` column's non-empty cells checked to be
    finite numbers; ValueError naming the file, and the line and column of a bad cell."""
    import pandas as pd  # lazy: pandas

    problem = file_problem(path, limit)
    if problem:
        raise ValueError(f"{path} {problem}")
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte at offset {exc.start})") from None
    except OSError as exc:
        raise ValueError(f"{path} cannot be read ({exc.strerror})") from None
    if not text.strip():
        raise ValueError(f"{path} is empty; a table starts with its header line")
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as exc:
        raise ValueError(f"{path}: not a CSV table ({str(exc).splitlines()[0]})") from None
    for col in numeric:
        if col not in df.columns:
            continue
        for i, raw in enumerate(df[col]):
            if not str(raw).strip():
                continue
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{path}:{i + 2}: {col!r} is not a number: {str(raw)[:40]!r}") from None
            if not math.isfinite(value):
                raise ValueError(f"{path}:{i + 2}: {col!r} is {raw!r}, not a finite number")
    return df


def name_problem(value: Any) -> str | None:
    """Why a name read from a file cannot be used as one path component (None when it can): it must be text of
    letters, digits and . _ + = @ -, not starting with a dot or dash, at most 200 characters."""
    if not isinstance(value, str):
        return f"is {type(value).__name__}, not a name"
    if not NAME.fullmatch(value):
        shown = value if len(value) <= 60 else f"{value[:60]}...({len(value)} characters)"
        return (f"{shown!r} is not a plain name (letters, digits and . _ + = @ -, at most 200 characters; no path "
                f"separator)")
    return None


def output_folder_problem(path: Path, written: bool = True) -> str | None:
    """Why `path` cannot become or be a folder the command writes into (phrased to follow its name), or None: a
    file, FIFO or link loop in its place or above it, a name too long, or (`written`) an ancestor that cannot be
    written."""
    path = Path(path)
    if any(len(part.encode()) > 255 for part in path.parts):
        return "has a name too long for the file system (over 255 bytes in one part)"
    if len(os.fsencode(path.absolute())) >= 4096:
        return "is a path too long for the file system"
    probe = path
    while True:
        try:
            st = os.stat(probe)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return f"{'is' if probe == path else f'lies under {probe},'} a link that loops back on itself"
            if exc.errno == errno.ENOTDIR:
                probe = probe.parent
                continue
            if exc.errno != errno.ENOENT:
                return f"cannot be reached ({exc.strerror})"
            if os.path.islink(probe):
                return f"{'is' if probe == path else f'lies under {probe},'} a link to nothing"
            probe = probe.parent
            continue
        break
    if not stat.S_ISDIR(st.st_mode):
        what = "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else "a file"
        return f"is {what}" if probe == path else f"lies under {probe}, which is {what}"
    if written and not os.access(probe, os.W_OK | os.X_OK):
        if not os.access(probe, os.R_OK | os.X_OK):
            return f"cannot be written ({probe} may not even be opened by this user: permission denied)"
        return f"cannot be written ({probe} is read-only to this user)"
    return None


def output_file_problem(path: Path) -> str | None:
    """Why `path` cannot be written as a file (phrased to follow its name), or None: a folder, FIFO or device in its
    place, a file this user may not write, or a folder for it that `output_folder_problem` refuses."""
    path = Path(path)
    if os.path.isdir(path):
        return "is a folder, not a file"
    if os.path.exists(path):
        if not os.path.isfile(path):
            return "is not a regular file"
        if not os.access(path, os.W_OK):
            return "cannot be written (read-only to this user)"
    problem = output_folder_problem(path.parent)
    return f"cannot be written: its folder {path.parent} {problem}" if problem else None
