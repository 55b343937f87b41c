"""The K schedule's derivation on scripted τ(K) and step costs, τ from accepted lengths, step costs from a run, and
the calibration on a scripted plain-decoding curve."""
from __future__ import annotations

import os

import pytest

from benchmarks.analysis import k_schedule_compute as ksd
from benchmarks.analysis.cost_model_compute import Engine
from benchmarks.core.metrics import Interval, exact
from benchmarks.core.shapes import SHAPES, released_draft
from benchmarks.hardware import roofline
from tests.typed_runs import lines, request


def _taus(values, spread=0.0):
    return {k: Interval(t, t - spread, t + spread, 10) for k, t in enumerate(values)}


TAU = _taus([1.0, 1.8, 2.4, 2.8, 3.0, 3.1])  # K = 0..5


def _cost(batch, k):
    """A step whose verify turns compute-bound: 10 ms flat until B·(K+1) reaches 8 rows, then linear in rows."""
    return exact(10.0 * max(1.0, batch * (k + 1) / 8) + (1.0 if k else 0.0))


def test_planted_optimum_found_and_falls_with_batch():
    choices = ksd.derive([1, 2, 4, 8, 16], TAU, _cost)
    best = {c.batch: c.best.k for c in choices}
    # by hand: B=1 K=5 (3.1/11 beats 3.0/11), B=2 K=3 (2.8/11 against K=4's 3.0/13.5), B=4 K=1 (1.8/11 against
    # K=2's 2.4/16), B=8 and 16 K=0 (every K's step grows faster than its τ)
    assert best == {1: 5, 2: 3, 4: 1, 8: 0, 16: 0}
    b2 = next(c for c in choices if c.batch == 2)
    assert b2.best.tok_per_s.value == pytest.approx(2 * 2.8 / 11 * 1e3)
    assert b2.runner_up is not None and b2.runner_up.k == 4  # 3.0/13.5 edges out K=2's 2.4/11
    assert b2.margin.value == pytest.approx((2.8 / 11) / (3.0 / 13.5) - 1)
    assert b2.decided  # exact τ and costs: the margin's interval is its point
    sched = ksd.schedule_of(choices)
    assert sched.as_mapping() == {1: 5, 2: 3, 4: 1, 8: 0} and ksd.first_fall(choices) == 2


def test_zero_chosen_where_every_k_loses():
    def costly(batch, k):
        return exact(10.0 + 10.0 * k)  # each drafted token costs a whole plain step: τ never pays for it
    choices = ksd.derive([1, 4], TAU, costly)
    assert [c.best.k for c in choices] == [0, 0]
    assert choices[0].runner_up.k == 1


def test_margin_undecided_when_intervals_overlap():
    wide = _taus([1.0, 1.8, 2.4, 2.8, 3.0, 3.1], spread=0.3)
    c = ksd.choose(1, wide, _cost)
    assert c.best.k == 5 and c.margin.low < 0 < c.margin.value and not c.decided


def test_candidates_limited_to_ks_given_and_priced():
    c = ksd.choose(1, TAU, _cost, ks=[0, 2, 9])  # K = 9 has no τ: not a candidate
    assert [p.k for p in c.points] == [0, 2] and c.best.k == 2
    assert ksd.choose(1, TAU, lambda b, k: None) is None


def test_taus_from_accepted_lengths_cut_at_each_k():
    reqs = lines([request(prompt_index=0, k=3, accept_lengths=[3, 0, 2]),
            request(prompt_index=1, k=3, accept_lengths=[1, 3])])
    t = ksd.tau_curve(reqs).taus()
    assert t[0] == exact(1.0)
    # K=1: steps 5, accepted min(a,1) = 1+0+1+1+1 = 4 -> τ 9/5; K=3: 9 accepted -> 14/5
    assert t[1].value == pytest.approx(9 / 5) and t[3].value == pytest.approx(14 / 5)
    assert t[2].units == 2 and t[2].low < t[2].value < t[2].high


def test_interpolated_and_run_costs():
    pts = {0: exact(5.0), 1: Interval(10.0, 9.0, 11.0, 4), 5: Interval(14.0, 13.0, 15.0, 4)}
    assert ksd.interpolated(pts, 3) == Interval(12.0, 11.0, 13.0, 4)
    assert ksd.interpolated(pts, 0) == exact(5.0)
    assert ksd.interpolated(pts, 6) is None
    cells = {(1, k): ksd.GridCell(1, k, v, exact(1.0)) for k, v in pts.items()}
    held = ksd.run_costs(cells, cost_ks=[1])
    assert held(1, 0) == exact(5.0) and held(1, 5) is None and held(2, 1) is None


def test_calibration_recovers_a_planted_overhead_and_fraction():
    shape = SHAPES["qwen3-4b"]
    d = released_draft(shape, 16)
    engine = Engine(shape, d.layers, len(d.target_layer_ids), 15, 16, 256, 2)
    chip = roofline.Device("chip", 1e12, 1e14, "scripted")
    planted = ksd.Calibration(2.0, 0.3, 0.0, {}).device(chip)
    ar = {b: roofline.step_seconds(ksd.engine_at(engine, b, 0).ar_step(), planted) * 1e3 for b in (1, 8, 64, 256)}
    cal = ksd.calibrate(ar, engine, chip)
    assert cal.overhead_ms == pytest.approx(2.0, rel=0.05) and cal.flops_fraction == pytest.approx(0.3, rel=0.05)
    assert cal.worst_error < 0.01
    with pytest.raises(ValueError, match="two or more"):
        ksd.calibrate({1: 3.0}, engine, chip)


def test_chip_cost_ar_drafter_adds_k_draft_tokens():
    shape = SHAPES["qwen3-4b"]
    d = released_draft(shape, 16)
    engine = Engine(shape, d.layers, len(d.target_layer_ids), 15, 16, 256, 2)
    chip = roofline.Device("chip", 1e12, 1e14, "scripted")
    ar = ksd.chip_cost(engine, chip, ar_draft_ms=0.5)
    plain = ksd.chip_cost(engine, chip)
    assert ar(1, 0) == plain(1, 0)
    assert ar(1, 4).value - ar(1, 2).value == pytest.approx(
        1.0 + (ksd.chip_cost(engine, chip, 0.0)(1, 4).value - ksd.chip_cost(engine, chip, 0.0)(1, 2).value))


def test_cost_model_schedule_on_a_run_writes_each_engines_config(tmp_path, capsys):
    import json

    import yaml

    from benchmarks.cli import main
    from benchmarks.decide import k_schedules
    from tests.analysis.synthetic_run import write_run

    run = write_run(tmp_path / "run")
    assert main(["cost-model", str(run), "--schedule"]) == 0
    out = capsys.readouterr().out
    assert "## jax on humaneval" in out and "| B | best K |" in out and "vllm.json" in out
    assert "static batches keep their finished rows" in out
    folder = run / "k_schedule" / "jax-humaneval"
    vllm = json.loads((folder / "vllm.json").read_text())
    ranges = vllm["num_speculative_tokens_per_batch_size"]
    assert ranges[0][0] == 1 and ranges[-1][1] == 2  # closed at the largest B priced
    matrix = yaml.safe_load((folder / "matrix.yaml").read_text())
    assert k_schedules.parse(matrix["k"]["dflash"]).ranges[0].first == 1 and 1 in matrix["batch_size"]
    assert set(json.loads((folder / "trtllm.json").read_text())) == {"max_draft_len", "draft_len_schedule"}
    assert (folder / "sglang.json").is_file() and (folder / "schedule.md").read_text().startswith("## jax")
    assert main(["cost-model", str(run), "--schedule", "--check-against", str(run)]) == 0
    assert "beside the grid measured in synthetic" in capsys.readouterr().out
    warm = write_run(tmp_path / "warm")  # the same run at another temperature is no replicate
    manifest = json.loads((warm / "manifest.json").read_text())
    for cell in manifest["cells"].values():
        cell["temperature"] = 0.7
    (warm / "manifest.json").write_text(json.dumps(manifest))
    assert main(["cost-model", str(run), "--schedule", "--check-against", str(warm)]) == 2
    assert "no grid of jax on humaneval at temperature 0 (it has jax on gsm8k at 0.7" in capsys.readouterr().err
    assert main(["cost-model", str(run), "--schedule", "--cost-ks", "99"]) == 2
    assert "--cost-ks 99: jax on humaneval measured no K = 99; give Ks it measured (" in capsys.readouterr().err
    assert main(["cost-model", "--chip", "v5p", "--tau-from", str(run), "--check-against", str(run)]) == 2
    assert "--check-against goes with --schedule" in capsys.readouterr().err


def _tiny_run(tmp_path):
    """The synthetic run with the shipped tiny target and DFlash draft as its models (their config.json is read)."""
    import json

    from benchmarks.core.paths import ROOT
    from tests.analysis.synthetic_run import write_run

    run = write_run(tmp_path / "run")
    path = run / "manifest.json"
    m = json.loads(path.read_text())
    for c in m["cells"].values():
        c["target"] = str(ROOT / "models/tiny/target")
        c["draft"] = str(ROOT / "models/tiny/dflash") if c["draft"] == "d" else c["draft"]
    path.write_text(json.dumps(m))
    return run


def test_cost_model_chip_schedule_falls_and_calibrates_on_a_published_curve(tmp_path, capsys):
    from benchmarks.cli import main

    run = _tiny_run(tmp_path)
    argv = ["cost-model", "--chip", "v5p", "--tau-from", str(run), "--shape", "qwen3-4b", "--schedule",
            "--batch", "1,2,4,8,16,32,64,128,256,512"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "K first falls at B = " in out and (run / "k_schedule" / "v5p-qwen3-4b-humaneval" / "vllm.json").is_file()
    assert "beside the" not in out
    assert main([*argv, "--check-against", str(run)]) == 0  # the chip's prices against a measured grid
    out = capsys.readouterr().out
    assert "The prediction among the Ks measured, beside the grid measured in synthetic" in out
    assert "| measured best K | predicted best K |" in out
    assert (run / "k_schedule" / "v5p-qwen3-4b-humaneval-checked-on-run" / "schedule.md").is_file()
    table = tmp_path / "published.csv"
    table.write_text("batch_size,tok_per_s_total\n1,100\n8,700\n64,3000\n")
    assert main([*argv, "--calibrate-from", str(table)]) == 0
    out = capsys.readouterr().out
    assert "Step terms fitted to published.csv's plain-decoding curve at context 256" in out
    assert "(assumed: TPU v5p's datasheet" in out and "from the terms of " in out
    table.write_text("b,tps\n1,100\n")
    assert main([*argv, "--calibrate-from", str(table)]) == 2
    assert "expected a CSV with columns batch_size and tok_per_s_total" in capsys.readouterr().err
    table.write_text("batch_size,tok_per_s_total\n1,0\n")
    assert main([*argv, "--calibrate-from", str(table)]) == 2
    assert "tok/s above 0" in capsys.readouterr().err
    fifo = tmp_path / "curve.fifo"
    os.mkfifo(fifo)  # read through the guarded reader: named, never opened (an open FIFO waits for a writer)
    assert main([*argv, "--calibrate-from", str(fifo)]) == 2
    assert "is a named pipe (FIFO)" in capsys.readouterr().err


def test_tau_ratio_paired_over_prompts_is_narrower_than_the_bounds_apart():
    # prompts whose acceptance varies a lot, but whose τ(3)/τ(2) varies little: the pairing sees it
    accepted = [[3, 3, 3, 3], [0, 0, 1, 0], [3, 2, 3, 3], [1, 0, 0, 0], [3, 3, 2, 3], [0, 1, 0, 0]]
    reqs = lines([request(prompt_index=i, k=3, accept_lengths=a) for i, a in enumerate(accepted)])
    curve = ksd.tau_curve(reqs)
    t2, t3 = curve.at(2), curve.at(3)
    paired = curve.ratio(3, 2)
    assert paired.value == pytest.approx(t3.value / t2.value)
    assert paired.high - paired.low < t3.high / t2.low - t3.low / t2.high
    costs = {0: exact(10.0), 2: exact(10.0), 3: exact(10.0)}
    c = ksd.choose(1, curve.taus(), lambda b, k: costs.get(k), tau_ratio=curve.ratio)
    apart = ksd.choose(1, curve.taus(), lambda b, k: costs.get(k))
    assert c.best.k == apart.best.k == 3 and c.runner_up.k == 2
    assert c.decided and not apart.decided  # the same figures: decided once paired


def test_measured_verify_cost_adds_the_draft_at_its_roofline_to_the_forward_timed():
    shape = SHAPES["qwen3-4b"]
    d = released_draft(shape, 16)
    engine = Engine(shape, d.layers, len(d.target_layer_ids), 15, 16, 256, 2)
    chip = roofline.Device("chip", 1e12, 1e14, "scripted")
    timed = {(1, 0): Interval(10.0, 9.0, 11.0, 7), (1, 3): Interval(10.0, 9.5, 10.5, 7),
             (1, 7): Interval(14.0, 13.0, 15.0, 7)}
    cost = ksd.measured_verify_cost(timed, engine, chip)
    draft = roofline.pass_seconds(ksd.step_at(engine, 1, 5).passes[0], chip) * 1e3
    assert cost(1, 0) == timed[(1, 0)]  # the plain step is the forward itself
    five = cost(1, 5)
    assert five is not None and five.value == pytest.approx(12.0 + draft) and five.low == pytest.approx(11.25 + draft)
    assert cost(1, 2) is None and cost(1, 15) is None and cost(4, 3) is None  # not timed: not priced
    ar = ksd.measured_verify_cost(timed, engine, chip, ar_draft_ms=0.5)(1, 3)
    assert ar is not None and ar.value == pytest.approx(11.5)


def test_cost_model_chip_schedule_from_a_kflat_timed_per_batch(tmp_path, capsys):
    """--kflat with --chip --schedule prices each (B, K) from the verify timed on the chip; a kflat without a batch
    column, a B not timed, or --kflat beside --calibrate-from or without --schedule are one line, exit 2."""
    from benchmarks.cli import main

    run = _tiny_run(tmp_path)
    head = "engine,batch,k,context_len,median_ms,ci_low,ci_high,repeats,below_floor\n"
    timed = [(b, k, 10.0 + b * 0.1 * (1 + k / 4)) for b in (1, 8) for k in (0, 3, 7, 15)]
    kflat = tmp_path / "kflat.csv"
    kflat.write_text(head + "".join(f"jax,{b},{k},256,{ms},{ms * 0.98},{ms * 1.02},7,False\n" for b, k, ms in timed))
    argv = ["cost-model", "--chip", "v5e", "--tau-from", str(run), "--shape", "qwen3-4b", "--schedule",
            "--kflat", str(kflat), "--batch", "1,8"]
    assert main(argv) == 0
    assert "The verify forward measured on the chip at each (B, K) (kflat.csv" in capsys.readouterr().out
    assert main([*argv[:-1], "1,16"]) == 2
    assert "not at B = 16" in capsys.readouterr().err
    no_batch = tmp_path / "plain.csv"
    no_batch.write_text("engine,k,context_len,median_ms,below_floor\njax,0,256,10.0,False\n")
    assert main([*argv[:9], str(no_batch), *argv[10:]]) == 2
    assert "has no batch column" in capsys.readouterr().err
    assert main([*argv, "--calibrate-from", str(kflat)]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main([a for a in argv if a != "--schedule"]) == 2
    assert "--kflat with --chip prices the steps of --schedule" in capsys.readouterr().err


def test_a_static_batch_that_keeps_finished_rows_sees_its_longest_request():
    # 12 tokens each: one request in 3 steps of 4 at K = 3, the other in 6 steps of 2. Batched together, the fast
    # one rides along finished for 3 steps: τ at K = 3 is 24 tokens over 2 × 6 row-steps, and K = 1 (which the slow
    # one fills as well: 6 steps either way) sees the same τ at a cheaper step
    reqs = lines([request(prompt_index=0, k=3, accept_lengths=[3, 3, 3]),
                  request(prompt_index=1, k=3, accept_lengths=[1, 1, 1, 1, 1, 1])])
    curve = ksd.tau_curve(reqs)
    pair = [frozenset(r.prompt_sha256 for r in reqs)]
    taus, ratio = curve.in_batches(pair, 2)
    assert taus[3].value == pytest.approx(24 / 12) and taus[1].value == pytest.approx(24 / 12)
    assert taus[0].value == pytest.approx(1.0) and curve.at(3).value == pytest.approx(24 / 9)
    assert ratio(3, 1).value == pytest.approx(1.0)
    # a batch of one is the request alone: its tokens over its own steps at K
    alone, _ = curve.in_batches([frozenset([reqs[0].prompt_sha256])], 1)
    assert alone[3].value == pytest.approx(4.0) and alone[1].value == pytest.approx(2.0)

    def cost(batch, k):
        return exact(10.0 + 0.1 * k)
    cells = {(b, k): ksd.GridCell(b, k, cost(b, k), exact(1.0), pair if b == 2 else None)
             for b in (1, 2) for k in (0, 1, 3)}
    kept = ksd.derive_batched([1, 2], curve, cells, cost)
    assert [c.best.k for c in kept] == [3, 1]
    assert kept[1].best.tau.value == pytest.approx(2.0)
    rows_free = {key: ksd.GridCell(c.batch, c.k, c.step_ms, c.tok_per_s) for key, c in cells.items()}
    assert [c.best.k for c in ksd.derive_batched([1, 2], curve, rows_free, cost)] == [3, 3]
