"""The worked example of each extension guide (docs/*-guide.md) runs as the page shows it: an engine added by its
options and one catalog row, a dataset by one registry row, a matrix key as declared, a summary column by one
registry entry, a study by one module and one command line."""
from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sys
from types import ModuleType

import pytest

from benchmarks.cli import COMMANDS, main
from benchmarks.core.paths import ROOT

EXAMPLE = re.compile(r"<!-- example: ([a-z-]+) -->\n```[a-z]*\n(.*?)```", re.S)


def examples(page: str) -> dict[str, str]:
    return dict(EXAMPLE.findall((ROOT / "docs" / page).read_text()))


def as_module(code: str, name: str, tmp_path, monkeypatch) -> ModuleType:
    """The block saved as `name`.py on the import path, imported."""
    (tmp_path / f"{name}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def test_engine_guide_an_echo_engine_runs_a_matrix(tmp_path, monkeypatch, capsys):
    from benchmarks.engines import catalog
    from benchmarks.records.store import RunStore

    ex = examples("engine-guide.md")
    module = as_module(ex["engine"], "echo_engine", tmp_path, monkeypatch)
    monkeypatch.setitem(catalog.ENGINES, "echo", module.ROW)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(3)))
    matrix = tmp_path / "echo.yaml"
    matrix.write_text(ex["engine-matrix"].replace("prompts.jsonl", str(prompts)))
    assert main(["validate", str(matrix)]) == 0
    typo = tmp_path / "typo.yaml"
    typo.write_text(matrix.read_text().replace("step_ms", "stepms"))
    assert main(["validate", str(typo)]) == 2
    assert "'stepms' is not an option of the echo engine" in capsys.readouterr().err
    assert main(["matrix", str(matrix), "--run-dir", str(tmp_path / "run")]) == 0
    requests = [r for r in RunStore(tmp_path / "run").record_objects() if r["kind"] == "request"]
    assert len(requests) == 2 and all(r["engine"] == "echo" and r["n_out"] == 4 for r in requests)
    assert all(r["tpot_ms"] == pytest.approx(2.0) for r in requests)  # the option reached the engine


def test_dataset_guide_a_registry_row_is_lacking_offline_and_renders_its_rows(tmp_path, monkeypatch, capsys):
    from benchmarks.data import dataset_registry, prompts

    ex = examples("dataset-guide.md")
    spec = as_module(ex["dataset"], "arc_dataset", tmp_path, monkeypatch).SPEC
    monkeypatch.setitem(dataset_registry.DATASETS, spec.name, spec)
    matrix = tmp_path / "arc.yaml"
    matrix.write_text("name: arc\npreset: tiny\nengine: jax\ndatasets: [arc-easy]\n")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["validate", str(matrix)]) == 5  # the hub is out of reach: lacking, never replaced
    assert "lacking: " in (err := capsys.readouterr().err) and "dataset 'arc-easy'" in err and "allenai/ai2_arc" in err
    rows = json.loads(ex["dataset-rows"])
    monkeypatch.setattr(dataset_registry, "_hub_rows", lambda s: rows if s is spec else [])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "models" / "tiny" / "target")
    chosen = prompts.select_prompts("arc-easy", 2, 0, tokenizer).prompts
    sent = {p.index: p.text for p in chosen}
    assert sent[0] == ex["dataset-prompt"].rstrip("\n")
    assert spec.answer(rows[1]) == "A"


def test_matrix_key_guide_the_declaration_is_the_schemas_and_parses(tmp_path, capsys):
    from benchmarks.config.matrix_parse import load_matrix

    ex = examples("matrix-key-guide.md")
    assert ex["key-declaration"] in (ROOT / "benchmarks" / "config" / "matrix_schema.py").read_text()
    path = tmp_path / "warm.yaml"
    path.write_text(ex["key-matrix"])
    matrix = load_matrix(path)
    assert matrix.warmup_prompts == 2 and isinstance(matrix.warmup_prompts, int)
    path.write_text(ex["key-matrix"].replace("warmup_prompts: 2", "warmup_prompts: -1"))
    assert main(["validate", str(path)]) == 2
    assert "'warmup_prompts': expected an int >= 0, got -1" in capsys.readouterr().err


def test_column_guide_a_registry_entry_reaches_every_row(tmp_path, monkeypatch):
    from benchmarks.analysis import columns
    from benchmarks.analysis.summary import summarize_run
    from benchmarks.records.store import RunStore
    from tests.analysis.synthetic_run import write_run

    column = as_module(examples("column-guide.md")["column"], "n_out_column", tmp_path, monkeypatch).COLUMN
    monkeypatch.setattr(columns, "COLUMNS", (*columns.COLUMNS, column))
    row_type = dataclasses.make_dataclass("Row", [(column.name, "float | None", dataclasses.field(default=None))],
                                          bases=(columns.SummaryRow,), frozen=True, kw_only=True)
    monkeypatch.setattr(columns, "SummaryRow", row_type)
    summary = summarize_run(RunStore(write_run(tmp_path / "run")))
    checked = 0
    for row, unit in zip(summary.rows, summary.units, strict=True):
        reqs = unit.reqs
        assert row.n_out_mean == (sum(r.n_out for r in reqs) / len(reqs) if reqs else None)
        checked += bool(reqs)
    assert checked > 5


def test_study_guide_a_module_and_a_command_line_make_a_study(tmp_path, monkeypatch, capsys):
    ex = examples("study-guide.md")
    as_module(ex["study"], "floor_study", tmp_path, monkeypatch)
    name, (module, about) = next(iter(eval("{" + ex["study-command"] + "}").items()))
    assert (name, module) == ("floor", "benchmarks.studies.floor")
    monkeypatch.setitem(COMMANDS["study"][1], name, ("floor_study", about))
    assert main(["study", "floor", "--shape", "qwen3-4b", "--chip", "v5e"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == re.search(r"prints\n`(.*?)`", (ROOT / "docs" / "study-guide.md").read_text()).group(1)
    assert main(["study", "floor", "--chip", "v9"]) == 2
    assert "--chip v9: not one of" in capsys.readouterr().err
