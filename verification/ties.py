"""The greedy verdict at a divergence: a numerical tie, or a violation (docs/lossless.md).

In bf16 an AR step and a (K+1)-token verify run different kernels, and where the target's two best tokens are within
rounding of each other its argmax can flip. At each prompt's first divergence the target was asked, in an untimed
teacher-forced pass in the run's dtype (benchmarks/run/tie_pass.py), for its logits there (a record of kind
"tie_check"). The divergence is a tie when the best logit there exceeds neither the baseline's token's nor the
speculative token's by more than the tolerance: TOLERANCE_ULPS ulps of the run's dtype at the largest |logit|
involved. Then both tokens were argmax candidates within rounding, and no third token beats both. Otherwise, or
without a check, it is a violation. Tokens after a tie are not compared. In float32 (and any dtype not in
TOLERANCE_ULPS) the strict rule holds: every divergence is a violation. Pure: verdicts over records.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from benchmarks.core.metrics import first_divergence
from benchmarks.core.numbers import MISSING
from benchmarks.records.records import TieCheckLine

# Significand bits (stored) of each dtype an engine may compute in.
MANTISSA_BITS = {"bfloat16": 7, "float16": 10, "float32": 23}
# Tolerance in ulps of the dtype at the largest |logit| involved; dtypes not listed are strict (exact identity).
# Measured kernel noise (JAX, tiny target, bf16): the gap between two top-5 tokens moves by at most 1.7 ulps between
# AR decode, (K+1)-token verify and teacher-forced prefill (99.9 % within 0.8 ulps); docs/lossless.md.
TOLERANCE_ULPS = {"bfloat16": 4.0, "float16": 4.0}


def dtype_name(dtype: Any) -> str:
    """A dtype as the engines name it ("torch.bfloat16", "bfloat16", jnp.bfloat16) → "bfloat16"."""
    return str(getattr(dtype, "name", dtype)).removeprefix("torch.")


def ulp(x: float, dtype: str) -> float:
    """The spacing of `dtype`'s values at |x| (normal range; the smallest normal's spacing below it)."""
    smallest = -14 if dtype == "float16" else -126
    exponent = max(math.frexp(abs(x))[1] - 1, smallest) if x else smallest
    return 2.0 ** (exponent - MANTISSA_BITS[dtype])


def tolerance(dtype: str, magnitude: float) -> float | None:
    """The largest logit margin that counts as a tie at `magnitude` (|logit|); None where ties are not allowed."""
    ulps = TOLERANCE_ULPS.get(dtype_name(dtype))
    return None if ulps is None else ulps * ulp(magnitude, dtype_name(dtype))


@dataclass(frozen=True)
class Verdict:
    """One prompt's first divergence: tie or not, and why (margin and tolerance in logits, margin in ulps)."""

    tie: bool
    margin: float | None
    tolerance: float | None
    margin_ulps: float | None
    reason: str


def classify(check: TieCheckLine | None) -> Verdict:
    """The verdict at one divergence from its tie-check record (None: the target was not asked, a violation)."""
    if check is None:
        return Verdict(False, None, None, None, "no tie check")
    return judge_tie((check.baseline_token, check.spec_token), check.dtype, check.token_logits, check.top_logits)


def judge_tie(tokens: tuple[int | None, int | None], dtype: str, token_logits: list[float | None],
              top_logits: list[float]) -> Verdict:
    """The verdict at one divergence between the (baseline, speculative) tokens, from the target's logits there: of
    those two tokens, and of its best ones."""
    if None in tokens:
        return Verdict(False, None, None, None, "one output ended earlier")
    base, spec = token_logits
    if base is None or spec is None:
        return Verdict(False, None, None, None, "a token outside the scorer's top log-probabilities")
    dtype = dtype_name(dtype)
    best = max([base, spec, *top_logits])
    margin = best - min(base, spec)
    magnitude = max(abs(best), abs(base), abs(spec))
    tol = tolerance(dtype, magnitude)
    ulps = margin / ulp(magnitude, dtype) if dtype in MANTISSA_BITS else None
    if tol is None:
        return Verdict(False, margin, None, ulps, f"{dtype}: exact identity required")
    if margin <= tol:
        return Verdict(True, margin, tol, ulps, "tie")
    return Verdict(False, margin, tol, ulps, f"margin {margin:.4g} > tolerance {tol:.4g}")


def check_key(prompt_sha256: str, divergence: int, baseline_token: int | None, spec_token: int | None) -> tuple:
    """What a tie check answers for: one prompt's divergence between exactly these two tokens."""
    return prompt_sha256, divergence, baseline_token, spec_token


def divergence_key(sha: str, base: list[int], spec: list[int]) -> tuple | None:
    """The check_key of a pair of outputs (None when they are identical)."""
    d = first_divergence(base, spec)
    if d is None:
        return None
    return check_key(sha, d, base[d] if d < len(base) else None, spec[d] if d < len(spec) else None)


@dataclass(frozen=True)
class RowTies:
    """A row's greedy verdict: prompts identical, tied at their first divergence, or in violation."""

    n_identical: int
    n_ties: int
    n_violations: int
    tie_margin_max: float | None  # logits: the largest margin among the ties
    tie_margin_max_ulps: float | None
    violations: list[tuple[int, Verdict]]  # (first divergence, verdict) of each violating prompt

    def columns(self) -> dict[str, Any]:
        return {"n_identical": self.n_identical, "n_ties": self.n_ties, "n_violations": self.n_violations,
                "tie_margin_max": self.tie_margin_max, "tie_margin_max_ulps": self.tie_margin_max_ulps}


def row_ties(pairs: list[tuple[str, list[int], list[int]]], checks: list[TieCheckLine]) -> RowTies:
    """The verdict over (prompt sha256, baseline tokens, speculative tokens) pairs, given the row's tie-check
    records; a check counts only for the divergence and tokens it was made for."""
    by_key = {check_key(c.prompt_sha256, c.divergence, c.baseline_token, c.spec_token): c for c in checks}
    identical = 0
    ties: list[tuple[int, Verdict]] = []
    violations: list[tuple[int, Verdict]] = []
    for sha, base, spec in pairs:
        key = divergence_key(sha, base, spec)
        if key is None:
            identical += 1
            continue
        v = classify(by_key.get(key))
        (ties if v.tie else violations).append((key[1], v))
    widest = max((v for _, v in ties), key=lambda v: v.margin or 0.0, default=None)  # a tie's margin is set
    return RowTies(identical, len(ties), len(violations), widest.margin if widest else None,
                   widest.margin_ulps if widest else None, violations)


def _four(x: float | None) -> str:
    return MISSING if x is None else f"{x:.4f}"


def report_markdown(checks: list[TieCheckLine]) -> str | None:
    """report.md's table of every tie check (one line per divergence scored); None when there was none."""
    checks = sorted(checks, key=lambda r: (r.engine, r.label, r.workload, r.prompt_index))
    if not checks:
        return None
    tolerances = ", ".join(f"{d} {u:g} ulps" for d, u in TOLERANCE_ULPS.items())
    lines = ["Each greedy prompt whose speculative output differs from AR's was teacher-forced through the "
             "baseline's engine up to its first divergence, untimed, in the run's dtype: tie when the best logit "
             f"there exceeds neither token's by more than the tolerance ({tolerances} at the largest |logit| "
             "involved; other dtypes exact identity). Logits of the baseline's token "
             "(AR) and the speculative one (spec); margin = best − min(AR, spec).", "",
             "| engine | method | dataset | prompt | token | AR / spec token | logits AR / spec / best | margin | "
             "tolerance | ulps | verdict |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in checks:
        v = classify(c)
        base, spec = c.token_logits
        best = max([x for x in (base, spec) if x is not None] + c.top_logits)
        lines.append(f"| {c.engine} | {c.label.removesuffix(' tie check')} | {c.workload} | "
                     f"{c.prompt_index} | {c.divergence} | {c.baseline_token} / {c.spec_token} | "
                     f"{_four(base)} / {_four(spec)} / {best:.4f} | {_four(v.margin)} | "
                     f"{'–' if v.tolerance is None else f'{v.tolerance:.4f}'} | "
                     f"{'–' if v.margin_ulps is None else f'{v.margin_ulps:.2f}'} | "
                     f"{'tie' if v.tie else 'VIOLATION: ' + v.reason} |")
    return "\n".join(lines)
