"""A speculative length per batch size: the schedule type, its parse from a matrix's `k`, and each engine's config.

A schedule is a list of inclusive ranges (first B, last B, K), the first starting at 1, the last open (None: every B
from its first on), K = 0 meaning plain decoding. The engines take it as:

    vLLM            speculative_config.num_speculative_tokens_per_batch_size: [[first, last, K], ...]
    TensorRT-LLM    draft_len_schedule: {last B: K, ...}, K = 0 above the largest key
    SGLang          one server per range: speculative_num_steps K, speculative_num_draft_tokens K + 1
    this harness    a matrix whose `k` is the schedule {first B: K} and whose `batch_size` holds B in every range
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

OPEN_END = 1 << 20  # the last B written for an open range where an engine needs a number (vLLM caps it at max_num_seqs)


class VllmConfig(TypedDict):
    """vLLM's speculative_config entries of a schedule."""

    num_speculative_tokens: int
    num_speculative_tokens_per_batch_size: list[list[int]]


class TrtllmConfig(TypedDict):
    """TensorRT-LLM's draft length entries of a schedule."""

    max_draft_len: int
    draft_len_schedule: dict[int, int]


class SglangSetting(TypedDict, total=False):
    """One SGLang server's speculative settings (K = 0: `speculative_algorithm` None)."""

    speculative_num_steps: int
    speculative_eagle_topk: int
    speculative_num_draft_tokens: int
    speculative_algorithm: None


class SglangServer(SglangSetting, total=False):
    """One range's SGLang server: its batch sizes (the last None: open) and settings."""

    batch_sizes: list[int | None]


@dataclass(frozen=True)
class Range:
    first: int
    last: int | None  # None: open above
    k: int


@dataclass(frozen=True)
class Schedule:
    """Ranges in increasing B, contiguous from B = 1, adjacent ranges with different Ks."""

    ranges: tuple[Range, ...]

    def k_at(self, batch: int) -> int:
        for r in self.ranges:
            if r.first <= batch and (r.last is None or batch <= r.last):
                return r.k
        raise ValueError(f"B={batch} is outside the schedule")

    def ks(self) -> list[int]:
        """The distinct speculative lengths it runs (K = 0 is plain decoding: the baseline's cell)."""
        return sorted({r.k for r in self.ranges if r.k})

    def max_k(self) -> int:
        return max(r.k for r in self.ranges)

    def as_mapping(self) -> dict[int, int]:
        """{first B: K}: the form a matrix's `k` takes."""
        return {r.first: r.k for r in self.ranges}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "Schedule":
        """The schedule a run's manifest holds (`dataclasses.asdict`: {"ranges": [{first, last, k}, ...]})."""
        return cls(tuple(Range(**r) for r in value["ranges"]))


def ks_of(value: "list[int] | Schedule") -> list[int]:
    """The Ks of a matrix's parsed `k` for one method: its list, or a schedule's distinct Ks above 0."""
    return value.ks() if isinstance(value, Schedule) else value


def looks_like(value: Any) -> bool:
    """Whether a matrix's `k` value (or one method's) is a schedule: a mapping keyed by batch sizes, or a list of
    [first, last, K] triples."""
    if isinstance(value, Mapping):
        return bool(value) and all(isinstance(b, int) and not isinstance(b, bool) for b in value)
    return isinstance(value, list) and bool(value) and all(isinstance(e, (list, tuple)) for e in value)


def from_choices(choices: Mapping[int, int]) -> Schedule:
    """The schedule of a K chosen at each B of `choices` (B -> K, B = 1 among them): each K holds from its B up to the
    next B given, the last one open; neighbouring equal Ks merge."""
    if not choices or min(choices) != 1:
        raise ValueError("a schedule needs a K at B = 1")
    points = sorted(choices.items())
    merged = [points[0]]
    for b, k in points[1:]:
        if k != merged[-1][1]:
            merged.append((b, k))
    ranges = [Range(b, merged[i + 1][0] - 1 if i + 1 < len(merged) else None, k) for i, (b, k) in enumerate(merged)]
    return Schedule(tuple(ranges))


def parse(value: Any, what: str = "K") -> Schedule:
    """A schedule as a matrix gives it: a mapping {first B: K} (K held up to the next first B, the last open), or a
    list of [first B, last B, K] triples as vLLM takes them (contiguous from B = 1; the last one's K held above it).
    `what` names its values in messages (a draft tree's schedule is of node budgets). Raises ValueError naming what
    is wrong."""
    if isinstance(value, Mapping):
        points: dict[int, int] = {}
        for b, k in value.items():
            points[_int(b, "a first batch size", 1)] = _int(k, f"a {what}", 0)
        if 1 not in points:
            raise ValueError(f"the schedule must start at batch size 1 (give a {what} for 1)")
        return from_choices(points)
    if isinstance(value, Sequence) and not isinstance(value, str) and value:
        triples = []
        for entry in value:
            if isinstance(entry, str) or not isinstance(entry, Sequence) or len(entry) != 3:
                raise ValueError(f"{entry!r}: each range is [first B, last B, {what}]")
            first, last = _int(entry[0], "a first batch size", 1), _int(entry[1], "a last batch size", 1)
            if last < first:
                raise ValueError(f"{list(entry)}: the last batch size is below the first")
            triples.append((first, last, _int(entry[2], f"a {what}", 0)))
        triples.sort()
        if triples[0][0] != 1:
            raise ValueError("the schedule must start at batch size 1")
        for (_, last, _), (first, _, _) in zip(triples, triples[1:]):
            if first != last + 1:
                raise ValueError(f"ranges must be contiguous: one ends at {last}, the next starts at {first}")
        return from_choices({first: k for first, _, k in triples})
    raise ValueError(f"{value!r}: give {{first B: {what}, ...}} or [[first B, last B, {what}], ...]")


def _int(value: Any, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{value!r}: expected {what}, an int >= {low}")
    return value


def vllm_config(schedule: Schedule, max_batch: int | None = None) -> VllmConfig:
    """vLLM's speculative_config entries: num_speculative_tokens (the largest K, what it allocates for) and the
    schedule, the open range closed at max_batch (or OPEN_END)."""
    end = max_batch or OPEN_END
    return {"num_speculative_tokens": max(schedule.max_k(), 1),
            "num_speculative_tokens_per_batch_size": [[r.first, r.last if r.last is not None else max(end, r.first),
                                                       r.k] for r in schedule.ranges]}


def trtllm_config(schedule: Schedule, max_batch: int | None = None) -> TrtllmConfig:
    """TensorRT-LLM's draft_len_schedule {last B: K}: every range up to the last with K > 0 (a K = 0 range between
    them written as 0), the trailing K = 0 left to its implicit "K = 0 above the largest key"; an open range of K > 0
    is closed at max_batch (or OPEN_END). max_draft_len is the largest K."""
    ranges = list(schedule.ranges)
    while ranges and ranges[-1].k == 0:
        ranges.pop()
    out = {(r.last if r.last is not None else max(max_batch or OPEN_END, r.first)): r.k for r in ranges}
    return {"max_draft_len": schedule.max_k(), "draft_len_schedule": out}


def sglang_config(schedule: Schedule) -> list[SglangServer]:
    """SGLang takes one speculative length per server: per range, its batch sizes and the server's settings (a chain
    of K steps, top-1, K + 1 draft tokens with the anchor; K = 0: no speculative algorithm)."""
    out: list[SglangServer] = []
    for r in schedule.ranges:
        setting: SglangSetting = ({"speculative_num_steps": r.k, "speculative_eagle_topk": 1,
                                   "speculative_num_draft_tokens": r.k + 1} if r.k else
                                  {"speculative_algorithm": None})
        out.append({"batch_sizes": [r.first, r.last], **setting})
    return out


def matrix_config(schedule: Schedule, base: Mapping[str, object], method: str = "dflash") -> dict[str, object]:
    """The harness's own matrix that runs the schedule: `base` (name, preset, engine, datasets, …) with `k` as the
    schedule of `method` and `batch_size` holding the first B of every range (B = 1 among them)."""
    return {**base, "methods": ["baseline", method], "k": {method: schedule.as_mapping()},
            "batch_size": [r.first for r in schedule.ranges]}
