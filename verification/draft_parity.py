"""Draft parity: two implementations' draft logits on the same inputs, compared step by step (pure).

A step's verdict is the largest |Δlogit| over its proposal rows and whether every row's argmax agrees; a run agrees
when no step exceeds the tolerance and no argmax differs. Used by the tpu-inference parity study
(benchmarks/studies/tpu_parity.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Where a difference shows first: the positions of the block's anchor, bucketed, for the per-position summary.
POSITION_BUCKETS = (64, 128, 256, 512, 1024, 2048)


@dataclass(frozen=True)
class StepDiff:
    """One draft step of one prompt: both drafts' logits over the block's proposal rows, compared."""

    prompt: int
    step: int
    position: int  # the anchor's position (the block starts there)
    max_abs_diff: float  # max |Δlogit| over rows and vocabulary
    agree: int  # proposal rows whose argmax is the same
    rows: int
    first_flip: int | None  # 1-based draft position of the first argmax disagreement, None if all agree

    @property
    def identical_argmax(self) -> bool:
        return self.agree == self.rows


def compare_step(ours: np.ndarray, theirs: np.ndarray, prompt: int, step: int, position: int) -> StepDiff:
    """Compare two [rows, V] logit arrays (row i = draft position i+1)."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    if ours.shape != theirs.shape or ours.ndim != 2:
        raise ValueError(f"logits must be two [rows, vocab] arrays of one shape, got {ours.shape} and {theirs.shape}")
    same = ours.argmax(-1) == theirs.argmax(-1)
    flips = np.flatnonzero(~same)
    return StepDiff(prompt, step, position, float(np.abs(ours - theirs).max()), int(same.sum()), len(same),
                    int(flips[0]) + 1 if len(flips) else None)


@dataclass(frozen=True)
class Verdict:
    steps: int
    max_abs_diff: float
    rows_agree: int
    rows: int
    steps_identical_argmax: int
    tol: float

    @property
    def ok(self) -> bool:
        return self.steps > 0 and self.max_abs_diff <= self.tol and self.rows_agree == self.rows

    def line(self) -> str:
        state = "MATCH" if self.ok else "DIFFER"
        return (f"verdict: {state}: max |Δlogit| {self.max_abs_diff:.3e} (tolerance {self.tol:.1e}) over {self.steps} "
                f"steps; argmax agreement {self.rows_agree}/{self.rows} rows "
                f"({self.rows_agree / max(self.rows, 1):.4f}), {self.steps_identical_argmax}/{self.steps} steps "
                "with every row identical")


def verdict(diffs: list[StepDiff], tol: float) -> Verdict:
    return Verdict(len(diffs), max((d.max_abs_diff for d in diffs), default=float("nan")),
                   sum(d.agree for d in diffs), sum(d.rows for d in diffs),
                   sum(d.identical_argmax for d in diffs), tol)


def by_position(diffs: list[StepDiff]) -> list[tuple[str, int, float, float]]:
    """(anchor position range, steps, max |Δlogit|, argmax agreement) per bucket of anchor positions."""
    out, low = [], 0
    for high in POSITION_BUCKETS:
        sel = [d for d in diffs if low <= d.position < high]
        if sel:
            out.append((f"{low}-{high - 1}", len(sel), max(d.max_abs_diff for d in sel),
                        sum(d.agree for d in sel) / sum(d.rows for d in sel)))
        low = high
    return out


def lines(diffs: list[StepDiff], tol: float, per_step: bool = True) -> list[str]:
    """The per-step table, a per-position summary and the verdict."""
    out = []
    if per_step:
        out.append("prompt step anchor_pos max|Δlogit| argmax_agree first_flip")
        out += [f"{d.prompt:6d} {d.step:4d} {d.position:10d} {d.max_abs_diff:11.3e} {d.agree:6d}/{d.rows:<5d} "
                f"{'-' if d.first_flip is None else d.first_flip}" for d in diffs]
    out.append("by anchor position: range, steps, max |Δlogit|, argmax agreement")
    out += [f"  {rng:>10s} {n:5d} {mx:11.3e} {agree:.4f}" for rng, n, mx, agree in by_position(diffs)]
    out.append(verdict(diffs, tol).line())
    return out


def attribution(verdicts: dict[str, Verdict]) -> str | None:
    """Name the setting when the draft as tpu-inference loads it differs and the RoPE-corrected one matches."""
    loaded, corrected = verdicts.get("as-loaded"), verdicts.get("corrected")
    if loaded is None or corrected is None or loaded.ok or not corrected.ok:
        return None
    return ("attribution: the whole difference is tpu-inference's RoPE setting. With the draft's rope_theta and "
            "rope_scaling set from the checkpoint before it is built (RoPE corrected), its logits match ours "
            f"(max |Δlogit| {corrected.max_abs_diff:.3e}, argmax {corrected.rows_agree}/{corrected.rows}); as loaded "
            f"they differ by up to {loaded.max_abs_diff:.3e} (argmax {loaded.rows_agree}/{loaded.rows}). See the "
            "rope_scaling that the draft's attention layers hold, printed above.")

