"""The records a run writes, one declared type per kind, each a line of a unit file (and of records.jsonl).

A line is built here (the `*_line` builders) as its type, serialised once by the store (`to_json()`: its fields, its
`kind` and `schema_version`) and read back as its type (`parse_lines`): a line of a kind or a schema version this
harness does not know, one that lacks a field or holds a value of the wrong type raises `RecordError` naming it.
Lines of run folders written before the version field existed read as version 1. A field marked optional is left out
of the line when it is None; a serving level (`Level`) is written as its two fields; `workload` is written under its
historical key, `dataset`. docs/outputs.md lists the kinds (tests/records/test_records.py checks it against these
declarations).
"""
from __future__ import annotations

import dataclasses
import re
import traceback
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar, Protocol, TypeVar

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import LoadResult, RequestRecord, SpecCounters, TokenScores
from benchmarks.core.metrics import tpot_ms

SCHEMA_VERSION = 1
READS_VERSIONS = (1,)  # a line without `schema_version` is version 1
OPTIONAL = {"optional": True}


def optional() -> Any:
    """A field left out of the line when it is None."""
    return field(default=None, metadata=OPTIONAL)


class Prompt(Protocol):
    """What a line names of its prompt (`datasets.Prompt`, which imports the store that reads these lines); read-only,
    as the frozen dataclass's fields are."""

    @property
    def index(self) -> int: ...

    @property
    def ids(self) -> list[int]: ...

    @property
    def sha256(self) -> str: ...

    @property
    def context_tokens(self) -> int | None: ...

    @property
    def turn(self) -> int | None: ...

    @property
    def key(self) -> str: ...


class RecordError(ValueError):
    """A line of a kind or a schema version this harness does not read, or one that does not hold its kind's fields."""


@dataclass(frozen=True)
class Level:
    """A serving level: the load generator's concurrency and request rate (None: as fast as it can)."""

    concurrency: int
    request_rate: float | None


def _json_name(f: dataclasses.Field) -> str:
    return f.metadata.get("json", f.name)


L = TypeVar("L", bound="Line")


@dataclass(frozen=True, kw_only=True)
class Line:
    """What every line names: its cell, the cell's label, the unit's workload key (written as `dataset`), and the
    provenance it was measured with (named by the store when it writes the unit)."""

    kind: ClassVar[str]
    cell_id: str
    label: str
    workload: str = field(metadata={"json": "dataset"})
    provenance_id: str | None = optional()

    def level_of(self) -> int | None:
        """The serving level's concurrency the line was measured at (None: not a serving level)."""
        return None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "schema_version": SCHEMA_VERSION}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Level):
                out |= dataclasses.asdict(value)
            elif value is not None or not f.metadata.get("optional"):
                out[_json_name(f)] = value
        return out

    @classmethod
    def from_json(cls: type[L], record: dict[str, Any], where: str = "a record") -> L:
        """The line a JSON object holds; RecordError naming `where` when a field is missing or of the wrong type
        (keys this kind does not declare are ignored)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name == "level":
                if record.get("concurrency") is not None:
                    values["level"] = level = Level(record["concurrency"], record.get("request_rate"))
                    if not (_fits(level.concurrency, int) and _fits(level.request_rate, float | None)):
                        raise RecordError(f"{where}: {cls.kind} record's serving level {level} is not an int "
                                          f"concurrency and a float or null request_rate")
                elif f.default is not None:
                    raise RecordError(f"{where}: {cls.kind} record lacks its serving level (`concurrency`)")
            elif _json_name(f) in record:
                values[f.name] = record[_json_name(f)]
            elif f.default is dataclasses.MISSING:
                raise RecordError(f"{where}: {cls.kind} record lacks the field `{_json_name(f)}`")
        declared: type = cls  # as `type`: mypy checks a type[L] for Hashable through its instances' __hash__
        for name, value in values.items():
            want = _hints(declared)[name]
            if not _fits(value, want):
                raise RecordError(f"{where}: {cls.kind} record's `{name}` is {value!r:.60}, not {_shown(want)}")
        return cls(**values)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _shown(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of a field's declared type (an int where a float is declared; no bool for a number)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


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

    def level_of(self) -> int | None:
        return None if self.level is None else self.level.concurrency


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

    def level_of(self) -> int | None:
        return self.concurrency


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

    def level_of(self) -> int | None:
        return None if self.level is None else self.level.concurrency

    def counters(self) -> SpecCounters:
        return SpecCounters(self.num_drafts, self.num_draft_tokens, self.num_accepted_tokens,
                            list(self.accepted_per_pos))


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

    def level_of(self) -> int | None:
        return self.level.concurrency


@dataclass(frozen=True, kw_only=True)
class ProbeRequestLine(RequestLine):
    """One request of a capacity probe (a round of requests at one load of an SLO search): it feeds the search, never
    a serving level's row."""

    kind: ClassVar[str] = "probe_request"
    round: int


@dataclass(frozen=True, kw_only=True)
class ProbeLine(LoadLine):
    """A capacity probe's round as a whole: the level's figures, its round at that load, and the server's
    speculative counters diffed around it (speculative cells)."""

    kind: ClassVar[str] = "probe"
    round: int
    num_drafts: int | None = optional()
    num_draft_tokens: int | None = optional()
    num_accepted_tokens: int | None = optional()
    accepted_per_pos: list[int] | None = optional()

    def counters(self) -> SpecCounters | None:
        if self.num_drafts is None:
            return None
        return SpecCounters(self.num_drafts, self.num_draft_tokens or 0, self.num_accepted_tokens or 0,
                            list(self.accepted_per_pos or []))


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

    def level_of(self) -> int | None:
        return self.concurrency


@dataclass(frozen=True, kw_only=True)
class TieCheckLine(Line):
    """The baseline engine's logits at one greedy divergence of a speculative cell (the lossless check's tie test)."""

    kind: ClassVar[str] = "tie_check"
    engine: str
    prompt_sha256: str
    prompt_index: int
    divergence: int
    baseline_token: int | None  # None: that output ended before the divergence
    spec_token: int | None
    dtype: str
    top_ids: list[int]
    top_logits: list[float]
    token_logits: list[float | None]


KINDS: dict[str, type[Line]] = {c.kind: c for c in (RequestLine, ErrorLine, SpecLine, LoadLine, SamplesLine,
                                                    TieCheckLine, RecheckLine, ProbeRequestLine, ProbeLine)}
PROBE_KINDS = (ProbeRequestLine.kind, ProbeLine.kind)


def json_fields(kind: type[Line]) -> list[tuple[str, bool]]:
    """The keys a line of `kind` is written with, each with whether it may be left out (`provenance_id`, which the
    store writes on every line, apart)."""
    out = [("kind", False), ("schema_version", False)]
    for f in dataclasses.fields(kind):
        if f.name == "provenance_id":
            continue
        names = [g.name for g in dataclasses.fields(Level)] if f.name == "level" else [_json_name(f)]
        out += [(n, bool(f.metadata.get("optional"))) for n in names]
    return out


def checked(records: list[dict[str, object]], where: str) -> list[dict[str, object]]:
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


def parse_lines(records: list[dict[str, object]], where: str) -> list[Line]:
    """The typed lines of JSON objects read from `where` (`checked`, then each read as its kind: `Line.from_json`)."""
    return [KINDS[str(r["kind"])].from_json(r, f"{where} line {i}") for i, r in enumerate(checked(records, where), 1)]


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
    return {"workload": prompt.key, "context_tokens": prompt.context_tokens, "turn": prompt.turn}


def request_line(cell: Cell, prompt: Prompt, output: RequestRecord, *, n_out: int | None = None,
                 level: Level | None = None, itl_ms: list[float] | None = None, start_s: float | None = None,
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


def recheck_of(line: RequestLine | ErrorLine) -> RecheckLine | ErrorLine:
    """A drift recheck's request (as kind "recheck") or error (its cause prefixed), labelled as the recheck."""
    label = f"{line.label} recheck"
    if isinstance(line, RequestLine):
        return RecheckLine(**{f.name: getattr(line, f.name) for f in dataclasses.fields(line)} | {"label": label})
    return dataclasses.replace(line, label=label, error=f"drift recheck: {line.error}")


def probe_of(lines: list[Line], at_round: int) -> list[Line]:
    """A serving level's lines (`run.serving.level_records`) as a capacity probe's round: its requests as
    `probe_request` records, its load record and speculative counters as one `probe` record."""
    spec = next((line for line in lines if isinstance(line, SpecLine)), None)
    counters = dataclasses.asdict(spec.counters()) if spec is not None else {}
    out: list[Line] = []
    for line in lines:
        if isinstance(line, RequestLine):
            out.append(ProbeRequestLine(**{f.name: getattr(line, f.name) for f in dataclasses.fields(line)},
                                        round=at_round))
        elif isinstance(line, LoadLine):
            out.append(ProbeLine(**{f.name: getattr(line, f.name) for f in dataclasses.fields(line)},
                                 round=at_round, **counters))
    return out


def error_line(cell: Cell, workload: str, exc: BaseException, *, message: str | None = None,
               concurrency: int | None = None) -> ErrorLine:
    """A failed unit's error (called in the except block: the traceback is exc's); `message` replaces its cause."""
    return ErrorLine(cell_id=cell.cell_id, label=cell.label, workload=workload, error=message or cause(exc),
                     traceback=getattr(exc, "remote_traceback", "") or traceback.format_exc(), concurrency=concurrency)


def spec_line(cell: Cell, workload: str, counters: SpecCounters) -> SpecLine:
    """A batch unit's speculative counters."""
    return SpecLine(cell_id=cell.cell_id, label=cell.label, workload=workload, **dataclasses.asdict(counters))


def served(cell: Cell, prompt: Prompt, level: Level) -> dict[str, Any]:
    """The fields every line of a serving level carries: the cell, the workload, the level."""
    return {"cell_id": cell.cell_id, "label": cell.label, "engine": cell.engine, "method": cell.method, "k": cell.k,
            **_workload(prompt), "level": level}


def served_spec_line(cell: Cell, prompt: Prompt, level: Level, counters: SpecCounters) -> SpecLine:
    """A serving level's speculative counters (the server's /metrics diff)."""
    return SpecLine(**served(cell, prompt, level), **dataclasses.asdict(counters))


def load_line(cell: Cell, prompt: Prompt, level: Level, result: LoadResult,
              server_tpot: tuple[float, float] | None) -> LoadLine:
    """A serving level from the load generator's result and the server's TPOT (sum s, count) diff."""
    return LoadLine(**served(cell, prompt, level), duration_s=result.duration, completed=result.completed,
                    failed=result.failed, total_output_tokens=result.total_output_tokens,
                    max_concurrent_requests=result.max_concurrent_requests,
                    server_tpot_sum_s=server_tpot[0] if server_tpot else None,
                    server_tpot_count=server_tpot[1] if server_tpot else None)


def samples_line(cell: Cell, workload: str, prompt: Prompt, length: int, seeds: list[int] | None,
                 samples: list[list[int]], loglik: list[float] | None, scoring: str | None,
                 concurrency: int | None = None) -> SamplesLine:
    """One prompt's distribution-check samples."""
    return SamplesLine(cell_id=cell.cell_id, label=cell.label, workload=workload, prompt_index=prompt.index,
                       prompt_sha256=prompt.sha256, temperature=cell.temperature, length=length, seeds=seeds,
                       samples=samples, loglik=loglik, scoring=scoring, concurrency=concurrency)


def tie_check_line(spec: Cell, workload: str, prompt: Prompt, divergence: int, baseline_token: int | None,
                   spec_token: int | None, scores: TokenScores) -> TieCheckLine:
    """The baseline engine's `token_scores` at a speculative cell's first divergence from it."""
    return TieCheckLine(cell_id=spec.cell_id, label=f"{spec.label} tie check", engine=spec.engine, workload=workload,
                        prompt_sha256=prompt.sha256, prompt_index=prompt.index, divergence=divergence,
                        baseline_token=baseline_token, spec_token=spec_token, dtype=scores.dtype,
                        top_ids=scores.top_ids, top_logits=scores.top_logits, token_logits=scores.token_logits)


@dataclass
class ByKind:
    """Lines sorted by kind (a recheck is not a request: it is a `RecheckLine`, listed apart)."""

    requests: list[RequestLine] = field(default_factory=list)
    rechecks: list[RecheckLine] = field(default_factory=list)
    specs: list[SpecLine] = field(default_factory=list)
    loads: list[LoadLine] = field(default_factory=list)
    errors: list[ErrorLine] = field(default_factory=list)
    samples: list[SamplesLine] = field(default_factory=list)
    tie_checks: list[TieCheckLine] = field(default_factory=list)
    probe_requests: list[ProbeRequestLine] = field(default_factory=list)
    probes: list[ProbeLine] = field(default_factory=list)

    def all(self) -> list[Line]:
        """Every line, kind by kind."""
        return [*self.requests, *self.rechecks, *self.specs, *self.loads, *self.errors, *self.samples,
                *self.tie_checks, *self.probe_requests, *self.probes]

    def add(self, line: Line) -> None:
        getattr(self, _FIELD_OF_KIND[line.kind]).append(line)

    @classmethod
    def of(cls, lines: Iterable[Line]) -> "ByKind":
        out = cls()
        for line in lines:
            out.add(line)
        return out


_FIELD_OF_KIND = {"request": "requests", "recheck": "rechecks", "spec": "specs", "load": "loads", "error": "errors",
                  "samples": "samples", "tie_check": "tie_checks", "probe_request": "probe_requests",
                  "probe": "probes"}
