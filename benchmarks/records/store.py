"""The results store of one run: atomic writes, one unit file per (cell, dataset), resume by cell id.

    results/runs/<run_id>/
      manifest.json        config, cells, model fingerprints, and the environment of the latest invocation
      provenance/<id>.json what one engine load was measured with; content-addressed, written before its units
      units/<cell>__<key>.jsonl   the records of one unit, each naming its `provenance_id`, in one atomic rename;
                           the key is the dataset, or it with an internal suffix ('@ctx<tokens>', '@turn2',
                           '@recheck', '@ties', '@c<level>', '@c<level>@p<round>' for a capacity probe); '@' never
                           occurs in a dataset name
      units/superseded/, units/foreign/   units that no longer hold or were measured again (none is overwritten in
                           place); units copied in from another run (never merged)
      records.jsonl        all units concatenated; a run rebuilds it when out of step (the old one kept beside)
      .lock                held by the one run writing the folder (released when its process ends, however)

Reading never writes; no file is written through a link; a `kill -9` leaves only whole files. A unit that cannot be
written is retried, then saved elsewhere and the run stops (`StoreWriteError`). `latest` moves once a unit exists.
"""
from __future__ import annotations

import dataclasses
import fcntl
import fnmatch
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Container, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

from benchmarks.core import paths
from benchmarks.core.atomic import FILE_MODE, atomic_write_json, atomic_write_text, temporary_target
from benchmarks.core.exit_codes import BadInput
from benchmarks.core.guarded import MAX_JSON_BYTES, file_problem, json_value, read_json_file
from benchmarks.hardware.provenance import Environment, ModelFingerprint
from benchmarks.records.manifest_read import Manifest, ManifestJson
from benchmarks.records.records import Line, checked, parse_lines

FOREIGN = "not a unit of this run"  # the reason a unit file copied in from another run is left out
WRITE_ATTEMPTS = 3
WRITE_BACKOFF_S = 1.0  # before the second attempt; doubled before the third


class ProvenanceRecord(TypedDict):
    """What one engine load was measured with (provenance/<id>.json; `run/unit_provenance.py` makes it): the
    environment, the model files by role ("target", "draft"), and the engine's own description (None where the load
    failed, `load_error` saying why)."""

    environment: Environment
    cell_id: str
    engine: str
    method: str
    models: dict[str, ModelFingerprint]
    describe: dict[str, object] | None
    load_error: str | None


def _jsonl(records: Sequence[Mapping[str, object]]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)


def json_object(line: str, where: str) -> dict[str, object]:
    """One JSONL line as a JSON object (`guarded.json_value`: depth bounded, non-finite numbers refused); ValueError
    naming `where` otherwise."""
    obj = json_value(line, where, what="JSON line")
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: a record must be a JSON object, not {type(obj).__name__}")
    return obj


def read_jsonl(path: Path, check: bool = True) -> list[dict[str, object]]:
    """The records of a JSONL file (none when it does not exist), of kinds and versions this harness reads unless
    `check` is off; ValueError naming the first bad line, or the path when something else than a file stands there
    (a folder, a FIFO, a link to a device or to nothing)."""
    if not os.path.lexists(path):
        return []
    problem = file_problem(path, MAX_JSON_BYTES)
    if problem:
        raise ValueError(f"{path.name} {problem}")
    with open(path, encoding="utf-8") as f:
        records = [json_object(line, f"line {i}") for i, line in enumerate(f, 1) if line.strip()]
    return checked(records, path.name) if check else records


class StoreWriteError(OSError):
    """A unit (or the run's manifest or provenance) that could not be written after WRITE_ATTEMPTS; the message says
    where its records were saved instead. The run stops."""


class RunFolderBusy(BadInput):
    """Another process holds the run folder's lock."""


def not_linked(folder: Path) -> Path:
    """A run folder's own units/ or provenance/, or BadInput when a link stands there: what it points at is another
    folder's records, never read as this run's."""
    if folder.is_symlink():
        raise BadInput(f"{folder} is a link (to {os.readlink(folder)}), not this run's own {folder.name}/: a run "
                       f"folder is read as it is; replace the link with a copy of the folder, or give the run it "
                       f"points into")
    return folder


def read_manifest(path: Path, need: tuple[str, ...] = ("cells", "config")) -> ManifestJson:
    """A run's manifest.json (`guarded.read_json_file`), checked to be one this harness wrote (an object with the
    fields `need`, each an object); BadInput, one line, otherwise (another tool's folder, a truncated file)."""
    fix = "give a run folder that `make bench` or `make matrix` wrote"
    try:
        manifest = read_json_file(path)
    except ValueError as exc:
        raise BadInput(f"{exc}; {fix}") from None
    if not (isinstance(manifest, dict) and all(isinstance(manifest.get(key), dict) for key in need)):
        raise BadInput(f"{path} is not a manifest of this harness (an object with {' and '.join(need) or 'fields'}); "
                       f"{fix}")
    return cast(ManifestJson, manifest)


def manifest_datasets(manifest: ManifestJson) -> set[str] | None:
    """The dataset names a run's matrix holds (None when its manifest does not list them)."""
    if "datasets" not in manifest["config"]:
        return None
    return {d["name"] for d in manifest["config"]["datasets"] or [] if isinstance(d, dict) and "name" in d}


def foreign_reason(name: str, records: list[dict[str, object]], cells: Container[str], datasets: set[str] | None
                   ) -> str | None:
    """Why a unit file does not belong to the run (its name, the cell ids inside it and the run's cells and datasets,
    where given, must agree), or None when it does."""
    cell_id, sep, key = name.removesuffix(".jsonl").partition("__")
    if not sep:
        return "not named <cell>__<dataset>.jsonl"
    if cell_id not in cells:
        return f"cell {cell_id} is not in the manifest"
    if datasets is not None and key.split("@", 1)[0] not in datasets:
        return f"dataset {key.split('@', 1)[0]!r} is not in the matrix"
    if any("cell_id" not in r for r in records):
        return "a record names no cell_id"
    inner = sorted({str(r["cell_id"]) for r in records} - {cell_id})
    return f"its records name cell {', '.join(inner)}" if inner else None


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


class RunStore:
    def __init__(self, run_dir: Path, point_latest_on_write: bool = False):
        self.run_dir = Path(run_dir)
        self.units_dir = self.run_dir / "units"
        self.point_latest_on_write = point_latest_on_write  # `latest` moves here once the first unit is written
        self.left_out: list[str] = []  # the run's own unit files its last read of the records left out (damaged)

    def _unit_path(self, cell_id: str, key: str) -> Path:
        return self.units_dir / f"{cell_id}__{key}.jsonl"

    def is_done(self, cell_id: str, key: str) -> bool:
        """A unit is done when its file exists, reads whole and holds no error record."""
        path = self._unit_path(cell_id, key)
        if not path.is_file():
            return False
        try:
            return all(r.kind != "error" and r.cell_id == cell_id for r in self.unit(cell_id, key))
        except (ValueError, UnicodeDecodeError):  # damaged by hand (the harness writes whole files): measured again
            return False

    def write_unit(self, cell_id: str, key: str, lines: Sequence[Line], provenance_id: str | None = None) -> None:
        """Write one unit atomically (retried), its lines serialised here; every line names the provenance it was
        measured with. When it cannot be written, its records are saved outside the run folder and StoreWriteError
        says where."""
        self.write_unit_json(cell_id, key, [
            (line if provenance_id is None else dataclasses.replace(line, provenance_id=provenance_id)).to_json()
            for line in lines])

    def write_unit_json(self, cell_id: str, key: str, records: Sequence[Mapping[str, object]]) -> None:
        """Write one unit's records as JSON objects (`write_unit`; a unit copied or made by hand). A unit file already
        there (measured again: failed, damaged, of a newer schema) is moved to units/superseded/ first, never
        overwritten in place."""
        path, text = self._unit_path(cell_id, key), _jsonl(records)
        if os.path.lexists(path):
            self._supersede(path)
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

    def unit_keys(self, cell_id: str) -> list[str]:
        """The keys of a cell's unit files, in name order."""
        return sorted(p.name.removesuffix(".jsonl").split("__", 1)[1]
                      for p in self.units_dir.glob(f"{cell_id}__*.jsonl"))

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

    def _supersede(self, path: Path, folder: str = "superseded") -> None:
        """Move a unit file (or whatever stands in its place) into units/<folder>/; one of the same name already
        there is kept, the newcomer named with the time it was moved (ns)."""
        (self.units_dir / folder).mkdir(exist_ok=True)
        target = self.units_dir / folder / path.name
        if os.path.lexists(target):
            target = target.with_name(f"{path.stem}.{time.time_ns()}{path.suffix}")
        os.replace(path, target)

    def set_aside_foreign(self, cells: set[str], datasets: set[str]) -> list[str]:
        """Move the unit files of `cells` that do not belong to this run (`foreign_reason`: copied in from another
        one) to units/foreign/, never merged; return each file's name with its reason. Only a run does this."""
        moved = []
        for p in sorted(self.units_dir.glob("*.jsonl")):
            if p.name.split("__", 1)[0] in cells:
                try:
                    why = foreign_reason(p.name, read_jsonl(p), cells, datasets)
                except (ValueError, UnicodeDecodeError):
                    continue  # damaged, not foreign: measured again
                if why:
                    self._supersede(p, "foreign")
                    moved.append(f"{p.name} ({why})")
        return moved

    def unit(self, cell_id: str, key: str) -> list[Line]:
        """The lines of one unit (none when it was not written)."""
        path = self._unit_path(cell_id, key)
        return parse_lines(read_jsonl(path, check=False), path.name)

    def write_provenance(self, provenance: ProvenanceRecord) -> str:
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

    def provenances(self, needed: set[str] | None = None) -> dict[str, ProvenanceRecord]:
        """The provenance records of the run, by id (`guarded.read_json_file`): BadInput naming a file that is not
        one JSON object (the harness writes whole files), or, given the ids `needed` (those the records name), only
        when it is one of them; another is named on stderr and left out."""
        found, folder = {}, not_linked(self.run_dir / "provenance")
        if folder.is_dir() and not os.access(folder, os.R_OK | os.X_OK):  # glob would see none: "none recorded"
            raise BadInput(f"{folder}: permission denied, its records cannot be read; give read access to it "
                           "(nothing was written)")
        for p in sorted(folder.glob("*.json")):
            try:
                value = read_json_file(p)
                if not isinstance(value, dict):
                    raise ValueError(f"{p} is not a provenance record (a JSON object)")
            except ValueError as exc:
                if needed is None or p.stem in needed:
                    raise BadInput(f"{exc}; the harness writes whole provenance files: restore it from its run") \
                        from None
                print(f"warning: {exc}; no record names it: left out", file=sys.stderr)
                continue
            found[p.stem] = cast(ProvenanceRecord, value)
        lost = sorted((needed or set()) - set(found))
        if lost:  # a unit measured with a provenance whose file is gone: its environment is not known
            more = f" and {len(lost) - 3} more" if len(lost) > 3 else ""
            shown = ", ".join(f"{pid}.json" for pid in lost[:3]) + more
            print(f"warning: {folder}: {shown} missing; the units that name {'them' if len(lost) > 1 else 'it'} have "
                  f"no recorded environment (the harness writes a unit's provenance before the unit)", file=sys.stderr)
        return found

    def unit_records(self, manifest: ManifestJson | None = None) -> tuple[list[dict[str, object]], list[str]]:
        """The records of every unit file, in file order, and the files left out, each with its reason: those that
        do not read whole (damaged by hand: the harness writes whole files), and, given the manifest, those that do
        not belong to the run (`foreign_reason`)."""
        records, damaged = [], []
        datasets = manifest_datasets(manifest) if manifest else None
        not_linked(self.units_dir)
        if self.units_dir.is_dir() and not os.access(self.units_dir, os.R_OK | os.X_OK):  # glob would see no unit
            raise BadInput(f"{self.units_dir}: permission denied, its units cannot be read; give read access to it "
                           "(nothing was written)")
        for p in sorted(self.units_dir.glob("*.jsonl")):
            try:
                unit = read_jsonl(p)
                why = foreign_reason(p.name, unit, manifest["cells"], datasets) if manifest else None
                if not why:
                    parse_lines(unit, p.name)
            except PermissionError:
                raise BadInput(f"{p}: permission denied, the unit cannot be read; give read access to it (nothing "
                               "was written)") from None
            except (ValueError, UnicodeDecodeError) as exc:
                damaged.append(f"{p.relative_to(self.run_dir)} ({type(exc).__name__}: {exc})")
                continue
            if why:
                damaged.append(f"{p.relative_to(self.run_dir)} ({FOREIGN}: {why})")
                continue
            records += unit
        return records, damaged

    def rebuild_records(self) -> None:
        """records.jsonl from units/, best effort (a run's own writes: `repair_records` checked it first)."""
        try:
            atomic_write_text(self.run_dir / "records.jsonl", _jsonl(self.unit_records()[0]))
        except OSError:
            pass

    def _records_state(self, say: bool = True) -> tuple[list[dict[str, object]], str | None]:
        """The records of units/ and why records.jsonl is out of step with them (None when it holds exactly them);
        `say`: a line on stderr for each unit file left out."""
        manifest = self.manifest()
        records, damaged = self.unit_records(manifest)
        self.left_out = [line for line in damaged if f"({FOREIGN}:" not in line]  # foreign ones were never the run's
        for line in damaged if say else []:
            print(f"warning: {line}: left out of the records; the unit is measured again on resume", file=sys.stderr)
        text = _jsonl(records)
        path = self.run_dir / "records.jsonl"
        try:
            have = path.read_bytes().decode("utf-8") if path.is_file() else None
        except (OSError, UnicodeDecodeError):
            have = ""
        if have == text:
            return records, None
        return records, ("missing" if have is None else "empty" if not have.strip()
                         else "truncated" if text.startswith(have) else "out of step with units/")

    def records(self, say: bool = True) -> list[Line]:
        """Every record of the run as its typed line, read only (`parse_lines`: BadInput naming a line of another
        shape); see `record_objects`."""
        try:
            return parse_lines(self.record_objects(say), "records.jsonl")
        except ValueError as exc:
            raise BadInput(f"{self.run_dir}: {exc}; the harness writes whole records: restore the unit from its run")

    def record_objects(self, say: bool = True) -> list[dict[str, object]]:
        """Every record of the run as its JSON object, read only: those of units/ when it exists (a line on stderr
        says when records.jsonl does not hold exactly them; the next run into the folder rebuilds it), else those of
        records.jsonl (a copied run). A damaged or foreign unit file is named (`say`) and left out."""
        if not self.units_dir.is_dir():
            path, cells = self.run_dir / "records.jsonl", self.manifest()["cells"]
            try:
                records = read_jsonl(path, check=False)
                stray = sum(r.get("cell_id") not in cells for r in records)
                if stray and say:
                    print(f"warning: {path}: {stray} record(s) of no cell of the manifest left out", file=sys.stderr)
                return checked([r for r in records if r.get("cell_id") in cells], path.name)
            except (ValueError, UnicodeDecodeError) as exc:
                raise BadInput(f"{path}: {exc}; the harness writes whole lines: restore the file from its run")
        records, why = self._records_state(say)
        if why and say:
            print(f"note: records.jsonl is {why}; the {len(records)} records of units/ are read (the next run into "
                  f"this folder rebuilds it)", file=sys.stderr)
        return records

    def repair_records(self) -> None:
        """Rebuild records.jsonl from units/ when out of step, the old file kept beside as records.jsonl.old, with a
        line on stderr; called only by a run, holding the lock."""
        records, why = self._records_state()
        if why is None:
            return
        path = self.run_dir / "records.jsonl"
        kept = ""
        if why != "missing" and path.stat().st_size:
            os.replace(path, path.with_name("records.jsonl.old"))
            kept = ", the old file kept as records.jsonl.old"
        atomic_write_text(path, _jsonl(records))
        print(f"note: records.jsonl was {why}; rebuilt from units/ ({len(records)} records{kept})", file=sys.stderr)

    def write_manifest(self, manifest: ManifestJson) -> None:
        try:
            retrying(lambda: atomic_write_json(self.run_dir / "manifest.json", manifest))
        except OSError as exc:
            raise StoreWriteError(f"could not write {self.run_dir / 'manifest.json'} ({exc}); nothing was measured "
                                  f"yet") from exc

    def manifest(self) -> ManifestJson:
        """The run's manifest (`read_manifest`: BadInput when it is not one the harness wrote)."""
        return read_manifest(self.run_dir / "manifest.json")

    def run_manifest(self) -> Manifest:
        """The run's manifest, typed: BadInput naming what is wrong in a manifest the harness did not write so."""
        path = self.run_dir / "manifest.json"
        raw = read_manifest(path)
        try:
            return Manifest.from_json(raw, str(path))
        except ValueError as exc:
            raise BadInput(f"{exc}; give a run folder that `make bench` or `make matrix` wrote") from None

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
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        except OSError:
            if not (self.path.is_symlink() or self.path.is_dir()):
                raise  # a folder that cannot be written: the CLI names it
            what = "a link" if self.path.is_symlink() else "a folder"
            raise BadInput(f"{self.path} is {what}, not the run's lock file; the harness writes no file through a "
                           f"link or over a folder: remove it, or give another --run-dir") from None
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
        remove_leftovers(self.path.parent)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None


def remove_leftovers(run_dir: Path) -> None:
    """Remove the temporary files of a run's own atomic writes (RUN_OUTPUTS less REPORT_OUTPUTS) that a run killed
    between a write and its rename left behind, with one line on stderr. Called holding the run's lock: no other run
    writes them then (a report may be writing its own files, which are left alone)."""
    own = [p for p in RUN_OUTPUTS if p not in REPORT_OUTPUTS]
    left = [t for t in run_dir.rglob(".*.tmp") if t.is_file() and not t.is_symlink()
            and (target := temporary_target(t)) is not None
            and any(fnmatch.fnmatchcase(target.relative_to(run_dir).as_posix(), p) for p in own)]
    for t in left:
        t.unlink(missing_ok=True)
    if left:
        print(f"note: removed {len(left)} temporary file(s) a killed run left in {run_dir} "
              f"({', '.join(t.relative_to(run_dir).as_posix() for t in left[:3])}{' ...' if len(left) > 3 else ''})",
              file=sys.stderr)


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


# What `report` writes into a run folder (report_write.OUTPUTS, its figures as files), and all a run writes into its
# run folder (benchmarks/records/store.py, docs/outputs.md): the declarations of benchmarks/cli/__init__.py. A run
# without --run-dir also points the runs directory's `latest` at its folder.
REPORT_OUTPUTS = ("summary.csv", "speculation_profile.json", "capacity.json", "report.md", "figures/*.png")
RUN_OUTPUTS = ("manifest.json", ".lock", "records.jsonl", "records.jsonl.old", "turns/*.json", "provenance/*.json",
               "units/*.jsonl", "units/superseded/*", "units/foreign/*", *REPORT_OUTPUTS)
