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
WAVE_R = 0.0  # the serial correlation allowed between a probe's waves in time order (a host drifting over minutes)
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


def wave_trend(values: Sequence[float], waves: Sequence[Hashable]) -> float | None:
    """The two-sided p-value of a linear trend in the waves' mean log latency over their time order (a host drifting
    over minutes, which a load's own rounds cannot tell from its load); None with fewer than MIN_WAVES waves."""
    by: dict[Hashable, list[float]] = {}
    for v, w in zip(values, waves, strict=True):
        if v > 0:
            by.setdefault(w, []).append(math.log(v))
    order = _ordered(by)
    return _trend_p(order, by) if len(order) >= MIN_WAVES else None


def _trend_p(order: Sequence[Hashable], by: Mapping[Hashable, list[float]]) -> float:
    """The t-test's two-sided p-value of the slope of the waves' mean (of `by`'s logs) over their order."""
    y = [sum(by[w]) / len(by[w]) for w in order]
    mid, mean_y = (len(y) - 1) / 2, sum(y) / len(y)
    x = [i - mid for i in range(len(y))]
    sxx = sum(v * v for v in x)
    slope = sum(a * (b - mean_y) for a, b in zip(x, y)) / sxx
    dof = len(y) - 2
    if dof < 1:
        return math.nan
    se = math.sqrt(sum((b - mean_y - slope * a) ** 2 for a, b in zip(x, y)) / dof / sxx)
    return 2 * float(stdtr(dof, -abs(slope) / se)) if se > 0 else (0.0 if slope else 1.0)


@dataclass(frozen=True)
class Judged:
    """One threshold read on a probe's requests: the percentile with its interval over the n requests that have the
    metric, and the verdict. `design_effect` > 1 where the requests' waves differ beyond chance: the interval then
    counts n / design_effect independent requests (`metrics.design_effect`)."""

    threshold: Threshold
    n: int
    estimate: float
    low: float
    high: float
    verdict: str
    design_effect: float = 1.0
    waves: int | None = None  # the requests' waves, where known
    trend_p: float | None = None  # a trend over the waves in time order (`wave_trend`), where three or more

    def waves_note(self) -> str:
        """What the waves say: ' (waves: as N of n)' where the interval counted fewer requests than it read; a trend
        over them where one shows (a drifting host, untold from load: not read); ' (N wave(s): too few to tell a
        shared slowdown, not read)' where fewer than MIN_WAVES waves of several requests leave the verdict untold;
        else ''."""
        notes = []
        if self.design_effect > 1:
            notes.append(f"waves: as {self.n / self.design_effect:.0f} of {self.n}")
        if self.trend_p is not None and self.trend_p < TREND_ALPHA:
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


def judge_threshold(t: Threshold, requests: Sequence[RequestLatency], confidence: float = CONFIDENCE) -> Judged:
    """One threshold on a probe's requests (`metrics.quantile_interval` of its percentile, at `confidence`). Where
    the requests' waves are known, a wave's requests may share a slowdown: they count as fewer independent ones, by
    the larger of two design effects, the normal model's on their logs (`metrics.design_effect`) and the model-free
    one on each request's being within the limit, what the interval counts (`metrics.share_design_effect`: a stall
    or a wider spread that the normal model misreads). With fewer than MIN_WAVES waves of several requests the
    verdict stays uncertain, and so it does where the waves trend over time (`wave_trend` below TREND_ALPHA: a host
    drifting, which a probe cannot tell from its load)."""
    kept = [(v, r.wave) for r in requests if not math.isnan(v := r.value(t.metric))]
    values = [v for v, _ in kept]
    waved = [(math.log(v), w) for v, w in kept if w is not None and v > 0]
    q = t.percentile / 100.0
    told = len(waved) == len(kept) and bool(waved)
    effect = max(metrics.design_effect([x for x, _ in waved], [w for _, w in waved], q),
                 metrics.share_design_effect([v <= t.limit_ms for v, _ in kept], [w for _, w in kept])) if told else 1.0
    estimate, low, high = metrics.quantile_interval(values, q, confidence, effect)
    verdict = (MEETS if values and high <= t.limit_ms else FAILS if values and low > t.limit_ms else UNCERTAIN)
    waves = len({w for _, w in waved}) if told else None
    if waves is not None and waves < MIN_WAVES and len(values) > waves:
        verdict = UNCERTAIN
    trend = wave_trend(values, [w for _, w in kept]) if told else None
    if trend is not None and trend < TREND_ALPHA:
        verdict = UNCERTAIN
    return Judged(t, len(values), estimate, low, high, verdict, effect, waves, trend)


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
