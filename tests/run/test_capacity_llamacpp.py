"""A capacity search through the real llama-server on the shipped tiny set (marked llamacpp: skipped with its reason
when it is not built): one plain-decoding cell, two loads, 72 requests a round, thresholds no request misses, so
C = 1 meets; each probe round is a unit holding the server's own output ids, and the report names the capacity.
Rounds of 72: requests at C = 1 can show a p50 met only where their waves (one request each) count as 6 or more, and
the serial factor reads their persistence at the upper end of its interval (`metrics.serial_design_effect`): 18
independent requests counted as fewer about one probe in four (tests/decide/test_wave_trend.py), and 36 single
requests of a loaded host, whose TPOTs of 8 tokens ran in blocks (lag-1 about 0.5), counted as 3."""
from __future__ import annotations

import json
import re

import pytest

from benchmarks.cli import main
from benchmarks.records.store import RunStore

pytestmark = pytest.mark.llamacpp


def test_a_capacity_search_through_llama_server(tmp_path, capsys):
    matrix = tmp_path / "slo.json"
    matrix.write_text(json.dumps({
        "name": "slo-llamacpp", "preset": "tiny", "engine": "llama.cpp-serve", "methods": ["baseline"],
        "datasets": ["humaneval"], "max_new_tokens": 8, "num_prompts": 72, "warmup_prompts": 1,
        "engine_options": {"llama.cpp": {"threads": 1}}, "slo": {"p50_tpot_ms": 10000, "p50_ttft_ms": 60000},
        "slo_range": [1, 3], "slo_step": 2, "slo_requests": 72}))
    run = tmp_path / "run"
    assert main(["matrix", str(matrix), "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    line = "capacity on humaneval under p50 TPOT ≤ 10000 ms, p50 TTFT ≤ 60000 ms: llama.cpp-serve baseline ≥ "
    assert re.search(re.escape(line) + "[13]", out), out[-1500:]  # C = 3's 24 waves may or may not show it met
    store = RunStore(run)
    [cell_id] = store.run_manifest().cells
    assert store.unit_keys(cell_id) == ["humaneval@c1@p0", "humaneval@c3@p0"]
    requests = [r for r in store.unit(cell_id, "humaneval@c3@p0") if r.kind == "probe_request"]
    assert len(requests) == 72 and all((r.extra or {}).get("output_ids_from") == "server" for r in requests)
    [decision] = json.loads((run / "capacity.json").read_text())["decisions"]
    assert [p["verdict"] for p in decision["configurations"][0]["probes"]][0] == "meets"
