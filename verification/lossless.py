"""The lossless check: greedy speculative decoding must reproduce the AR baseline token for token, and sampled
speculative decoding must draw from AR's distribution (verification/distribution.py). Pure: verdicts over summary
rows."""
from __future__ import annotations

import math
from typing import Any


def divergent_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Greedy method rows whose outputs are not all identical to the baseline's."""
    return [r for r in rows if r["method"] != "baseline" and r["temperature"] == 0
            and r["identical_frac"] is not None and not math.isnan(r["identical_frac"]) and r["identical_frac"] < 1.0]


def unchecked_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Greedy method rows that could not be checked (no baseline records for the same prompts); serving rows at
    concurrency > 1 carry a measured identity fraction instead (`identical_frac_batched`), not a verdict."""
    return [r for r in rows if r["method"] != "baseline" and r["temperature"] == 0 and r["n_prompts"]
            and r["identical_frac"] is None and (r.get("concurrency") or 1) == 1]


def distribution_failures(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sampled (T > 0) method rows whose distribution check rejected equality with the AR baseline."""
    return [r for r in rows if r.get("dist_verdict") == "FAIL"]


def verdict_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in distribution_failures(rows):
        lines.append(f"DISTRIBUTION VIOLATION: {r['engine']} {r['label']} at T={r['temperature']} on {r['dataset']}: "
                     f"samples differ from AR's (smallest Holm-adjusted p = {r['dist_p_min']:.2g} over "
                     f"{r['dist_n_tests']} tests)")
    for r in divergent_rows(rows):
        lines.append(f"LOSSLESS VIOLATION: {r['engine']} {r['label']} on {r['dataset']}: "
                     f"{r['identical_frac']:.3f} of prompts identical to AR, first divergence at token "
                     f"{r['first_divergence_min']}")
    for r in unchecked_rows(rows):
        lines.append(f"lossless not checked: {r['engine']} {r['label']} on {r['dataset']} has no baseline records "
                     f"for the same prompts")
    return lines
