"""speculation_profile.json, and report.md's lines for the profile checks that fail, rendered from the profiles
(analysis/speculation_profile.py)."""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from benchmarks.analysis.speculation_profile import AGREE, PREFIX, TAU_SUM, TOLERANCE, Profile, Source
from benchmarks.records.summary_row import label_at

CHECKS = {TAU_SUM: "τ = 1 + Σ p_i", PREFIX: "p_i non-increasing", AGREE: "agreement"}
SOURCES = {"counters": "engine counters", "requests": "accept lengths", "both": "engine counters vs accept lengths"}


def _number(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else x


def _source(s: Source) -> dict[str, Any]:
    return {"steps": s.steps, "accepted": s.accepted, "tau_per_step": _number(s.tau_per_step),
            "tau_per_request": _number(s.tau_per_request),
            "requests": None if s.per_request is None else len(s.per_request),
            "marginal": [_number(p) for p in s.marginal], "conditional": [_number(c) for c in s.conditional],
            "drafted": s.drafted,
            "per_request": None if s.per_request is None else [asdict(r) for r in s.per_request],
            "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in s.checks}}


def _profile(p: Profile) -> dict[str, Any]:
    cell_id, workload, level = p.key
    c = p.cell
    return {"cell_id": cell_id, "engine": c.engine, "method": c.method, "label": c.label, "k": c.k,
            "dataset": workload.split("@", 1)[0], "workload": workload, "temperature": c.temperature,
            "concurrency": level, "batch_size": c.batch_size if level is None else None,
            "sources": {s.name: _source(s) for s in (p.counters, p.requests) if s},
            "agreement": None if p.agreement is None else {"ok": p.agreement.ok, "detail": p.agreement.detail}}


def profile_json(profiles: list[Profile]) -> str:
    """speculation_profile.json: the tolerance of its checks and one profile per speculative row."""
    body = {"tolerance": TOLERANCE, "profiles": [_profile(p) for p in profiles]}
    return json.dumps(body, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _row(p: Profile) -> str:
    """The row a profile is of, as report.md's tables name it: "jax dflash-k3 @C=4 on humaneval"."""
    shown = label_at(p.cell.label, p.key[2], p.cell.batch_size)
    return f"{p.cell.engine} {shown} on {p.key[1]}"


def failed_check_lines(profiles: list[Profile]) -> list[str]:
    """report.md's paragraph naming each profile check that fails, by row and source (none when all hold)."""
    lines = [f"- {_row(p)}, {SOURCES[source]}: {CHECKS[c.name]} fails ({c.detail})"
             for p in profiles for source, c in p.failures()]
    if not lines:
        return []
    return [f"Speculation profile checks that fail (speculation_profile.json, tolerance {TOLERANCE}):\n"
            + "\n".join(lines)]
