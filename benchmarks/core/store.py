"""The results store of one run: atomic writes, one unit file per (cell, dataset), resume by cell id.

    results/runs/<run_id>/
      manifest.json        config, cells, model fingerprints, and the environment of the latest invocation
      provenance/<id>.json what one engine load was measured with (git SHA, packages, hardware, model files, the
                           engine's describe()); content-addressed, written before any unit that names it
      units/<cell>__<dataset>.jsonl   the records of one (cell, dataset), each naming its `provenance_id`,
                           written in one atomic rename
      units/<cell>__<dataset>@recheck.jsonl   a baseline measured again after its speculative cells (drift guard);
                           '@' never occurs in a dataset name, so internal unit keys (@recheck, @ties, @c<level>,
                           the workloads' @ctx<tokens> and @turn2) cannot collide with one
      units/superseded/    units of cells that are no longer in the run (their model files changed)
      records.jsonl        all units concatenated (rebuilt atomically after each unit)

A `kill -9` at any moment leaves only whole files: a unit is either absent (and is redone) or complete.
Units holding an error record are redone on the next run.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
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
        return [json.loads(line) for line in f if line.strip()]


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
    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.units_dir = self.run_dir / "units"

    def _unit_path(self, cell_id: str, dataset: str) -> Path:
        return self.units_dir / f"{cell_id}__{dataset}.jsonl"

    def is_done(self, cell_id: str, dataset: str) -> bool:
        """A unit is done when its file exists and holds no error record."""
        path = self._unit_path(cell_id, dataset)
        return path.is_file() and not any(r.get("kind") == "error" for r in self.unit(cell_id, dataset))

    def write_unit(self, cell_id: str, dataset: str, records: list[dict[str, Any]],
                   provenance_id: str | None = None) -> None:
        """Write one unit atomically; every record names the provenance it was measured with."""
        if provenance_id is not None:
            records = [{**r, "provenance_id": provenance_id} for r in records]
        atomic_write_text(self._unit_path(cell_id, dataset), _jsonl(records))
        self.rebuild_records()

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

    def retire_unit(self, cell_id: str, dataset: str) -> bool:
        """Move one unit to units/superseded/ (it no longer holds); False when there was none."""
        path = self._unit_path(cell_id, dataset)
        if not path.is_file():
            return False
        self._supersede(path)
        self.rebuild_records()
        return True

    def _supersede(self, path: Path) -> None:
        (self.units_dir / "superseded").mkdir(exist_ok=True)
        os.replace(path, self.units_dir / "superseded" / path.name)

    def unit(self, cell_id: str, dataset: str) -> list[dict[str, Any]]:
        """The records of one unit (none when it was not written)."""
        return read_jsonl(self._unit_path(cell_id, dataset))

    def write_provenance(self, provenance: dict[str, Any]) -> str:
        """Store a provenance record under its content hash (once) and return that id."""
        text = json.dumps(provenance, indent=2, sort_keys=True, default=str) + "\n"
        pid = hashlib.sha256(text.encode()).hexdigest()[:12]
        path = self.run_dir / "provenance" / f"{pid}.json"
        if not path.is_file():
            atomic_write_text(path, text)
        return pid

    def provenances(self) -> dict[str, dict[str, Any]]:
        """Every provenance record of the run, by id."""
        return {p.stem: json.loads(p.read_text()) for p in sorted((self.run_dir / "provenance").glob("*.json"))}

    def rebuild_records(self) -> None:
        records = [r for p in sorted(self.units_dir.glob("*.jsonl")) for r in read_jsonl(p)]
        atomic_write_text(self.run_dir / "records.jsonl", _jsonl(records))

    def records(self) -> list[dict[str, Any]]:
        return read_jsonl(self.run_dir / "records.jsonl")

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        atomic_write_json(self.run_dir / "manifest.json", manifest)

    def manifest(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "manifest.json").read_text())


def latest_link(run_dir: Path) -> Path:
    """The `latest` link that point_latest(run_dir) sets: beside the run folder."""
    return Path(run_dir).parent / "latest"


def point_latest(run_dir: Path) -> None:
    """Make the `latest` link beside run_dir point at it (replaced atomically)."""
    link = latest_link(run_dir)
    tmp = run_dir.parent / f".latest.{os.getpid()}.{threading.get_ident()}"  # two runs of one process may race
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, link)
