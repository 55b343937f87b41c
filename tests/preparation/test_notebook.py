"""The reproduction notebook, executed end to end on CPU as a user would run it (parameters injected, no network)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest

from benchmarks.core.paths import ROOT
from preparation.execute_notebook import NOTEBOOK, main

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PIP_NO_INDEX": "1"}


def outputs(nb: nbformat.NotebookNode) -> list[dict[str, Any]]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def test_notebook_has_parameters_and_clone_step() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    for name in ("REPO_URL", "BRANCH", "DATASET", "N", "PRESET", "ENGINE", "WORKDIR", "CLONE"):
        assert f"\n{name} = " in "\n" + tagged[0].source
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for step in ("--recurse-submodules", "bash preparation/bootstrap.sh", "make bench", "summary.csv"):
        assert step in code
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # stored without outputs


@pytest.mark.slow
@pytest.mark.heavy  # the whole notebook (~36 s): make test ALL=1 and CI
def test_notebook_runs_end_to_end_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
    # the JAX engine: the notebook's steps are the same for either engine; vLLM cells interleaved in workers, as
    # `make bench` runs them on CPU, are tested in tests/run/test_vllm_interleave.py (here they would add 2 minutes)
    # as on a TPU machine: the kernel over unix sockets, without a TCP socket
    out = tmp_path / "run.ipynb"
    assert main(["--out", str(out), "CLONE=False", f"WORKDIR={ROOT}", "DATASET=humaneval", "N=2", "PRESET=tiny",
                 "ENGINE=jax"]) == 0
    nb = nbformat.read(out, as_version=4)
    assert sorted(p.name for p in (tmp_path / "run").iterdir())[0] == "figure-00.png"
    outs = outputs(nb)
    tables = [o["data"]["text/html"] for o in outs if "text/html" in o.get("data", {})]
    assert any("<table" in t and "humaneval" in t and "tau" in t and "dflash" in t for t in tables)
    assert any("image/png" in o.get("data", {}) for o in outs)
    markdown = "".join(o["data"].get("text/markdown", "") for o in outs if "data" in o)
    assert "no published row matches" in markdown  # a CPU run has no published counterpart, and says why
    assert not [o for o in outs if o.get("output_type") == "error"]
