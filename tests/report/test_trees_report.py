"""report.md's draft-tree section (report/trees_report.py) on a hand-made greedy run with AR, DFlash K = 3 and trees
at budgets 4 and 8: τ, speedup and rows per step against the budget, and τ at budget 4 estimated from the budget-8
run's paths beside the one measured."""
import pytest

from benchmarks.analysis.summary import summarize_run
from benchmarks.analysis.tree_curve import tree_curve
from benchmarks.records.store import RunStore
from benchmarks.report.trees_report import trees_markdown

CELL = {"engine": "jax", "target": "t", "temperature": 0.0, "max_new_tokens": 16, "seed": 0, "engine_options": {}}
TREE = {**CELL, "method": "ddtree", "draft": "d", "k": 0}
CELLS = {"base": {**CELL, "method": "baseline", "draft": None, "k": 0},
         "dfl": {**CELL, "method": "dflash", "draft": "d", "k": 3},
         "t4": {**TREE, "shape": {"budget": 4, "scheduled": False}},
         "t8": {**TREE, "shape": {"budget": 8, "scheduled": False}}}
LABELS = {"base": "baseline", "dfl": "dflash-k3", "t4": "ddtree-b4", "t8": "ddtree-b8"}
# Per prompt, 10 tokens after the first: the budget-8 tree's accepted paths, and each cell's accept lengths
PATHS = [[[1, 2, 5], [1, 3, 6, 8], []], [[1, 2], [1, 2, 3], [1], []], [[1, 3, 7, 8], [2, 5, 6], []],
         [[1], [1], [1], [1], [], []]]
ACCEPTED = {"dfl": [[3, 3, 1]] * 4, "t4": [[2, 2, 2, 0], [1, 2, 1, 2], [3, 3, 1], [1, 1, 1, 1, 0, 0]],
            "t8": [[len(p) for p in paths] for paths in PATHS]}
TPOT = {"base": 10.0, "dfl": 5.0, "t4": 4.0, "t8": 4.5}


def request(cid, i):
    cell, tpot = CELLS[cid], TPOT[cid] * (1 + 0.03 * ((i * 7 + len(cid)) % 5 - 2))
    extra = {"tree_paths": PATHS[i], "tree_rows": [9] * len(PATHS[i])} if cid == "t8" else {}
    return {"kind": "request", "cell_id": cid, "label": LABELS[cid], "engine": "jax", "method": cell["method"],
            "k": cell["k"], "dataset": "humaneval", "prompt_index": i, "prompt_sha256": f"sha{i}",
            "n_prompt_tokens": 10, "n_out": 11, "ttft_ms": 20.0, "tpot_ms": tpot, "decode_s": tpot / 100,
            "output_ids": list(range(i, i + 11)), "accept_lengths": ACCEPTED.get(cid, [None] * 4)[i], "extra": extra}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trees")
    store = RunStore(folder)
    store.write_manifest({"run_id": "trees", "created_utc": "now", "config_path": "m.yaml", "git_sha": "abc",
                          "config": {"target": "t", "max_new_tokens": 16, "num_prompts": 4, "warmup_prompts": 0},
                          "cells": CELLS, "packages": {}, "platform": "cpu",
                          "hardware": {"device": "Test CPU", "bandwidth_gbps": None, "cache_bytes": None},
                          "models": {"t": {"config_sha256": "x", "weight_bytes": None}}})
    for cid in CELLS:
        store.write_unit_json(cid, "humaneval", [request(cid, i) for i in range(4)])
    return folder


@pytest.fixture(scope="module")
def summary(run_dir):
    return summarize_run(RunStore(run_dir))


def table_rows(md, header):
    block = md.split(header, 1)[1].split("\n\n", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()[2:]]


def test_tau_speedup_and_rows_against_the_budget(summary):
    md = trees_markdown(summary.units, summary.rows)
    assert md is not None
    rows = table_rows(md, "| dataset | B | T | engine | method | τ |")
    assert [r[4] for r in rows] == ["baseline", "dflash-k3", "ddtree-b4", "ddtree-b8"]
    assert [r[5] for r in rows] == ["1.00", "3.33", "2.35", "2.50"]  # 1 + 28/12, 1 + 23/17, 1 + 24/16
    assert [r[7] for r in rows] == ["1.0", "4.0", "5.0", "9.0"]
    by_label = {r.label: r for r in summary.rows}
    assert rows[3][6].startswith(f"{by_label['ddtree-b8'].speedup:.2f}")


def test_tau_at_a_smaller_budget_from_the_largest_budgets_run(summary):
    md = trees_markdown(summary.units, summary.rows)
    assert md is not None
    rows = table_rows(md, "| dataset | B | T | engine | budget |")
    t8 = next(u for u in summary.units if u.cell.tree_budget == 8)
    est = tree_curve(t8.reqs, 8).at(4)
    assert est.value == pytest.approx(1 + 17 / 16)
    within = "yes" if est.low <= 1 + 23 / 17 <= est.high else "no"
    assert rows == [["humaneval", "1", "0", "jax", "4", f"{est.value:.2f} [{est.low:.2f}, {est.high:.2f}]", "2.35",
                     within],
                    ["humaneval", "1", "0", "jax", "8", md.split("| 8 | ", 1)[1].split(" |")[0], "2.50", "yes"]]


def test_a_run_without_trees_has_no_section(summary):
    units = [u for u in summary.units if not u.cell.tree_budget]
    rows = [r for u, r in zip(summary.units, summary.rows) if not u.cell.tree_budget]
    assert len(rows) == 2 and trees_markdown(units, rows) is None



def test_the_whole_report_renders_with_tree_rows(run_dir, tmp_path):
    """report.md, summary.csv, speculation_profile.json and the figures of a run with tree rows, nothing failing;
    each tree row's profile is per depth, every check passing."""
    import json
    import shutil

    from benchmarks.report.report_write import write_reports

    run = shutil.copytree(run_dir, tmp_path / "run")
    written = write_reports(run)
    assert written.failed == [] and (run / "report.md").read_text().startswith("# Run trees")
    profiles = {p["label"]: p for p in json.loads((run / "speculation_profile.json").read_text())["profiles"]}
    tree = profiles["ddtree-b8"]["sources"]["requests"]
    assert tree["marginal"] == pytest.approx([11 / 16, 6 / 16, 5 / 16, 2 / 16])  # depths 1..4
    assert all(c["ok"] for p in profiles.values() for c in p["sources"]["requests"]["checks"].values())
    assert "ddtree-b4" in (run / "summary.csv").read_text()


def test_tau_against_k_leaves_the_trees_out(summary):
    """A tree has no K: τ against K draws the chain alone (the Draft trees section has τ against the budget)."""
    from benchmarks.analysis.summary_csv import summary_frame
    from benchmarks.analysis.tree_curve import row_tau
    from benchmarks.figures.run_figures import tau_vs_k_figure

    frame = summary_frame(summary.rows)
    frame["tau"] = [row_tau(u, r.tau) for u, r in zip(summary.units, summary.rows)]  # the rows carry no counters
    fig = tau_vs_k_figure(frame)
    assert fig is not None
    _, labels = fig.axes[0].get_legend_handles_labels()
    assert [x.split(" ·")[0] for x in labels] == ["dflash", "ceiling K+1"]


def test_the_trees_figure_draws_tau_and_speedup_against_the_budget(summary):
    """Measured τ at budgets 4 and 8, the estimate at every budget 1..8 from the budget-8 run, DFlash's line."""
    from benchmarks.figures.run_figures import tree_figure

    fig = tree_figure(summary)
    assert fig is not None
    ax_tau, ax_speed = fig.axes[:2]
    measured = next(line for line in ax_tau.get_lines() if line.get_label().endswith(": measured"))
    assert list(measured.get_xdata()) == [4, 8] and list(measured.get_ydata()) == pytest.approx([1 + 23 / 17, 2.5])
    estimate = next(line for line in ax_tau.get_lines() if "from b = 8" in str(line.get_label()))
    assert len(estimate.get_xdata()) == 8 and estimate.get_ydata()[3] == pytest.approx(1 + 17 / 16)
    assert any("dflash-k3" in str(line.get_label()) for line in ax_speed.get_lines())


def test_tau_ratio_of_each_tree_to_the_chain_paired_over_prompts(summary):
    """Every cell decodes each prompt to the same tokens, so each tree's τ over the chain's is Σ chain steps / Σ tree
    steps over the four prompts: 12 / 17 at budget 4 and 12 / 16 at budget 8."""
    md = trees_markdown(summary.units, summary.rows)
    assert md is not None
    rows = table_rows(md, "| dataset | B | engine | tree | chain |")
    assert [(r[3], r[4], r[6]) for r in rows] == [("ddtree-b4", "dflash-k3", "4 of 4"),
                                                  ("ddtree-b8", "dflash-k3", "4 of 4")]
    assert [float(r[5].split()[0]) for r in rows] == [pytest.approx(12 / 17, abs=0.005),
                                                      pytest.approx(12 / 16, abs=0.005)]
    assert all("[" in r[5] for r in rows)  # an interval over the prompts
