"""A latency target (SLO) and how one probe's requests are judged against it: thresholds on a percentile of TTFT,
TPOT, ITL or end-to-end latency, each read with its order-statistic interval (`metrics.quantile_interval`): the probe
"meets" a threshold when the interval's upper end is within it, "fails" when its lower end is beyond it, and is
"uncertain" otherwise; a probe meets the SLO when it meets every threshold and fails it when it fails any. A load
read after each of up to R rounds reads each look at `look_confidence(R)`, so that its R looks together call a
failing load "meets" at most as often as one look at CONFIDENCE would. Goodput counts the requests that met every
threshold themselves. Pure: docs/serving.md ("Capacity at a latency target")."""
from __future__ import annotations

import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from scipy.special import stdtr

from benchmarks.core import metrics

METRICS = ("ttft", "tpot", "itl", "e2el")
METRIC_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}
PERCENTILES = (50, 90, 95, 99)
THRESHOLD_NAME = re.compile(r"p(\d+)_([a-z0-9]+)_ms")
CONFIDENCE = 0.95
MEETS, FAILS, UNCERTAIN = "meets", "fails", "uncertain"
MIN_WAVES = 3  # the fewest waves whose shares within a limit can tell a shared slowdown from the requests' own noise
WAVE_WORTH = 8  # the most independent requests one wave counts as: a wave effect that a probe's few waves all
# missed (a stall one wave in seven meets) cannot show in them, so many requests in few waves say less than their count
TREND_ALPHA = 0.05  # the trend test over a probe's waves: two-sided


def look_confidence(looks: int) -> float:
    """The two-sided confidence of each of a load's `looks` readings (one after each round, the rounds pooled): the
    error of one look at CONFIDENCE spent in equal parts over them, so that over every look a load at the threshold
    is called "meets" (or "fails") at most (1 - CONFIDENCE) / 2 of the time, whichever look decides it."""
    return 1.0 - (1.0 - CONFIDENCE) / max(looks, 1)


@dataclass(frozen=True)
class Threshold:
    """The `percentile` of a per-request latency (`metric`, one of METRICS) must be at most `limit_ms`."""

    metric: str
    percentile: int
    limit_ms: float

    @property
    def name(self) -> str:
        """Its matrix key, as vLLM's `bench sweep` names an SLA: `p99_tpot_ms`."""
        return f"p{self.percentile}_{self.metric}_ms"

    def text(self, limit_ms: float | None = None) -> str:
        return f"p{self.percentile} {METRIC_WORDS[self.metric]} ≤ {limit_ms or self.limit_ms:g} ms"


@dataclass(frozen=True)
class Slo:
    """Every threshold a request load must meet at once."""

    thresholds: tuple[Threshold, ...]

    @classmethod
    def of(cls, mapping: Mapping[str, float]) -> Slo:
        """The SLO a matrix's `slo` mapping (checked by `benchmarks.config.slo_keys`) holds, in its order."""
        out = []
        for name, limit in mapping.items():
            m = THRESHOLD_NAME.fullmatch(name)
            if m is None:
                raise ValueError(f"{name!r} is not a threshold name (p<percentile>_<metric>_ms)")
            out.append(Threshold(m.group(2), int(m.group(1)), float(limit)))
        return cls(tuple(out))

    def text(self) -> str:
        return ", ".join(t.text() for t in self.thresholds)

    def with_limit(self, index: int, limit_ms: float) -> Slo:
        """The same SLO with threshold `index` moved to `limit_ms` (the others kept)."""
        return Slo(tuple(Threshold(t.metric, t.percentile, limit_ms) if i == index else t
                         for i, t in enumerate(self.thresholds)))


def slos_of(config: Mapping[str, object]) -> list[Slo]:
    """The SLOs of a matrix given as its fields (a Matrix's `vars`, or a run manifest's `config`); none without."""
    given = config.get("slo")
    return [Slo.of(m) for m in given] if isinstance(given, list) else []


@dataclass(frozen=True)
class RequestLatency:
    """What one request of a probe contributes: its latencies in ms (NaN where it has none: one output token has no
    TPOT, one streamed chunk no ITL) and its output tokens. `itl` is its longest gap between streamed chunks (the
    longest a user waits mid-answer). `wave`: the requests in flight with it (one host's slowdown may fall on all of
    them), None where unknown."""

    ttft: float
    tpot: float
    itl: float
    e2el: float
    n_out: int
    wave: Hashable | None = None

    def value(self, metric: str) -> float:
        return float(getattr(self, metric))


def _ordered(keys: Iterable[Hashable]) -> list[Hashable]:
    """Waves in time order: by their keys ((round, wave) sorts so), in order of appearance where keys do not sort."""
    keys = list(dict.fromkeys(keys))
    try:
        return sorted(keys)  # type: ignore[type-var]
    except TypeError:
        return keys


def _transients(order: Sequence[Hashable], by: Mapping[Hashable, list[float]]) -> set[Hashable]:
    """The waves of each round that run while the server fills or drains, which its other waves do not share: the
    opening wave where it holds several requests (all of them sent at once onto a server that held none, so all of
    them prefilled together; at a request rate, sent onto an idle server), and the closing wave where it holds fewer
    requests than the round's others (the server draining as the last requests finish). A round is the first part
    of a (round, wave) key; keys of another shape are one round."""
    rounds: dict[Hashable, list[Hashable]] = {}
    for w in order:
        rounds.setdefault(w[0] if isinstance(w, tuple) and len(w) == 2 else None, []).append(w)
    out = set()
    for waves in rounds.values():
        if len(by[waves[0]]) > 1:
            out.add(waves[0])
        if len(waves) > 1 and len(by[waves[-1]]) < max(len(by[w]) for w in waves):
            out.add(waves[-1])
    return out


@dataclass(frozen=True)
class Trend:
    """A linear trend in the waves' mean log latency over their time order: its two-sided p-value, its slope per
    wave and the waves it was fitted on."""

    p: float
    slope: float
    waves: int

    @property
    def span(self) -> float:
        """How far the fitted line's slow end lies above its mean, in log latency: what a host as slow as the
        slowest point of its drift over the probe adds."""
        return abs(self.slope) * (self.waves - 1) / 2


def wave_trend(values: Sequence[float], waves: Sequence[Hashable]) -> Trend | None:
    """A linear trend in the waves' mean log latency over their time order (a host drifting over minutes, which a
    load's own rounds cannot tell from its load), fitted on the waves of equal size that each round holds between its
    start-up and its drain (`_transients`: they differ from the others in every probe, and are no drift); None with
    fewer than MIN_WAVES waves left."""
    by: dict[Hashable, list[float]] = {}
    for v, w in zip(values, waves, strict=True):
        if v > 0:
            by.setdefault(w, []).append(math.log(v))
    order = _ordered(by)
    transient = _transients(order, by)
    order = [w for w in order if w not in transient]
    return _trend(order, by) if len(order) >= MIN_WAVES else None


def _trend(order: Sequence[Hashable], by: Mapping[Hashable, list[float]]) -> Trend:
    """The least-squares slope of the waves' mean (of `by`'s logs) over their order and its t-test's two-sided
    p-value."""
    y = [sum(by[w]) / len(by[w]) for w in order]
    mid, mean_y = (len(y) - 1) / 2, sum(y) / len(y)
    x = [i - mid for i in range(len(y))]
    sxx = sum(v * v for v in x)
    slope = sum(a * (b - mean_y) for a, b in zip(x, y)) / sxx
    dof = len(y) - 2
    if dof < 1:
        return Trend(math.nan, slope, len(y))
    se = math.sqrt(sum((b - mean_y - slope * a) ** 2 for a, b in zip(x, y)) / dof / sxx)
    p = 2 * float(stdtr(dof, -abs(slope) / se)) if se > 0 else (0.0 if slope else 1.0)
    return Trend(p, slope, len(y))


@dataclass(frozen=True)
class Judged:
    """One threshold read on a probe's requests: the percentile with its interval over the n requests that have the
    metric, and the verdict. `design_effect` > 1 where the requests' waves may share a slowdown (`wave_effect`): the
    interval then counts n / design_effect independent requests."""

    threshold: Threshold
    n: int
    estimate: float
    low: float
    high: float
    verdict: str
    design_effect: float = 1.0
    waves: int | None = None  # the requests' waves, where known
    trend_p: float | None = None  # a trend over the waves in time order (`wave_trend`), where three or more
    drift_untold: bool = False  # a "meets" that the trend over its waves left unread (`judge_threshold`)
    short_of: tuple[int, int] | None = None  # where only the waves left an undecided count short of an upper end,
    # and told their persistence (`metrics.serial_told`): what one needs, and the requests that would give it at this
    # design effect

    def waves_note(self) -> str:
        """What the waves say: ' (waves: as N of n)' where the interval counted fewer requests than it read; a trend
        over them where it left a "meets" unread (a drifting host, untold from load); ' (N wave(s): too few to tell a
        shared slowdown, not read)' where fewer than MIN_WAVES waves of several requests leave the verdict untold;
        what an upper end needs where the waves left the count short of it; else ''."""
        notes = []
        if self.design_effect > 1:
            notes.append(f"waves: as {self.n / self.design_effect:.0f} of {self.n}" + (
                f", an upper end needs {self.short_of[0]}: about {self.short_of[1]} requests at this design effect"
                if self.short_of else ""))
        if self.drift_untold and self.trend_p is not None:
            notes.append(f"a trend over its waves, p = {self.trend_p:.2g}: a drifting host untold from load, not read")
        if self.waves is not None and self.waves < MIN_WAVES and self.n > self.waves:
            notes.append(f"{self.waves} wave{'s' if self.waves > 1 else ''}: too few to tell a shared slowdown, "
                         f"not read")
        return f" ({'; '.join(notes)})" if notes else ""

    def text(self) -> str:
        def ms(x: float) -> str:
            return "–" if math.isnan(x) else "∞" if math.isinf(x) else f"{x:.3g}"
        return (f"p{self.threshold.percentile} {METRIC_WORDS[self.threshold.metric]} {ms(self.estimate)} ms "
                f"[{ms(self.low)}, {ms(self.high)}]{self.waves_note()} vs ≤ {self.threshold.limit_ms:g}: "
                f"{self.verdict}")


@dataclass(frozen=True)
class Judgment:
    """A probe judged against an SLO: each threshold's reading and the verdict over all of them."""

    judged: tuple[Judged, ...]
    verdict: str
    requests: int

    def text(self) -> str:
        return "; ".join(j.text() for j in self.judged)


def wave_effect(t: Threshold, kept: Sequence[tuple[float, Hashable]], waved: Sequence[tuple[float, Hashable]]
                ) -> float:
    """The design effect of a threshold's requests in waves: the largest of the normal model's on their logs
    (`metrics.design_effect`), the model-free one on each request's being within the limit
    (`metrics.share_design_effect`) and m / WAVE_WORTH (m the waves' mean size), times the serial factor of the
    waves' mean log latency in time order about their line (`metrics.serial_design_effect`: a slowdown that persists
    from wave to wave makes neighbouring waves one observation of the host; a steady trend is `wave_trend`'s)."""
    logs, waves = [x for x, _ in waved], [w for _, w in waved]
    return max(metrics.design_effect(logs, waves, t.percentile / 100.0),
               metrics.share_design_effect([v <= t.limit_ms for v, _ in kept], [w for _, w in kept]),
               len(waves) / len(set(waves)) / WAVE_WORTH) * metrics.serial_design_effect(_wave_means(waved))


def _wave_means(waved: Sequence[tuple[float, Hashable]]) -> list[float]:
    """Each wave's mean (of its requests' log latencies), the waves in time order."""
    by: dict[Hashable, list[float]] = {}
    for x, w in waved:
        by.setdefault(w, []).append(x)
    return [sum(by[w]) / len(by[w]) for w in _ordered(by)]


def judge_threshold(t: Threshold, requests: Sequence[RequestLatency], confidence: float = CONFIDENCE) -> Judged:
    """One threshold on a probe's requests (`metrics.quantile_interval` of its percentile, at `confidence`). Where
    the requests' waves are known, a wave's requests may share a slowdown, and neighbouring waves a host's state:
    they count as fewer independent ones, by `wave_effect` (the normal model's design effect on their logs, the
    model-free one on each request's being within the limit, what the interval counts, at least m / WAVE_WORTH, and
    the waves' serial factor in time order). With fewer than MIN_WAVES waves of several requests the verdict stays
    uncertain.

    A trend over the waves in time order (`wave_trend` below TREND_ALPHA: a host drifting, which a probe cannot tell
    from its load) leaves a "meets" uncertain where it could have made it: where the interval's upper end, moved to
    the slow end of the fitted trend (`Trend.span`), is beyond the limit. Only "meets" is checked: a drift that makes
    a load read "fails" can only put the capacity below the truth, and a "meets" whose upper end clears the limit
    with the whole drift added holds however the host moved within the probe."""
    kept = [(v, r.wave) for r in requests if not math.isnan(v := r.value(t.metric))]
    values = [v for v, _ in kept]
    waved = [(math.log(v), w) for v, w in kept if w is not None and v > 0]
    q = t.percentile / 100.0
    told = len(waved) == len(kept) and bool(waved)
    effect = wave_effect(t, kept, waved) if told else 1.0
    estimate, low, high = metrics.quantile_interval(values, q, confidence, effect)
    verdict = (MEETS if values and high <= t.limit_ms else FAILS if values and low > t.limit_ms else UNCERTAIN)
    need = metrics.min_values_for_bound(q, confidence)
    short = ((need, math.ceil(need * effect)) if verdict == UNCERTAIN and effect > 1
             and len(values) >= need > len(values) / effect and metrics.serial_told(_wave_means(waved)) else None)
    waves = len({w for _, w in waved}) if told else None
    if waves is not None and waves < MIN_WAVES and len(values) > waves:
        verdict = UNCERTAIN
    trend = wave_trend(values, [w for _, w in kept]) if told else None
    untold = (verdict == MEETS and trend is not None and trend.p < TREND_ALPHA
              and high * math.exp(trend.span) > t.limit_ms)
    return Judged(t, len(values), estimate, low, high, UNCERTAIN if untold else verdict, effect, waves,
                  trend.p if trend is not None else None, untold, short)


def judge(slo: Slo, requests: Sequence[RequestLatency], confidence: float = CONFIDENCE) -> Judgment:
    """A probe against an SLO: it fails when any threshold fails, meets when every threshold meets, and is uncertain
    otherwise (an interval that straddles a threshold, or too few requests for a bound)."""
    judged = tuple(judge_threshold(t, requests, confidence) for t in slo.thresholds)
    verdicts = {j.verdict for j in judged}
    verdict = FAILS if FAILS in verdicts else MEETS if verdicts == {MEETS} else UNCERTAIN
    return Judgment(judged, verdict, len(requests))


def is_good(slo: Slo, r: RequestLatency) -> bool:
    """Whether one request met every threshold itself (a metric it has no value of does not count against it)."""
    return all(math.isnan(v := r.value(t.metric)) or v <= t.limit_ms for t in slo.thresholds)


@dataclass(frozen=True)
class Goodput:
    """Requests/s and output tokens/s of the requests that met every threshold, over the probe's wall time."""

    requests_per_s: float
    tok_per_s: float
    good: int
    requests: int


def goodput(slo: Slo, requests: Iterable[RequestLatency], duration_s: float) -> Goodput:
    reqs = list(requests)
    good = [r for r in reqs if is_good(slo, r)]
    return Goodput(metrics.requests_per_s(len(good), duration_s),
                   metrics.aggregate_tok_per_s(sum(r.n_out for r in good), duration_s), len(good), len(reqs))


def fewest_requests(slo: Slo, looks: int = 1) -> tuple[Threshold, int]:
    """The threshold that needs the most requests at one load before it can be judged "meets" when a load is read
    up to `looks` times, and that number (`metrics.min_values_for_bound` of its percentile)."""
    need = [(t, metrics.min_values_for_bound(t.percentile / 100.0, look_confidence(looks))) for t in slo.thresholds]
    return max(need, key=lambda tn: tn[1])
