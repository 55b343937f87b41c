"""`cost-model --schedule --tree`: the node budget at each batch size from a run's largest-budget tree cell, priced by
the run's own steps at its budgets (a planted cost, 10 ms + 0.2 ms a verified row) or by a chip's roofline, and the
options it refuses."""
import pytest
import yaml

from benchmarks.cli import main
from benchmarks.core.paths import ROOT
from benchmarks.records.store import RunStore

CELL = {"engine": "jax", "target": "t", "temperature": 0.0, "max_new_tokens": 16, "seed": 0, "engine_options": {}}
DRAFT = str(ROOT / "models" / "tiny" / "dflash")
# Per prompt parity: the budget-8 tree's accepted paths, and the accept lengths of the budget-4 cell; 11 tokens after
# the first, every cell
PATHS = {0: [[1, 2, 3, 6, 8], [1, 2, 4], []], 1: [[1, 2, 5], [1, 3], [1, 2], []]}
ACCEPTED = {0: [3, 3, 2], 1: [2, 2, 2, 1]}


def cell(budget: int, batch: int) -> dict:
    if not budget:
        return {**CELL, "method": "baseline", "draft": None, "k": 0, "batch_size": batch}
    return {**CELL, "method": "ddtree", "draft": DRAFT, "k": 0, "batch_size": batch,
            "shape": {"budget": budget, "scheduled": False}}


def step_ms(batch: int, budget: int) -> float:
    return 10 + 0.2 * batch * (budget + 1)


def request(cid: str, budget: int, batch: int, i: int) -> dict:
    accepted = None if not budget else [len(p) for p in PATHS[i % 2]] if budget == 8 else ACCEPTED[i % 2]
    steps = len(accepted) if accepted else 11
    step = step_ms(batch, budget) * (1.02 if (i if batch == 1 else i // batch) % 2 else 0.98) / 1e3
    extra = {"step_s": step} if batch == 1 else {"batch_step_s": step}
    if budget == 8:
        extra["tree_paths"] = PATHS[i % 2]
    return {"kind": "request", "cell_id": cid, "label": f"ddtree-b{budget}" if budget else "baseline",
            "engine": "jax", "method": "ddtree" if budget else "baseline", "k": 0, "dataset": "humaneval",
            "prompt_index": i, "prompt_sha256": f"sha{i}", "n_prompt_tokens": 10, "n_out": 12, "ttft_ms": 20.0,
            "tpot_ms": 1e3 * step * steps / 11, "decode_s": step * steps, "output_ids": list(range(i, i + 12)),
            "accept_lengths": accepted, "extra": extra, **({"batch_index": i // batch} if batch > 1 else {})}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("treerun")
    cells = {f"b{budget}-B{batch}": cell(budget, batch) for budget in (0, 4, 8) for batch in (1, 4)}
    store = RunStore(folder)
    store.write_manifest({"run_id": "trees", "created_utc": "now", "config_path": "m.yaml", "git_sha": "abc",
                          "config": {"target": "t", "max_new_tokens": 16, "num_prompts": 8, "warmup_prompts": 0},
                          "cells": cells, "packages": {}, "platform": "cpu",
                          "hardware": {"device": "Test CPU", "bandwidth_gbps": None, "cache_bytes": None},
                          "models": {"t": {"config_sha256": "x", "weight_bytes": None}}})
    for cid, c in cells.items():
        budget = c["shape"]["budget"] if "shape" in c else 0
        store.write_unit_json(cid, "humaneval", [request(cid, budget, c["batch_size"], i) for i in range(8)])
    return folder


def test_the_runs_own_steps_pick_the_largest_budget_alone_and_a_smaller_one_in_a_batch(run, capsys):
    """τ(8) = 1 + 60/28 and τ(4) = 1 + 48/28 from the budget-8 paths; at B = 1, 3.14 / 11.8 ms beats 2.71 / 11; at
    B = 4, 2.71 / 14 beats 3.14 / 17.2 (and 5's 2.86 / 14.8, 6's 2.86 / 15.6)."""
    assert main(["cost-model", str(run), "--schedule", "--tree"]) == 0
    out = capsys.readouterr().out
    assert "## jax on humaneval: the draft tree's budget" in out and "| B | best budget |" in out
    assert "| 1 | **8** |" in out and "| 4 | **4** |" in out
    assert "measured best budget" in out  # beside the run's own grid of budgets 0, 4, 8
    folder = run / "k_schedule" / "jax-humaneval-tree"
    matrix = yaml.safe_load((folder / "matrix.yaml").read_text())
    assert matrix["tree_budget"] == {1: 8, 4: 4} and matrix["batch_size"] == [1, 4]
    assert matrix["methods"] == ["baseline", "ddtree"]
    assert (folder / "schedule.md").read_text().startswith("## jax on humaneval")


def test_a_chip_prices_the_verify_by_its_rows(run, capsys):
    argv = ["cost-model", "--chip", "v5e", "--tau-from", str(run), "--shape", "qwen3-4b", "--schedule", "--tree",
            "--batch", "1,4,64,256"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "the verify over B × (budget + 1) rows" in out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "**" in line]
    best = {int(r[0].strip("| ")): int(r[1].strip("*")) for r in rows}
    assert best[1] == best[4] == 8 and best[256] < best[1]  # 9 rows a request: far below the ridge at B = 4
    assert "measured best budget" not in out  # the run's CPU grid is no check of the chip's prices


@pytest.mark.parametrize("extra, fragment", [
    ([], "--tree picks the node budget of --schedule"),
    (["--schedule", "--cost-ks", "4"], "--cost-ks price or check a K schedule's steps, not a tree's"),
])
def test_options_a_tree_cannot_use_are_refused(run, capsys, extra, fragment):
    assert main(["cost-model", str(run), "--tree", *extra]) == 2
    assert fragment in capsys.readouterr().err


def test_a_run_without_tree_paths_is_refused_naming_the_fix(tmp_path, capsys):
    from tests.analysis.synthetic_run import write_run

    assert main(["cost-model", str(write_run(tmp_path / "run")), "--schedule", "--tree"]) == 2
    assert "no draft-tree row whose requests record their accepted paths" in capsys.readouterr().err
