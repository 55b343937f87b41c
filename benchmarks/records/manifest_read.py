"""A run's manifest.json as the analysis reads it: the run's shape (its matrix as run, its cells), the models and
prompts it was made with, and the environment of its latest invocation. Written by benchmarks/run/manifest_build.py."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Required, TypedDict

from benchmarks.config.matrix_expand import ranges_at
from benchmarks.config.matrix_schema import Matrix, matrix_of_manifest
from benchmarks.core.cells import Cell, KSchedule
from benchmarks.core.guarded import name_problem
from benchmarks.data.prompts import Construction, SkippedRows, WorkloadFields
from benchmarks.decide.k_schedules import Schedule
from benchmarks.hardware.provenance import Hardware, ModelFingerprint


class TrainedLengths(TypedDict):
    """The sequence lengths a model set trained by `benchmarks tiny train` was trained on, and where they are read."""

    target: int
    drafts: int
    source: str


class FirstAnswersBy(TypedDict):
    """The cell that wrote a second turn's first answers."""

    cell_id: str
    engine: str
    label: str


class PromptRecord(WorkloadFields, Construction):
    """One measured prompt of a workload in the manifest: its row, hash and length, and how it was made."""

    index: int
    sha256: str
    tokens: int


class PromptManifest(TypedDict, total=False):
    """How a run's prompts were made (the manifest's `prompts`; written by `run/manifest_build.prompt_manifest`)."""

    chat_template: dict[str, object] | None
    chat_template_sha256: str | None
    template_ignores: list[str]
    max_prompt_tokens: int | None
    trained_lengths: TrainedLengths | None
    warnings: list[str]
    first_answers_by: FirstAnswersBy | None
    workloads: dict[str, list[PromptRecord]]


class ManifestJson(TypedDict, total=False):
    """manifest.json as written (run/manifest_build.py) and read back: a run of an older harness lacks the keys added
    since; `cells` and `config` are always there (`store.read_manifest` checks)."""

    run_id: str
    created_utc: str
    config_path: str | None
    config: Required[dict[str, Any]]  # the Matrix as run (`matrix_of_manifest` reads it)
    cells: Required[dict[str, dict[str, object]]]  # by id, each a Cell's fields (`Cell.from_json`)
    git_sha: str | None
    packages: dict[str, str]
    platform: str
    hardware: Hardware
    models: dict[str, ModelFingerprint]
    prompts_skipped: dict[str, SkippedRows]
    prompts: PromptManifest


@dataclass(frozen=True)
class Manifest:
    """A run's manifest: `cells` by id as typed cells; `config` the Matrix the run took (a run of an older harness
    lacks the keys added since: `matrix_of_manifest` says what their absence means)."""

    run_id: str
    cells: dict[str, Cell]
    config: Matrix
    platform: str | None = None
    hardware: dict[str, Any] = field(default_factory=dict)
    packages: dict[str, str] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    prompts: dict[str, Any] = field(default_factory=dict)
    prompts_skipped: dict[str, SkippedRows] = field(default_factory=dict)
    config_path: str | None = None
    created_utc: str | None = None
    git_sha: str | None = None
    recorded: frozenset[str] = frozenset()  # the matrix fields `config` was read from (the rest are defaults)

    @classmethod
    def from_json(cls, value: ManifestJson, where: str) -> "Manifest":
        """The manifest a JSON object holds (a mapping with `cells` and `config` mappings, as `store.read_manifest`
        checks); ValueError naming `where`, the cell and its field when a cell or a section is not what it should, or
        when its run_id is not a plain name (a name read from a file may become part of a path)."""
        cells = {str(cid): Cell.from_json(c, f"{where}: cell {cid}") for cid, c in value["cells"].items()}
        for name in ("hardware", "packages", "models", "prompts", "prompts_skipped"):
            section = value.get(name) or {}
            if not isinstance(section, dict):
                raise ValueError(f"{where}: `{name}` is {type(section).__name__}, not a mapping")
        for name in ("platform", "config_path", "created_utc", "git_sha"):
            text = value.get(name)
            if text is not None and not isinstance(text, str):
                raise ValueError(f"{where}: `{name}` is {text!r:.40}, not text")
        run_id = value.get("run_id")
        if run_id is not None and name_problem(run_id):
            raise ValueError(f"{where}: run_id {name_problem(run_id)}")
        config = matrix_of_manifest(value["config"])
        return cls(run_id=run_id or "", cells=_with_schedules(cells, config), config=config,
                   platform=value.get("platform"), hardware=dict(value.get("hardware") or {}),
                   packages=value.get("packages") or {}, models=value.get("models") or {},
                   prompts=dict(value.get("prompts") or {}), prompts_skipped=value.get("prompts_skipped") or {},
                   config_path=value.get("config_path"), created_utc=value.get("created_utc"),
                   git_sha=value.get("git_sha"), recorded=frozenset(value["config"]))

    @property
    def target(self) -> str:
        return self.config.target


def _with_schedules(cells: dict[str, Cell], config: Matrix) -> dict[str, Cell]:
    """The cells of a run written before cells had a shape: one whose K was a schedule's, at a batch size where it
    ran that K, gets the schedule back (its id unchanged); a schedule passed whole is read from its options."""
    def upgraded(cell: Cell) -> Cell:
        schedule = config.k.get(cell.method)
        if cell.shape is not None or not isinstance(schedule, Schedule):
            return cell
        return replace(cell, shape=KSchedule(ranges_at(schedule, cell.batch_size)))
    return {cid: upgraded(c) for cid, c in cells.items()}
