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

from benchmarks.core import metrics

METRICS = ("ttft", "tpot", "itl", "e2el")
METRIC_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}
PERCENTILES = (50, 90, 95, 99)
THRESHOLD_NAME = re.compile(r"p(\d+)_([a-z0-9]+)_ms")
CONFIDENCE = 0.95
MEETS, FAILS, UNCERTAIN = "meets", "fails", "uncertain"


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

    def waves_note(self) -> str:
        """' (waves differ: as N of n)' where the interval counted fewer requests than it read; ' (N wave(s): a shared
        slowdown untold)' where too few waves of several requests leave it unchecked; else ''."""
        if self.design_effect > 1:
            return f" (waves differ: as {self.n / self.design_effect:.0f} of {self.n})"
        if self.waves is not None and self.waves < 3 and self.n > self.waves:
            return f" ({self.waves} wave{'s' if self.waves > 1 else ''}: a shared slowdown untold)"
        return ""

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
    """One threshold on a probe's requests (`metrics.quantile_interval` of its percentile, at `confidence`), counting
    requests of waves that differ beyond chance as fewer independent ones (`metrics.design_effect` of their logs)."""
    kept = [(v, r.wave) for r in requests if not math.isnan(v := r.value(t.metric))]
    values = [v for v, _ in kept]
    waved = [(math.log(v), w) for v, w in kept if w is not None and v > 0]
    q = t.percentile / 100.0
    told = len(waved) == len(kept) and bool(waved)
    effect = metrics.design_effect([x for x, _ in waved], [w for _, w in waved], q) if told else 1.0
    estimate, low, high = metrics.quantile_interval(values, q, confidence, effect)
    verdict = (MEETS if values and high <= t.limit_ms else FAILS if values and low > t.limit_ms else UNCERTAIN)
    return Judged(t, len(values), estimate, low, high, verdict, effect, len({w for _, w in waved}) if told else None)


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
