"""A capacity search run end to end on a scripted server whose latencies grow with load (tests/slo_server.py, no
engine): each probe round a unit, the planted capacities found and reported (report.md, capacity.json, both figures),
`--plan` showing each search's state, a rerun measuring nothing, a failed probe retried on the next run, and a run
killed mid-search (SIGKILL) that resumes without measuring a stored probe again."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.cli import main
from benchmarks.core.paths import ROOT
from benchmarks.engines import catalog
from benchmarks.records.store import RunStore
from tests import slo_server
from tests.slo_server import ROW


@pytest.fixture
def slo_row(monkeypatch, tmp_path):
    monkeypatch.setitem(catalog.ENGINES, ROW.name, ROW)
    monkeypatch.setenv("SLO_SERVER_LOG", str(tmp_path / "loads.log"))


def matrix_file(tmp_path, **extra):
    """Rounds of 96 requests: three waves at the top of the range, C = 32 (validate refuses fewer)."""
    raw = {"name": "slo", "preset": "tiny", "engine": ROW.name, "methods": ["baseline", "dflash"], "k": [3],
           "datasets": ["humaneval"], "num_prompts": 96, "warmup_prompts": 1, "max_new_tokens": 8,
           "slo": {"p90_tpot_ms": 20, "p90_ttft_ms": 500}, "slo_range": [1, 32], "slo_requests": 96, **extra}
    path = tmp_path / "slo.json"
    path.write_text(json.dumps(raw))
    return path


def loads_run(tmp_path) -> list[str]:
    """The loads the scripted server ran (cell label and tag), warm-ups left out."""
    log = tmp_path / "loads.log"
    return [line for line in log.read_text().splitlines() if not line.endswith(".warmup")] if log.exists() else []


def test_a_capacity_search_finds_the_planted_capacities_and_reports_them(slo_row, tmp_path, capsys):
    path, run = matrix_file(tmp_path), tmp_path / "run"
    assert main(["validate", str(path)]) == 0
    assert main(["matrix", str(path), "--run-dir", str(run)]) == 0  # nothing due a lossless check: no fixed level
    out = capsys.readouterr().out
    assert "[baseline] humaneval: capacity under p90 TPOT ≤ 20 ms, p90 TTFT ≤ 500 ms: 8 after 7 probes (C = 8 " \
           "meets and C = 9 fails)" in out
    assert "[dflash-k3] humaneval: probe 6 at C = 18, round 0 (96 requests; bisect: C = 16 meets, C = 20 fails): " \
           "p90 TPOT 19.8 ms [19.6, 19.9] vs ≤ 20: meets; p90 TTFT 90 ms [90, 90] vs ≤ 500: meets; the SLO: " \
           "MEETS" in out
    assert "capacity on humaneval under p90 TPOT ≤ 20 ms, p90 TTFT ≤ 500 ms: slo-scripted baseline 8; slo-scripted " \
           "dflash-k3 18 → slo-scripted dflash-k3 holds the most (18)" in out
    store = RunStore(run)
    cells = {c.label: cid for cid, c in store.run_manifest().cells.items()}
    assert "humaneval@c8@p0" in store.unit_keys(cells["baseline"]) and len(store.unit_keys(cells["baseline"])) == 7
    assert len(loads_run(tmp_path)) == 14  # 7 probes per cell, each one load
    capacity = json.loads((run / "capacity.json").read_text())
    [decision] = capacity["decisions"]
    by_label = {c["label"]: c for c in decision["configurations"]}
    assert by_label["baseline"]["capacity"]["text"] == "8" and by_label["dflash-k3"]["capacity"]["text"] == "18"
    assert by_label["dflash-k3"]["vs_best_plain"]["ratio"] == pytest.approx(18 / 8)
    assert by_label["baseline"]["vs_best_plain"] == {"ratio": 1.0, "low": 1.0, "high": 1.0}  # itself: exactly 1
    assert decision["leaders"] == [f"{ROW.name} dflash-k3"] and decision["best_plain"] == f"{ROW.name} baseline"
    probe = by_label["baseline"]["probes"][0]
    assert (probe["load"], probe["why"], probe["verdict"]) == (1, "the low end of the range", "meets")
    assert probe["thresholds"][0]["name"] == "p90_tpot_ms" and probe["thresholds"][0]["ci_high_ms"] < 20
    report = (run / "report.md").read_text()
    assert "## Capacity at a latency target" in report
    assert f"| {ROW.name} | dflash-k3 | 18 |" in report and "**Decision**: slo-scripted dflash-k3 holds the most (18)" \
        in report
    assert "| 4 | C = 8 | 0 | 96 | 18.7 [18.6, 18.8] | 40 [40, 40] | meets |" in report
    assert {p.name for p in (run / "figures").iterdir()} == {"capacity_vs_threshold.png", "capacity_pareto.png"}

    assert main(["matrix", str(path), "--run-dir", str(run), "--plan"]) == 0
    plan = capsys.readouterr().out
    assert "capacity searches (bisect) over 32 loads from C = 1, C = 32, rounds of 96 requests (at most 1 per load)" \
        in plan
    assert "| slo-scripted | baseline | humaneval | p90 TPOT ≤ 20 ms, p90 TTFT ≤ 500 ms | 7 | 8 after 7 probes" in plan

    assert main(["matrix", str(path), "--run-dir", str(run)]) == 0  # a rerun replays every path: nothing measured
    assert len(loads_run(tmp_path)) == 14
    assert "14 capacity probe(s) stored, which the searches walk again without measuring" in capsys.readouterr().err


def test_a_second_slo_reuses_the_probes_the_first_measured(slo_row, tmp_path, capsys):
    path = matrix_file(tmp_path, methods=["baseline"], slo=[{"p90_tpot_ms": 20}, {"p90_tpot_ms": 30}])
    assert main(["matrix", str(path), "--run-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "capacity under p90 TPOT ≤ 30 ms: 13 after" in out  # 2 + 2·13 = 28 ms × 1.05 ≤ 30
    ran = loads_run(tmp_path)
    assert len(ran) == len(set(ran)) < 14  # the second path starts on the first's probes (1, 32, 16) for free


def test_a_failed_probe_stops_its_search_and_is_measured_on_the_next_run(slo_row, tmp_path, monkeypatch, capsys):
    path, run = matrix_file(tmp_path, methods=["baseline"]), tmp_path / "run"
    real = slo_server.SloServer.run_load

    def broken(self, load, workdir, tag):
        if tag.startswith("humaneval@c16@p0"):
            raise ConnectionError("the server went away")
        return real(self, load, workdir, tag)

    monkeypatch.setattr(slo_server.SloServer, "run_load", broken)
    assert main(["matrix", str(path), "--run-dir", str(run)]) == 1
    out = capsys.readouterr().out
    assert "probe at C = 16 round 0 FAILED: ConnectionError: the server went away" in out
    assert "## Failed units" in (run / "report.md").read_text()
    monkeypatch.setattr(slo_server.SloServer, "run_load", real)
    assert main(["matrix", str(path), "--run-dir", str(run)]) == 0
    assert [line.split()[1] for line in loads_run(tmp_path)][2:] == [
        "humaneval@c16@p0", "humaneval@c8@p0", "humaneval@c12@p0", "humaneval@c10@p0", "humaneval@c9@p0"]


@pytest.mark.slow
def test_a_run_killed_mid_search_resumes_without_measuring_a_stored_probe_again(tmp_path):
    path, run, log = matrix_file(tmp_path), tmp_path / "run", tmp_path / "loads.log"
    cmd = [sys.executable, "-m", "tests.slo_run", "matrix", str(path), "--run-dir", str(run)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SLO_SERVER_LOG": str(log), "SLO_SERVER_SLEEP_S": "0.3"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and len(list((run / "units").glob("*@p*.jsonl"))) < 4:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    labels = {cid: c.label for cid, c in RunStore(run).run_manifest().cells.items()}
    stored = {f"{labels[p.name.split('__')[0]]} {p.name.split('__')[1].removesuffix('.jsonl')}"
              for p in (run / "units").glob("*.jsonl")}
    assert 4 <= len(stored) < 14, "the kill should land mid-search"
    before = len(loads_run(tmp_path))

    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rerun = loads_run(tmp_path)[before:]
    assert not set(rerun) & stored  # no stored probe is measured again
    assert len(rerun) == 14 - len(stored) and stored | set(rerun) == set(loads_run(tmp_path))
    assert len(list((run / "units").glob("*.jsonl"))) == 14
    assert json.loads((run / "capacity.json").read_text())["decisions"][0]["leaders"] == [f"{ROW.name} dflash-k3"]
