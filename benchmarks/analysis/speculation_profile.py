"""A speculative row's speculation profile (speculation_profile.json; docs/statistics.md): per position i = 1..K the
marginal acceptance p_i and the conditional c_i, τ per verify step and per request, from each source its records
carry (the engine's counters, `spec` lines; the requests' accept lengths), with the consistency checks: τ = 1 + Σ p_i
within TOLERANCE, 1 ≥ p_1 ≥ … ≥ p_K (the prefix rule), and, where both sources exist, that they agree.

Each step counts at its own K: a position is at risk in the steps that drafted it (a K schedule's steps run the K of
the batch they ran in; `draft_lengths` says which), so p_i = steps with ≥ i accepted / steps that drafted i, and c_i
= steps with ≥ i accepted / steps with ≥ i − 1 accepted that drafted i. A draft tree's profile is per depth: depth i
is at risk in the steps whose tree reaches it. `drafted` is each position's share of the steps at risk; the τ and
prefix checks read the shares of all steps, p_i × drafted_i (p_i itself where every step drafted K)."""
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
    marginal: list[float]  # p_i over the steps that drafted position i
    conditional: list[float]
    tau_per_request: float | None
    per_request: list[RequestTau] | None
    checks: list[Check]
    drafted: list[float]  # per position, the share of steps that drafted it (1 at a fixed K)

    @property
    def shares(self) -> list[float]:
        """Per position, the share of all steps with ≥ i accepted: p_i × drafted_i (0 where none drafted i)."""
        return [p * d if d else 0.0 for p, d in zip(self.marginal, self.drafted)]


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
    gaps = [abs(a - b) for a, b in zip(counters.shares, requests.shares)]
    tau_gap = abs(counters.tau_per_step - requests.tau_per_step)
    detail = (f"τ {counters.tau_per_step:.3f} vs {requests.tau_per_step:.3f}"
              + (f", largest p_i gap {max(gaps):.3f}" if gaps else "")
              + f", {counters.steps} vs {requests.steps} steps")
    return Check(AGREE, tau_gap <= TOLERANCE and all(g <= TOLERANCE for g in gaps), detail)


@dataclass(frozen=True)
class Positions:
    """Per position i = 1..n, over a row's verify steps: those with ≥ i accepted, those that drafted i, and those
    with ≥ i − 1 accepted that drafted i (c_i's condition)."""

    steps: int
    accepted: int
    reached: list[int]
    drafted: list[int]
    conditioned: list[int]

    @classmethod
    def of_steps(cls, accepted: list[int], limits: list[int], n: int) -> "Positions":
        """Steps that accepted `accepted[j]` drafts of the `limits[j]` they drafted, at positions 1..n."""
        pairs = list(zip(accepted, limits, strict=True))
        return cls(len(pairs), sum(accepted),
                   [sum(a >= i for a, _ in pairs) for i in range(1, n + 1)],
                   [sum(d >= i for _, d in pairs) for i in range(1, n + 1)],
                   [sum(a >= i - 1 and d >= i for a, d in pairs) for i in range(1, n + 1)])

    @classmethod
    def of_counters(cls, c: SpecCounters) -> "Positions":
        """The engine's counters: every step drafted every position they count (they say no more)."""
        reached = list(c.accepted_per_pos)
        return cls(c.num_drafts, c.num_accepted_tokens, reached, [c.num_drafts] * len(reached),
                   [c.num_drafts, *reached][:len(reached)])


def _ratio(n: int, d: int) -> float:
    return n / d if d > 0 else math.nan


def _source(name: str, pos: Positions, per_request: list[RequestTau] | None,
            tau_per_request: float | None) -> Source:
    if pos.steps <= 0:
        return Source(name, pos.steps, pos.accepted, math.nan, [], [], tau_per_request, per_request,
                      [tau_sum_check(math.nan, []), prefix_check([])], [])
    marginal = [_ratio(r, d) for r, d in zip(pos.reached, pos.drafted)]
    conditional = [_ratio(r, d) for r, d in zip(pos.reached, pos.conditioned)]
    drafted = [d / pos.steps for d in pos.drafted]
    tau = 1.0 + pos.accepted / pos.steps
    shares = [r / pos.steps for r in pos.reached]
    return Source(name, pos.steps, pos.accepted, tau, marginal, conditional, tau_per_request, per_request,
                  [tau_sum_check(tau, shares), prefix_check(shares)], drafted)


def from_counters(counters: SpecCounters) -> Source:
    """The profile of the engine's counters (diffed around the row's measured prompts)."""
    return _source("counters", Positions.of_counters(counters), None, None)


def step_limits(request: RequestLine, limit: int, tree: bool = False) -> list[int]:
    """Each verify step's own limit: the drafts it made (`draft_lengths`), or for a tree the depth its tree reached
    (`tree_depths`), where the record carries them step for step; else `limit` at every step."""
    steps = request.accept_lengths or []
    own = (request.extra or {}).get("tree_depths" if tree else "draft_lengths")
    if isinstance(own, list) and len(own) == len(steps):
        return [int(x) for x in own]
    return [limit] * len(steps)


def from_requests(requests: list[RequestLine], k: int, tree: bool = False) -> Source | None:
    """The profile of the requests' accept lengths at positions 1..K (a length beyond K fails τ = 1 + Σ p_i), each
    step at its own limit (`step_limits`, K where the records do not say); None when no request carries them. τ per
    request leaves out requests without a verify step."""
    measured = sorted(((r.prompt_index, r.accept_lengths, step_limits(r, k, tree)) for r in requests
                       if r.accept_lengths is not None), key=lambda m: m[0])
    if not measured:
        return None
    accepted = [n for _, lengths, _ in measured for n in lengths]
    limits = [min(d, k) for _, _, own in measured for d in own]
    per_request = [RequestTau(i, len(lengths), metrics.tau_prompt_mean([lengths])) for i, lengths, _ in measured
                   if lengths]
    return _source("requests", Positions.of_steps(accepted, limits, k), per_request,
                   metrics.tau_prompt_mean([lengths for _, lengths, _ in measured]))


def depth_limit(cell: Cell, requests: list[RequestLine], counted: int | None = None) -> int:
    """The depths a tree cell's profile covers: its longest possible path, the node budget (a tree of b nodes is at
    most b deep) cut at the engine's depth limit where its counters count one (`counted`: their positions, the
    draft's block less the root); without counters, cut at the deepest depth any step accepted or any step's tree
    reached (no step is at risk beyond it that the records can show)."""
    if counted:
        return min(cell.tree_budget, counted)
    deepest = max([0, *(d for r in requests for d in (*(r.accept_lengths or []), *step_limits(r, 0, tree=True)))])
    return min(cell.tree_budget, deepest)


def profile(key: Key, cell: Cell, lines: ByKind) -> Profile | None:
    """A summary row's speculation profile from its records; None for a baseline, or a row with neither source."""
    if cell.method == "baseline":
        return None
    counted = sum((s.counters() for s in lines.specs), SpecCounters()) if lines.specs else None
    counters = from_counters(counted) if counted is not None else None
    tree = cell.tree_budget > 0
    if tree:
        limit = depth_limit(cell, lines.requests, len(counted.accepted_per_pos) if counted is not None else None)
    else:
        limit = largest_k(cell)
    requests = from_requests(lines.requests, limit, tree)
    if counters is None and requests is None:
        return None
    return Profile(key, cell, counters, requests,
                   agreement_check(counters, requests) if counters and requests else None)
