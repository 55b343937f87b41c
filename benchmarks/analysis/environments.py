"""Where and how a run's units were measured: one environment or several (a resumed run), and the cell order."""
from __future__ import annotations

from typing import Any

from benchmarks.core.provenance import content_id, environment_key


def used_provenances(records: list[dict[str, Any]], provenances: dict[str, dict[str, Any]]
                     ) -> dict[str, dict[str, Any]]:
    """The provenance records that the run's current units name."""
    ids = {r["provenance_id"] for r in records if r.get("provenance_id")}
    return {pid: p for pid, p in provenances.items() if pid in ids}


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def provenance_lines(records: list[dict[str, Any]], provenances: dict[str, dict[str, Any]]) -> list[str]:
    """Which environment each unit was measured in; loud when a resumed run mixes several."""
    units: dict[str, set[str]] = {}
    envs: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("provenance_id") in provenances:
            key = environment_key(provenances[r["provenance_id"]]["environment"])
            envs[content_id(key)] = key
            units.setdefault(content_id(key), set()).add(f"{r['label']} on {r['dataset']}")
    if not units:
        return ["No unit names its provenance (a run from before they were recorded): the header shows the latest "
                "invocation's environment, which may not be the one every unit was measured in."]
    if len(units) == 1:
        ((env_id, names),) = units.items()
        e = envs[env_id]
        return [f"All {len(names)} units were measured in one environment: git {e['git_sha']}, "
                f"{e['platform']} · {e['device']}."]
    flat = {env_id: _flatten(e) for env_id, e in envs.items()}
    differing = sorted(k for k in set().union(*flat.values()) if len({str(f.get(k)) for f in flat.values()}) > 1)
    lines = [f"**MIXED PROVENANCE: this run's units were measured in {len(units)} different environments** "
             f"(a resumed run on other code, packages or hardware); they differ in {', '.join(differing)}. "
             f"Compare numbers across them with care."]
    for env_id, names in sorted(units.items(), key=lambda kv: sorted(kv[1])):
        what = " · ".join(f"{k} {flat[env_id].get(k, '–')}" for k in differing)
        lines.append(f"- {what}: {', '.join(sorted(names))}")
    return lines


def cell_order(config: dict[str, Any]) -> str:
    """How the cells of a run took their prompts, and where they ran (the latest invocation's executor)."""
    interleaved = bool(config.get("interleave"))
    if config.get("executor") == "ray":
        return ("interleaved, prompt by prompt, in Ray actors" if interleaved
                else "in Ray actors, several at once (executor ray)")
    return "interleaved, prompt by prompt" if interleaved else "one after another"
