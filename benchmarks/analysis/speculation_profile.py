"""A speculative row's speculation profile (speculation_profile.json; docs/statistics.md): per position i = 1..K the
marginal acceptance p_i and the conditional c_i, τ per verify step and per request, from each source its records
carry (the engine's counters, `spec` lines; the requests' accept lengths), with the consistency checks: τ = 1 + Σ p_i
within TOLERANCE, 1 ≥ p_1 ≥ … ≥ p_K (the prefix rule), and, where both sources exist, that they agree."""
from __future__ import annotations

import math
from dataclasses import dataclass

from benchmarks.config.pairing import largest_k
from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SpecCounters
from benchmarks.records.records import ByKind, RequestLine

TOLERANCE = 0.02  # on |τ − (1 + Σ p_i)|, and between the sources' τ and each p_i
TAU_SUM, PREFIX, AGREE = "tau_sum", "non_increasing", "sources_agree"
Key = tuple[str, str, int | None]  # (cell id, workload, serving concurrency), a summary row's


@dataclass(frozen=True)
class Check:
    """A consistency check: whether it holds (None: the source has nothing to check) and what it compared."""

    name: str
    ok: bool | None
    detail: str


@dataclass(frozen=True)
class RequestTau:
    """One request's τ: 1 + its mean accepted drafts over its verify steps."""

    prompt_index: int
    steps: int
    tau: float


@dataclass(frozen=True)
class Source:
    """One source's profile: its verify steps and accepted drafts, τ pooled over the steps, p_i and c_i for each
    position (NaN where undefined), τ per request (the mean over requests, and each request's; requests only) and
    its checks."""

    name: str  # "counters" (the engine's) or "requests" (their accept lengths)
    steps: int
    accepted: int
    tau_per_step: float
    marginal: list[float]
    conditional: list[float]
    tau_per_request: float | None
    per_request: list[RequestTau] | None
    checks: list[Check]


@dataclass(frozen=True)
class Profile:
    """A speculative row's profile from each source its records carry, and whether the two agree."""

    key: Key
    cell: Cell
    counters: Source | None
    requests: Source | None
    agreement: Check | None

    def failures(self) -> list[tuple[str, Check]]:
        """Each check that fails, with its source's name ("both" for the sources' agreement)."""
        out = [(s.name, c) for s in (self.counters, self.requests) if s for c in s.checks if c.ok is False]
        return out + ([("both", self.agreement)] if self.agreement and self.agreement.ok is False else [])


def tau_sum_check(tau: float, marginal: list[float]) -> Check:
    """τ pooled over the steps = 1 + Σ p_i, within TOLERANCE."""
    if math.isnan(tau) or not marginal:
        return Check(TAU_SUM, None, "no verify steps" if math.isnan(tau) else "no per-position counts")
    total = 1.0 + sum(marginal)
    return Check(TAU_SUM, abs(tau - total) <= TOLERANCE, f"τ {tau:.3f}, 1 + Σ p_i {total:.3f}")


def prefix_check(marginal: list[float]) -> Check:
    """1 ≥ p_1 ≥ p_2 ≥ … ≥ p_K: a draft is accepted only after every draft before it."""
    if not marginal:
        return Check(PREFIX, None, "no per-position counts")
    rise = next(((i, before, p) for i, (before, p) in enumerate(zip([1.0, *marginal], marginal), 1) if p > before),
                None)
    if rise is None:
        return Check(PREFIX, True, f"1 ≥ p_1 ≥ … ≥ p_{len(marginal)}")
    i, before, p = rise
    return Check(PREFIX, False, f"p_{i} {p:.3f} > {'1' if i == 1 else f'p_{i - 1} {before:.3f}'}")


def agreement_check(counters: Source, requests: Source) -> Check:
    """The engine's counters and the accept lengths give the same τ and p_i, each within TOLERANCE."""
    if math.isnan(counters.tau_per_step) or math.isnan(requests.tau_per_step):
        return Check(AGREE, None, "a source without verify steps")
    gaps = [abs(a - b) for a, b in zip(counters.marginal, requests.marginal)]
    tau_gap = abs(counters.tau_per_step - requests.tau_per_step)
    detail = (f"τ {counters.tau_per_step:.3f} vs {requests.tau_per_step:.3f}"
              + (f", largest p_i gap {max(gaps):.3f}" if gaps else "")
              + f", {counters.steps} vs {requests.steps} steps")
    return Check(AGREE, tau_gap <= TOLERANCE and all(g <= TOLERANCE for g in gaps), detail)


def _source(name: str, counters: SpecCounters, per_request: list[RequestTau] | None,
            tau_per_request: float | None) -> Source:
    a = metrics.acceptance(counters)
    return Source(name, counters.num_drafts, counters.num_accepted_tokens, a.tau, a.per_position,
                  metrics.conditional_acceptance(counters) if a.per_position else [], tau_per_request, per_request,
                  [tau_sum_check(a.tau, a.per_position), prefix_check(a.per_position)])


def from_counters(counters: SpecCounters) -> Source:
    """The profile of the engine's counters (diffed around the row's measured prompts)."""
    return _source("counters", counters, None, None)


def from_requests(requests: list[RequestLine], k: int) -> Source | None:
    """The profile of the requests' accept lengths at positions 1..K (a length beyond K fails τ = 1 + Σ p_i); None
    when no request carries them. τ per request leaves out requests without a verify step."""
    measured = sorted(((r.prompt_index, r.accept_lengths) for r in requests if r.accept_lengths is not None),
                      key=lambda m: m[0])
    if not measured:
        return None
    steps = [n for _, lengths in measured for n in lengths]
    per_request = [RequestTau(i, len(lengths), metrics.tau_prompt_mean([lengths])) for i, lengths in measured
                   if lengths]
    return _source("requests", SpecCounters.from_accept_lengths(steps, k), per_request,
                   metrics.tau_prompt_mean([lengths for _, lengths in measured]))


def profile(key: Key, cell: Cell, lines: ByKind) -> Profile | None:
    """A summary row's speculation profile from its records; None for a baseline, or a row with neither source."""
    if cell.method == "baseline":
        return None
    counters = from_counters(sum((s.counters() for s in lines.specs), SpecCounters())) if lines.specs else None
    requests = from_requests(lines.requests, largest_k(cell))
    if counters is None and requests is None:
        return None
    return Profile(key, cell, counters, requests,
                   agreement_check(counters, requests) if counters and requests else None)
