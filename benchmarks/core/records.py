"""The records a run writes, one declared type per kind, each a line of a unit file (and of records.jsonl).

A line is built here (the `*_line` builders), written as `to_json()` — its fields, its `kind` and `schema_version`
— and read back through `checked`: a line of a kind or a schema version this harness does not know raises
`RecordError` naming it. Lines of run folders written before the version field existed read as version 1. A field
marked optional is left out of the line when it is None; a serving level (`Level`) is written as its two fields.
docs/outputs.md lists the kinds (tests/core/test_records.py checks it against these declarations).
"""
from __future__ import annotations

import dataclasses
import re
import traceback
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SpecCounters
from benchmarks.core.metrics import tpot_ms

SCHEMA_VERSION = 1
READS_VERSIONS = (1,)  # a line without `schema_version` is version 1
OPTIONAL = {"optional": True}


def optional() -> Any:
    """A field left out of the line when it is None."""
    return field(default=None, metadata=OPTIONAL)


class Prompt(Protocol):
    """What a line names of its prompt (`datasets.Prompt`, which imports the store that reads these lines)."""

    index: int
    ids: list[int]
    sha256: str
    context_tokens: int | None
    turn: int | None

    @property
    def key(self) -> str: ...


class RecordError(ValueError):
    """A line of a kind or a schema version this harness does not read."""


@dataclass(frozen=True)
class Level:
    """A serving level: the load generator's concurrency and request rate (None: as fast as it can)."""

    concurrency: int
    request_rate: float | None


@dataclass(frozen=True, kw_only=True)
class Line:
    """What every line names: its cell, the cell's label, and the unit's workload key (`dataset`)."""

    kind: ClassVar[str]
    cell_id: str
    label: str
    dataset: str

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "schema_version": SCHEMA_VERSION}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Level):
                out |= dataclasses.asdict(value)
            elif value is not None or not f.metadata.get("optional"):
                out[f.name] = value
        return out

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> "Line":
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in record.items() if k in names}
        if "level" in names and "concurrency" in record:
            values["level"] = Level(record["concurrency"], record.get("request_rate"))
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class RequestLine(Line):
    """One measured prompt: its times, its output ids, the accepted draft lengths where the engine sees them."""

    kind: ClassVar[str] = "request"
    engine: str
    method: str
    k: int
    prompt_index: int
    prompt_sha256: str
    n_prompt_tokens: int
    n_out: int
    ttft_ms: float
    tpot_ms: float | None
    decode_s: float
    output_ids: list[int]
    accept_lengths: list[int] | None
    context_tokens: int | None = optional()
    turn: int | None = optional()
    itl_ms: list[float] | None = optional()
    start_s: float | None = optional()
    extra: dict[str, Any] | None = optional()
    level: Level | None = optional()
    batch_index: int | None = optional()  # its static batch at B > 1: 0, 1, … in the run's prompt order


@dataclass(frozen=True, kw_only=True)
class RecheckLine(RequestLine):
    """A baseline's prompt measured again after its speculative cells (the drift recheck), never a measurement."""

    kind: ClassVar[str] = "recheck"


@dataclass(frozen=True, kw_only=True)
class ErrorLine(Line):
    """A unit that failed: the cause and its traceback (a worker's own, where it has one)."""

    kind: ClassVar[str] = "error"
    error: str
    traceback: str
    concurrency: int | None = optional()


@dataclass(frozen=True, kw_only=True)
class SpecLine(Line):
    """A (cell, dataset)'s speculative counters, diffed around its measured prompts (a serving level's /metrics)."""

    kind: ClassVar[str] = "spec"
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: list[int]
    engine: str | None = optional()
    method: str | None = optional()
    k: int | None = optional()
    context_tokens: int | None = optional()
    turn: int | None = optional()
    level: Level | None = optional()


@dataclass(frozen=True, kw_only=True)
class LoadLine(Line):
    """A serving level as a whole: wall time, requests, output tokens, the server's own TPOT sum and count."""

    kind: ClassVar[str] = "load"
    engine: str
    method: str
    k: int
    level: Level
    duration_s: float
    completed: int
    failed: int
    total_output_tokens: int
    max_concurrent_requests: int | None
    server_tpot_sum_s: float | None
    server_tpot_count: float | None
    context_tokens: int | None = optional()
    turn: int | None = optional()


@dataclass(frozen=True, kw_only=True)
class SamplesLine(Line):
    """One prompt's samples at T > 0 for the distribution check, with their seeds and the target's log-likelihoods."""

    kind: ClassVar[str] = "samples"
    prompt_index: int
    prompt_sha256: str
    temperature: float
    length: int
    seeds: list[int] | None
    samples: list[list[int]]
    loglik: list[float] | None
    scoring: str | None
    concurrency: int | None = optional()


@dataclass(frozen=True, kw_only=True)
class TieCheckLine(Line):
    """The baseline engine's logits at one greedy divergence of a speculative cell (the lossless check's tie test)."""

    kind: ClassVar[str] = "tie_check"
    engine: str
    prompt_sha256: str
    prompt_index: int
    divergence: int
    baseline_token: int
    spec_token: int
    dtype: str
    top_ids: list[int]
    top_logits: list[float]
    token_logits: list[float]


KINDS: dict[str, type[Line]] = {c.kind: c for c in (RequestLine, ErrorLine, SpecLine, LoadLine, SamplesLine,
                                                    TieCheckLine, RecheckLine)}


def json_fields(kind: type[Line]) -> list[tuple[str, bool]]:
    """The keys a line of `kind` is written with, each with whether it may be left out."""
    out = [("kind", False), ("schema_version", False)]
    for f in dataclasses.fields(kind):
        names = [g.name for g in dataclasses.fields(Level)] if f.name == "level" else [f.name]
        out += [(n, bool(f.metadata.get("optional"))) for n in names]
    return out


def checked(records: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """`records` as read from `where`, unchanged; RecordError names the first of a kind or version not read here."""
    for i, r in enumerate(records, 1):
        kind, version = r.get("kind"), r.get("schema_version", 1)
        if kind not in KINDS:
            raise RecordError(f"{where} line {i}: record kind {kind!r} is not one this harness reads "
                              f"({', '.join(sorted(KINDS))})")
        if version not in READS_VERSIONS:
            raise RecordError(f"{where} line {i}: {kind} record of schema version {version!r}; this harness reads "
                              f"version {', '.join(map(str, READS_VERSIONS))} (a newer harness wrote it)")
    return records


def cause(exc: BaseException) -> str:
    """An exception as the records and messages name it."""
    return f"{type(exc).__name__}: {exc}"


# Exceptions that say what was asked cannot be done (a value, a type, a missing file or key): the same input fails the
# same way, so a rerun does not help. Anything else (a worker that died or timed out, memory, the network, the disk)
# may pass on a rerun.
LASTING = frozenset({"ValueError", "TypeError", "KeyError", "IndexError", "AttributeError", "NotImplementedError",
                     "AssertionError", "ImportError", "ModuleNotFoundError", "FileNotFoundError", "IsADirectoryError",
                     "NotADirectoryError", "PermissionError", "UnicodeError", "ConfigError", "BadInput",
                     "DatasetUnavailable"})
CAUSE_TYPE = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception|Input|Unavailable)): ")


def rerun_may_help(error: str) -> bool:
    """Whether a unit that failed with `error` (as `cause` wrote it; a worker's cause follows its own type, as in
    "WorkerError: ValueError: ...") may pass when the run is rerun: not when any type named at its start is LASTING."""
    types = []
    while (m := CAUSE_TYPE.match(error)) is not None:
        types.append(m.group(1).rsplit(".", 1)[-1])
        error = error[m.end():]
    return not LASTING.intersection(types)


def _workload(prompt: Prompt) -> dict[str, Any]:
    return {"dataset": prompt.key, "context_tokens": prompt.context_tokens, "turn": prompt.turn}


def request_line(cell: Cell, prompt: Prompt, output: Any, *, n_out: int | None = None, level: Level | None = None,
                 itl_ms: list[float] | None = None, start_s: float | None = None,
                 batch_index: int | None = None) -> RequestLine:
    """One prompt's request from what the engine returned (`RequestRecord`: output ids, seconds from the request's
    start); `n_out` where the output length is counted otherwise than by its ids (a server's count); `batch_index`
    the static batch it was decoded in."""
    n = len(output.output_ids) if n_out is None else n_out
    return RequestLine(
        cell_id=cell.cell_id, label=cell.label, engine=cell.engine, method=cell.method, k=cell.k, **_workload(prompt),
        prompt_index=prompt.index, prompt_sha256=prompt.sha256, n_prompt_tokens=len(prompt.ids), n_out=n,
        ttft_ms=1000.0 * output.ttft_s, tpot_ms=tpot_ms(output.ttft_s, output.last_token_s, n),
        decode_s=output.last_token_s - output.ttft_s, output_ids=list(output.output_ids),
        accept_lengths=output.accept_lengths, extra=output.extra or None, level=level, itl_ms=itl_ms,
        start_s=start_s, batch_index=batch_index)


def recheck_of(record: dict[str, Any]) -> dict[str, Any]:
    """A drift recheck's request (as kind "recheck") or error (its cause prefixed), labelled as the recheck."""
    label = f"{record['label']} recheck"
    if record["kind"] == "request":
        return RecheckLine.from_json({**record, "label": label}).to_json()
    return ErrorLine.from_json({**record, "label": label, "error": f"drift recheck: {record['error']}"}).to_json()


def error_line(cell: Cell, dataset: str, exc: BaseException, *, message: str | None = None,
               concurrency: int | None = None) -> ErrorLine:
    """A failed unit's error (called in the except block: the traceback is exc's); `message` replaces its cause."""
    return ErrorLine(cell_id=cell.cell_id, label=cell.label, dataset=dataset, error=message or cause(exc),
                     traceback=getattr(exc, "remote_traceback", "") or traceback.format_exc(), concurrency=concurrency)


def spec_line(cell: Cell, dataset: str, counters: SpecCounters) -> SpecLine:
    """A batch unit's speculative counters."""
    return SpecLine(cell_id=cell.cell_id, label=cell.label, dataset=dataset, **dataclasses.asdict(counters))


def served(cell: Cell, prompt: Prompt, level: Level) -> dict[str, Any]:
    """The fields every line of a serving level carries: the cell, the workload, the level."""
    return {"cell_id": cell.cell_id, "label": cell.label, "engine": cell.engine, "method": cell.method, "k": cell.k,
            **_workload(prompt), "level": level}


def served_spec_line(cell: Cell, prompt: Prompt, level: Level, counters: SpecCounters) -> SpecLine:
    """A serving level's speculative counters (the server's /metrics diff)."""
    return SpecLine(**served(cell, prompt, level), **dataclasses.asdict(counters))


def load_line(cell: Cell, prompt: Prompt, level: Level, result: dict[str, Any],
              server_tpot: tuple[float, float] | None) -> LoadLine:
    """A serving level from the load generator's result and the server's TPOT (sum s, count) diff."""
    return LoadLine(**served(cell, prompt, level), duration_s=result["duration"], completed=result["completed"],
                    failed=result["failed"], total_output_tokens=result["total_output_tokens"],
                    max_concurrent_requests=result.get("max_concurrent_requests"),
                    server_tpot_sum_s=server_tpot[0] if server_tpot else None,
                    server_tpot_count=server_tpot[1] if server_tpot else None)


def samples_line(cell: Cell, dataset: str, prompt: Prompt, length: int, seeds: list[int] | None,
                 samples: list[list[int]], loglik: list[float] | None, scoring: str | None,
                 concurrency: int | None = None) -> SamplesLine:
    """One prompt's distribution-check samples."""
    return SamplesLine(cell_id=cell.cell_id, label=cell.label, dataset=dataset, prompt_index=prompt.index,
                       prompt_sha256=prompt.sha256, temperature=cell.temperature, length=length, seeds=seeds,
                       samples=samples, loglik=loglik, scoring=scoring, concurrency=concurrency)


def tie_check_line(spec: Cell, dataset: str, prompt: Prompt, divergence: int, baseline_token: int, spec_token: int,
                   scores: dict[str, Any]) -> TieCheckLine:
    """The baseline engine's `token_scores` at a speculative cell's first divergence from it."""
    return TieCheckLine(cell_id=spec.cell_id, label=f"{spec.label} tie check", engine=spec.engine, dataset=dataset,
                        prompt_sha256=prompt.sha256, prompt_index=prompt.index, divergence=divergence,
                        baseline_token=baseline_token, spec_token=spec_token, dtype=scores["dtype"],
                        top_ids=scores["top_ids"], top_logits=scores["top_logits"],
                        token_logits=scores["token_logits"])
