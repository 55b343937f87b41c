"""A run's manifest.json as the analysis reads it: the run's shape (its matrix as run, its cells), the models and
prompts it was made with, and the environment of its latest invocation. Written by benchmarks/run/manifest_build.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmarks.config.matrix_schema import Matrix, matrix_of_manifest
from benchmarks.core.cells import Cell
from benchmarks.core.guarded import name_problem


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
    prompts_skipped: dict[str, Any] = field(default_factory=dict)
    config_path: str | None = None
    created_utc: str | None = None
    git_sha: str | None = None
    recorded: frozenset[str] = frozenset()  # the matrix fields `config` was read from (the rest are defaults)

    @classmethod
    def from_json(cls, value: dict[str, Any], where: str) -> "Manifest":
        """The manifest a JSON object holds (a mapping with `cells` and `config` mappings, as `store.read_manifest`
        checks); ValueError naming `where`, the cell and its field when a cell or a section is not what it should, or
        when its run_id is not a plain name (a name read from a file may become part of a path)."""
        cells = {str(cid): Cell.from_json(c, f"{where}: cell {cid}") for cid, c in value["cells"].items()}
        sections = {name: value.get(name) or {} for name in ("hardware", "packages", "models", "prompts",
                                                             "prompts_skipped")}
        for name, section in sections.items():
            if not isinstance(section, dict):
                raise ValueError(f"{where}: `{name}` is {type(section).__name__}, not a mapping")
        texts = {name: value.get(name) for name in ("platform", "config_path", "created_utc", "git_sha")}
        for name, text in texts.items():
            if text is not None and not isinstance(text, str):
                raise ValueError(f"{where}: `{name}` is {text!r:.40}, not text")
        run_id = value.get("run_id")
        if run_id is not None and name_problem(run_id):
            raise ValueError(f"{where}: run_id {name_problem(run_id)}")
        return cls(run_id=run_id or "", cells=cells, config=matrix_of_manifest(value["config"]),
                   platform=texts["platform"], hardware=sections["hardware"], packages=sections["packages"],
                   models=sections["models"], prompts=sections["prompts"],
                   prompts_skipped=sections["prompts_skipped"], config_path=texts["config_path"],
                   created_utc=texts["created_utc"], git_sha=texts["git_sha"],
                   recorded=frozenset(value["config"]))

    @property
    def target(self) -> str:
        return self.config.target
