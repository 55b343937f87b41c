"""A run folder named by the run id of before IDENTITY_VERSION 1 resumes with no unit measured again: found as the
matrix's default folder, or given as --run-dir; one `note:` line says so. Engine-free: a scripted engine joins the
catalog."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks import cli
from benchmarks.config.matrix_expand import legacy_run_id, run_id_for
from benchmarks.config.matrix_parse import load_matrix
from benchmarks.core.paths import ROOT
from benchmarks.engines import catalog
from benchmarks.engines.catalog import EngineOptions, EngineRow
from benchmarks.records.store import RunStore
from benchmarks.run import plan

TINY = ROOT / "models" / "tiny"


@pytest.fixture(autouse=True)
def scripted(monkeypatch, tmp_path):
    monkeypatch.setitem(catalog.ENGINES, "scripted", EngineRow(
        "scripted", "tests.catalog_engine:CatalogEngine", ("baseline", "dflash"),
        EngineOptions(lambda: frozenset({"step_ms", "max_model_len"}))))
    monkeypatch.setattr(plan, "RUNS_DIR", tmp_path / "runs")


def matrix_file(tmp_path: Path) -> Path:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(4)))
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({
        "name": "legacy", "target": str(TINY / "target"), "drafts": {"dflash": str(TINY / "dflash")},
        "engine": "scripted", "methods": ["baseline", "dflash"], "k": [3], "max_new_tokens": 8, "num_prompts": 2,
        "warmup_prompts": 0, "drift_prompts": 0, "datasets": [{"name": "local", "path": str(prompts)}],
        "engine_options": {"max_model_len": 512}}))
    return path


def run(argv: list, capsys) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


@pytest.mark.parametrize("explicit", [False, True])
def test_a_folder_of_the_former_run_id_resumes_with_one_note(tmp_path, capsys, explicit):
    path = matrix_file(tmp_path)
    matrix = load_matrix(path)
    old, new = plan.RUNS_DIR / legacy_run_id(matrix), plan.RUNS_DIR / run_id_for(matrix)
    assert old != new
    assert run(["matrix", path, "--run-dir", old], capsys)[0] == 0  # the folder a run of before would have made
    records = RunStore(old).record_objects()
    assert records and json.loads((old / "manifest.json").read_text())["run_id"] == old.name

    again = ["matrix", path] + (["--run-dir", old] if explicit else [])
    rc, out, err = run(again + ["--plan"], capsys)
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert rc == 0 and len(notes) == 1 and old.name in notes[0] and "0 to run" in out
    rc, out, err = run(again, capsys)
    assert rc == 0 and sum(line.startswith("note:") for line in err.splitlines()) == 1
    assert RunStore(old).record_objects() == records and not new.exists()
