"""Every metric of the harness, defined once, as pure functions: per request (TTFT, TPOT without prefill, tok/s),
speculative (τ pooled and per prompt, α, per-position rates, the histogram of accepted lengths), the paired speedup
with its Student-t interval and the ratio of mean TPOTs, the baseline drift and its flag, the cost model's τ(K), the
serving figures (ITL, aggregate throughput, crossover, server TPOT), the static-batch figures (tokens/s per user, the
throughput speedup paired over batches, the crossover batch size), the intervals of a mean and of a rate over
independent units (the K schedule's τ(K) and step times), and the physical floor. Their definitions, in the
vocabulary of the project's notes: docs/statistics.md."""
from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import bdtr, fdtrc, fdtri, ndtr, ndtri, owens_t, stdtr, stdtrit

from benchmarks.core.engine_io import SpecCounters


def tpot_ms(ttft_s: float, last_token_s: float, n_out: int) -> float:
    """Mean time per output token after the first, in ms; NaN when fewer than two tokens were produced."""
    if n_out < 2:
        return math.nan
    return 1000.0 * (last_token_s - ttft_s) / (n_out - 1)


def output_tok_per_s(n_out: float, decode_s: float) -> float:
    """Output tokens per second of decode time (first token to last); NaN when no decode time elapsed."""
    return n_out / decode_s if decode_s > 0 else math.nan


def aggregate_tok_per_s(total_output_tokens: float, duration_s: float) -> float:
    """Output tokens of a whole serving level per second of its wall time; NaN without elapsed time."""
    return total_output_tokens / duration_s if duration_s > 0 else math.nan


def requests_per_s(completed: int, duration_s: float) -> float:
    """Completed requests of a serving level per second of its wall time; NaN without elapsed time."""
    return completed / duration_s if duration_s > 0 else math.nan


def histogram_mean(total: float, count: float) -> float:
    """The mean of the observations behind a histogram's (sum, count); NaN without observations."""
    return total / count if count > 0 else math.nan


def throughput_speedup(tok_s_base: float, tok_s_method: float) -> float:
    """Aggregate throughput of a method over the AR baseline's at the same load; NaN unless both are positive."""
    if not (tok_s_base > 0 and tok_s_method > 0):
        return math.nan
    return tok_s_method / tok_s_base


def percentile(values: list[float], q: float) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return float(np.percentile(clean, q)) if clean else math.nan


def quantile_interval(values: Sequence[float], q: float, confidence: float = 0.95, design_effect: float = 1.0
                      ) -> tuple[float, float, float]:
    """The q-quantile (0 < q < 1) of `values` (NaN left out; linear interpolation, as `percentile`) and its
    distribution-free `confidence` interval from order statistics: [x_(l), x_(u)] (ranks from 1), l the largest rank
    with P(B <= l - 1) <= a and u the smallest with P(B >= u) <= a, B ~ Binomial(n, q) the values below the true
    quantile and a = (1 - confidence) / 2; it covers the quantile with probability >= confidence for independent
    draws of any continuous distribution. A bound that no rank reaches is infinite (-inf, +inf): too few values
    (`min_values_for_bound`). NaN everywhere without values.

    Values that are not independent (requests sharing a slowdown) count as n / design_effect: the ranks are those of
    that many values, each taken at its place among the n (outward), as Woodruff's interval does with a design's
    variance."""
    x = np.sort([v for v in values if not math.isnan(v)])
    n = len(x)
    if not n:
        return math.nan, math.nan, math.nan
    n_eff = max(1, int(n / max(design_effect, 1.0)))
    low, high = _quantile_ranks(n_eff, q, confidence)
    if n_eff < n:
        low, high = math.floor(low * n / n_eff), (math.ceil(high * n / n_eff) if high <= n_eff else n + 1)
    return (float(np.percentile(x, 100.0 * q)), float(x[low - 1]) if low else -math.inf,
            float(x[high - 1]) if high <= n else math.inf)


@dataclass(frozen=True)
class _Anova:
    """A one-way ANOVA of values in groups: k groups of n values, the mean squares between and within them, and m0,
    the groups' size as the intra-group correlation's estimator weighs it."""

    k: int
    n: int
    between: float
    within: float
    m0: float

    def rho_upper(self, ratio: float, alpha: float) -> float:
        """The intra-group correlation at the upper end of its one-sided 1 − `alpha` interval from the F ratio
        `ratio` (a few groups tell it poorly: a wide one)."""
        f = ratio / fdtri(self.k - 1, self.n - self.k, alpha)
        return max((f - 1) / (f + self.m0 - 1), 0.0)


def _anova(values: Sequence[float], groups: Sequence[Hashable]) -> _Anova | None:
    """The ANOVA of finite `values` by `groups`; None where fewer than three groups, or no group of two, leave the
    intra-group correlation untold."""
    by: dict[Hashable, list[float]] = {}
    for v, g in zip(values, groups, strict=True):
        if math.isfinite(v):
            by.setdefault(g, []).append(v)
    sizes = [len(v) for v in by.values()]
    k, n = len(by), sum(sizes)
    if k < 3 or n - k < 1 or max(sizes) < 2:
        return None
    means = [sum(v) / len(v) for v in by.values()]
    grand = sum(sum(v) for v in by.values()) / n
    between = sum(len(v) * (m - grand) ** 2 for v, m in zip(by.values(), means)) / (k - 1)
    within = sum(sum((x - m) ** 2 for x in v) for v, m in zip(by.values(), means)) / (n - k)
    return _Anova(k, n, between, within, (n - sum(z * z for z in sizes) / n) / (k - 1))


def design_effect(logs: Sequence[float], groups: Sequence[Hashable], q: float | None = None, alpha: float = 0.2
                  ) -> float:
    """How many values one independent value is worth when the values come in groups that may share an effect (the
    requests of one wave, slowed by one host): 1 + (m − 1) · ρ, m the groups' mean size and ρ the intra-group
    correlation of `logs` at the upper end of its one-sided 1 − `alpha` interval (one-way ANOVA's, from the F ratio:
    a few groups tell ρ poorly, and an estimate that falls short would overstate the values), where the groups differ
    beyond chance (the ANOVA F-test at `alpha`); 1 where they do not, where no group holds two values, or where
    fewer than three groups leave ρ untold. For a q-quantile, ρ is that of being below it (`_indicator_correlation`),
    which is what its interval counts."""
    a = _anova(logs, groups)
    if a is None:
        return 1.0
    if a.within <= 0:  # every group's values alike: a group is worth one value where the groups differ
        return a.n / a.k if a.between > 0 else 1.0
    if fdtrc(a.k - 1, a.n - a.k, a.between / a.within) >= alpha:
        return 1.0
    rho = a.rho_upper(a.between / a.within, alpha)
    return 1.0 + (a.n / a.k - 1) * (rho if q is None else _indicator_correlation(rho, q))


def share_design_effect(within: Sequence[bool], groups: Sequence[Hashable], alpha: float = 0.2) -> float:
    """How many requests one independent request is worth in counting those within a limit, when the requests come in
    waves that may share a slowdown of any shape (a shift, a stall, a wider spread): 1 + (m − 1) · ρ, m the waves'
    mean size and ρ the intra-wave correlation of the 0/1 indicators themselves (one-way ANOVA's), at the upper end of
    its one-sided 1 − `alpha` interval from the F ratio, whether or not the waves differ beyond chance (a few waves
    that happen alike cannot rule out a slowdown they missed). 1 where no wave holds two requests or fewer than three
    waves leave ρ untold; m where every wave's requests agree and the waves do not (each wave one request); as for an F
    ratio of 1 where every request agrees (all within: no sign of a slowdown, nor of its absence)."""
    a = _anova([float(v) for v in within], groups)
    if a is None:
        return 1.0
    if a.within <= 0 and a.between > 0:
        return a.n / a.k
    ratio = a.between / a.within if a.within > 0 else 1.0  # every request alike: no sign either way
    return 1.0 + (a.n / a.k - 1) * a.rho_upper(ratio, alpha)


def _indicator_correlation(rho: float, q: float) -> float:
    """The correlation of two values' being below their q-quantile when the values are jointly normal with
    correlation rho: (P(both below) − q²) / (q (1 − q)), P(both below) = Φ(z) − 2 T(z, √((1 − ρ) / (1 + ρ))) with
    Owen's T (z the q-quantile of a standard normal)."""
    if rho <= 0:
        return 0.0
    if rho >= 1:
        return 1.0
    z = float(ndtri(q))
    both = float(ndtr(z)) - 2 * float(owens_t(z, math.sqrt((1 - rho) / (1 + rho))))
    return min(1.0, max(0.0, (both - q * q) / (q * (1 - q))))


@functools.lru_cache(maxsize=4096)
def _quantile_ranks(n: int, q: float, confidence: float) -> tuple[int, int]:
    """The ranks (from 1) of `quantile_interval`'s bounds among n values: 0 for no lower bound, n + 1 for no upper."""
    a = (1.0 - confidence) / 2.0
    cdf = bdtr(np.arange(n + 1), n, q)  # cdf[k] = P(B <= k)
    lows = [r for r in range(1, n + 1) if cdf[r - 1] <= a]
    highs = [r for r in range(1, n + 1) if 1.0 - cdf[r - 1] <= a]
    return (lows[-1] if lows else 0), (highs[0] if highs else n + 1)


def min_values_for_bound(q: float, confidence: float = 0.95) -> int:
    """The fewest values whose `quantile_interval` of the q-quantile has a finite upper end: q^n <= (1 - confidence)
    / 2 (the largest value must lie above the quantile with that probability); 368 for the 99th percentile, 36 for
    the 90th, 6 for the median."""
    return math.ceil(math.log((1.0 - confidence) / 2.0) / math.log(q) - 1e-9)


def mean(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return float(np.mean(clean)) if clean else math.nan


@dataclass(frozen=True)
class Acceptance:
    tau: float
    alpha: float
    per_position: list[float]  # p_1..p_K
    histogram: list[int]  # steps with exactly 0..K accepted drafts


def acceptance(c: SpecCounters) -> Acceptance:
    """τ, α, per-position rates and the accepted-length histogram from (diffed) counters."""
    if c.num_drafts <= 0:
        return Acceptance(math.nan, math.nan, [], [])
    at_least = [c.num_drafts] + list(c.accepted_per_pos)  # at_least[i] = steps with >= i accepted
    hist = [at_least[i] - (at_least[i + 1] if i + 1 < len(at_least) else 0) for i in range(len(at_least))]
    return Acceptance(
        tau=1.0 + c.num_accepted_tokens / c.num_drafts,
        alpha=c.num_accepted_tokens / c.num_draft_tokens if c.num_draft_tokens else math.nan,
        per_position=[n / c.num_drafts for n in c.accepted_per_pos],
        histogram=hist,
    )


def conditional_acceptance(c: SpecCounters) -> list[float]:
    """c_i = P(≥ i accepted | ≥ i − 1 accepted) for i = 1..K from (diffed) counters: the steps with ≥ i accepted
    drafts over those with ≥ i − 1 (c_1 = p_1); NaN where the condition never held."""
    at_least = [c.num_drafts, *c.accepted_per_pos]
    return [n / before if before > 0 else math.nan for before, n in zip(at_least, at_least[1:])]


def step_room(accepted: list[int], n_out: int) -> list[int]:
    """The drafts each verify step of a request can count within its n_out tokens (its output, cut at EOS or the
    token limit): the first token comes from prefill and each step commits accepted + 1, so a step that starts with
    `committed` tokens can count n_out - committed - 1 drafts (its last token is its own); one entry per step that
    starts before the last token (a step after it is not counted). A step with one token left has room 0."""
    out, committed = [], 1
    for a in accepted:
        if committed >= n_out:
            break
        room = n_out - committed - 1
        out.append(room)
        committed += min(a, room) + 1
    return out


def accepted_within(accepted: list[int], n_out: int) -> list[int]:
    """Per-step accepted drafts counted within a request's n_out tokens (`step_room`): a step that would commit past
    the output (EOS or the limit) counts only the drafts still wanted, a last one-token step counts as a verify step
    that accepted 0, a step after the last token is not counted; so τ = (n_out - 1) / steps, on every engine."""
    return [min(a, room) for a, room in zip(accepted, step_room(accepted, n_out))]


def drafted_within(accepted: list[int], drafted: list[int], n_out: int) -> list[int]:
    """Per-step drafted counts within a request's n_out tokens, step for step with `accepted_within`: a step counts
    only its drafts for tokens before the output's last, min(drafted, room), so an engine that drafts K to the end and
    one that caps its drafts at the tokens still wanted count alike (α too), and a last one-token step drafts 0."""
    return [min(d, room) for d, room in zip(drafted, step_room(accepted, n_out))]


def tau_prompt_mean(accept_lengths: list[list[int] | None]) -> float:
    """Mean over prompts of each prompt's τ (1 + its mean accepted drafts per verify step), from per-request
    accepted lengths; prompts without verify steps (or without per-request data) are left out. Unlike the pooled τ,
    every prompt weighs the same, however many steps it took."""
    per_prompt = [1.0 + sum(a) / len(a) for a in accept_lengths if a]
    return float(np.mean(per_prompt)) if per_prompt else math.nan


@dataclass(frozen=True)
class Speedup:
    geomean: float  # the point estimate: the geometric mean of the ratios (or, `ratio_of_sums`, the wall-clock ratio)
    ci_low: float  # 95 % CI, Student-t over the independent units; NaN with fewer than two units or no spread
    ci_high: float
    mean_ratio: float
    n: int  # pairs behind the estimate (prompts, or batches for a throughput)
    units: int = 0  # independent units behind the interval: prompts at batch 1, batches at B > 1, waves at C > 1
    p_below: float = math.nan  # one-sided p-value of "the ratio is 1 or above" (t over the units); NaN without CI

    @property
    def has_interval(self) -> bool:
        return not math.isnan(self.ci_low)


NO_SPEEDUP = Speedup(math.nan, math.nan, math.nan, math.nan, 0)


def log_mean_interval(logs: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean of log ratios over the last axis and its Student-t interval, mean ± t_{(1+level)/2, n-1} · sd / √n
    (vectorised over any leading axes): exact for normal log ratios, 94.8-96.4 % simulated coverage at n = 2..16 for
    normal and t3 ones (tests/core/test_metrics.py). The bounds are NaN at n < 2: one ratio has no spread."""
    logs = np.asarray(logs, dtype=float)
    n = logs.shape[-1]
    mean = logs.mean(axis=-1) if n else np.full(logs.shape[:-1], math.nan)
    if n < 2:
        return mean, np.full_like(mean, math.nan), np.full_like(mean, math.nan)
    half = stdtrit(n - 1, 0.5 + level / 2) * logs.std(axis=-1, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


def _t_summary(est: float, se: float, n_units: int, df: float | None = None) -> tuple[float, float, float]:
    """The 95 % Student-t interval of a log estimate from its standard error over n_units (`df` degrees of freedom,
    n_units − 1 by default), and the one-sided p-value of "the ratio is 1 or above"; NaN bounds with fewer than two
    units, or with no spread between them (a zero-width interval would claim a certainty the units cannot give)."""
    if n_units < 2 or not se > 1e-12:  # no spread (to rounding): no interval, rather than one of zero width
        return math.nan, math.nan, math.nan
    df = n_units - 1 if df is None else df
    half = stdtrit(df, 0.975) * se
    return est - half, est + half, float(stdtr(df, est / se))


def weighted_df(weights: np.ndarray) -> float:
    """The degrees of freedom of t for a ratio of sums over units of unequal weight: halfway between n − 1 and
    Satterthwaite's (Σw²)² / Σw⁴ − 1 for the weights, so n − 1 for equal weights, fewer as one unit outweighs the
    others. At n − 1 whatever the weights, t ran liberal on 4–8 units; at Satterthwaite's, conservative (a crossover
    named in 0.6–1.4 % of runs for 2.5 %); halfway holds both (docs/statistics.md)."""
    w2 = np.asarray(weights, dtype=float) ** 2
    satterthwaite = max(1.0, float(w2.sum() ** 2 / (w2 ** 2).sum()) - 1.0)
    return (len(w2) - 1 + satterthwaite) / 2


def paired_ratio(numerator: list[float], denominator: list[float], clusters: list[Hashable] | None = None
                 ) -> Speedup:
    """numerator / denominator on pairs matched by position (the caller pairs them): the geometric mean of the
    ratios with its 95 % CI and the ratio of means; pairs without two positive finite values are dropped.

    `clusters` names each pair's unit of independence (its static batch, its serving wave); by default every pair is
    its own. The estimate is the mean over units of each unit's mean log ratio, its interval Student-t over the units
    (`log_mean_interval` on the unit means): pairs of one unit share its noise, so only units are independent."""
    keys = list(range(len(numerator))) if clusters is None else list(clusters)
    pairs = [(a, b, c) for a, b, c in zip(numerator, denominator, keys, strict=True)
             if a > 0 and b > 0 and not (math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b))]
    if not pairs:
        return NO_SPEEDUP
    by_unit: dict[Hashable, list[float]] = {}
    for a, b, c in pairs:
        by_unit.setdefault(c, []).append(math.log(a / b))
    units = np.array([np.mean(v) for v in by_unit.values()])
    mean = float(units.mean())
    se = float(units.std(ddof=1) / math.sqrt(len(units))) if len(units) > 1 else math.nan
    low, high, p = _t_summary(mean, se, len(units))
    top, bottom = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    return Speedup(geomean=math.exp(mean), ci_low=math.exp(low), ci_high=math.exp(high),
                   mean_ratio=float(top.mean() / bottom.mean()), n=len(pairs), units=len(units), p_below=p)


def ratio_of_sums(tokens_m: list[float], spans_m: list[float], tokens_b: list[float], spans_b: list[float],
                  center: float | None = None) -> Speedup:
    """The wall-clock throughput speedup over paired units (a method's batch and the baseline's batch of the same
    prompts): (Σ tokens_M / Σ span_M) / (Σ tokens_AR / Σ span_AR), with a 95 % interval over the units: log of the
    ratio ± t · its jackknife standard error (the ratio recomputed with each unit left out), t with the degrees of
    freedom of units of unequal weight (`weighted_df`: n − 1 when the units' decode times are equal). The delta
    method's linearised error, and t at n − 1 whatever the weights, ran liberal on a few units (docs/statistics.md).
    Units with a non-positive value are dropped; `mean_ratio` is the mean of the units' own ratios. `center`: another
    estimate of the same ratio (a serving level's aggregate), given the interval's width from the units."""
    rows = np.array([r for r in zip(tokens_m, spans_m, tokens_b, spans_b, strict=True)
                     if all(x > 0 and math.isfinite(x) for x in r)], dtype=float).reshape(-1, 4)
    n = len(rows)
    if not n:
        return NO_SPEEDUP

    def log_ratio(sums: np.ndarray) -> np.ndarray:
        return np.log(sums[..., 0] / sums[..., 1]) - np.log(sums[..., 2] / sums[..., 3])
    total = rows.sum(axis=0)
    log_r = float(log_ratio(total)) if center is None else math.log(center)
    if n > 1:
        left_out = log_ratio(total - rows)  # each unit's leave-one-out ratio
        se = math.sqrt((n - 1) / n * float(((left_out - left_out.mean()) ** 2).sum()))
    else:
        se = math.nan
    # a unit weighs in the ratio by its share of each arm's decode time: t's degrees of freedom from those shares
    low, high, p = _t_summary(log_r, se, n, weighted_df(rows[:, 1] / total[1] + rows[:, 3] / total[3]))
    own = (rows[:, 0] / rows[:, 1]) / (rows[:, 2] / rows[:, 3])
    return Speedup(geomean=math.exp(log_r), ci_low=math.exp(low), ci_high=math.exp(high),
                   mean_ratio=float(own.mean()), n=n, units=n, p_below=p)


def paired_speedup(tpot_base: list[float], tpot_method: list[float], clusters: list[Hashable] | None = None
                   ) -> Speedup:
    """Speedup on prompts paired by position in the two lists (the caller pairs them by prompt hash): the geometric
    mean of TPOT_AR / TPOT_M with its 95 % CI over the units of independence (`paired_ratio`), and the ratio of mean
    TPOTs."""
    return paired_ratio(tpot_base, tpot_method, clusters)


def request_tok_per_s(n_out: int, decode_s: float) -> float:
    """One request's own decode rate: the tokens after its first over the span from its first to its last token
    (the tokens of the span it divides by); NaN with fewer than two tokens or no span."""
    return (n_out - 1) / decode_s if n_out > 1 and decode_s > 0 else math.nan


def outliers(values: list[float], z: float = 3.5, factor: float = 1.5) -> list[int]:
    """Indexes of values far from the others in log space: a modified z-score 0.6745·|ln x − median|/MAD above `z`
    (Iglewicz and Hoaglin's rule, robust to the outliers themselves) and at least `factor` times from the median
    (so that identical values with one slight straggler, MAD 0, are not flagged). NaN and non-positive values are
    left out; fewer than three values give none."""
    logs = [(i, math.log(v)) for i, v in enumerate(values) if v is not None and v > 0 and math.isfinite(v)]
    if len(logs) < 3:
        return []
    x = np.array([v for _, v in logs])
    center = float(np.median(x))
    mad = float(np.median(np.abs(x - center)))
    far = [i for i, v in logs if abs(v - center) >= math.log(factor)]
    return [i for i in far if mad == 0 or 0.6745 * abs(dict(logs)[i] - center) / mad > z]


@dataclass(frozen=True)
class Crossover:
    """Where a method's speedup falls below 1 along a load axis (batch size or concurrency), decided from the levels'
    intervals: `level` the smallest level shown below 1 (Holm over the levels with an interval, one-sided, family-wise
    level FAMILY_ALPHA), None when none is; `inconclusive` the levels without an interval (fewer than two units)."""

    level: int | None
    tested: list[int]
    inconclusive: list[int]
    adjusted: dict[int, float]  # each tested level's Holm-adjusted one-sided p-value


FAMILY_ALPHA = 0.025  # one-sided: a single level is shown below 1 exactly when its 95 % interval lies below 1


def holm(p_values: dict[Any, float]) -> dict[Any, float]:
    """Holm's step-down adjusted p-values (monotone, capped at 1)."""
    out, running, m = {}, 0.0, len(p_values)
    for i, (key, p) in enumerate(sorted(p_values.items(), key=lambda kv: kv[1])):
        running = max(running, min(1.0, (m - i) * p))
        out[key] = running
    return out


def crossover(levels: list[tuple[int, Speedup]], alpha: float = FAMILY_ALPHA) -> Crossover:
    """The smallest level whose speedup is shown below 1 by its interval over its units, the family of levels
    scanned Holm-corrected; levels without an interval are inconclusive, never counted as "not below 1"."""
    tested = {level: s.p_below for level, s in levels if s.has_interval and not math.isnan(s.p_below)}
    adjusted = holm(tested)
    below = [level for level, p in adjusted.items() if p < alpha]
    return Crossover(min(below) if below else None, sorted(tested),
                     sorted(level for level, _ in levels if level not in tested), adjusted)


@dataclass(frozen=True)
class Drift:
    before_ms: float  # geometric-mean TPOT of the baseline's measurement on the recheck prompts
    after_ms: float  # geometric-mean TPOT of its recheck on the same prompts
    drift: float  # after / before - 1 (> 0: the baseline slowed down)
    ci_low: float  # 95 % CI of the drift (Student-t on the per-prompt log ratios); NaN at n = 1
    ci_high: float
    n: int


def baseline_drift(tpot_before: list[float | None], tpot_after: list[float | None]) -> Drift:
    """How far the baseline moved between its measurement and its recheck, on prompts paired by position (the caller
    pairs them by prompt hash), with the CI of that move; pairs without a positive TPOT on both sides are dropped."""
    pairs = [(b, a) for b, a in zip(tpot_before, tpot_after, strict=True)
             if b is not None and a is not None and b > 0 and a > 0]
    if not pairs:
        return Drift(math.nan, math.nan, math.nan, math.nan, math.nan, 0)
    before, after = np.log([b for b, _ in pairs]), np.log([a for _, a in pairs])
    mean, low, high = log_mean_interval(after - before)
    return Drift(float(np.exp(before.mean())), float(np.exp(after.mean())), float(np.expm1(mean)),
                 float(np.expm1(low)), float(np.expm1(high)), len(pairs))


def drift_flag(d: Drift, ci_low: float | None, ci_high: float | None) -> bool | None:
    """Whether the baseline's drift outweighs the speedup's own uncertainty (speedup CI [ci_low, ci_high]).

    True when the drift is real, its CI excluding 0 (the recheck's own noise cannot explain it), and large, with
    |ln(1 + drift)| beyond half the speedup CI's width in log space: a baseline that moved by the factor 1 + drift
    moves the speedup by the same factor, out of its interval. False when either condition fails; None when either
    interval is unknown (fewer than two prompts on either side)."""
    if ci_low is None or ci_high is None:
        return None
    values = (d.drift, d.ci_low, d.ci_high, ci_low, ci_high)
    if any(math.isnan(x) for x in values) or ci_low <= 0:
        return None
    if d.ci_low <= 0.0 <= d.ci_high:
        return False
    return abs(math.log1p(d.drift)) > 0.5 * math.log(ci_high / ci_low)


def tpot_ratio(tpot_base: float, tpot_method: float) -> float:
    """Speedup from two summary TPOTs (e.g. published means): TPOT_AR / TPOT_M; NaN unless both are positive."""
    if not (tpot_base > 0 and tpot_method > 0):
        return math.nan
    return tpot_base / tpot_method


def median_speedup(tpot_base: list[float], tpot_method: list[float]) -> float:
    """Speedup as a ratio of medians: median TPOT_AR / median TPOT_M (unpaired; NaN values dropped)."""
    return tpot_ratio(percentile(tpot_base, 50), percentile(tpot_method, 50))


def tau_from_per_position(per_position: list[float], k: int) -> float:
    """Expected tokens per verify step at K from per-position rates p_1..p_n (n >= K); p_i do not depend on K for a
    block drafter, so the rates of a larger K give τ at a smaller one."""
    if k > len(per_position):
        raise ValueError(f"K={k} needs p_1..p_{k}; only {len(per_position)} positions are known")
    return 1.0 + float(sum(per_position[:k]))


def accepted_at(accept_lengths: Sequence[int], k: int) -> list[int]:
    """A request's accepted lengths had its steps drafted K tokens: each step's min(a, K) (the prefix rule: a block
    drafter's first K proposals are the same at any K)."""
    return [min(a, k) for a in accept_lengths]


@dataclass(frozen=True)
class Interval:
    """A point estimate and its 95 % interval (NaN bounds where the units cannot give one)."""

    value: float
    low: float
    high: float
    units: int

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))


def exact(value: float) -> Interval:
    """A figure with no sampling error (a roofline's time): its interval is the point."""
    return Interval(value, value, value, 0)


def mean_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """The mean of independent units and its Student-t interval (NaN bounds at n < 2): on the log scale,
    mean · exp(± t_{n−1} · sd / (√n · mean)) by the delta method, where every unit is positive (a time, a rate: no
    negative bound), else mean ± t_{n−1} · sd / √n."""
    x = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    n = len(x)
    if not n:
        return Interval(math.nan, math.nan, math.nan, 0)
    m = float(x.mean())
    if n < 2:
        return Interval(m, math.nan, math.nan, 1)
    half = float(stdtrit(n - 1, 0.5 + level / 2) * x.std(ddof=1) / math.sqrt(n))
    return _spread(m, half, n, log=bool((x > 0).all()))


def rate_interval(counts: Sequence[float], spans: Sequence[float], level: float = 0.95) -> Interval:
    """Σ counts / Σ spans over independent units (tokens over seconds, tokens over steps), with the delta method's
    Student-t interval over the units on the log scale, so that no bound is negative: R · exp(± t_{n−1} · sd(u) /
    (√n · R)), u_i = (c_i − R·s_i) / mean(s). Units with a non-positive span are dropped; NaN bounds at n < 2."""
    pairs = np.array([(c, s) for c, s in zip(counts, spans, strict=True)
                      if s > 0 and math.isfinite(c) and math.isfinite(s)], dtype=float).reshape(-1, 2)
    n = len(pairs)
    if not n:
        return Interval(math.nan, math.nan, math.nan, 0)
    rate = float(pairs[:, 0].sum() / pairs[:, 1].sum())
    if n < 2:
        return Interval(rate, math.nan, math.nan, 1)
    u = (pairs[:, 0] - rate * pairs[:, 1]) / pairs[:, 1].mean()
    half = float(stdtrit(n - 1, 0.5 + level / 2) * u.std(ddof=1) / math.sqrt(n))
    return _spread(rate, half, n, log=rate > 0)


BOOTSTRAP_UNITS = 16  # the fewest units `ratio_bootstrap_t` resamples


def ratio_bootstrap_t(counts: Sequence[float], spans: Sequence[float], level: float = 0.95, resamples: int = 2000,
                      seed: int = 0) -> Interval:
    """Σ counts / Σ spans over independent units, as `rate_interval`, with a studentized bootstrap interval on the log
    scale: log R − q · se, se the delta method's (as `rate_interval`), q the bootstrap's quantiles of (log R* − log R) /
    se* over `resamples` resamples of the units (seeded: the same data give the same interval). The delta method's
    symmetric interval missed a skewed ratio (τ(4) / τ(15) over 32 prompts) on its low side 7 % of the time for 2.5 %;
    this one 3 % (docs/statistics.md). `rate_interval` below BOOTSTRAP_UNITS units, whose resamples take too few
    distinct values to read a tail from."""
    pairs = np.array([(c, s) for c, s in zip(counts, spans, strict=True)
                      if c > 0 and s > 0 and math.isfinite(c) and math.isfinite(s)], dtype=float).reshape(-1, 2)
    n = len(pairs)
    if n < BOOTSTRAP_UNITS:
        return rate_interval(counts, spans, level)
    a, b = pairs[:, 0], pairs[:, 1]
    rate, se = _log_ratio_se(np.ones((1, n)), a, b)
    if not se[0] > 1e-12:
        return Interval(float(rate[0]), float(rate[0]), float(rate[0]), n)
    r, spread = _log_ratio_se(_resample_weights(n, resamples, seed), a, b)
    keep = spread > 1e-12  # a resample of one unit repeated has no spread
    t = (np.log(r[keep]) - math.log(rate[0])) / spread[keep]
    tail = (1 - level) / 2
    q_low, q_high = np.quantile(t, [1 - tail, tail])
    value = float(rate[0])
    return Interval(value, value * math.exp(-float(q_low) * se[0]), value * math.exp(-float(q_high) * se[0]), n)


@functools.lru_cache(maxsize=64)
def _resample_weights(n: int, resamples: int, seed: int) -> np.ndarray:
    """How often each of n units is drawn in each of `resamples` seeded bootstrap resamples (fixed by its arguments,
    so drawn once)."""
    w = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(float)
    w.flags.writeable = False
    return w


def _log_ratio_se(weights: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `weights` (how often each unit is drawn), R = Σw·a / Σw·b and the delta method's standard error of
    log R, as `rate_interval` forms it: sd(a − R·b) / (√n · mean(a)) over the drawn units."""
    n = a.shape[0]
    sums = weights @ np.stack([a, b, a * a, a * b, b * b], axis=1)
    rate = sums[:, 0] / sums[:, 1]
    ss = np.maximum(sums[:, 2] - 2 * rate * sums[:, 3] + rate ** 2 * sums[:, 4], 0.0)  # Σw(a − R b)², its mean 0
    return rate, np.sqrt(ss / (n - 1)) / (math.sqrt(n) * sums[:, 0] / n)


def serial_inflation(n: int, r: float) -> float:
    """How much wider a mean's Student-t interval over n units in time order must be when neighbouring units may
    correlate as an AR(1) at `r` (a host drifting over minutes): √(v (n − 1) / (1 − v)), v = Σᵢⱼ r^|i−j| / n², the
    ratio of the mean's true variance to the one its sample variance gives on average. At n = 3, r = 0.7: 2.47; 1 at
    r = 0 or n < 2."""
    if n < 2 or r <= 0:
        return 1.0
    lags = np.arange(1, n)
    v = (n + 2 * float(((n - lags) * r ** lags).sum())) / n ** 2  # Var(mean) / σ²
    return math.sqrt(v * (n - 1) / (1 - v))


SERIAL_R_MAX = 0.95  # the most persistence a serial factor allows


def serial_design_effect(means: Sequence[float], alpha: float = 0.2) -> float:
    """How much more the mean of k units taken in time order varies than that of k independent ones, when neighbours
    may share a state that moves slowly (a host drifting over minutes, a slowdown persisting from wave to wave): the
    AR(1) factor 1 + 2 Σₗ (1 − l/k) rˡ over lags l < k, r at the upper end of its one-sided 1 − `alpha` interval
    (`serial_r_upper`: a few units tell r poorly, and a low reading would overstate them) from the units' departures
    from their straight line (`lag1_about_line`): a steady rise, such as the fixed order of the prompts at
    concurrency 1 where each unit is one request, is not persistence but a trend (`slo.wave_trend`'s). 1 with fewer
    than four units or none apart from their line. `means`: each unit's mean (a wave's mean log latency), in time
    order."""
    read = _serial_r(means, alpha)
    if read is None:
        return 1.0
    r, k = read
    lags = np.arange(1, k)
    return 1.0 + 2.0 * float(((1.0 - lags / k) * r ** lags).sum())


def serial_told(means: Sequence[float], alpha: float = 0.2) -> bool:
    """Whether units in time order tell how far their neighbours move together: the upper end of that persistence
    (`serial_r_upper`) below SERIAL_R_MAX, or no departures from their line to read it from. Where it is not told
    (six units or fewer, nearly always), more units, not a count at the same design effect, are what would tell."""
    read = _serial_r(means, alpha)
    return read is None or read[0] < SERIAL_R_MAX


def _serial_r(means: Sequence[float], alpha: float) -> tuple[float, int] | None:
    """The upper end of the units' persistence (`serial_r_upper`) and their count; None where `lag1_about_line`
    reads nothing."""
    y = [v for v in means if math.isfinite(v)]
    r_hat = lag1_about_line(y)
    return None if r_hat is None else (serial_r_upper(r_hat, len(y), alpha), len(y))


def lag1_about_line(values: Sequence[float]) -> float | None:
    """The lag-1 autocorrelation of `values` (in time order) about their least-squares line; None with fewer than
    four values or none apart from their line (but for rounding)."""
    y = np.asarray(values, dtype=float)
    k = len(y)
    if k < 4:
        return None
    x = np.arange(k) - (k - 1) / 2
    d = y - y.mean() - float(x @ y) / float(x @ x) * x
    den = float(d @ d)
    if den <= 1e-12 * float((y - y.mean()) @ (y - y.mean())) or den <= 0:
        return None
    return float(d[1:] @ d[:-1]) / den


def serial_r_upper(r_hat: float, k: int, alpha: float = 0.2) -> float:
    """The upper end of a one-sided 1 − `alpha` interval for the AR(1) r of k units in time order, from r_hat, the
    lag-1 autocorrelation of their departures from their straight line: the largest r within [0, SERIAL_R_MAX] under
    which an estimate at or above r_hat has probability at least `alpha`, the estimate taken as normal with mean
    r (1 − 6/k) − 2/k (the line's removal biases it down by (2 + 6r)/k: tests/decide/test_wave_serial.py checks both
    by simulation) and sd 1/√k. With k ≤ 6 the estimate's mean does not rise with r: no reading tells, and r is
    SERIAL_R_MAX."""
    slope = 1.0 - 6.0 / k
    reach = r_hat + 2.0 / k - float(ndtri(alpha)) / math.sqrt(k)
    if slope <= 0 or reach >= SERIAL_R_MAX * slope:
        return SERIAL_R_MAX
    return max(reach / slope, 0.0)


def _spread(value: float, half: float, n: int, log: bool) -> Interval:
    """value ± half, or with `log` the same half-width on the log scale by the delta method, value · exp(± half /
    value): no bound below 0."""
    if log:
        return Interval(value, value * math.exp(-half / value), value * math.exp(half / value), n)
    return Interval(value, value - half, value + half, n)


def predicted_speedup(tau: float, tpot_base_ms: float, step_ms: float) -> float:
    """τ tokens per speculative step of step_ms against one token per AR step of tpot_base_ms."""
    return tau * tpot_base_ms / step_ms


def step_cost_in_ar_steps(tau: float, tpot_method: float, tpot_base: float) -> float:
    """One draft + verify step, in AR steps: τ · TPOT_M / TPOT_AR (the inverse of the speedup, times τ)."""
    return tau * tpot_method / tpot_base


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (a length difference counts at the shorter length); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class Lossless:
    identical_frac: float
    first_divergence_min: int | None
    divergent: list[tuple[int, int]]  # (pair index, first divergence index)


def lossless(reference: list[list[int]], candidate: list[list[int]]) -> Lossless:
    """Token identity of paired outputs: greedy speculative decoding must reproduce AR exactly."""
    if not reference:
        return Lossless(math.nan, None, [])
    divergent = []
    for i, (r, c) in enumerate(zip(reference, candidate, strict=True)):
        d = first_divergence(r, c)
        if d is not None:
            divergent.append((i, d))
    return Lossless(
        identical_frac=1.0 - len(divergent) / len(reference),
        first_divergence_min=min((d for _, d in divergent), default=None),
        divergent=divergent,
    )


def tpot_floor_ms(weight_bytes: float, bandwidth_bytes_per_s: float) -> float:
    """The fastest a memory-bound AR step can be: every weight read once per token."""
    return 1000.0 * weight_bytes / bandwidth_bytes_per_s


def below_floor(measured_ms: float, floor_ms: float, tolerance: float = 0.0) -> bool:
    """True when a measured time is physically impossible (a timing bug, e.g. dispatch timed without a sync)."""
    return not math.isnan(measured_ms) and measured_ms < floor_ms * (1.0 - tolerance)
