"""Every shipped matrix (configs/matrices/*.yaml) runs to its report through the command line, at a reduced size with
every axis kept: its engines, methods, K or K schedule, batch sizes, temperatures, datasets, context lengths, turns,
serving levels and capacity search (its SLO, load axis and search mode). What is tested is the report: every table and
figure renders, and each (cell, workload, level) has its summary row.

Reduced: 3 measured prompts (or the largest batch), 1 warm-up, 8 new tokens (the drift recheck as shipped, on every
measured prompt); a capacity search's range cut to its first 8 loads, its requests as shipped (fewer could never show
its percentile met). Substituted where this machine lacks what a matrix names: for a hub preset's models the tiny pair
of models/tiny (the preset's dtype kept, max_model_len cut to the tiny target's 2048 positions, the context lengths
scaled to fit them), and for a hub dataset a local file of prompts under its name. Engines: a JAX-only matrix of at
most `REAL_JAX_CELLS` cells runs the real JAX engine on CPU; every other engine (vLLM, llama.cpp, their servers, and
JAX in the larger or mixed matrices: about a minute of compiles per few cells) is scripted, its catalog row otherwise
kept (capabilities, workers, limits): a batch engine by tests/shipped_engine.py, a serving engine by
tests/slo_server.py, whose latencies grow with load."""
from __future__ import annotations

import csv
import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml

from benchmarks.cli import main
from benchmarks.config.matrix_expand import expand
from benchmarks.config.matrix_parse import load_matrix
from benchmarks.config.matrix_schema import Matrix
from benchmarks.config.yaml_files import read_yaml
from benchmarks.core.exit_codes import Exit
from benchmarks.core.paths import ROOT
from benchmarks.data.dataset_registry import DATASETS
from benchmarks.data.workloads import workloads
from benchmarks.engines import catalog
from benchmarks.report import report_write
from benchmarks.report.report_write import Written

pytestmark = pytest.mark.heavy

MATRICES = sorted((ROOT / "configs" / "matrices").glob("*.yaml"))
TINY = "tiny"
TINY_POSITIONS = 2048  # the tiny target's max_position_embeddings
TINY_CONTEXT = 1760  # the longest context of tiny-long-context.yaml; a longer one may not fit in whole shots
PROMPTS, NEW_TOKENS = 3, 8
SLO_LOADS = 8  # the loads of a capacity search's range kept
REAL_JAX_CELLS = 5  # a JAX-only matrix of at most this many cells runs the real engine (about a minute here)


def real_jax(path: Path) -> bool:
    """Whether the shipped matrix runs the real JAX engine here (the module's docstring says which do)."""
    shipped = load_matrix(path)
    return shipped.engines == ["jax"] and len(expand(shipped)) <= REAL_JAX_CELLS


def reduced(path: Path, tmp: Path) -> Path:
    """The shipped matrix at `path`, reduced and with its lacking inputs substituted (the module's docstring says
    how), as a file in `tmp`."""
    raw, shipped = read_yaml(path), load_matrix(path)
    raw.update(num_prompts=max(PROMPTS, *(shipped.batch_size or [1])), warmup_prompts=min(shipped.warmup_prompts, 1),
               max_new_tokens=NEW_TOKENS)
    if shipped.slo is not None:
        assert shipped.slo_range is not None and shipped.slo_step is not None
        low, step = shipped.slo_range[0], shipped.slo_step
        raw.update(slo_range=[low, min(shipped.slo_range[1], low + step * (SLO_LOADS - 1))],
                   num_prompts=shipped.num_prompts)
    if raw.get("preset") != TINY:
        options = dict(raw.get("engine_options") or {})
        options["dtype"] = options.get("dtype", shipped.engine_options.get("dtype"))
        options["max_model_len"] = min(options.get("max_model_len", TINY_POSITIONS), TINY_POSITIONS)
        raw = {k: v for k, v in raw.items() if k not in ("target", "drafts")}
        raw.update(preset=TINY, engine_options=options)
    if shipped.context_tokens and max(shipped.context_tokens) > TINY_CONTEXT:
        top = max(shipped.context_tokens)
        raw["context_tokens"] = [round(n * TINY_CONTEXT / top) for n in shipped.context_tokens]
    raw["datasets"] = [d.name if d.path is None and DATASETS[d.name].offline else local(tmp, d.name, raw["num_prompts"])
                       for d in shipped.datasets]
    out = tmp / path.name
    out.write_text(yaml.safe_dump(raw))
    return out


def local(tmp: Path, name: str, rows: int) -> dict[str, str]:
    """A local file of prompts standing in for hub dataset `name`, under its name: a row per measured prompt and one
    for the warm-up."""
    path = tmp / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{name} question {i}: what is {i} + {i}?"}) + "\n"
                            for i in range(rows + 1)))
    return {"name": name, "path": str(path)}


def host(monkeypatch: pytest.MonkeyPatch, keep_jax: bool) -> None:
    """Every engine of the catalog scripted (the JAX engine kept when `keep_jax`), each row otherwise as shipped; vLLM
    present, which the scripted engines stand in for (where it is absent, `matrix` refuses a vLLM engine)."""
    monkeypatch.setattr(catalog, "vllm_absence", lambda: None)
    for name, row in list(catalog.ENGINES.items()):
        if keep_jax and name == "jax":
            continue
        spec = "tests.slo_server:SloServer" if row.serves else "tests.shipped_engine:ShippedEngine"
        monkeypatch.setitem(catalog.ENGINES, name, dataclasses.replace(row, implementation=spec))


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[Written]:
    """What each `write_reports` of the command line returned, in order."""
    calls: list[Written] = []
    write = report_write.write_reports

    def recorded(run_dir: Path) -> Written:
        calls.append(write(run_dir))
        return calls[-1]

    monkeypatch.setattr(report_write, "write_reports", recorded)
    return calls


def workload_keys(m: Matrix) -> list[str]:
    return [w.key for w in workloads([d.name for d in m.datasets], m.context_tokens, m.turns)]


def expected_rows(m: Matrix, engines: dict[str, str]) -> set[tuple[str, str, float | None]]:
    """(cell id, workload, level) of each summary row a run of `m` owes, its cells' engines by id: a serving cell's
    at each of its levels (none in a capacity search without fixed levels), a batch cell's at none."""
    return {(c, key, level) for c, engine in engines.items() for key in workload_keys(m)
            for level in (m.concurrency if catalog.engine(engine).serves else [None])}


@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.jax] if real_jax(p) else [], id=p.stem)
                                  for p in MATRICES])
def test_a_shipped_matrix_runs_to_its_report(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             written: list[Written], capsys: pytest.CaptureFixture[str]) -> None:
    host(monkeypatch, keep_jax=real_jax(path))
    matrix, run_dir = reduced(path, tmp_path), tmp_path / "run"
    rc = main(["matrix", str(matrix), "--run-dir", str(run_dir)])
    assert rc == Exit.OK, f"{path.name}: exit {rc}\n{capsys.readouterr().err}"
    [done] = written
    assert done.failed == []
    report = (run_dir / "report.md").read_text()
    assert "\n## Results\n" in report and "- not drawn:" not in report
    figures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", report)
    assert figures and all((run_dir / f).is_file() for f in figures), figures
    m, manifest = load_matrix(matrix), done.summary.manifest
    assert len(manifest.cells) == len(expand(m))
    with open(run_dir / "summary.csv", newline="") as f:
        rows = [(r["cell_id"], r["dataset"], float(r["concurrency"]) if r["concurrency"] else None)
                for r in csv.DictReader(f)]
    engines = {c: cell.engine for c, cell in manifest.cells.items()}
    assert len(rows) == len(set(rows)) and set(rows) == expected_rows(m, engines)
    if m.slo:
        decided = {(d.workload, d.slo_index, c.cell_id) for d in done.summary.capacities for c in d.cells}
        assert decided == {(k, i, c) for k in workload_keys(m) for i in range(len(m.slo)) for c in engines}
        assert "\n## Capacity at a latency target\n" in report and (run_dir / "capacity.json").is_file()
