"""The greedy verdict at a divergence (verification/ties.py): numerical ties within a few bf16 ulps of the largest
|logit| pass, anything else (a wider margin, a third token ahead of both, float32, no check, a stale check) is a
violation; the summary, the verdict lines and the report show identical / ties / violations per row."""
import pytest

from benchmarks.records.records import TieCheckLine
from benchmarks.records.store import RunStore
from benchmarks.report.report_write import write_reports
from benchmarks.report.tables import results_table
from tests.typed_runs import summary_json
from verification import ties
from verification.lossless import divergent_rows, tie_rows, verdict_lines


def check(base_logit, spec_logit, top, dtype="bfloat16", sha="s0", d=2, base_token=7, spec_token=9):
    return TieCheckLine.from_json(check_json(base_logit, spec_logit, top, dtype, sha, d, base_token, spec_token))


def check_json(base_logit, spec_logit, top, dtype="bfloat16", sha="s0", d=2, base_token=7, spec_token=9):
    return {"kind": "tie_check", "cell_id": "dfl", "label": "dflash-k3 tie check", "engine": "jax",
            "dataset": "humaneval", "prompt_sha256": sha, "prompt_index": 0, "divergence": d,
            "baseline_token": base_token, "spec_token": spec_token, "dtype": dtype, "top_ids": list(range(len(top))),
            "top_logits": top, "token_logits": [base_logit, spec_logit]}


def test_ulp_and_tolerance_follow_the_dtype_and_the_magnitude():
    assert ties.ulp(5.2, "bfloat16") == 2 ** -5 and ties.ulp(-5.2, "bfloat16") == 2 ** -5
    assert ties.ulp(1.0, "bfloat16") == 2 ** -7 and ties.ulp(0.99, "bfloat16") == 2 ** -8
    assert ties.ulp(5.2, "float16") == 2 ** -8 and ties.ulp(5.2, "float32") == 2 ** -21
    assert ties.ulp(0.0, "bfloat16") == 2 ** -133
    assert ties.tolerance("bfloat16", 5.2) == ties.TOLERANCE_ULPS["bfloat16"] * 2 ** -5
    assert ties.tolerance("torch.bfloat16", 20.0) == ties.TOLERANCE_ULPS["bfloat16"] * 2 ** -3
    assert ties.tolerance("float32", 5.2) is None  # strict: exact identity


def test_the_measured_near_ties_are_ties():
    # the three divergences of the brief's bf16 runs, recomputed in float32 (margins 0.0000, 0.0078, 0.0354 at
    # |logit| ~ 5.2), the last with the baseline's token third behind two tokens within 0.035
    for base, spec, top in ((5.2, 5.2, [5.2, 4.1]), (5.2078, 5.2, [5.2078, 5.2]), (5.19, 5.2154, [5.2254, 5.2154])):
        v = ties.classify(check(base, spec, top))
        assert v.tie and v.margin == pytest.approx(max(top) - min(base, spec)) and v.margin_ulps <= 1.2


def test_wider_margins_a_token_ahead_of_both_and_float32_are_violations():
    tol = ties.tolerance("bfloat16", 5.2)
    assert ties.classify(check(5.2, 5.2 - 0.9 * tol, [5.2, 5.0])).tie
    v = ties.classify(check(5.2, 5.2 - 1.1 * tol, [5.2, 5.0]))
    assert not v.tie and v.reason.startswith("margin")
    # the two tokens agree, but a third beats both by more than the tolerance: neither was an argmax candidate
    assert not ties.classify(check(5.0, 5.0, [5.0 + 1.5 * tol, 5.0])).tie
    v = ties.classify(check(5.2, 5.2, [5.2], dtype="float32"))
    assert not v.tie and v.margin == 0.0 and "exact identity" in v.reason
    assert not ties.classify(None).tie and ties.classify(None).reason == "no tie check"
    assert ties.classify(check(5.2, 5.2, [5.2], spec_token=None)).reason == "one output ended earlier"


def test_row_counts_ties_only_for_the_divergence_they_were_checked_at():
    pairs = [("s0", [1, 2, 7, 4], [1, 2, 9, 5]), ("s1", [1, 2, 3], [1, 2, 3]), ("s2", [4, 4, 4], [4, 5, 4]),
             ("s3", [1, 2], [1, 2, 3])]
    checks = [check(5.2, 5.19, [5.2]), check(5.2, 5.19, [5.2], sha="s2", d=1, base_token=4, spec_token=6)]
    t = ties.row_ties(pairs, checks)
    # s0: a tie; s1 identical; s2's check was made for other tokens (stale); s3 ended at another length
    assert (t.n_identical, t.n_ties, t.n_violations) == (1, 1, 2)
    assert t.tie_margin_max == pytest.approx(0.01) and t.tie_margin_max_ulps == pytest.approx(0.01 * 32)
    assert sorted((d, v.reason) for d, v in t.violations) == [(1, "no tie check"), (2, "no tie check")]


CELLS = {
    "base": {"engine": "jax", "target": "t", "method": "baseline", "draft": None, "k": 0, "temperature": 0.0,
             "max_new_tokens": 4, "seed": 0, "engine_options": {}},
    "dfl": {"engine": "jax", "target": "t", "method": "dflash", "draft": "d", "k": 3, "temperature": 0.0,
            "max_new_tokens": 4, "seed": 0, "engine_options": {}},
}


def request(cell, i, ids):
    return {"kind": "request", "cell_id": cell, "label": "baseline" if cell == "base" else "dflash-k3",
            "engine": "jax", "method": CELLS[cell]["method"], "k": CELLS[cell]["k"], "dataset": "humaneval",
            "prompt_index": i, "prompt_sha256": f"s{i}", "n_prompt_tokens": 10, "n_out": len(ids), "ttft_ms": 20.0,
            "tpot_ms": 10.0 if cell == "base" else 5.0, "decode_s": 0.03, "output_ids": ids, "accept_lengths": None}


def records(spec_logit):
    return [request("base", 0, [1, 2, 7, 4]), request("base", 1, [5, 6, 7, 8]), request("dfl", 0, [1, 2, 9, 9]),
            request("dfl", 1, [5, 6, 7, 8]), check_json(5.2, spec_logit, [5.2, 3.0])]


MANIFEST = {"run_id": "r", "created_utc": "now", "config_path": "m.yaml", "git_sha": "abc",
            "config": {"target": "t", "max_new_tokens": 4, "num_prompts": 2, "warmup_prompts": 0},
            "cells": CELLS, "packages": {}, "platform": "cpu", "hardware": {"device": "cpu"}, "models": {}}


def test_summary_verdict_lines_and_exit_rule_tell_a_tie_from_a_violation():
    tie = {r.label: r for r in summary_json(records(5.19), MANIFEST).rows}["dflash-k3"]
    assert (tie.identical_frac, tie.n_identical, tie.n_ties, tie.n_violations) == (0.5, 1, 1, 0)
    assert tie.tie_margin_max == pytest.approx(0.01) and tie.first_violation is None
    assert not divergent_rows([tie]) and tie_rows([tie]) == [tie]
    [line] = verdict_lines([tie])
    assert line.startswith("lossless up to numerical ties: jax dflash-k3 on humaneval: 1 of 2 prompts")
    assert "| 1/1/0 (0.32 ulp) |" in results_table([tie])

    bad = {r.label: r for r in summary_json(records(4.0), MANIFEST).rows}["dflash-k3"]
    assert (bad.n_ties, bad.n_violations, bad.first_violation) == (0, 1, 2)
    assert divergent_rows([bad]) == [bad] and not tie_rows([bad])
    [line] = verdict_lines([bad])
    assert line.startswith("LOSSLESS VIOLATION: jax dflash-k3 on humaneval: 0.500 of prompts identical")
    assert "1 of 2 prompts diverge beyond a numerical tie, the first at token 2 (margin 1.2 > tolerance 0.125)" in line


def test_report_lists_every_tie_check(tmp_path):
    store = RunStore(tmp_path)
    store.write_manifest(MANIFEST)
    recs = records(5.19)
    store.write_unit_json("base", "humaneval", recs[:2])
    store.write_unit_json("dfl", "humaneval", recs[2:4])
    store.write_unit_json("dfl", "humaneval@ties", recs[4:])
    write_reports(tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "| jax | dflash-k3 | humaneval | 0 | 2 | 7 / 9 | 5.2000 / 5.1900 / 5.2000 | 0.0100 | 0.1250 | 0.32 | tie |" \
        in report
    assert "lossless up to numerical ties" in report
    assert "n_ties" in (tmp_path / "summary.csv").read_text().splitlines()[0]
