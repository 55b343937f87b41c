"""The "Capacity at a latency target" section of report.md and capacity.json: per workload and SLO, each
configuration's capacity with its range, its throughput and goodput there, its ratio to the best plain-decoding
capacity and the winner (or a tie), then each search's probe log: what it tried, each threshold's percentile with its
interval, the verdict and why. Rendering only: the decisions are analysis/capacities.py's."""
from __future__ import annotations

import json
import math
from typing import Any

from benchmarks.analysis.capacities import CellCapacity, Decision, user_rate
from benchmarks.core.markdown import fmt, table
from benchmarks.decide.capacity import Probe
from benchmarks.decide.slo import goodput

EXPLAIN = """\
Each configuration's capacity is the largest load of the searched range whose probe **meets** every threshold of
the SLO. A threshold is read at its percentile over the probe's requests, with the distribution-free interval of
that percentile (order statistics, binomial ranks; 95 %, or 1 − 5 %/R at each of a load's R looks where R rounds may
be pooled): a probe **meets** it when the interval's upper end is within it, **fails** when its lower end is beyond
it, and is **uncertain** otherwise; it meets the SLO when it meets every threshold and fails it when it fails any. An
uncertain load gets another round of requests (the next measured prompts, pooled with the rounds before) while its
prompts last. The bracketing search assumes that latency grows with load: it probes both ends of the range, then
halves the gap between the largest load shown to meet and the smallest shown to fail above it. The capacity is the
largest load with every load read below it shown to meet; a load it cannot decide leaves it a **range** (the loads
it may be). **× best plain** divides the capacity by the largest plain-decoding capacity of the run on any engine
(the range: what the two ranges allow); configurations whose ranges overlap the leader's are a **tie**, not a win.
**Goodput**: requests/s and output tokens/s of the requests that met every threshold themselves, at the capacity's
probe. The requests in flight together (a wave: as many as the concurrency, sent one after another) share the
server, and waves in time order share the host: a probe's interval counts its requests as fewer independent ones
("waves: as N of n" in the probe log), by how much its waves differ, at most 8 requests a wave, and more where
neighbouring waves may move together (as they may wherever six waves or fewer cannot tell); where that alone leaves
too few for a bound, the log says how many requests would give one. A trend over its waves leaves a "meets" it could
have made uncertain (docs/serving.md)."""


def _ms(x: float) -> str:
    return "–" if math.isnan(x) else "∞" if math.isinf(x) else f"{x:.3g}"


def _ratio(d: Decision, c: CellCapacity) -> str:
    r = d.ratio(c)
    if r is None:
        return "–"
    ends = f"{_ms(r.low)}–{_ms(r.high)}" if not r.low == r.high == r.point else ""
    return _ms(r.point) + (f" [{ends}]" if ends else "")


def _stopped(d: Decision, c: CellCapacity) -> str:
    """Why a search stopped, or the probe it still asks for."""
    pending = c.path.pending
    return c.path.stopped or (f"incomplete: next {d.space.text(pending.load)}" if pending else "")


def _bisect(d: Decision, c: CellCapacity) -> list[str]:
    """Of a sweep: what the bracketing search finds over the same probes, and with how many."""
    if c.bisect is None:
        return []
    return [f"{c.bisect.capacity.text(d.space)} ({len(c.bisect.probes)} probes)"]


def decision_table(d: Decision) -> str:
    unit = "C" if d.space.axis == "concurrency" else "req/s"
    rows = []
    for c in d.cells:
        at, good = c.at_capacity, d.goodput(c)
        rows.append([c.cell.engine, c.cell.label, c.capacity.text(d.space),
                     fmt(at.tok_per_s, 1) if at else "–",
                     fmt(good.requests_per_s) if good else "–", fmt(good.tok_per_s, 1) if good else "–",
                     _ratio(d, c), str(len(c.path.probes)), _stopped(d, c), *_bisect(d, c)])
    sweep = ["bisect over these probes"] if any(c.bisect for c in d.cells) else []
    return table(["engine", "method", f"capacity ({unit})", "out tok/s there", "goodput req/s", "goodput tok/s",
                  "× best plain [range]", "probes", "search stopped", *sweep], rows)


def probe_rows(d: Decision, c: CellCapacity) -> list[list[str]]:
    rows = []
    for i, p in enumerate(c.path.probes, 1):
        r, good = p.reading, goodput(d.slo, p.reading.requests, p.reading.duration_s)
        rows.append([str(i), d.space.text(p.step.load), str(p.step.round), str(len(r.requests)),
                     *(f"{_ms(j.estimate)} [{_ms(j.low)}, {_ms(j.high)}]{j.waves_note()}" for j in r.judgment.judged),
                     r.verdict, fmt(good.requests_per_s), fmt(r.tok_per_s, 1), fmt(user_rate(r, d.slo), 1),
                     p.step.why])
    return rows


def probe_log(d: Decision, c: CellCapacity) -> str:
    heads = [f"p{t.percentile} {t.metric.upper()} ms [95% CI] (≤ {t.limit_ms:g})" for t in d.slo.thresholds]
    notes = [f"- **NOT MONOTONE**: {line}; the bracketing search's assumption fails here, so a load it did not "
             f"visit may meet: sweep the range (`slo_search: sweep`) to see it" for line in c.path.non_monotone]
    return "\n".join([f"{c.name}: {c.capacity.text(d.space)} ({_stopped(d, c)})", "",
                      table(["#", "load", "round", "requests", *heads, "verdict", "goodput req/s", "out tok/s",
                             "tok/s per user", "why"], probe_rows(d, c)), *([""] + notes if notes else [])])


def _first(notes: tuple[str, ...], shown: int = 3) -> str:
    """The first few findings, and how many more the probe log and capacity.json hold."""
    more = len(notes) - shown
    return "; ".join(notes[:shown]) + (f"; {more} more in its probe log" if more > 0 else "")


def capacity_lines(found: list[Decision]) -> list[str]:
    """The decisions for the terminal: per workload and SLO, each configuration's capacity and the decision."""
    return [f"capacity on {d.workload} under {d.slo.text()}: "
            + "; ".join(f"{c.name} {c.capacity.text(d.space)}" for c in d.cells) + f" → {d.verdict()}"
            for d in found]


def capacity_markdown(found: list[Decision]) -> str | None:
    """The section's body; None without a capacity search."""
    if not found:
        return None
    space = found[0].space
    parts = [EXPLAIN, "", f"Search: {space.mode} over {len(space.grid)} loads, {space.text(space.grid[0])} to "
                          f"{space.text(space.grid[-1])}; rounds of {space.requests} requests, at most {space.rounds} "
                          f"per load."]
    for d in found:
        parts += ["", f"### {d.workload} · {d.slo.text()}", "", decision_table(d), "", f"**Decision**: {d.verdict()}."]
        parts += [f"- {c.name}: NOT MONOTONE ({_first(c.path.non_monotone)})" for c in d.cells
                  if c.path.non_monotone]
    parts += ["", "### Probe logs"]
    for d in found:
        for c in d.cells:
            parts += ["", f"**{d.workload} · {d.slo.text()} · {c.name}**", "", probe_log(d, c)]
    return "\n".join(parts)


def _num(x: float | None) -> float | None:
    """A number for JSON: None for a missing or infinite one (the text fields say which)."""
    return None if x is None or not math.isfinite(x) else x


def _probe_json(d: Decision, p: Probe) -> dict[str, Any]:
    r, good = p.reading, goodput(d.slo, p.reading.requests, p.reading.duration_s)
    return {"load": p.step.load, "round": p.step.round, "why": p.step.why, "requests": len(r.requests),
            "rounds_pooled": len(r.rounds), "verdict": r.verdict, "duration_s": r.duration_s,
            "out_tok_per_s": _num(r.tok_per_s), "tok_per_s_per_user": _num(user_rate(r, d.slo)),
            "goodput_requests_per_s": _num(good.requests_per_s), "goodput_tok_per_s": _num(good.tok_per_s),
            "thresholds": [{"name": j.threshold.name, "limit_ms": j.threshold.limit_ms, "n": j.n,
                            "estimate_ms": _num(j.estimate), "ci_low_ms": _num(j.low), "ci_high_ms": _num(j.high),
                            "design_effect": j.design_effect, "waves": j.waves, "wave_trend_p": _num(j.trend_p),
                            "verdict": j.verdict}
                           for j in r.judgment.judged]}


def capacity_json(found: list[Decision]) -> str:
    """capacity.json: the search space and every decision, each configuration with its capacity, ratio, stop reason
    and probes in the order its search took them (an interval end that no rank reaches, or a missing number, is
    null)."""
    out: dict[str, Any] = {"decisions": []}
    if found:
        s = found[0].space
        out["space"] = {"axis": s.axis, "loads": list(s.grid), "requests_per_round": s.requests,
                        "max_rounds": s.rounds, "mode": s.mode}
    for d in found:
        configs = []
        for c in d.cells:
            cap, r, good = c.capacity, d.ratio(c), d.goodput(c)
            configs.append({
                "cell_id": c.cell_id, "engine": c.cell.engine, "method": c.cell.method, "k": c.cell.k,
                "label": c.cell.label,
                "capacity": {"low": cap.low, "high": cap.high, "open_above": cap.open_above,
                             "uncertain": list(cap.uncertain), "text": cap.text(d.space)},
                "vs_best_plain": None if r is None else {"ratio": _num(r.point), "low": _num(r.low),
                                                         "high": _num(r.high)},
                "out_tok_per_s": _num(c.at_capacity.tok_per_s) if c.at_capacity else None,
                "goodput_requests_per_s": _num(good.requests_per_s) if good else None,
                "goodput_tok_per_s": _num(good.tok_per_s) if good else None,
                "stopped": c.path.stopped,
                "pending": None if c.path.pending is None else {"load": c.path.pending.load,
                                                                "round": c.path.pending.round},
                "non_monotone": list(c.path.non_monotone),
                "bisect_over_these_probes": None if c.bisect is None else {
                    "capacity": c.bisect.capacity.text(d.space), "probes": len(c.bisect.probes),
                    "stopped": c.bisect.stopped},
                "probes": [_probe_json(d, p) for p in c.path.probes]})
        out["decisions"].append({
            "workload": d.workload, "slo": {t.name: t.limit_ms for t in d.slo.thresholds}, "slo_text": d.slo.text(),
            "best_plain": d.best_plain.name if d.best_plain else None, "decision": d.verdict(),
            "leaders": [c.name for c in d.leaders], "configurations": configs})
    return json.dumps(out, indent=2, ensure_ascii=False) + "\n"
