"""What crosses the engine boundary: sampling parameters in, a request's measurement and speculative counters out."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class SamplingParams:
    temperature: float
    max_new_tokens: int
    seed: int = 0


@dataclass
class RequestRecord:
    """What an engine measured for one prompt (batch size 1).

    Times are seconds on a monotonic clock, relative to the request start.
    `accept_lengths` holds the accepted draft count of every verify step when the engine reports it (the JAX
    engine; vLLM with per-request spec-decode metrics); the engine-wide counters remain the source of τ.
    """

    output_ids: list[int]
    ttft_s: float
    last_token_s: float
    accept_lengths: list[int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SpecCounters:
    """Cumulative speculative-decoding counters, vLLM's vocabulary; the run diffs them around each dataset.

    accepted_per_pos[i] = number of drafts whose position i+1 was accepted (a prefix rule, so non-increasing).
    """

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def _combine(self, other: "SpecCounters", sign: int) -> "SpecCounters":
        n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        a = self.accepted_per_pos + [0] * (n - len(self.accepted_per_pos))
        b = other.accepted_per_pos + [0] * (n - len(other.accepted_per_pos))
        return SpecCounters(
            self.num_drafts + sign * other.num_drafts,
            self.num_draft_tokens + sign * other.num_draft_tokens,
            self.num_accepted_tokens + sign * other.num_accepted_tokens,
            [x + sign * y for x, y in zip(a, b)],
        )

    def __sub__(self, other: "SpecCounters") -> "SpecCounters":
        return self._combine(other, -1)

    def __add__(self, other: "SpecCounters") -> "SpecCounters":
        return self._combine(other, 1)

    @classmethod
    def from_accept_lengths(cls, lengths: list[int], k: int, drafted: list[int] | None = None) -> "SpecCounters":
        """Counters of verify steps that accepted lengths[i] drafts of k each (or of drafted[i], where a method
        drafts fewer, as n-gram lookup does)."""
        return cls(
            num_drafts=len(lengths),
            num_draft_tokens=k * len(lengths) if drafted is None else sum(drafted[:len(lengths)]),
            num_accepted_tokens=sum(lengths),
            accepted_per_pos=[sum(1 for n in lengths if n >= i) for i in range(1, k + 1)],
        )


@dataclass(frozen=True)
class TokenScores:
    """The target's logits for the token after a prompt and prefix, untimed (the lossless check's tie test): the
    dtype they were computed in, the top ids and logits (best first), and the logits of the tokens asked about (None
    for one the engine does not return: llama.cpp's log-probabilities, whose margins are the logits' own, cover its
    `n_probs` best tokens only)."""

    dtype: str
    top_ids: list[int]
    top_logits: list[float]
    token_logits: list[float | None]


@dataclass(frozen=True)
class LoadResult:
    """What a serving level's load generator measured: the level as a whole, then one entry per request in the order
    of the load's prompts (the fields of `vllm bench serve --save-detailed`; seconds on the client's clock from the
    load's start or the request's). `output_ids` where the generator has the server's ids, else `generated_texts`;
    `accept_lengths` and `draft_lengths` where it sees each request's verify steps, counted within its output."""

    duration: float
    completed: int
    failed: int
    total_output_tokens: int
    max_concurrent_requests: int | None
    ttfts: list[float]
    itls: list[list[float]]
    latencies: list[float]
    start_times: list[float]
    input_lens: list[int]
    output_lens: list[int]
    errors: list[str]
    generated_texts: list[str] | None = None
    output_ids: list[list[int]] | None = None
    accept_lengths: list[list[int]] | None = None
    draft_lengths: list[list[int]] | None = None

    @classmethod
    def from_vllm(cls, saved: dict[str, Any]) -> "LoadResult":
        """The result `vllm bench serve --save-result --save-detailed` saved (its summary statistics left out)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in names} | {
            "failed": saved.get("failed", 0), "max_concurrent_requests": saved.get("max_concurrent_requests")})
