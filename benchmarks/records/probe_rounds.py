"""A capacity search's probes as the search reads them (`capacity.Round`), from the records a run stored: each
request's latencies and each round's wall time and output tokens, by load and round."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence

from benchmarks.decide.capacity import Round, Space, wave_size
from benchmarks.decide.slo import RequestLatency
from benchmarks.records.records import Level, Line, ProbeLine, ProbeRequestLine, RequestLine


def latency_of(r: RequestLine, wave: Hashable | None = None) -> RequestLatency:
    """One request's latencies: TTFT, TPOT (a request whose stream reached the client in one burst has no decode
    timing, and counts with the TPOT its client saw), its longest gap between streamed chunks, and TTFT + decode."""
    tpot = r.tpot_ms if r.tpot_ms is not None else (r.extra or {}).get("client_tpot_ms")
    return RequestLatency(ttft=r.ttft_ms, tpot=math.nan if tpot is None else float(tpot),
                          itl=max(r.itl_ms) if r.itl_ms else math.nan, e2el=r.ttft_ms + 1000.0 * r.decode_s,
                          n_out=r.n_out, wave=wave)


def waves_of(load: float, axis: str, reqs: Sequence[RequestLine]) -> list[int] | None:
    """Each request's wave, by the order the requests were sent: groups of as many as were in flight at once (the
    concurrency; at a request rate, the rate times the mean end-to-end latency, Little's law; one alone at
    concurrency 1). None where a request lacks its start time, or where all started at once (the load generator kept
    no order)."""
    if any(r.start_s is None for r in reqs) or len({r.start_s for r in reqs}) < 2:
        return None
    size = wave_size(load, axis, sum(r.ttft_ms / 1e3 + r.decode_s for r in reqs) / len(reqs))
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i].start_s, i))
    wave = [0] * len(reqs)
    for rank, i in enumerate(order):
        wave[i] = rank // size
    return wave


def load_of(space: Space, level: Level) -> float:
    """The load a probe's level was at, on the search's axis."""
    return float(level.concurrency) if space.axis == "concurrency" else float(level.request_rate or 0.0)


def round_of(space: Space, lines: Iterable[Line]) -> Round:
    """One probe round from its unit's lines (a `probe` record and its `probe_request` records)."""
    lines = list(lines)
    [probe] = [line for line in lines if isinstance(line, ProbeLine)]
    reqs = sorted((line for line in lines if isinstance(line, ProbeRequestLine)), key=lambda r: r.prompt_index)
    load = load_of(space, probe.level)
    waves = waves_of(load, space.axis, reqs) if reqs else None
    tagged = [None] * len(reqs) if waves is None else [(probe.round, w) for w in waves]
    return Round(load, probe.round, tuple(latency_of(r, w) for r, w in zip(reqs, tagged)), probe.duration_s,
                 probe.total_output_tokens)


def rounds_by_load(space: Space, lines: Iterable[Line]) -> dict[float, list[Round]]:
    """The rounds some lines of one cell and workload hold, by load: rounds 0, 1, ... in order, as far as they run
    without a gap (a later round without its predecessors is not read)."""
    units: dict[tuple[float, int], list[Line]] = defaultdict(list)
    for line in lines:
        if isinstance(line, (ProbeLine, ProbeRequestLine)) and line.level is not None:
            units[(load_of(space, line.level), line.round)].append(line)
    out: dict[float, list[Round]] = {}
    for load in sorted({load for load, _ in units}):
        rounds = out.setdefault(load, [])
        while (load, len(rounds)) in units and any(isinstance(x, ProbeLine) for x in units[(load, len(rounds))]):
            rounds.append(round_of(space, units[(load, len(rounds))]))
    return out
