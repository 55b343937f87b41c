"""Draft parity (the comparison of `make parity-tpu-inference`): per-step report and verdict from given logit arrays."""

import numpy as np
import pytest

from verification.draft_parity import attribution, by_position, compare_step, lines, verdict


def _logits(rows: int = 15, vocab: int = 50, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, vocab))


def test_identical_logits_match():
    a = _logits()
    d = compare_step(a, a.copy(), prompt=0, step=0, position=10)
    assert (d.max_abs_diff, d.agree, d.rows, d.first_flip) == (0.0, 15, 15, None)
    assert verdict([d], tol=1e-4).ok


def test_small_difference_within_tolerance_keeps_argmax():
    a = _logits()
    d = compare_step(a, a + 3e-6, 0, 0, 10)
    assert d.max_abs_diff == pytest.approx(3e-6, rel=1e-3)
    assert d.identical_argmax and verdict([d], 1e-4).ok
    assert not verdict([d], 1e-6).ok  # the same difference fails a tighter tolerance


def test_argmax_flip_is_located_and_fails_the_verdict():
    a = _logits()
    b = a.copy()
    row = 6
    b[row, (a[row].argmax() + 1) % a.shape[1]] = a[row].max() + 1.0  # another token wins in row 6
    d = compare_step(a, b, 2, 3, 40)
    assert d.agree == 14 and d.first_flip == row + 1  # reported as draft position 7 (1-based)
    v = verdict([compare_step(a, a, 0, 0, 5), d], tol=10.0)
    assert not v.ok and v.rows_agree == 29 and v.rows == 30 and v.steps_identical_argmax == 1


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError):
        compare_step(_logits(15), _logits(16), 0, 0, 0)


def test_report_lines_and_position_buckets():
    a = _logits()
    diffs = [compare_step(a, a + 1e-3 * k, 0, k, pos) for k, pos in enumerate((5, 70, 300))]
    buckets = by_position(diffs)
    assert [b[0] for b in buckets] == ["0-63", "64-127", "256-511"]
    assert buckets[2][2] == pytest.approx(2e-3, rel=1e-3)
    out = lines(diffs, tol=1e-4)
    assert len([x for x in out if x.startswith("     0 ")]) == 3  # one table row per step
    assert out[-1].startswith("verdict: DIFFER") and "2.000e-03" in out[-1]
    assert lines(diffs, tol=1e-2)[-1].startswith("verdict: MATCH")


def test_no_steps_is_not_a_match():
    assert not verdict([], tol=1.0).ok


def test_attribution_names_rope_only_when_the_corrected_draft_alone_matches():
    a = _logits()
    off, on = [compare_step(a, a + 1e-2, 0, 0, 9)], [compare_step(a, a + 1e-6, 0, 0, 9)]
    note = attribution({"as-loaded": verdict(off, 1e-4), "corrected": verdict(on, 1e-4)})
    assert note and "RoPE" in note and "1.000e-02" in note
    assert attribution({"as-loaded": verdict(off, 1e-4), "corrected": verdict(off, 1e-4)}) is None
    assert attribution({"as-loaded": verdict(on, 1e-4), "corrected": verdict(on, 1e-4)}) is None
    assert attribution({"as-loaded": verdict(off, 1e-4)}) is None
