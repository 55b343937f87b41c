"""The results store of one run: atomic writes, one unit file per (cell, dataset), resume by cell id.

    results/runs/<run_id>/
      manifest.json        config, cells, model fingerprints, and the environment of the latest invocation
      provenance/<id>.json what one engine load was measured with; content-addressed, written before its units
      units/<cell>__<key>.jsonl   the records of one unit, each naming its `provenance_id`, in one atomic rename;
                           the key is the dataset, or it with an internal suffix ('@ctx<tokens>', '@turn2',
                           '@recheck', '@ties', '@c<level>'); '@' never occurs in a dataset name
      units/superseded/    units that no longer hold (their cells left the matrix, or their checks are redone)
      records.jsonl        all units concatenated, rebuilt from units/ whenever it does not hold exactly them
      .lock                held by the one run writing the folder (released when its process ends, however)

A `kill -9` at any moment leaves only whole files. A unit that cannot be written is retried, then saved elsewhere
and the run stops (`StoreWriteError`). `latest` (in the runs directory) moves to a run once it holds a unit.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.core import paths
from benchmarks.core.exit_codes import BadInput
from benchmarks.core.record_lines import checked

WRITE_ATTEMPTS = 3
WRITE_BACKOFF_S = 1.0  # before the second attempt; doubled before the third


def _file_mode() -> int:
    """The mode a newly created file gets under this process's umask (read once, at import)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target (with the mode a plain
    write would give it under the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with open(path, encoding="utf-8") as f:
        return checked([json.loads(line) for line in f if line.strip()], path.name)


class StoreWriteError(OSError):
    """A unit (or the run's manifest or provenance) that could not be written after WRITE_ATTEMPTS; the message says
    where its records were saved instead. The run stops."""


class RunFolderBusy(BadInput):
    """Another process holds the run folder's lock."""


def retrying(write: Callable[[], Any]) -> Any:
    """`write()`, tried again after WRITE_BACKOFF_S and twice that when it raises OSError (a full disk that frees
    up, a file system that is back); the last error is raised."""
    for attempt in range(WRITE_ATTEMPTS):
        try:
            return write()
        except OSError:
            if attempt == WRITE_ATTEMPTS - 1:
                raise
            time.sleep(WRITE_BACKOFF_S * 2 ** attempt)


def level_key(dataset: str, concurrency: int, request_rate: float | None) -> str:
    """The unit key of one serving level of a dataset."""
    return f"{dataset}@c{concurrency}" + (f"@r{request_rate:g}" if request_rate is not None else "")


def workload_key(dataset: str, context_tokens: int | None = None, turn: int | None = None) -> str:
    """The key of a dataset's workload: `<dataset>@ctx<N>` at a context length, `<dataset>@turn2` for the second turn
    of its conversations, the dataset's own name otherwise (its plain prompts, or their first turn)."""
    return (dataset + (f"@ctx{context_tokens}" if context_tokens is not None else "")
            + (f"@turn{turn}" if turn is not None and turn > 1 else ""))


def recheck_key(dataset: str) -> str:
    """The unit key of a baseline's drift recheck on a dataset (its records keep the dataset's own name)."""
    return f"{dataset}@recheck"


def ties_key(dataset: str) -> str:
    """The unit key of a speculative cell's tie checks on a dataset (its records keep the dataset's own name)."""
    return f"{dataset}@ties"


class RunStore:
    def __init__(self, run_dir: Path, point_latest_on_write: bool = False):
        self.run_dir = Path(run_dir)
        self.units_dir = self.run_dir / "units"
        self.point_latest_on_write = point_latest_on_write  # `latest` moves here once the first unit is written

    def _unit_path(self, cell_id: str, key: str) -> Path:
        return self.units_dir / f"{cell_id}__{key}.jsonl"

    def is_done(self, cell_id: str, key: str) -> bool:
        """A unit is done when its file exists, reads whole and holds no error record."""
        path = self._unit_path(cell_id, key)
        if not path.is_file():
            return False
        try:
            return not any(r.get("kind") == "error" for r in read_jsonl(path))
        except ValueError:  # damaged by hand (the harness writes whole files): measured again
            return False

    def write_unit(self, cell_id: str, key: str, records: list[dict[str, Any]],
                   provenance_id: str | None = None) -> None:
        """Write one unit atomically (retried); every record names the provenance it was measured with. When it
        cannot be written, its records are saved outside the run folder and StoreWriteError says where."""
        if provenance_id is not None:
            records = [{**r, "provenance_id": provenance_id} for r in records]
        path, text = self._unit_path(cell_id, key), _jsonl(records)
        try:
            retrying(lambda: atomic_write_text(path, text))
        except OSError as exc:
            raise StoreWriteError(f"could not write unit {path.name} into {self.units_dir} after {WRITE_ATTEMPTS} "
                                  f"attempts ({exc}); {self._save_elsewhere(path.name, text)}") from exc
        self.rebuild_records()
        if self.point_latest_on_write:
            point_latest(self.run_dir)
            self.point_latest_on_write = False

    def _save_elsewhere(self, name: str, text: str) -> str:
        """Where a unit that the run folder could not take went: a file in the temporary directory, else stderr."""
        spare = Path(tempfile.gettempdir()) / f"dflash-unsaved-{self.run_dir.name}-{name}"
        try:
            atomic_write_text(spare, text)
            return f"its records are saved in {spare}: move that file into {self.units_dir} to keep the unit"
        except OSError:
            sys.stderr.write(f"--- records of unit {name} (nowhere to save them) ---\n{text}--- end ---\n")
            return "its records were printed on stderr above, between '---' lines (no file could take them)"

    def safe_units(self) -> list[str]:
        """The unit files written whole in the run folder."""
        return sorted(p.name for p in self.units_dir.glob("*.jsonl"))

    def rename_legacy_keys(self) -> None:
        """Give the units of a run written before internal keys took '@' their current names (`<dataset>__recheck`
        became `<dataset>@recheck`, `<dataset>__ties` `<dataset>@ties`), so a resumed run finds them."""
        for suffix in ("recheck", "ties"):
            for p in self.units_dir.glob(f"*__*__{suffix}.jsonl"):
                os.replace(p, p.with_name(p.name.removesuffix(f"__{suffix}.jsonl") + f"@{suffix}.jsonl"))

    def retire_units(self, cell_ids: set[str]) -> list[str]:
        """Move the units of cells not in `cell_ids` to units/superseded/; return their file names."""
        moved = []
        for p in sorted(self.units_dir.glob("*.jsonl")):
            if p.name.split("__", 1)[0] not in cell_ids:
                self._supersede(p)
                moved.append(p.name)
        if moved:
            self.rebuild_records()
        return moved

    def retire_unit(self, cell_id: str, key: str) -> bool:
        """Move one unit to units/superseded/ (it no longer holds); False when there was none."""
        path = self._unit_path(cell_id, key)
        if not path.is_file():
            return False
        self._supersede(path)
        self.rebuild_records()
        return True

    def _supersede(self, path: Path) -> None:
        (self.units_dir / "superseded").mkdir(exist_ok=True)
        os.replace(path, self.units_dir / "superseded" / path.name)

    def unit(self, cell_id: str, key: str) -> list[dict[str, Any]]:
        """The records of one unit (none when it was not written)."""
        return read_jsonl(self._unit_path(cell_id, key))

    def write_provenance(self, provenance: dict[str, Any]) -> str:
        """Store a provenance record under its content hash (once) and return that id."""
        text = json.dumps(provenance, indent=2, sort_keys=True, default=str) + "\n"
        pid = hashlib.sha256(text.encode()).hexdigest()[:12]
        path = self.run_dir / "provenance" / f"{pid}.json"
        if not path.is_file():
            try:
                retrying(lambda: atomic_write_text(path, text))
            except OSError as exc:
                raise StoreWriteError(f"could not write {path} ({exc}); no unit of this engine load was measured "
                                      f"yet") from exc
        return pid

    def provenances(self) -> dict[str, dict[str, Any]]:
        """Every provenance record of the run, by id."""
        return {p.stem: json.loads(p.read_text()) for p in sorted((self.run_dir / "provenance").glob("*.json"))}

    def unit_records(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The records of every unit file, in file order, and the files left out because they do not read whole
        (damaged by hand: the harness writes whole files), each with its reason."""
        records, damaged = [], []
        for p in sorted(self.units_dir.glob("*.jsonl")):
            try:
                records += read_jsonl(p)
            except ValueError as exc:
                damaged.append(f"{p.relative_to(self.run_dir)} ({type(exc).__name__}: {exc})")
        return records, damaged

    def rebuild_records(self) -> None:
        """records.jsonl from units/, best effort: units/ is the source of truth, and `records` repairs the file
        whenever it is out of step."""
        try:
            atomic_write_text(self.run_dir / "records.jsonl", _jsonl(self.unit_records()[0]))
        except OSError:
            pass

    def records(self) -> list[dict[str, Any]]:
        """Every record of the run's units. records.jsonl is rebuilt when it does not hold exactly them (missing,
        emptied, truncated, edited), and a line on stderr says so; a damaged unit file is named and left out."""
        records, damaged = self.unit_records()
        for line in damaged:
            print(f"warning: {line}: left out of the records; the unit is measured again on resume", file=sys.stderr)
        text = _jsonl(records)
        path = self.run_dir / "records.jsonl"
        try:
            have = path.read_bytes().decode("utf-8") if path.is_file() else None
        except (OSError, UnicodeDecodeError):
            have = ""
        if have != text:
            why = ("missing" if have is None else "empty" if not have.strip()
                   else "truncated" if text.startswith(have) else "out of step with units/")
            try:
                atomic_write_text(path, text)
                print(f"note: records.jsonl was {why}; rebuilt from units/ ({len(records)} records)", file=sys.stderr)
            except OSError as exc:
                print(f"note: records.jsonl is {why} and could not be rebuilt ({exc}); the {len(records)} records "
                      f"of units/ are used", file=sys.stderr)
        return records

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        try:
            retrying(lambda: atomic_write_json(self.run_dir / "manifest.json", manifest))
        except OSError as exc:
            raise StoreWriteError(f"could not write {self.run_dir / 'manifest.json'} ({exc}); nothing was measured "
                                  f"yet") from exc

    def manifest(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "manifest.json").read_text())

    def lock(self) -> "RunLock":
        """The run folder's writer lock (taken with `with`); raises RunFolderBusy naming the process holding it."""
        return RunLock(self.run_dir)


class RunLock:
    """An exclusive lock on a run folder (flock on its .lock file, which holds the writer's pid): the kernel
    releases it when the process ends, even by SIGKILL, so a crashed run never leaves it stuck."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / ".lock"
        self._fd: int | None = None

    def __enter__(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "an unknown process"
            os.close(fd)
            raise RunFolderBusy(f"{self.path.parent} is being written by another run ({holder}); wait for it to "
                                f"finish, or give another --run-dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None


def latest_link() -> Path:
    """The `latest` link of the runs directory the harness owns."""
    return paths.RUNS_DIR / "latest"


def point_latest(run_dir: Path) -> bool:
    """Point `latest` in the runs directory at run_dir (replaced atomically; relative when run_dir lies inside).
    False, with a warning, when something else than a link holds that name or it cannot be written."""
    link = latest_link()
    if link.exists() and not link.is_symlink():
        print(f"warning: {link} is not a link the harness made; left as it is", file=sys.stderr)
        return False
    run_dir = Path(run_dir).resolve()
    runs = paths.RUNS_DIR.resolve()
    target = os.path.relpath(run_dir, runs) if run_dir.is_relative_to(runs) else str(run_dir)
    tmp = paths.RUNS_DIR / f".latest.{os.getpid()}.{threading.get_ident()}"  # two runs of one process may race
    try:
        paths.RUNS_DIR.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, link)
    except OSError as exc:
        print(f"warning: could not point {link} at {run_dir} ({exc})", file=sys.stderr)
        return False
    return True
