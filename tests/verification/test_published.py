"""Reference data validation and the published-vs-ours comparison on hand-made summaries."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.cli import main
from benchmarks.data import reference
from benchmarks.data.reference import ReferenceDataError, load_k_flat, load_reference
from benchmarks.report.published_report import comparison_markdown
from tests.typed_runs import manifest, request
from verification.published import hardware_matches, model_key

V5P_JSON = {"run_id": "tpu-run", "platform": "tpu", "hardware": {"device": "TPU v5p", "bandwidth_gbps": 2765.0}}
V5P_MANIFEST = manifest(V5P_JSON)
CPU_MANIFEST = manifest({"run_id": "cpu-run", "platform": "cpu",
                         "hardware": {"device": "AMD EPYC 7B13 64-Core Processor", "bandwidth_gbps": None}})


def _summary(hardware: str, target: str, draft: str, max_new_tokens: int, dataset: str, n: int,
             ar_tpot: float, tpot: float, tau: float) -> pd.DataFrame:
    common = {"run_id": "r", "engine": "jax", "platform": "x", "hardware": hardware, "target": target,
              "temperature": 0.0, "max_new_tokens": max_new_tokens, "dataset": dataset, "n_prompts": n}
    return pd.DataFrame([
        dict(common, cell_id="base0", label="baseline", method="baseline", draft=None, k=0, tau=None,
             tpot_ms_mean=ar_tpot, speedup=1.0, speedup_mean_ratio=1.0),
        dict(common, cell_id="dfl15", label="dflash-k15", method="dflash", draft=draft, k=15, tau=tau,
             tpot_ms_mean=tpot, speedup=ar_tpot / tpot * 0.97, speedup_mean_ratio=ar_tpot / tpot),
    ])


def test_reference_files_load_and_hold_the_published_numbers() -> None:
    ref = load_reference()
    v5p = ref[ref["table"] == "tpu_v5p_qwen3_4b"].set_index("dataset")
    assert len(v5p) == 10
    assert v5p.loc["math500", ["tau", "speedup", "tpot_ar_ms", "tpot_ms"]].tolist() == [8.80, 5.72, 8.02, 1.40]
    mean = ref[(ref["table"] == "tpu_v5p_qwen3_4b") & (ref["stat"] == "mean")].iloc[0]
    assert (mean["tau"], mean["speedup"]) == (5.42, 3.13)
    llama = ref[ref["table"] == "tpu_v5p_llama31_8b"]
    assert sorted(zip(llama["method"], llama["k"], llama["stat"], llama["speedup"])) == [
        ("dflash", 10.0, "max", 2.69), ("dflash", 10.0, "overall", 2.29), ("dflash", 10.0, "value", 2.83),
        ("eagle3", 2.0, "overall", 1.30)]
    b200 = ref[ref["table"] == "gpu_b200_qwen3_8b"]
    eagle = b200[b200["method"] == "eagle3"].iloc[0]
    assert (eagle["speedup_low"], eagle["speedup_high"], eagle["tau_low"], eagle["tau_high"]) == (2.1, 2.5, 2.7, 3.4)
    # conditions NOTES does not give stay empty
    assert llama["temperature"].isna().all() and b200["max_new_tokens"].isna().all()
    assert (ref["source"].str.len() > 0).all() and (ref["source_ref"].str.len() > 0).all()


def test_k_flat_forward_time_is_below_the_v5p_floor() -> None:
    k_flat = load_k_flat()
    fwd = k_flat[k_flat["claim"] == "forward_time"].iloc[0]
    assert (fwd["forward_ms"], fwd["floor_ms"]) == (1.31, 2.9)
    assert bool(fwd["below_floor"])
    ratios = k_flat[k_flat["claim"] == "verify_cost_vs_k"].set_index("hardware")
    assert ratios.loc["NVIDIA RTX 2000 Ada", "cost_ratio_high"] == 1.24
    assert ratios.loc["TPU v5p", "k_max"] == 1024


def test_loader_rejects_inconsistent_files(tmp_path: Path) -> None:
    for f in reference.REFERENCE_DIR.glob("*.csv"):
        shutil.copy(f, tmp_path / f.name)
    path = tmp_path / "tpu_v5p_qwen3_4b.csv"
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[df["dataset"] == "math500", "tau"] = "9.80"  # the mean row no longer agrees
    df.to_csv(path, index=False)
    with pytest.raises(ReferenceDataError, match="mean row tau"):
        load_reference(tmp_path)
    df.loc[df["dataset"] == "math500", "tau"] = "8.80"
    df.loc[df["dataset"] == "math500", "speedup"] = "4.00"  # disagrees with 8.02 / 1.40
    df.to_csv(path, index=False)
    with pytest.raises(ReferenceDataError, match=r"tpu_v5p_qwen3_4b.csv:2: speedup 4.0 disagrees"):
        load_reference(tmp_path)


def test_name_normalisation() -> None:
    assert model_key("Qwen/Qwen3-4B") == model_key("/models/Qwen3-4B/") == "qwen34b"
    assert model_key("/hf/hub/models--Qwen--Qwen3-4B/snapshots/0123abcd") == "qwen34b"
    assert model_key("meta-llama/Meta-Llama-3.1-8B-Instruct") == model_key("meta-llama/Llama-3.1-8B-Instruct")
    assert model_key("Qwen/Qwen3-4B") != model_key("Qwen/Qwen3-4B-Instruct-2507")
    assert hardware_matches("TPU v5p", "TPU v5p-8") and hardware_matches("TPU v5", "TPU v5p-8")
    assert hardware_matches("TPU v5p-8", "TPU v5p")  # the runner names a TPU by its accelerator type
    assert hardware_matches("NVIDIA H100 80GB HBM3", "H100")
    assert not hardware_matches("TPU v5 lite", "TPU v5p-8")
    assert not hardware_matches("AMD EPYC 7B13", "TPU v5p-8")


def test_matching_v5p_run_gives_published_ours_and_ratio() -> None:
    summary = _summary("TPU v5p", "/checkpoints/Qwen3-4B", "z-lab/Qwen3-4B-DFlash-b16", 256, "math500", 8,
                       ar_tpot=8.10, tpot=1.62, tau=8.36)
    md = comparison_markdown(summary, V5P_MANIFEST)
    assert "| math500 | dflash-k15 | τ (pooled, both) | 8.80 | 8.36 | 0.95 |" in md
    assert "| math500 | dflash-k15 | speedup (mean-TPOT ratio) | 5.72 | 5.00 | 0.87 |" in md
    assert "| math500 | dflash-k15 | AR TPOT (ms) | 8.02 | 8.10 | 1.01 |" in md
    assert "| math500 | dflash-k15 | TPOT (ms) | 1.40 | 1.62 | 1.16 |" in md
    assert "harness 'standalone JAX runner' (published) vs engine 'jax' (ours)" in md
    assert "mean row not compared for dflash-k15: the run lacks aime24" in md
    assert "no published row matches" not in md


def test_b200_tau_is_compared_with_our_per_prompt_mean() -> None:
    """The B200 table's τ is a per-prompt mean: ours is taken from tau_prompt_mean, not the pooled tau."""
    summary = _summary("NVIDIA B200", "Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16", 256, "math500", 8,
                       ar_tpot=10.0, tpot=2.0, tau=6.0)
    summary["tau_prompt_mean"] = [None, 7.0]
    md = comparison_markdown(summary, manifest({"run_id": "b", "platform": "gpu",
                                                "hardware": {"device": "NVIDIA B200"}}))
    assert "| math500 | dflash-k15 | τ (prompt mean, inferred, both) | 7.87 | 7.00 | 0.89 |" in md
    assert "its τ statistic (prompt mean) is inferred: the publication does not say" in md
    ref = load_reference()
    b200 = ref[ref["table"] == "gpu_b200_qwen3_8b"]
    assert set(b200["tau_statistic"]) == {"prompt_mean"} and set(b200["tau_statistic_basis"]) == {"inferred"}


def test_the_v5p_tau_statistic_is_its_named_harness_s_and_not_marked_inferred() -> None:
    ref = load_reference()
    v5p = ref[(ref["table"] == "tpu_v5p_qwen3_4b")]
    assert set(v5p["tau_statistic_basis"]) == {"harness"} and set(v5p["harness"]) == {"standalone JAX runner"}
    llama = ref[ref["table"] == "tpu_v5p_llama31_8b"]  # no τ: neither a statistic nor its basis
    assert set(llama["tau_statistic"]) == {""} and set(llama["tau_statistic_basis"]) == {""}
    summary = _summary("TPU v5p", "Qwen/Qwen3-4B", "z-lab/Qwen3-4B-DFlash-b16", 256, "math500", 8,
                       ar_tpot=8.10, tpot=1.62, tau=8.36)
    assert "inferred" not in comparison_markdown(summary, V5P_MANIFEST)


@pytest.mark.parametrize("table, dataset, value, fragment", [
    ("gpu_b200_qwen3_8b", "math500", "", "tau_statistic_basis '' is not one of"),
    ("gpu_b200_qwen3_8b", "math500", "guessed", "tau_statistic_basis 'guessed' is not one of"),
    ("tpu_v5p_llama31_8b", "mbpp", "stated", "tau_statistic_basis is set but the row has no τ"),
])
def test_a_tau_statistic_must_say_what_it_rests_on(tmp_path: Path, table, dataset, value, fragment) -> None:
    for f in reference.REFERENCE_DIR.glob("*.csv"):
        shutil.copy(f, tmp_path / f.name)
    path = tmp_path / f"{table}.csv"
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[df["dataset"] == dataset, "tau_statistic_basis"] = value
    df.to_csv(path, index=False)
    with pytest.raises(ReferenceDataError, match=fragment):
        load_reference(tmp_path)


def test_a_tau_without_its_statistic_is_refused(tmp_path: Path) -> None:
    for f in reference.REFERENCE_DIR.glob("*.csv"):
        shutil.copy(f, tmp_path / f.name)
    path = tmp_path / "tpu_v5p_qwen3_4b.csv"
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[df["dataset"] == "math500", "tau_statistic"] = ""
    df.to_csv(path, index=False)
    with pytest.raises(ReferenceDataError, match="tau_statistic"):
        load_reference(tmp_path)


def test_cpu_tiny_run_says_no_row_matches_and_why() -> None:
    summary = _summary("AMD EPYC 7B13 64-Core Processor", "models/tiny/target", "models/tiny/dflash", 128,
                       "humaneval", 2, ar_tpot=3.0, tpot=1.5, tau=3.2)
    md = comparison_markdown(summary, CPU_MANIFEST)
    assert "|---|" not in md  # nothing is compared
    assert "- dflash-k15 (cell dfl15): no published row matches humaneval." in md
    v5p_line = next(line for line in md.splitlines() if line.strip().startswith("- vs tpu_v5p_qwen3_4b"))
    for expected in ("hardware AMD EPYC 7B13 64-Core Processor (ours) vs TPU v5p-8 (published)",
                     "target models/tiny/target (ours) vs Qwen/Qwen3-4B (published)",
                     "draft models/tiny/dflash (ours) vs z-lab/Qwen3-4B-DFlash-b16 (published)",
                     "max_new_tokens 128 (ours) vs 256 (published)",
                     "same method dflash, k 15, temperature 0"):
        assert expected in v5p_line
    b200_line = next(line for line in md.splitlines() if line.strip().startswith("- vs gpu_b200_qwen3_8b"))
    assert "not stated by the publication: draft, k, max_new_tokens" in b200_line


def test_baseline_only_run() -> None:
    summary = _summary("TPU v5p", "Qwen/Qwen3-4B", "", 256, "math500", 8, 8.0, 1.0, 1.0).iloc[:1]
    assert "nothing to compare" in comparison_markdown(summary, V5P_MANIFEST)


def test_cli_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command recomputes the run's summary from its records: 8 humaneval prompts at AR TPOT 7.70 ms and DFlash
    2.20 ms, τ 5.70 (47 accepted drafts in 10 steps)."""
    cell = {"engine": "jax", "target": "Qwen/Qwen3-4B", "temperature": 0.0, "max_new_tokens": 256, "seed": 0,
            "engine_options": {}}
    cells = {"base0": {**cell, "method": "baseline", "draft": None, "k": 0},
             "dfl15": {**cell, "method": "dflash", "draft": "z-lab/Qwen3-4B-DFlash-b16", "k": 15}}
    arms = (("base0", "baseline", 7.70), ("dfl15", "dflash-k15", 2.20))
    records = [request(cell_id=cid, label=label, method=cells[cid]["method"], k=cells[cid]["k"], prompt_index=i,
                       tpot_ms=tpot) for cid, label, tpot in arms for i in range(8)]
    records.append({"kind": "spec", "cell_id": "dfl15", "label": "dflash-k15", "dataset": "humaneval",
                    "num_drafts": 10, "num_draft_tokens": 150, "num_accepted_tokens": 47, "accepted_per_pos": [10] * 4})
    (tmp_path / "manifest.json").write_text(json.dumps({**V5P_JSON, "cells": cells, "config": {}}))
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["check", "published", str(tmp_path)]) == 0
    assert "| humaneval | dflash-k15 | τ (pooled, both) | 5.76 | 5.70 | 0.99 |" in capsys.readouterr().out
    assert main(["check", "published", str(tmp_path / "missing")]) == 2


H200_MANIFEST = manifest({"run_id": "h200-run", "platform": "gpu", "hardware": {"device": "NVIDIA H200"}})
TREE_TARGETS = ("Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-Coder-30B-A3B-Instruct")
TREE_DATASETS = ("math500", "gsm8k", "aime24", "aime25", "humaneval", "mbpp", "livecodebench", "swe-bench",
                 "mt-bench", "alpaca")


def _with_tree_row(summary: pd.DataFrame, tau_prompt_mean: float, speedup: float) -> pd.DataFrame:
    """A run's summary with a ddtree-b64 row beside its DFlash row (a tree cell has K = 0)."""
    tree = summary[summary["method"] == "dflash"].copy()
    tree[["cell_id", "label", "method", "k"]] = ["tree64", "ddtree-b64", "ddtree", 0]
    tree[["tau_prompt_mean", "speedup_mean_ratio"]] = [tau_prompt_mean, speedup]
    return pd.concat([summary, tree], ignore_index=True)


def test_the_tree_table_is_complete_and_holds_the_published_numbers() -> None:
    """Every dataset x target x temperature has a DFlash and a DDTree row with τ and speedup, under the paper's
    stated conditions; spot values as published; DDTree beats DFlash in every entry, as the paper says of its
    table."""
    ref = load_reference()
    tree = ref[ref["table"] == reference.TREE_TABLE]
    assert len(tree) == 120 and set(tree["stat"]) == {"value"}
    keys = set(zip(tree["dataset"], tree["target"], tree["temperature"], tree["method"]))
    assert keys == {(d, t, temp, m) for d in TREE_DATASETS for t in TREE_TARGETS for temp in (0.0, 1.0)
                    for m in ("dflash", "ddtree")}
    assert tree[["tau", "speedup"]].notna().all().all() and (tree["tau"] >= 1).all()
    for col, value in (("hardware", "NVIDIA H200"), ("max_new_tokens", 2048), ("block_size", 16),
                       ("batch_size", 1), ("warmup_prompts", 1), ("tau_statistic", "prompt_mean"),
                       ("tau_statistic_basis", "harness")):
        assert set(tree[col]) == {value}, col
    assert set(tree.loc[tree["method"] == "dflash", "k"]) == {15.0}
    assert tree.loc[tree["method"] == "ddtree", "k"].isna().all()  # a tree has no K; its budget is not published
    counts = tree.drop_duplicates("dataset").set_index("dataset")["prompts_per_dataset"]
    assert counts.to_dict() == {"math500": 128, "gsm8k": 128, "aime24": 30, "aime25": 30, "humaneval": 164,
                                "mbpp": 128, "livecodebench": 128, "swe-bench": 128, "mt-bench": 80, "alpaca": 128}
    at = tree.set_index(["dataset", "target", "temperature", "method"])
    assert at.loc[("math500", "Qwen/Qwen3-4B", 0.0, "dflash"), ["tau", "speedup"]].tolist() == [7.72, 5.54]
    assert at.loc[("math500", "Qwen/Qwen3-4B", 0.0, "ddtree"), ["tau", "speedup"]].tolist() == [10.71, 7.50]
    assert at.loc[("mt-bench", "Qwen/Qwen3-4B", 0.0, "ddtree"), ["tau", "speedup"]].tolist() == [6.70, 4.18]
    assert at.loc[("humaneval", "Qwen/Qwen3-Coder-30B-A3B-Instruct", 1.0, "ddtree"), ["tau", "speedup"]].tolist() \
        == [10.42, 7.88]
    assert at.loc[("alpaca", "Qwen/Qwen3-8B", 1.0, "dflash"), ["tau", "speedup"]].tolist() == [2.94, 1.95]
    dflash = at.xs("dflash", level="method")
    ddtree = at.xs("ddtree", level="method").loc[dflash.index]
    assert (ddtree["tau"] > dflash["tau"]).all() and (ddtree["speedup"] > dflash["speedup"]).all()


@pytest.mark.parametrize("column, value, fragment", [
    ("dataset", "leetcode", "dataset 'leetcode' is not one of"),
    ("temperature", "0", "duplicate (dataset, stat, method, k, target, temperature)"),
])
def test_the_tree_table_refuses_an_unknown_dataset_and_a_repeated_row(tmp_path: Path, column, value,
                                                                      fragment) -> None:
    """A dataset neither in the registry nor published-only is refused; a T = 1.0 row moved to T = 0 repeats one."""
    for f in reference.REFERENCE_DIR.glob("*.csv"):
        shutil.copy(f, tmp_path / f.name)
    path = tmp_path / f"{reference.TREE_TABLE}.csv"
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    row = df.index[(df["dataset"] == "livecodebench") & (df["temperature"] == "1")][0]
    df.loc[row, column] = value
    df.to_csv(path, index=False)
    with pytest.raises(ReferenceDataError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        load_reference(tmp_path)


def test_an_h200_run_compares_its_tree_and_dflash_rows_with_the_tree_table() -> None:
    summary = _summary("NVIDIA H200", "Qwen/Qwen3-4B", "z-lab/Qwen3-4B-DFlash-b16", 2048, "humaneval", 8,
                       ar_tpot=20.0, tpot=4.0, tau=6.5)
    summary["tau_prompt_mean"] = [None, 6.6]
    md = comparison_markdown(_with_tree_row(summary, tau_prompt_mean=9.0, speedup=6.0), H200_MANIFEST)
    assert "| humaneval | dflash-k15 | τ (prompt mean, both) | 6.62 | 6.60 | 1.00 |" in md
    assert "| humaneval | dflash-k15 | speedup (mean-TPOT ratio) | 4.81 | 5.00 | 1.04 |" in md
    assert "| humaneval | ddtree-b64 | τ (prompt mean, both) | 9.44 | 9.00 | 0.95 |" in md
    assert "| humaneval | ddtree-b64 | speedup (mean-TPOT ratio) | 6.81 | 6.00 | 0.88 |" in md
    notes = next(line for line in md.splitlines() if line.startswith(f"- {reference.TREE_TABLE}:"))
    assert "prompts per dataset 164 (+1 warm-up) (published) vs 8 (ours)" in notes
    assert "best node budget of {16 32 64 128 256 512 1024}" in notes and "(which one is not published)" in notes
    assert "no published row matches" not in md and "### Published draft trees" not in md


def test_prompt_counts_that_differ_by_dataset_are_named_per_dataset() -> None:
    rows = [_summary("NVIDIA H200", "Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16", 2048, dataset, n, 20.0, 4.0, 6.5)
            for dataset, n in (("humaneval", 164), ("mt-bench", 8), ("aime24", 4))]
    summary = pd.concat(rows, ignore_index=True)
    summary["tau_prompt_mean"] = 6.0
    md = comparison_markdown(summary, H200_MANIFEST)
    notes = next(line for line in md.splitlines() if line.startswith(f"- {reference.TREE_TABLE}:"))
    assert "prompts per dataset, published vs ours: mt-bench 80 vs 8, aime24 30 vs 4;" in notes
    assert "humaneval" not in notes.split("prompts per dataset")[1]  # 164 as published


def test_a_cpu_tree_run_matches_nothing_and_gets_the_published_tree_table() -> None:
    summary = _summary("AMD EPYC 7B13 64-Core Processor", "models/tiny/target", "models/tiny/dflash", 128,
                       "humaneval", 2, ar_tpot=3.0, tpot=1.5, tau=3.2)
    summary = pd.concat([summary, _summary("AMD EPYC 7B13 64-Core Processor", "models/tiny/target",
                                           "models/tiny/dflash", 128, "gsm8k-local", 2, 3.0, 1.5, 3.2)])
    md = comparison_markdown(_with_tree_row(summary, tau_prompt_mean=4.0, speedup=1.8), CPU_MANIFEST)
    assert "- ddtree-b64 (cell tree64): no published row matches humaneval, gsm8k-local." in md
    tree_line = next(line for line in md.splitlines()
                     if line.strip().startswith(f"- vs {reference.TREE_TABLE}") and "method ddtree" in line)
    assert "same method ddtree, temperature 0; not stated by the publication: k." in tree_line
    section = md.split("### Published draft trees for this run's datasets")[1]
    assert section.count("| humaneval |") == 6  # 3 targets x 2 temperatures
    assert "| humaneval | Qwen3-4B | 0 | 6.62 | 9.44 | 4.81 | 6.81 |" in section
    assert "| humaneval | Qwen3-Coder-30B-A3B-Instruct | 1 | 7.60 | 10.42 | 5.64 | 7.88 |" in section
    assert f"{reference.TREE_TABLE} has no row for gsm8k-local; its datasets: math500, gsm8k," in section
    plain = comparison_markdown(summary, CPU_MANIFEST)  # no tree row: the table is not printed
    assert "### Published draft trees" not in plain


def test_cli_compares_a_tree_run_with_the_tree_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ddtree-b64 cell of Qwen3-4B on an H200, greedy, 2048 new tokens: 4 math500 prompts at AR TPOT 20 ms and tree
    TPOT 2.5 ms (8.00x against the published 7.50x), 3 steps a prompt accepting 9, 9 and 8 nodes (τ 9.67 a prompt
    against the published 10.71), recomputed from the run's records."""
    cell = {"engine": "jax", "target": "Qwen/Qwen3-4B", "temperature": 0.0, "max_new_tokens": 2048, "seed": 0,
            "engine_options": {}}
    cells = {"base0": {**cell, "method": "baseline", "draft": None, "k": 0},
             "tree64": {**cell, "method": "ddtree", "draft": "z-lab/Qwen3-4B-DFlash-b16", "k": 0,
                        "shape": {"budget": 64, "scheduled": False}}}
    accepted = [9, 9, 8]
    tree = {"accept_lengths": accepted, "extra": {"tree_rows": [65] * 3,
                                                  "tree_paths": [list(range(1, a + 1)) for a in accepted]}}
    records = [request(cell_id=cid, label=label, method=cells[cid]["method"], k=0, dataset="math500",
                       prompt_index=i, tpot_ms=tpot, output_ids=list(range(30)), **(tree if cid == "tree64" else {}))
               for cid, label, tpot in (("base0", "baseline", 20.0), ("tree64", "ddtree-b64", 2.5))
               for i in range(4)]
    h200 = {"run_id": "tree-run", "platform": "gpu", "hardware": {"device": "NVIDIA H200"}}
    (tmp_path / "manifest.json").write_text(json.dumps({**h200, "cells": cells, "config": {}}))
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["check", "published", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| math500 | ddtree-b64 | τ (prompt mean, both) | 10.71 | 9.67 | 0.90 |" in out
    assert "| math500 | ddtree-b64 | speedup (mean-TPOT ratio) | 7.50 | 8.00 | 1.07 |" in out
    assert "prompts per dataset 128 (+1 warm-up) (published) vs 4 (ours)" in out
    assert "### Published draft trees" not in out
