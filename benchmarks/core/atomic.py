"""The one writer of outputs: a file is either whole or absent, never half written (a kill, a full disk), takes the
mode a plain write would give it under the umask, and is never written through a link (a link where an output goes,
or where a folder the command makes for its outputs goes, is refused as bad input: docs/outputs.md)."""
from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.core.exit_codes import BadInput


def _file_mode() -> int:
    """The mode a newly created file gets under this process's umask (read once, at import)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()


def not_a_link(path: Path, what: str = "this output") -> Path:
    """`path`, or BadInput when a link stands there: the harness never writes through one into a file or folder it
    did not make."""
    if path.is_symlink():
        raise BadInput(f"{path}: {_link_kind(path)} stands where {what} goes, and the harness never writes through "
                       f"a link; remove the link or give another output folder")
    return path


def _link_kind(path: Path) -> str:
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python before 3.13: a loop
        return "a link that loops back on itself"
    except OSError as exc:
        return "a link that loops back on itself" if exc.errno == errno.ELOOP else "a broken link"
    return "a link"


def output_folder(path: Path) -> Path:
    """A folder a command makes for its outputs (made when absent, parents too); BadInput when a link or a file
    stands there."""
    not_a_link(path, "an output folder")
    if path.exists() and not path.is_dir():
        raise BadInput(f"{path}: a file stands where an output folder goes; give a folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_outputs(out: Path, names: Iterable[str]) -> None:
    """BadInput, before any work, when a link or a file stands where a command's output folder goes, or a link where
    one of its files goes."""
    not_a_link(out, "the output folder")
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out}: a file stands there; give a folder")
    for name in names:
        not_a_link(out / name)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target (with the mode a plain
    write would give it under the umask); BadInput when the target is a link."""
    not_a_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:  # named as the file it was to become, not the temporary name the user never asked for
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# The temporary name atomic_write_bytes gives: "." + the target's name + "." + mkstemp's eight characters + ".tmp"
TEMPORARY = re.compile(r"\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp")


def temporary_target(path: Path) -> Path | None:
    """The file a temporary file of atomic_write_bytes was to become (a process killed between its write and its
    rename leaves it behind), None for any other name."""
    m = TEMPORARY.fullmatch(path.name)
    return path.with_name(m.group("target")) if m else None


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def atomic_write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """Rows as CSV under a header of `columns` (keys beyond them left out, missing ones empty)."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, text.getvalue())
