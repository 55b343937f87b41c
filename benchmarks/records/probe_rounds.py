"""A capacity search's probes as the search reads them (`capacity.Round`), from the records a run stored: each
request's latencies and each round's wall time and output tokens, by load and round."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from benchmarks.decide.capacity import Round, Space
from benchmarks.decide.slo import RequestLatency
from benchmarks.records.records import Level, Line, ProbeLine, ProbeRequestLine, RequestLine


def latency_of(r: RequestLine) -> RequestLatency:
    """One request's latencies: TTFT, TPOT (a request whose stream reached the client in one burst has no decode
    timing, and counts with the TPOT its client saw), its longest gap between streamed chunks, and TTFT + decode."""
    tpot = r.tpot_ms if r.tpot_ms is not None else (r.extra or {}).get("client_tpot_ms")
    return RequestLatency(ttft=r.ttft_ms, tpot=math.nan if tpot is None else float(tpot),
                          itl=max(r.itl_ms) if r.itl_ms else math.nan, e2el=r.ttft_ms + 1000.0 * r.decode_s,
                          n_out=r.n_out)


def load_of(space: Space, level: Level) -> float:
    """The load a probe's level was at, on the search's axis."""
    return float(level.concurrency) if space.axis == "concurrency" else float(level.request_rate or 0.0)


def round_of(space: Space, lines: Iterable[Line]) -> Round:
    """One probe round from its unit's lines (a `probe` record and its `probe_request` records)."""
    lines = list(lines)
    [probe] = [line for line in lines if isinstance(line, ProbeLine)]
    reqs = sorted((line for line in lines if isinstance(line, ProbeRequestLine)), key=lambda r: r.prompt_index)
    return Round(load_of(space, probe.level), probe.round, tuple(latency_of(r) for r in reqs), probe.duration_s,
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
