"""The capacity search, pure: which load to probe next given the probes so far, where it stops, and the capacity
the probes show (the largest load of the range shown to meet every threshold of an SLO with every load read below it,
and the range it may lie in). Each load's looks and the loads together keep the error of one verdict: docs/serving.md.

A search runs over a grid of loads (`Space`: concurrency levels, or request rates) and assumes that latency grows
with load. It probes the two ends, then bisects between the largest load shown to meet and the smallest shown to fail
above it; a load left uncertain gets another round of requests (pooled with the rounds before it) until it is decided
or its requests are spent, and the search then narrows each side of it. `sweep` probes every load instead. Given the
probes already stored, `replay` walks the same path again, so a search that resumes measures nothing twice; the
capacity is read the same way from any set of probes (`capacity_from`: how it moves as a threshold changes). The
loads the search visited are checked against its assumption (`non_monotone`). docs/serving.md says what a probe
costs and how this compares with `vllm bench sweep` and AIPerf."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.decide.slo import FAILS, MEETS, UNCERTAIN, Judgment, RequestLatency, Slo, judge, look_confidence

AXES = ("concurrency", "request_rate")
BISECT, SWEEP = "bisect", "sweep"
MODES = (BISECT, SWEEP)
MAX_LOADS = 1024  # grid points of one range


def grid_of(low: float, high: float, step: float, axis: str) -> tuple[float, ...]:
    """The loads low, low + step, ..., high (ints on the concurrency axis); ValueError when high is not on the grid."""
    n = (high - low) / step
    if abs(n - round(n)) > 1e-6:
        raise ValueError(f"{high:g} is not a whole number of steps of {step:g} from {low:g}")
    loads = [low + i * step for i in range(int(round(n)) + 1)]
    return tuple(int(round(x)) if axis == "concurrency" else round(x, 9) for x in loads)


@dataclass(frozen=True)
class Space:
    """What one capacity search ranges over: the load axis and its grid, the requests of one round (a probe's first
    measurement at a load, and each further one), the most rounds one load may get, and the mode."""

    axis: str
    grid: tuple[float, ...]
    requests: int
    rounds: int
    mode: str = BISECT

    def text(self, load: float) -> str:
        """A load as the report names it: `C = 8`, `2.5 req/s`."""
        return f"C = {load:g}" if self.axis == "concurrency" else f"{load:g} req/s"

    def round_prompts(self, r: int) -> slice:
        """Which of the measured prompts round `r` sends (each load sends the same ones in the same round)."""
        return slice(r * self.requests, (r + 1) * self.requests)


def space_of(config: Mapping[str, Any]) -> Space | None:
    """The search space of a matrix given as its fields (a Matrix's `vars`, or a run manifest's `config`); None
    without an SLO. The rounds spread the measured prompts (`num_prompts`) in chunks of `slo_requests`."""
    if not config.get("slo"):
        return None
    low, high = config["slo_range"]
    requests = int(config["slo_requests"])
    return Space(config["slo_load"], grid_of(low, high, config["slo_step"], config["slo_load"]), requests,
                 rounds_of(int(config["num_prompts"]), requests), config.get("slo_search") or BISECT)


def wave_size(load: float, axis: str, latency_s: float = 0.0) -> int:
    """The requests of one wave at a load, the requests in flight at once (which share the server's slowdowns): the
    concurrency, or at a request rate the rate times a request's end-to-end latency in seconds (Little's law); at
    least one."""
    return max(1, round(load if axis == "concurrency" else load * latency_s))


def rounds_of(num_prompts: int, requests: int) -> int:
    """The most rounds one load gets, each a look at it: the measured prompts in rounds of `requests`."""
    return math.ceil(num_prompts / requests)


@dataclass(frozen=True)
class Round:
    """One round of requests measured at one load: the requests' latencies, its wall time and output tokens."""

    load: float
    round: int
    requests: tuple[RequestLatency, ...]
    duration_s: float
    output_tokens: int


@dataclass(frozen=True)
class Reading:
    """A load as the search reads it: the rounds pooled (the fewest, from the first, that decide it, else all that
    were measured), their judgment, and the round it still asks for (None when decided or its requests are spent)."""

    load: float
    rounds: tuple[Round, ...]
    judgment: Judgment
    more: int | None

    @property
    def verdict(self) -> str:
        return self.judgment.verdict

    @property
    def requests(self) -> list[RequestLatency]:
        return [r for rnd in self.rounds for r in rnd.requests]

    @property
    def duration_s(self) -> float:
        return sum(r.duration_s for r in self.rounds)

    @property
    def tok_per_s(self) -> float:
        """Output tokens of the pooled rounds per second of their wall time."""
        d = self.duration_s
        return sum(r.output_tokens for r in self.rounds) / d if d > 0 else math.nan


def read_load(space: Space, slo: Slo, rounds: Sequence[Round]) -> Reading:
    """Rounds 0, 1, ... of one load (at least one) read against an SLO: the first prefix that decides it, else all of
    them, asking for the next round while any is left. The first decision stands however many rounds follow, so a
    reading never changes once made. Each look reads at `look_confidence` of the space's rounds: its looks together
    keep the error of one."""
    confidence = look_confidence(space.rounds)
    for used in range(1, len(rounds) + 1):
        j = judge(slo, [r for rnd in rounds[:used] for r in rnd.requests], confidence)
        if j.verdict != UNCERTAIN:
            return Reading(rounds[0].load, tuple(rounds[:used]), j, None)
    return Reading(rounds[0].load, tuple(rounds), j, len(rounds) if len(rounds) < space.rounds else None)


@dataclass(frozen=True)
class Step:
    """A probe the search asks for: a round at a load, and why."""

    load: float
    round: int
    why: str


@dataclass(frozen=True)
class Capacity:
    """What probes show: `low`, the largest load shown to meet with every load read below it (None: none was), and
    `high`, the largest load the capacity may be (the one below the smallest load shown to fail above `low`; None:
    the lowest load fails); `open_above` when no load above `low` was shown to fail (the capacity may exceed the
    range), and the loads left uncertain between them."""

    low: float | None
    high: float | None
    open_above: bool
    uncertain: tuple[float, ...]

    @property
    def exact(self) -> bool:
        return self.low is not None and self.low == self.high and not self.open_above

    @property
    def bounds(self) -> tuple[float, float]:
        """The range as numbers, for comparing capacities: [0, 0] below the range, an upper end of inf when open."""
        return (self.low or 0.0, math.inf if self.open_above else self.high or 0.0)

    def text(self, space: Space) -> str:
        """`8`, `6–9`, `≥ 16 (the top of the range)`, `< 1 (below the range)`, `≤ 4` (nothing shown to meet)."""
        def at(x: float) -> str:
            return f"{x:g}"
        if self.high is None:
            return f"< {at(space.grid[0])} (below the range)"
        if self.low is None:
            return "unknown (no load shown to meet or to fail)" if self.open_above else f"≤ {at(self.high)}"
        if self.open_above:
            return f"≥ {at(self.low)}" + (" (the top of the range)" if self.low == space.grid[-1] else "")
        return at(self.low) if self.low == self.high else f"{at(self.low)}–{at(self.high)}"


def capacity_of(space: Space, readings: Mapping[float, Reading]) -> Capacity:
    """The capacity some readings show: the largest load shown to meet with every load read below it shown to meet
    too, and the load below the smallest one shown to fail above it.

    Read from the bottom up and stopped at the first load not shown to meet, the loads form a fixed sequence of tests:
    a capacity above the truth needs the first load that truly fails to be called "meets", so the claim keeps the
    error of one verdict however many loads were read (a sweep reads them all)."""
    grid = space.grid
    at = {load: i for i, load in enumerate(grid)}
    verdict = {at[load]: r.verdict for load, r in readings.items()}
    first_not = min((i for i, v in verdict.items() if v != MEETS), default=len(grid))
    low = max((i for i, v in verdict.items() if v == MEETS and i < first_not), default=-1)
    high = min((i for i, v in verdict.items() if v == FAILS and i > low), default=len(grid))
    uncertain = tuple(grid[i] for i, v in sorted(verdict.items()) if v == UNCERTAIN and low < i < high)
    return Capacity(grid[low] if low >= 0 else None, grid[high - 1] if high > 0 else None, high == len(grid),
                    uncertain)


def next_step(space: Space, readings: Mapping[float, Reading]) -> Step | str:
    """The probe to measure next given the readings so far, or why the search stops.

    An uncertain load with requests left gets its next round first. `sweep` then probes every load in order.
    `bisect` probes the low end (stopping when it fails: the capacity is below the range), the high end (stopping
    when it meets: the capacity is at least the top), then the middle of the gap above the largest load shown to
    meet, and of the gap below the smallest load shown to fail above it; it stops when both gaps are closed."""
    for r in readings.values():
        if r.more is not None:
            return Step(r.load, r.more, f"uncertain after {len(r.requests)} requests: {space.requests} more")
    grid, n = space.grid, len(space.grid)
    at = {load: i for i, load in enumerate(grid)}
    verdict = {at[load]: r.verdict for load, r in readings.items()}
    if space.mode == SWEEP:
        todo = [i for i in range(n) if i not in verdict]
        return Step(grid[todo[0]], 0, "sweep: every load of the range") if todo else "every load of the range probed"
    if 0 not in verdict:
        return Step(grid[0], 0, "the low end of the range")
    if verdict[0] == FAILS:
        return f"the low end ({space.text(grid[0])}) fails: the capacity is below the range"
    if n - 1 not in verdict:
        return Step(grid[n - 1], 0, "the high end of the range")
    if verdict[n - 1] == MEETS:
        return f"the high end ({space.text(grid[-1])}) meets: the capacity is at least the top of the range"
    low = max((i for i, v in verdict.items() if v == MEETS), default=-1)
    high = min((i for i, v in verdict.items() if v == FAILS and i > low), default=n)
    probed = sorted(verdict)
    if low >= 0:
        above = min(i for i in probed if i > low)
        if above - low > 1:
            return Step(grid[(low + above) // 2], 0, f"bisect: {space.text(grid[low])} meets, "
                                                     f"{space.text(grid[above])} {verdict[above]}")
    if high < n:
        below = max(i for i in probed if i < high)
        if high - below > 1:
            return Step(grid[(below + high) // 2], 0, f"bisect: {space.text(grid[below])} {verdict[below]}, "
                                                      f"{space.text(grid[high])} fails")
    left = [space.text(grid[i]) for i in probed if verdict[i] == UNCERTAIN and low < i < high]
    return ((f"{space.text(grid[low])} meets" if low >= 0 else "no load shown to meet")
            + (f" and {space.text(grid[high])} fails" if high < n else ", none shown to fail above it")
            + (f"; {', '.join(left)} uncertain with every request spent" if left else ""))


def non_monotone(space: Space, readings: Mapping[float, Reading]) -> tuple[str, ...]:
    """Where the visited loads contradict the search's assumption that latency grows with load: a load that meets
    above one that fails, or a percentile whose interval at a higher load lies wholly below its interval at a lower
    one (each higher load named once, against the lowest load it contradicts)."""
    ordered = [readings[load] for load in sorted(readings)]
    out = []
    for j, hi in enumerate(ordered):
        lower = ordered[:j]
        failing = [lo for lo in lower if lo.verdict == FAILS]
        if hi.verdict == MEETS and failing:
            out.append(f"{space.text(hi.load)} meets although {space.text(failing[0].load)} fails")
            continue
        for k, h in enumerate(hi.judgment.judged):
            below = [(lo, lo.judgment.judged[k]) for lo in lower if h.high < lo.judgment.judged[k].low]
            if below:
                lo, was = below[0]
                out.append(f"{h.threshold.name} at {space.text(hi.load)} [{h.low:.3g}, {h.high:.3g}] ms lies below "
                           f"its value at {space.text(lo.load)} [{was.low:.3g}, {was.high:.3g}] ms")
                break
    return tuple(out)


@dataclass(frozen=True)
class Probe:
    """One step of a search's path: the round it measured and the load's reading with it."""

    step: Step
    reading: Reading


@dataclass(frozen=True)
class Path:
    """A search walked over stored probes: the probes it took in order, the next one to measure (None when it has
    stopped, and why), the capacity its readings show, and where they contradict its assumption."""

    probes: tuple[Probe, ...]
    pending: Step | None
    stopped: str | None
    capacity: Capacity
    non_monotone: tuple[str, ...]
    readings: Mapping[float, Reading]


def replay(space: Space, slo: Slo, stored: Mapping[float, Sequence[Round]]) -> Path:
    """The search's path over the rounds already measured (by load, rounds 0, 1, ... in order): each step taken as
    `next_step` asks, reading only the rounds the path has asked for, until it stops or asks for a round not stored
    (`pending`, the one to measure next). The same stored rounds always give the same path."""
    taken: dict[float, list[Round]] = {}
    readings: dict[float, Reading] = {}
    probes: list[Probe] = []
    while True:
        step = next_step(space, readings)
        if isinstance(step, Step) and step.round < len(stored.get(step.load, ())):
            taken.setdefault(step.load, []).append(stored[step.load][step.round])
            readings[step.load] = read_load(space, slo, taken[step.load])
            probes.append(Probe(step, readings[step.load]))
            continue
        pending, stopped = (step, None) if isinstance(step, Step) else (None, step)
        return Path(tuple(probes), pending, stopped, capacity_of(space, readings), non_monotone(space, readings),
                    readings)


def capacity_from(space: Space, slo: Slo, stored: Mapping[float, Sequence[Round]]) -> Capacity:
    """The capacity every stored probe shows under an SLO, whichever search measured them (each load read as
    `read_load` reads it, on its stored rounds)."""
    return capacity_of(space, {load: read_load(space, slo, rounds) for load, rounds in stored.items()
                               if rounds and load in space.grid})
