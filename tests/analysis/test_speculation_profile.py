"""speculation_profile.json and its checks (analysis/speculation_profile.py): consistent records pass; counters
whose τ is not 1 + Σ p_i, counters whose p_i rise, accept lengths beyond K and sources that disagree each fail
their check, recorded in the file and named in report.md; the synthetic run writes one profile per speculative row."""
import json
import math

import pytest

from benchmarks.analysis import speculation_profile
from benchmarks.core import metrics
from benchmarks.core.engine_io import SpecCounters
from benchmarks.records.store import RunStore
from benchmarks.report.report_write import write_reports
from tests.analysis.synthetic_run import write_run

CELL = {"engine": "vllm", "target": "t", "draft": "d", "k": 3, "temperature": 0.0, "max_new_tokens": 8, "seed": 0,
        "engine_options": {}}
CELLS = {"base": {**CELL, "method": "baseline", "draft": None, "k": 0}, "dfl": {**CELL, "method": "dflash"}}
ACCEPTED = [[3, 3], [1, 2], [0, 0, 1, 1]]  # 8 steps, 11 accepted; >= 1: 6, >= 2: 3, >= 3: 2
COUNTERS = {"num_drafts": 8, "num_draft_tokens": 24, "num_accepted_tokens": 11, "accepted_per_pos": [6, 3, 2]}


@pytest.fixture(autouse=True)
def no_figures(monkeypatch):
    import benchmarks.figures.run_figures as figures

    # figures are not the profile's business
    monkeypatch.setattr(figures, "run_figures", lambda *_: figures.Drawn([], []))


def request(cell, i, accepted):
    return {"kind": "request", "cell_id": cell, "label": "baseline" if cell == "base" else "dflash-k3",
            "engine": "vllm", "method": CELLS[cell]["method"], "k": CELLS[cell]["k"], "dataset": "humaneval",
            "prompt_index": i, "prompt_sha256": f"sha{i}", "n_prompt_tokens": 10, "n_out": 4, "ttft_ms": 20.0,
            "tpot_ms": 5.0, "decode_s": 0.015, "output_ids": [1, 2, 3, 4], "accept_lengths": accepted}


def run(tmp_path, accepted=(*ACCEPTED,), counters=COUNTERS):
    """A run of a baseline and a DFlash K = 3 cell whose requests accepted `accepted` (None: they do not say) and
    whose spec counters are `counters` (None: no spec record), reported; its profile of the DFlash cell and
    report.md."""
    store = RunStore(tmp_path)
    store.write_manifest({"run_id": "profile", "created_utc": "now", "config_path": "m.yaml", "git_sha": "abc",
                          "config": {"target": "t", "max_new_tokens": 8, "num_prompts": 3, "warmup_prompts": 1},
                          "cells": CELLS, "packages": {}, "platform": "cpu",
                          "hardware": {"device": "Test CPU", "bandwidth_gbps": None, "cache_bytes": None},
                          "models": {"t": {"config_sha256": "x", "weight_bytes": None}}})
    store.write_unit_json("base", "humaneval", [request("base", i, None) for i in range(3)])
    spec = {"kind": "spec", "cell_id": "dfl", "label": "dflash-k3", "dataset": "humaneval", **(counters or {})}
    store.write_unit_json("dfl", "humaneval", [request("dfl", i, accepted and accepted[i]) for i in range(3)]
                          + ([spec] if counters else []))
    write_reports(tmp_path)
    [profile] = json.loads((tmp_path / "speculation_profile.json").read_text())["profiles"]
    return profile, (tmp_path / "report.md").read_text()


def acceptance_section(report):
    return report.split("## Per-position acceptance\n", 1)[1].split("\n## ", 1)[0]


def test_conditional_acceptance_is_undefined_where_its_condition_never_held():
    assert metrics.conditional_acceptance(SpecCounters(8, 24, 9, [6, 3, 0])) == [0.75, 0.5, 0.0]
    c = metrics.conditional_acceptance(SpecCounters(4, 12, 2, [2, 0, 0]))
    assert c[:2] == [0.5, 0.0] and math.isnan(c[2])


def test_a_source_without_verify_steps_has_nothing_to_check():
    source = speculation_profile.from_counters(SpecCounters(0, 0, 0, [0, 0, 0]))
    assert source.marginal == source.conditional == [] and math.isnan(source.tau_per_step)
    assert [(c.name, c.ok) for c in source.checks] == [("tau_sum", None), ("non_increasing", None)]
    assert speculation_profile.from_requests([], 3) is None


def test_consistent_records_pass_every_check(tmp_path):
    profile, report = run(tmp_path)
    assert {k: profile[k] for k in ("engine", "method", "k", "workload", "temperature", "concurrency")} == {
        "engine": "vllm", "method": "dflash", "k": 3, "workload": "humaneval", "temperature": 0.0, "concurrency": None}
    counters, requests = profile["sources"]["counters"], profile["sources"]["requests"]
    for source in (counters, requests):
        assert source["steps"] == 8 and source["tau_per_step"] == pytest.approx(1 + 11 / 8)
        assert source["marginal"] == [0.75, 0.375, 0.25] and source["conditional"] == pytest.approx([0.75, 0.5, 2 / 3])
        assert {name: c["ok"] for name, c in source["checks"].items()} == {"tau_sum": True, "non_increasing": True}
    assert counters["tau_per_request"] is None and counters["per_request"] is None
    assert requests["requests"] == 3 and requests["tau_per_request"] == pytest.approx((4 + 2.5 + 1.5) / 3)
    assert [r["tau"] for r in requests["per_request"]] == [4.0, 2.5, 1.5]
    assert profile["agreement"]["ok"] is True
    assert "Speculation profile checks" not in report


@pytest.mark.parametrize("accepted, counters, source, check, line", [
    (None, COUNTERS | {"accepted_per_pos": [6, 3, 1]}, "counters", "tau_sum",
     "- vllm dflash-k3 on humaneval, engine counters: τ = 1 + Σ p_i fails (τ 2.375, 1 + Σ p_i 2.250)"),
    (None, COUNTERS | {"accepted_per_pos": [3, 5, 3]}, "counters", "non_increasing",
     "- vllm dflash-k3 on humaneval, engine counters: p_i non-increasing fails (p_2 0.625 > p_1 0.375)"),
    ([[3, 4], [1, 2], [0, 0, 1, 1]], None, "requests", "tau_sum",
     "- vllm dflash-k3 on humaneval, accept lengths: τ = 1 + Σ p_i fails (τ 2.500, 1 + Σ p_i 2.375)"),
    ([[3, 3], [1, 2], [0, 0, 0, 0]], COUNTERS, "both", "sources_agree",
     "- vllm dflash-k3 on humaneval, engine counters vs accept lengths: agreement fails (τ 2.375 vs 2.125, largest "
     "p_i gap 0.250, 8 vs 8 steps)"),
])
def test_a_violated_check_is_recorded_and_named_in_the_report(tmp_path, accepted, counters, source, check, line):
    profile, report = run(tmp_path, accepted, counters)
    results = {(name, c): v["ok"] for name, s in profile["sources"].items() for c, v in s["checks"].items()}
    results[("both", "sources_agree")] = (profile["agreement"] or {}).get("ok")
    assert [key for key, ok in results.items() if ok is False] == [(source, check)]
    section = acceptance_section(report)
    assert "Speculation profile checks that fail (speculation_profile.json, tolerance 0.02):" in section
    assert line in section.splitlines()


def test_a_conditional_without_its_condition_is_null(tmp_path):
    profile, _ = run(tmp_path, [[1, 1], [0, 0], [1, 0, 0, 0]],
                     COUNTERS | {"num_accepted_tokens": 3, "accepted_per_pos": [3, 0, 0]})
    assert profile["sources"]["counters"]["conditional"] == [0.375, 0.0, None]
    assert profile["agreement"]["ok"] is True


def test_the_synthetic_run_writes_a_profile_per_speculative_row(tmp_path):
    out = write_run(tmp_path)
    summary = write_reports(out).summary
    profiles = json.loads((out / "speculation_profile.json").read_text())["profiles"]
    rows = [r for r in summary.rows if r.method != "baseline" and not r.n_errors]
    assert [(p["label"], p["workload"], p["concurrency"], p["batch_size"]) for p in profiles] == [
        (r.label, r.dataset, r.concurrency, r.batch_size) for r in rows]
    for p, r in zip(profiles, rows):
        assert p["sources"]["requests"]["tau_per_request"] == pytest.approx(r.tau_prompt_mean)
        if r.per_position:  # a row with engine counters: the file's marginals and τ are summary.csv's
            assert p["sources"]["counters"]["marginal"] == json.loads(r.per_position)
            assert p["sources"]["counters"]["tau_per_step"] == pytest.approx(r.tau)
            assert p["agreement"]["ok"] is True
        assert all(c["ok"] for s in p["sources"].values() for c in s["checks"].values())
    assert "Speculation profile checks" not in (out / "report.md").read_text()


def test_a_k_schedule_cell_is_profiled_at_the_largest_k_its_steps_run(tmp_path, monkeypatch):
    """A vLLM cell at B = 2 with the schedule [[1, 1, 4], [2, 2, 3]] is a K = 3 cell, but whenever one request runs
    alone its steps run K = 4: an accept length of 4 is correct data, and the profile counts positions 1..4."""
    schedule = {"num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 2, 3]]}
    monkeypatch.setitem(CELLS, "dfl", {**CELLS["dfl"], "engine_options": schedule})
    profile, report = run(tmp_path, accepted=([3, 4], [1, 2], [0, 0, 1, 1]), counters=None)
    requests = profile["sources"]["requests"]
    assert requests["marginal"] == [0.75, 0.375, 0.25, 0.125] and requests["tau_per_step"] == pytest.approx(1 + 12 / 8)
    assert {name: c["ok"] for name, c in requests["checks"].items()} == {"tau_sum": True, "non_increasing": True}
    assert "Speculation profile checks" not in report
