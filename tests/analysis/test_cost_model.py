"""Cost model: the formula on hand-computed values, its report section, and (slow) agreement with a real JAX run."""
from __future__ import annotations

import json
import math

import pytest

from benchmarks.analysis import cost_model_compute as cm
from benchmarks.cli import main
from benchmarks.core.paths import ROOT
from benchmarks.report.cost_model_render import cost_model_markdown
from tests.typed_runs import lines, manifest, request, summary_row


def test_predict_by_hand():
    # p = .8 .6 .4 .2; t_AR 10 ms; draft 2 ms; verify 10 ms at K=1, 12 ms at K=3; host 1 ms
    preds = cm.predict([0.8, 0.6, 0.4, 0.2], 10.0, {1: 2.0, 3: 2.0}, {1: 10.0, 3: 12.0}, 1.0, [1, 2, 3, 4])
    assert [p.k for p in preds] == [1, 2, 3]  # no verify time beyond the measured Ks: K=4 is not predicted
    k1, k2, k3 = preds
    assert (k1.tau, k1.step_ms, k1.speedup) == pytest.approx((1.8, 13.0, 18 / 13))
    assert (k2.tau, k2.verify_ms, k2.step_ms, k2.speedup) == pytest.approx((2.4, 11.0, 14.0, 24 / 14))
    assert (k3.tau, k3.step_ms, k3.speedup, k3.tok_per_s) == pytest.approx((2.8, 15.0, 28 / 15, 2800 / 15))
    assert cm.best_k(preds).k == 3
    assert cm.best_k([]) is None


def test_interpolate_holds_only_when_asked():
    pts = {2: 4.0, 6: 8.0}
    assert cm.interpolate(pts, 4) == 6.0
    assert math.isnan(cm.interpolate(pts, 7))
    assert cm.interpolate(pts, 7, hold=True) == 8.0


def _extra(draft, verify, host, steps):
    return {"draft_s": draft, "verify_s": verify, "host_s": host, "decode_steps": steps}


def test_breakdown_per_step_means():
    records = lines([request(extra=_extra(0.02, 0.10, 0.01, 10)), request(extra=_extra(0.06, 0.30, 0.03, 30))])
    b = cm.breakdown(records)
    assert (b.draft_ms, b.verify_ms, b.host_ms, b.steps) == pytest.approx((2.0, 10.0, 1.0, 40))
    assert cm.breakdown(lines([request(extra={"draft_s": 0.1})])) is None


def _run(breakdown: bool = True, baseline: bool = True):
    """A hand-made run: AR 10 ms/token; dflash K=1 and K=3 with p = .8 .6 .4, draft 2, verify 10 / 12, host 1."""
    common = {"engine": "jax", "target": "t", "temperature": 0.0, "max_new_tokens": 64, "seed": 0,
              "engine_options": {"breakdown": True}}
    cells = {"k1": {**common, "method": "dflash", "k": 1}, "k3": {**common, "method": "dflash", "k": 3}}
    rows = [{"cell_id": "k1", "label": "dflash-k1", "method": "dflash", "k": 1, "engine": "jax", "dataset": "d",
             "n_errors": 0, "per_position": json.dumps([0.8]), "tau": 1.8, "tpot_ms_mean": 7.0,
             "speedup": 1.38, "speedup_mean_ratio": 1.40},
            {"cell_id": "k3", "label": "dflash-k3", "method": "dflash", "k": 3, "engine": "jax", "dataset": "d",
             "n_errors": 0, "per_position": json.dumps([0.8, 0.6, 0.4]), "tau": 2.8, "tpot_ms_mean": 5.4,
             "speedup": 1.84, "speedup_mean_ratio": 1.85}]
    if baseline:
        cells["ar"] = {**common, "method": "baseline", "k": 0}
        rows.append({"cell_id": "ar", "label": "baseline", "method": "baseline", "k": 0, "engine": "jax",
                     "dataset": "d", "n_errors": 0, "per_position": None, "tau": None, "tpot_ms_mean": 10.0,
                     "speedup": 1.0, "speedup_mean_ratio": 1.0})
    times = {"k1": (0.02, 0.10), "k3": (0.02, 0.12)}
    requests = {(cid, "d"): lines([request(cell_id=cid, dataset="d", n_prompt_tokens=100, output_ids=[0] * 64,
                                           **({"extra": _extra(times[cid][0], times[cid][1], 0.01, 10)}
                                              if breakdown else {}))]) for cid in ("k1", "k3")}
    rows = [summary_row(**r) for r in rows]
    return rows, cm.groups(rows, requests, manifest({"cells": cells}).cells)


def test_markdown_predicted_vs_measured_and_best_k():
    md = cost_model_markdown(*_run())
    assert "t_AR = 10.000 ms/token" in md and "p_i from dflash-k3" in md
    assert "| 1 | 1.80 | 1.80 | 2.000 | 10.000 | 13.000 | 138.5 | 1.38 | – | 1.40 | -1.1 % |" in md
    assert "| 3 | 2.80 | 2.80 | 2.000 | 12.000 | 15.000 | 186.7 | 1.87 | – | 1.85 | +0.9 % |" in md
    assert "Predicted best K: **3**" in md and "among K = 1..3" in md


def test_markdown_with_a_kflat_curve_predicts_beyond_the_ks_run():
    import pandas as pd

    kflat = pd.DataFrame({"k": [0, 1, 3, 7], "context_len": [128] * 4, "median_ms": [5.0, 5.0, 6.0, 6.0],
                          "below_floor": [False, False, False, True]})
    rows, groups = _run()
    # measured 10 ms at K=1 and 12 ms at K=3 are twice the curve (5, 6): K=2 (curve 5.5) is predicted at 11 ms
    verify = cm.kflat_verify(kflat, 132.0, {1: 10.0, 3: 12.0}, [1, 2, 3, 5, 7])
    assert verify == pytest.approx({1: 10.0, 2: 11.0, 3: 12.0})  # K=7 is below the floor there: unused
    assert cm.kflat_verify(kflat, 132.0, {1: 10.0, 3: 18.0}, [2]) == pytest.approx({2: 2.5 * 5.5})  # median scale
    md = cost_model_markdown(rows, groups, kflat)
    assert "K-flat curve" in md


def test_markdown_says_what_is_missing():
    assert "no draft / verify / host breakdown" in cost_model_markdown(*_run(breakdown=False))
    assert "no AR baseline" in cost_model_markdown(*_run(baseline=False))
    assert "no successful dflash cell" in cost_model_markdown([], [])


def test_chip_rows_by_hand():
    """An AR step reads 8 GB and a DFlash step 10 GB (toy shape below) at 2 TB/s: 4 ms and 5 ms."""
    from dataclasses import dataclass

    from benchmarks.hardware.roofline import Device

    @dataclass(frozen=True)
    class Shape:  # one layer, no head: what each matmul reads is easy to add up
        vocab_size: int = 1
        hidden_size: int = 1000
        intermediate_size: int = 1000
        num_layers: int = 1
        num_heads: int = 10
        num_kv_heads: int = 10
        head_dim: int = 100
        tie_word_embeddings: bool = True

    device = Device("toy", 2e12, 1e30, "by hand")
    engine = cm.Engine(Shape(), Shape(), 1, 3, 4, 0, 1000)
    (row,) = cm.chip_rows(engine, device, [cm.Tau("d", 2.5, 2.0, 10.0, 25.0)])
    per_layer = (3 + 1 + 2 + 1) * 1e6 * 1000  # qkv, o, gate_up, down of 1e6 elements each, 1000-byte elements
    assert row["ar_ms"] == pytest.approx(1e3 * (per_layer + 1000 * 1000) / 2e12, rel=1e-2)  # + the 1-row head
    assert row["speedup"] == pytest.approx(2.5 * row["ar_ms"] / row["step_ms"])
    assert row["tok_per_s"] == pytest.approx(2.5 / (row["step_ms"] / 1e3))
    assert (row["published_speedup"], row["published_ar_ms"], row["published_step_ms"]) == (2.0, 10.0, 25.0)


def test_cost_model_for_a_chip_at_the_published_tau(capsys):
    """v5p at the published Qwen3-4B τ: the roofline's AR TPOT is the floor and a step costs less than the published
    runner's 1.5-2.2 AR steps, so every predicted speedup is above the published one."""
    from benchmarks.cli import main
    from benchmarks.core.paths import REFERENCE_DIR

    assert main(["cost-model", "--chip", "v5p", "--tau-from", str(REFERENCE_DIR / "tpu_v5p_qwen3_4b.csv")]) == 0
    out = capsys.readouterr().out
    assert "Predicted on TPU v5p" in out and "AR floor 2.9" in out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and line[2:3].isalpha()][1:]
    assert len(rows) == 9
    for cells in rows:
        ar_ms, speedup, published, ratio = float(cells[2]), float(cells[5]), float(cells[6]), float(cells[7])
        assert ar_ms == pytest.approx(2.92, abs=0.01) and speedup > published and ratio > 1.0



def test_cost_model_for_a_chip_refuses_a_table_that_is_not_a_published_one(capsys, tmp_path):
    """A --tau-from CSV of another schema, or none at all: one error line naming the file, exit 2."""
    from benchmarks.cli import main
    from benchmarks.core.paths import REFERENCE_DIR

    other = tmp_path / "mine.csv"
    other.write_text("dataset,tau\nmath500,3.0\n")
    for path, says in ((other, "columns differ from the schema"), (tmp_path / "none.csv", "does not exist"),
                       (REFERENCE_DIR / "k_flat.csv", "columns differ from the schema")):
        assert main(["cost-model", "--chip", "h200", "--tau-from", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(path) in err[0] and says in err[0], err


def test_pricing_a_chip_imports_no_engine():
    """cost-model --chip, from a published table or a run's own config.json files, reads shapes from
    benchmarks.core.shapes: no engine (nor jax) is imported to price a chip, only the catalog and the options each
    engine declares as data."""
    import subprocess
    import sys

    from benchmarks.core.paths import REFERENCE_DIR, ROOT

    code = f"""
import argparse, sys
from pathlib import Path
from benchmarks.cli import main
assert main(["cost-model", "--chip", "v5p", "--tau-from", {str(REFERENCE_DIR / "tpu_v5p_qwen3_4b.csv")!r}]) == 0
from benchmarks.cli.k_schedule import run_engine
from benchmarks.core.cells import Cell
tiny = Path({str(ROOT / "models" / "tiny")!r})
cell = Cell("jax", str(tiny / "target"), "dflash", str(tiny / "dflash"), 7, 0.0, 8, 0)
args = argparse.Namespace(shape=None, context=256, tau_from=Path("run"))
engine = run_engine([cell], args, 4)
assert (engine.k, engine.target.num_layers, engine.draft_layers.num_layers, engine.num_taps) == (7, 6, 2, 3)
declared = {{"benchmarks.engines", "benchmarks.engines.catalog", "benchmarks.engines.options"}} | {{
    f"benchmarks.engines.{{e}}" + suffix for e in ("jax", "vllm", "llamacpp") for suffix in ("", f".{{e}}_options")}}
loaded = sorted(m for m in sys.modules if m.startswith("benchmarks.engines") and m not in declared
                or m.split(".")[0] in ("jax", "vllm", "torch"))
assert not loaded, loaded  # the engines' option declarations (data) only
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_held_out_prediction_on_a_tiny_jax_run(oracle_pair, tmp_path):
    """Oracle pair (every draft accepted) on the JAX engine at K = 3, 5 and 7, interleaved: the speedup at K=5
    predicted from the K=3 and K=7 cells alone (p_i of K=7, step times interpolated in K) matches K=5's measured
    mean-ratio speedup. Nothing measured at K=5 enters the prediction.

    t_AR cancels between predicted and measured, so the error is K=5's measured step time (τ·TPOT) against the
    interpolation of K=3's and K=7's, which a busy shared host moves by itself; hence 25 %. A model that drops τ
    (5×) or the draft time (about 30 % of a step here) misses by more."""
    from benchmarks.analysis.summary import summarize_run
    from benchmarks.config.matrix_parse import parse_matrix
    from benchmarks.records.store import RunStore
    from tests.run_helpers import run_matrix

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"def function_{i}(x):\n    return x + {i}"}) + "\n"
                               for i in range(6)))
    matrix = parse_matrix({
        "name": "cost-model", "engine": "jax", "target": str(oracle_pair["target"]),
        "drafts": {"dflash": str(oracle_pair["dflash"])}, "methods": ["baseline", "dflash"], "k": [3, 5, 7],
        "datasets": [{"name": "local", "path": str(prompts)}], "max_new_tokens": 96, "num_prompts": 5,
        "warmup_prompts": 1, "interleave": True,
        "engine_options": {"breakdown": True, "max_model_len": 256, "dtype": "float32"},
    })
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 0
    summary = summarize_run(RunStore(run_dir))
    rows = summary.rows
    by_k = {r.k: r for r in rows if r.method == "dflash"}
    ar = next(r for r in rows if r.method == "baseline")
    # the oracle accepts every draft; a last step counts only the 95 tokens wanted after the first
    assert {k: r.tau for k, r in by_k.items()} == {k: 95 / math.ceil(95 / (k + 1)) for k in (3, 5, 7)}
    others = [by_k[3], by_k[7]]
    parts = {r.cell_id: cm.breakdown([x for x in summary.records.requests if x.cell_id == r.cell_id])
             for r in others}
    inputs = cm.gather(others, parts)
    assert sorted(inputs.verify_ms) == [3, 7] and inputs.p_source == "dflash-k7"
    (pred,) = cm.predict(inputs.per_position, ar.tpot_ms_mean, inputs.draft_ms, inputs.verify_ms,
                         inputs.host_ms, [5])
    print(f"K=5 held out: predicted {pred.speedup:.3f}x, measured {by_k[5].speedup_mean_ratio:.3f}x")
    assert pred.tau == 6.0
    assert pred.speedup == pytest.approx(by_k[5].speedup_mean_ratio, rel=0.25)
    md = cost_model_markdown(rows, summary.cost_groups)
    assert "Predicted best K" in md


def test_cost_model_for_a_chip_by_batch(capsys):
    """--batch: per B the steps, per dataset and B the speedup; the B where the verify turns compute-bound and where
    the speedup falls below 1; a bad list is refused by the parser (exit 2)."""
    from benchmarks.cli import main
    from benchmarks.core.paths import REFERENCE_DIR

    table = str(REFERENCE_DIR / "tpu_v5p_qwen3_4b.csv")
    assert main(["cost-model", "--chip", "v5p", "--batch", "1,8,64", "--tau-from", table]) == 0
    out = capsys.readouterr().out
    assert "turns compute-bound at B = 11." in out
    assert "| 1 | 2.923 | 342 | 3.653 | 1.25 | memory-bound |" in out and "| 64 |" in out
    assert "| alpaca | 2.86 | 2.29 (783) |" in out and out.rstrip().endswith("| 31 |")
    with pytest.raises(SystemExit) as exc:
        main(["cost-model", "--chip", "v5p", "--batch", "0,x", "--tau-from", table])
    assert exc.value.code == 2


V5E_GRID = ROOT / "results" / "measured" / "tpu-v5e-2026-12-05" / "grid-before-attention-change.csv"
PUBLISHED = ROOT / "results" / "reference" / "tpu_v5p_qwen3_4b.csv"


def test_terms_fitted_to_a_chip_grid_price_a_published_tau_at_each_batch(capsys):
    assert main(["cost-model", "--chip", "v5e", "--fit-from", str(V5E_GRID), "--shape", "qwen3-4b",
                 "--tau-from", str(PUBLISHED), "--batch", "1,8,16,32"]) == 0
    out = capsys.readouterr().out
    assert "Step terms fitted to 18 steps" in out and "per request and pass" in out and "KV and other bytes" in out
    assert "Held out: each point predicted by the terms fitted to the others." in out
    assert "held out: worst error" in out and "| B=64 context=256 K=15 | 100.008 |" in out
    assert "| math500 | 8.80 |" in out and "| 32 |" in out  # K = 15 at every B asked


def test_a_fit_leaves_out_the_steps_of_a_write_behind_window_and_holds_a_measured_per_row_term(tmp_path, capsys):
    """The terms price the engine as it writes its caches by default: a grid's points at a window (study device-grid
    --write-behind) run another step and stay out of the fit. A chip's grid that timed its matmuls by row count holds
    its per-row term there (grid.json's matmul rows_half), the other terms fitted around it."""
    header, *rows = V5E_GRID.read_text().splitlines()
    windowed = rows[0].split(",")
    windowed[4] = "1.0"  # a step no fit of the others could reproduce
    grid = tmp_path / "grid.csv"
    grid.write_text("\n".join([header + ",write_behind", *(r + ",0" for r in rows), ",".join(windowed) + ",16"]))
    (tmp_path / "grid.json").write_text(json.dumps({"platform": "tpu", "device": "TPU v5 lite", "shape": "qwen3-4b",
                                                    "dtype": "bfloat16", "matmul": {"rows_half": 150.0}}))
    assert main(["cost-model", "--chip", "v5e", "--fit-from", str(grid), "--tau-from", str(PUBLISHED),
                 "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "Step terms fitted to 18 steps" in out and "| 1.000 |" not in out
    assert "FLOP efficiency rows / (rows + 150) of 197.0 TFLOP/s" in out
    assert "(measured: the grid's matmul rates by row count (grid.json))" in out


def test_a_grid_without_its_shape_or_with_another_price_is_refused(tmp_path, capsys):
    bare = tmp_path / "grid.csv"
    bare.write_text(V5E_GRID.read_text())
    assert main(["cost-model", "--chip", "v5e", "--fit-from", str(bare), "--tau-from", str(PUBLISHED)]) == 2
    assert "the grid's shape is not recorded; give --shape" in capsys.readouterr().err
    assert main(["cost-model", "--chip", "v5e", "--fit-from", str(bare), "--calibrate-from", str(bare),
                 "--tau-from", str(PUBLISHED)]) == 2
    assert "--calibrate-from and --fit-from are prices of one step" in capsys.readouterr().err


def test_a_published_plain_curve_calibrates_per_pass_and_per_request_costs_at_a_fixed_k(tmp_path, capsys):
    curve = tmp_path / "curve.csv"
    curve.write_text("batch_size,tok_per_s_total\n1,92\n4,310\n8,560\n16,930\n32,1400\n")
    assert main(["cost-model", "--chip", "v5e", "--calibrate-from", str(curve), "--tau-from", str(PUBLISHED),
                 "--batch", "1,8,16,32"]) == 0
    out = capsys.readouterr().out
    assert "(assumed: TPU v5e's datasheet" in out and "(assumed: the roofline's" in out
    assert "attention's FLOPs at 197 TFLOP/s (100 % of the peak) (assumed: the peak" in out
    assert "per request and pass 0.3385 ms (fitted: the curve's slope" in out
    assert "The curve itself, as the terms reproduce it: B=1 +4.0 %" in out and "| math500 | 8.80 |" in out
    # each point predicted by the terms calibrated on the others, with the worst and the median error
    assert "each point of the curve predicted by the terms calibrated on the others (leave one out)" in out
    assert "| B=1 | 10.870 | 11.823 | +8.8 % |" in out and "worst error 8.8 %, median 4.8 % over 5 point(s)" in out
    # no --rows-half: the speculative curve is a range over the per-row terms measured on the devices we hold
    assert "cannot show a matmul's efficiency at the many rows a verify multiplies" in out
    assert "- TPU v5e: rows / (rows + 87) of the peak" in out and "- this CPU: rows / (rows + " in out
    row = next(line for line in out.splitlines() if line.startswith("| 16 | 17.087 | "))  # the AR step: one value
    low, high = (float(x) for x in row.split(" | ")[2].split("–"))
    assert low < high == 31.570  # the DFlash step a range; the v5e's term (rows_half 87) its slower end
    assert main(["cost-model", "--chip", "v5e", "--calibrate-from", str(curve), "--tau-from", str(PUBLISHED),
                 "--batch", "1,16", "--rows-half", "87"]) == 0  # one term given: one line, at it
    out = capsys.readouterr().out
    assert "FLOP efficiency rows / (rows + 87)" in out and "a range over" not in out and "| math500 | 8.80 |" in out
    curve.write_text("batch_size,tok_per_s_total\n8,560\n")
    assert main(["cost-model", "--chip", "v5e", "--calibrate-from", str(curve), "--tau-from", str(PUBLISHED)]) == 2
    assert "a plain-decoding curve at one batch size" in capsys.readouterr().err
    curve.write_text("batch_size,tok_per_s_total\n1,92\n1,95\n8,560\n")
    assert main(["cost-model", "--chip", "v5e", "--calibrate-from", str(curve), "--tau-from", str(PUBLISHED)]) == 2
    assert "batch size 1 given more than once; keep one row per batch size" in capsys.readouterr().err


def test_a_calibration_on_a_runs_plain_curve_prints_each_point_left_out(tmp_path, capsys):
    """This CPU's calibration (a run's own AR baselines) is checked on each of its points left out too; the
    synthetic run's curve has two batch sizes, so neither can be predicted from the other, and the table says so."""
    from tests.analysis.test_k_schedule import _tiny_run

    run = _tiny_run(tmp_path)
    assert main(["cost-model", str(run), "--calibrate-from", str(run)]) == 0
    out = capsys.readouterr().out
    assert "Held out: each AR step predicted by the roofline calibrated on the others (leave one out)." in out
    assert "| B=2 | 9.400 | – | not predicted: a calibration needs AR step times at two or more batch sizes |" in out
    assert "held out: no point could be predicted from the others (each line says why); not checked" in out
