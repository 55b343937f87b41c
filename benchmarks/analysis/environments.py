"""Where and how a run's units were measured, as report lines: one environment or several (a resumed run), and the
cell order."""
from __future__ import annotations

from collections.abc import Mapping

from benchmarks.config.matrix_schema import Matrix
from benchmarks.hardware.provenance import EnvironmentKey

UNKNOWN = "unknown"  # the id the units whose provenance file is missing are listed under (`Summary.environments`)
NOT_KNOWN: EnvironmentKey = {"git_sha": None, "code_sha256": None, "packages": None, "platform": None, "device": None,
                             "cores": None, "env": {}}


def _flatten(d: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def provenance_lines(environments: Mapping[str, tuple[EnvironmentKey, set[str]]]) -> list[str]:
    """Which environment each unit was measured in (`Summary.environments`); loud when a resumed run mixes several,
    and naming the units whose provenance file is missing (their environment is not known)."""
    envs = {env_id: key for env_id, (key, _) in environments.items() if env_id != UNKNOWN}
    units = {env_id: names for env_id, (_, names) in environments.items() if env_id != UNKNOWN}
    lost = sorted(environments[UNKNOWN][1]) if UNKNOWN in environments else []
    if lost:
        shown = ", ".join(lost[:5]) + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
        unknown = [f"**{len(lost)} unit{'s have' if len(lost) > 1 else ' has'} no provenance file; "
                   f"{'their' if len(lost) > 1 else 'its'} environment is not known**: {shown}."]
    else:
        unknown = []
    if not units:
        return unknown or ["No unit names its provenance (a run from before they were recorded): the header shows "
                           "the latest invocation's environment, which may not be the one every unit was measured in."]
    if len(units) == 1:
        ((env_id, names),) = units.items()
        e = envs[env_id]
        code = f" (code {e['code_sha256']})" if e.get("code_sha256") else ""
        which = (f"The other {len(names)} unit{'s were' if len(names) > 1 else ' was'}" if lost
                 else f"All {len(names)} units were")
        return [f"{which} measured in one environment: git {e['git_sha']}{code}, {e['platform']} · {e['device']}.",
                *unknown]
    flat = {env_id: _flatten(e) for env_id, e in envs.items()}
    differing = sorted(k for k in set().union(*flat.values()) if len({str(f.get(k)) for f in flat.values()}) > 1)
    lines = [f"**MIXED PROVENANCE: this run's units were measured in {len(units)} different environments** "
             f"(a resumed run on other code, packages or hardware); they differ in {', '.join(differing)}. "
             f"Compare numbers across them with care."]
    for env_id, names in sorted(units.items(), key=lambda kv: sorted(kv[1])):
        what = " · ".join(f"{k} {flat[env_id].get(k, '–')}" for k in differing)
        lines.append(f"- {what}: {', '.join(sorted(names))}")
    return lines + unknown


def cell_order(config: Matrix) -> str:
    """How the cells of a run took their prompts, and where they ran (the latest invocation's executor)."""
    interleaved = config.interleave
    if config.executor == "ray":
        return ("interleaved, prompt by prompt, in Ray actors" if interleaved
                else "in Ray actors, several at once (executor ray)")
    return "interleaved, prompt by prompt" if interleaved else "one after another"
