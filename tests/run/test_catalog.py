"""An engine added through the catalog alone (docs/layout.md): one row, and the harness validates its options,
hosts it in worker processes, runs it, pairs it and reports it; nothing else names it."""
from __future__ import annotations

import json
import os

import pytest

from benchmarks.cli import main
from benchmarks.engines import catalog
from benchmarks.engines.catalog import EngineOptions, EngineRow
from benchmarks.records.store import RunStore

ROW = EngineRow("scripted", "tests.catalog_engine:CatalogEngine", ("baseline", "dflash"),
                EngineOptions(lambda: frozenset({"step_ms", "max_model_len", "dtype", "load_s"})), worker=True)


@pytest.fixture
def scripted_row(monkeypatch):
    monkeypatch.setitem(catalog.ENGINES, ROW.name, ROW)


def matrix_file(tmp_path, **extra):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(4)))
    raw = {"name": "catalog", "preset": "tiny", "engine": "scripted", "methods": ["baseline", "dflash"], "k": [3],
           "datasets": [{"name": "local", "path": str(prompts)}], "num_prompts": 3, "warmup_prompts": 1,
           "max_new_tokens": 8, "drift_prompts": 0, **extra}
    path = tmp_path / "catalog.yaml"
    path.write_text(json.dumps(raw))
    return path


def test_an_engine_added_by_one_catalog_row_runs_in_workers_and_is_reported(scripted_row, tmp_path, capsys,
                                                                             monkeypatch):
    monkeypatch.setenv("PLATFORM", "cpu")  # a TPU machine refuses to interleave cells in workers
    path = matrix_file(tmp_path, interleave=True)  # a worker engine interleaved: each cell in its own process
    assert main(["validate", str(path)]) == 0
    assert f"{path}: ok, 2 cells" in capsys.readouterr().out
    assert main(["matrix", str(path), "--run-dir", str(tmp_path / "run")]) == 0
    store = RunStore(tmp_path / "run")
    rows = {r["label"]: r for r in store.record_objects() if r["kind"] == "request"}
    assert rows["dflash-k3"]["engine"] == "scripted" and rows["dflash-k3"]["tpot_ms"] == pytest.approx(4.0)
    hosts = {p["describe"]["pid_of_host"] for p in store.provenances().values()}
    assert len(hosts) == 2 and os.getpid() not in hosts  # each cell in a worker process of its own
    assert ",scripted," in (tmp_path / "run" / "summary.csv").read_text()
    report = (tmp_path / "run" / "report.md").read_text()
    assert "| local | scripted | dflash-k3 |" in report and "2.50" in report  # 10 ms / 4 ms, paired on each prompt


def test_worker_engines_of_a_group_load_side_by_side_on_cpu(scripted_row, tmp_path, monkeypatch, capsys):
    """Each cell's engine loads in its own worker process while the other loads (placement.start_side_by_side)."""
    from benchmarks.hardware import provenance

    monkeypatch.setattr(provenance, "detect_platform", lambda: "cpu")
    path = matrix_file(tmp_path, interleave=True, engine_options={"load_s": 1.5})
    assert main(["matrix", str(path), "--run-dir", str(tmp_path / "run")]) == 0
    assert "loaded beside the group's other cells" in capsys.readouterr().out
    (a0, a1), (b0, b1) = sorted(p["describe"]["loaded"] for p in RunStore(tmp_path / "run").provenances().values())
    assert b0 < a1  # the second load began before the first ended


def test_the_catalog_row_decides_the_options_a_cell_may_set(scripted_row, tmp_path, capsys):
    assert main(["validate", str(matrix_file(tmp_path, engine_options={"step_ms": 5}))]) == 0
    capsys.readouterr()
    assert main(["validate", str(matrix_file(tmp_path, engine_options={"stepms": 5}))]) == 2
    err = capsys.readouterr().err
    assert "'stepms' is not an option of the scripted engine" in err and err.rstrip().endswith("did you mean step_ms?")


def test_an_engine_the_catalog_lacks_is_named_with_the_known_ones(tmp_path, capsys):
    assert main(["validate", str(matrix_file(tmp_path))]) == 2
    assert "unknown engine 'scripted'; allowed: vllm, jax, vllm-serve" in capsys.readouterr().err


SERVER_ROW = EngineRow("scripted-serve", "tests.catalog_server:CatalogServer", ("baseline", "dflash"),
                       EngineOptions(lambda: frozenset({"max_model_len", "dtype"})), serves="scripted")


def test_a_serving_engine_added_by_one_catalog_row_is_driven_per_level_and_reported(scripted_row, monkeypatch,
                                                                                     tmp_path, capsys):
    monkeypatch.setitem(catalog.ENGINES, SERVER_ROW.name, SERVER_ROW)
    path = matrix_file(tmp_path, engine="scripted-serve", concurrency=[1, 2])
    assert main(["matrix", str(path), "--run-dir", str(tmp_path / "run")]) == 0
    assert "scripted server healthy" in capsys.readouterr().out  # named from the row, never "vllm"
    records = RunStore(tmp_path / "run").record_objects()
    loads = sorted((r["concurrency"], r["label"]) for r in records if r["kind"] == "load")
    assert loads == [(1, "baseline"), (1, "dflash-k3"), (2, "baseline"), (2, "dflash-k3")]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Serving under load" in report
    assert "| local | dflash-k3 | 2 | 3 |" in report and "2.50" in report  # 10 ms / 4 ms per token, paired
