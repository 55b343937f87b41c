"""The engine catalog's rows point into the engines' folders lazily: importing the run plan or `validate` imports no
engine folder, and every row's "module:name" resolves to what it names."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks.core.paths import ROOT
from benchmarks.engines import catalog
from benchmarks.engines.catalog import EngineOptions, PreRun


def test_importing_the_plan_and_validate_imports_no_engine_folder():
    code = ("import json, sys, benchmarks.run.plan, benchmarks.cli.validate; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('benchmarks.engines.'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    assert "benchmarks.engines.catalog" in loaded  # the plan reads the catalog ...
    folders = sorted({m.split(".")[2] for m in loaded if m.count(".") >= 2} & {"jax", "vllm", "llamacpp"})
    assert folders == []  # ... and no engine's folder


@pytest.mark.parametrize("row", catalog.ENGINES.values(), ids=lambda r: r.name)
def test_every_rows_lazy_names_resolve(row):
    assert isinstance(row.declaration, EngineOptions) and row.options()
    assert isinstance(row.pre_run_check(), PreRun)
    limit = row.largest_batch()
    assert limit is None or (isinstance(limit, int) and limit >= 1)


def test_the_pre_run_checks_run_once_per_measuring_engine(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(catalog, "resolve", lambda spec: lambda: calls.append(spec) or PreRun(builds=(spec,)))
    found = catalog.pre_run_checks(["llama.cpp-serve", "llama.cpp", "jax", "vllm-serve"])
    assert calls == [".llamacpp.llamacpp_build:pre_run", ".vllm.vllm_options:pre_run"]  # jax has none
    assert [f.builds for f in found] == [(calls[0],), (), (calls[1],)]


def test_only_the_jax_engine_runs_the_draft_trees():
    assert [name for name, row in catalog.ENGINES.items() if "ddtree" in row.methods] == ["jax"]
