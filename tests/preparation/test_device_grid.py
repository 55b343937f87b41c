"""study device-grid on the CPU stand-in: every point runs the engine's own loop (batch 1 and a static batch, plain
decoding and the oracle DFlash) with every draft accepted, a point that does not fit the memory is named with its
bytes and skipped, one past the budget is dropped and named, and the device check's summary prints the grid."""
import argparse
import json
import re

import jax
import pytest

from benchmarks.cli import main
from benchmarks.core.paths import ROOT
from benchmarks.hardware import matmul_rate
from benchmarks.studies import device_grid
from benchmarks.studies.device_summary import grid_lines

pytestmark = pytest.mark.jax


def grid_args(tmp_path, **over):
    # float32 on every backend: the stand-in's expectations are float32's (a chip's default is bfloat16)
    args = dict(shape="qwen3-tiny", dtype="float32", batch=(1, 2), context=(256,), ks=(0, 3), steps=3, repeats=2,
                budget_s=600.0, memory_gb=None, profile_above=0.0, profile_max=1, stream_gb=0.0, matmul_gb=0.0,
                matmul_rows=(16, 64), attention="xla", out=tmp_path / "grid")
    return argparse.Namespace(**(args | over))


def test_the_points_run_the_engines_loops_with_every_draft_accepted(tmp_path):
    grid = device_grid.Grid(grid_args(tmp_path, stream_gb=0.01, matmul_gb=0.002))
    assert grid.run(device_grid.order((1, 2), (256,), (0, 3))) == 0
    g = json.loads((tmp_path / "grid" / "grid.json").read_text())
    stream, mm = g["stream"], g["matmul"]
    # the matmul rates: a large matmul, and the layer's four matmuls at the model's widths at each row count asked
    assert mm["peak"]["flops_per_s"] == pytest.approx(mm["peak"]["flops"] / mm["peak"]["seconds"])
    assert "block_until_ready" in mm["method"] and "median" in mm["method"] and mm["repeats"] == 2
    assert {(m["name"], m["rows"]) for m in mm["shapes"]} == {(n, r) for n in ("qkv_proj", "o_proj", "gate_up_proj",
                                                                              "down_proj") for r in (16, 64)}
    for m in mm["shapes"]:
        assert m["flops"] == 2.0 * m["rows"] * m["n_in"] * m["n_out"] and m["copies"] >= 1
        assert m["flops_per_s"] == pytest.approx(m["flops"] / m["seconds"])
    assert sorted(mm["by_rows"]) == ["16", "64"] and 0 < mm["rows_half"] < 1e6
    # a CPU's per-row term is a fraction of the fastest rate it measured (a chip's: of its datasheet peak)
    if grid.hw.platform == "cpu":
        assert mm["rows_half_of"] == "the fastest rate measured"
        assert mm["rows_half_of_flops_per_s"] == max(mm["peak"]["flops_per_s"], *mm["by_rows"].values())
    else:
        assert mm["rows_half_of"].endswith("'s datasheet peak") and mm["rows_half_of_flops_per_s"] > 0
    assert (tmp_path / "grid" / "matmul.csv").read_text().count("\n") == 1 + len(mm["shapes"])
    assert stream["bytes"] > 5e6 and stream["seconds"] > 0
    assert stream["bytes_per_s"] == pytest.approx(stream["bytes"] / stream["seconds"])
    assert [(p["batch"], p["k"]) for p in g["points"]] == [(1, 0), (2, 0), (1, 3), (2, 3)]  # plain decoding first
    for p in g["points"]:
        assert p["status"] == "ok" and p["oracle_ok"] and p["step_ms"] > 0 and p["compile_s"] > 0
        assert p["floor_ms"] > 0 and p["ratio_to_floor"] == pytest.approx(p["step_ms"] / p["floor_ms"])
        # the same step against its bytes at the bandwidth the device's own matrix-vector product reached
        assert p["ratio_to_stream"] == pytest.approx(p["step_ms"] * stream["bytes_per_s"] / (1e3 * p["step_bytes"]))
        assert p["host_ms"] == pytest.approx(p["engine_step_ms"] - p["step_ms"])
        assert p["kv_cache_bytes"] > 0 and p["need_bytes"] > p["kv_cache_bytes"]
        # the practical roofline: per pass its bytes at the stream's rate or its FLOPs at the measured rates
        practical, compute = matmul_rate.practical_seconds(grid.step(device_grid.Point(p["batch"], 256, p["k"])),
                                                           stream["bytes_per_s"], matmul_rate.rate_lookup(mm["shapes"]),
                                                           mm["peak"]["flops_per_s"])
        assert p["practical_ms"] == pytest.approx(1e3 * practical) and p["practical_ms"] > 0
        assert p["practical_bound"] == ("compute" if compute else "memory")
        assert p["ratio_to_practical"] == pytest.approx(p["step_ms"] / p["practical_ms"])
    by = {(p["batch"], p["k"]): p for p in g["points"]}
    assert by[(2, 0)]["kv_cache_bytes"] == 2 * by[(1, 0)]["kv_cache_bytes"]  # every request's cache
    assert by[(1, 3)]["step_bytes"] > by[(1, 0)]["step_bytes"]  # the draft's weights and lm_head read again
    assert g["skipped"] == [] and g["dropped"] == [] and g["violations"] == []
    assert (tmp_path / "grid" / "grid.csv").read_text().count("\n") == 5
    assert "NaN" not in (tmp_path / "grid" / "grid.json").read_text()  # a CPU has no roofline: null, valid JSON
    assert g["dtype"] == "float32"  # a CPU's default


def test_a_grid_in_another_dtype_says_so_and_a_fit_in_the_wrong_one_is_refused(tmp_path, capsys):
    args = grid_args(tmp_path, dtype="bfloat16", batch=(1,), ks=(0,))
    assert device_grid.Grid(args).run(device_grid.order((1,), (256,), (0,))) == 0
    g = json.loads((tmp_path / "grid" / "grid.json").read_text())
    assert g["dtype"] == "bfloat16" and g["points"][0]["status"] == "ok"
    # as a v5e's grid would record it (a CPU's is refused for --chip before its dtype is read)
    (tmp_path / "grid" / "grid.json").write_text(json.dumps(g | {"platform": "tpu", "device": "TPU v5 lite"}))
    assert main(["cost-model", "--chip", "v5e", "--fit-from", str(tmp_path / "grid"), "--dtype", "float32",
                 "--tau-from", str(ROOT / "results" / "reference" / "tpu_v5p_qwen3_4b.csv")]) == 2
    assert "the grid was timed in bfloat16, the steps are priced in float32; give --dtype bfloat16" in \
        capsys.readouterr().err


def test_a_point_that_does_not_fit_is_named_with_its_bytes_and_one_past_the_budget_dropped(tmp_path, monkeypatch):
    cfg, dcfg = _shapes()
    need = {(b, k): device_grid.need_bytes(cfg, dcfg, device_grid.Point(b, 256, k), 4)[1]
            for b in (1, 2) for k in (0, 3)}
    free = 4e6  # a point may take 90 % of it: room for B = 1's caches and work space, not for B = 2's
    assert need[(1, 0)] < need[(1, 3)] <= 0.9 * free < need[(2, 0)]
    grid = device_grid.Grid(grid_args(tmp_path, memory_gb=free / 1e9))
    left = iter([600.0, 0.0])  # the budget holds the first point, then nothing
    monkeypatch.setattr(grid, "left", lambda: next(left))
    assert grid.run(device_grid.order((1, 2), (256,), (0, 3))) == 0
    g = json.loads((tmp_path / "grid" / "grid.json").read_text())
    assert g["stream"] is None and "ratio_to_stream" not in g["points"][0]  # --stream-gb 0: not measured
    assert [(p["batch"], p["k"]) for p in g["points"]] == [(1, 0)]
    skipped = {(p["batch"], p["k"]): p for p in g["skipped"]}
    assert (2, 0) in skipped and skipped[(2, 0)]["note"].startswith("does not fit: ")
    assert "of KV cache" in skipped[(2, 0)]["note"] and "--memory-gb" in skipped[(2, 0)]["note"]
    assert len(g["dropped"]) == 1 and g["dropped"][0].startswith("B=1 context=256 K=3")
    lines, bad = grid_lines(tmp_path / "grid")
    assert not bad and any("does not fit" in line for line in lines) and any("dropped: " in line for line in lines)


def test_a_budget_below_the_first_points_cost_runs_nothing_and_says_so(tmp_path, capsys):
    """The budget is checked before the first point too (from its predicted cost), and a grid that measured nothing
    does not exit 0; its outputs are whole, and the stream that does not fit the memory is named, not drawn."""
    grid = device_grid.Grid(grid_args(tmp_path, budget_s=1.0, stream_gb=8.0, memory_gb=1.0, matmul_gb=8.0))
    assert grid.run(device_grid.order((1,), (256,), (0,))) == 4  # NOT_CHECKED: dropped for time
    g = json.loads((tmp_path / "grid" / "grid.json").read_text())
    assert g["points"] == [] and g["dropped"][0].startswith("B=1 context=256 K=0: need ~")
    assert g["stream"] is None and re.match(r"not measured: \d+\.\d\d GB to draw its matrix", g["stream_note"])
    lines, _ = grid_lines(tmp_path / "grid")
    assert g["matmul_note"] and f"  matmul {g['matmul_note']}" in lines  # the summary says why no rate was measured
    # the matmul rates' compiles alone (a loop per shape and row count) are more than the budget: not measured
    assert g["matmul"] is None and re.match(r"not measured: ~\d+ s predicted", g["matmul_note"])
    assert "--matmul-rows" in g["matmul_note"]
    assert "no point was measured" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "grid").iterdir()) == ["grid.csv", "grid.json"]  # no trace folder


def test_matmul_rates_that_do_not_fit_the_memory_are_named_not_measured(tmp_path):
    """The large matmul's three n x n arrays (512 on a CPU, float32: 3.1 MB; larger on a chip) against 2 MB free:
    not allocated, and no practical roofline."""
    grid = device_grid.Grid(grid_args(tmp_path, memory_gb=0.002, matmul_gb=0.001))
    assert grid.result["matmul"] is None
    size = "3.1 MB" if grid.hw.platform == "cpu" else r"[\d.]+ [MG]B"
    assert re.fullmatch(fr"not measured: {size} of weight copies, 2\.0 MB free \(--memory-gb 0\.002\); give a "
                        r"smaller --matmul-gb", grid.result["matmul_note"])
    assert grid.row(device_grid.Point(1, 256, 0), "skipped").get("practical_ms") is None


@pytest.mark.parametrize("name", ["grid.json", "grid.csv", "matmul.csv", "profile.tar.gz"])
def test_an_output_that_is_a_link_is_refused_before_any_work(tmp_path, capsys, name):
    """A link where an output goes (into a user's file) is refused, the file untouched; so is a linked --out."""
    users = tmp_path / "users.txt"
    users.write_text("mine\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / name).symlink_to(users)
    (tmp_path / "linked").symlink_to(tmp_path / "out")
    for out in ("out", "linked"):
        assert main(["study", "device-grid", "--shape", "qwen3-tiny", "--out", str(tmp_path / out)]) == 2
        assert "a link stands where" in capsys.readouterr().err
    assert users.read_text() == "mine\n"


def _shapes():
    from benchmarks.studies.device import draft_config, resolve_shape

    cfg = resolve_shape("qwen3-tiny")
    return cfg, draft_config(cfg)


def test_bad_points_are_refused_before_anything_loads(capsys):
    code = main(["study", "device-grid", "--shape", "qwen3-tiny", "--batch", "3", "--ks", "16", "--context", "20"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--batch 3: the engine's batch sizes are 1, 2, 4" in err and "--ks 16: DFlash's K runs 1..15" in err
    assert "--context 20: 12 steps of K + 1 tokens must fit inside it" in err


def test_order_and_op_kinds():
    points = device_grid.order((4, 1), (2048, 256), (7, 0, 15))
    assert [p.k for p in points[:4]] == [0, 0, 0, 0] and points[4].k == 15 and points[-1].k == 7
    assert [(p.batch, p.context) for p in points[:4]] == [(1, 256), (1, 2048), (4, 256), (4, 2048)]
    assert device_grid.op_kind("%fusion.2923 = (f32[4]{0:T(128)S(1)}, bf16[4,2560]{1,0}) fusion(...)") \
        == "fusion (f32[4]"
    assert device_grid.op_kind("%copy.12 = bf16[4,8,4,8192]{3,2,1,0:T(4,128)} copy(%x)") == "copy bf16[4,8,4,8192]"


def test_a_shape_whose_weights_do_not_fit_is_refused_before_they_are_allocated(tmp_path, monkeypatch):
    """The weights are checked against the free memory (the host's on a CPU, the device's on a chip) before any is
    allocated."""
    monkeypatch.setattr(device_grid, "available_memory_bytes", lambda: 1e6)  # a CPU's free memory
    if jax.default_backend() != "cpu":  # a chip's comes from its memory statistics
        monkeypatch.setattr(device_grid, "free_device_bytes", lambda memory_gb: (1e6, "the device's memory statistics"))
    with pytest.raises(device_grid.BadInput, match=r"--shape qwen3-tiny: its weights and its draft's take .* free"):
        device_grid.Grid(grid_args(tmp_path))
    assert not (tmp_path / "grid").exists()


def test_a_grid_whose_every_point_failed_exits_1(tmp_path, monkeypatch, capsys):
    grid = device_grid.Grid(grid_args(tmp_path))

    def fails(point):
        raise RuntimeError("RESOURCE_EXHAUSTED: out of memory")

    monkeypatch.setattr(grid, "measure", fails)
    assert grid.run(device_grid.order((1, 2), (256,), (0,))) == 1  # Exit.FAILED: nothing measured
    g = json.loads((tmp_path / "grid" / "grid.json").read_text())
    assert g["points"] == [] and [p["status"] for p in g["skipped"]] == ["failed", "failed"]
    assert "no point was measured" in capsys.readouterr().out


def test_a_point_above_its_roofline_is_profiled_whatever_bounds_it_and_trees_count_toward_the_most(tmp_path):
    """--profile-above reads the step against its roofline, memory- or compute-bound (a tree's verify of many rows
    is compute-bound), and --profile-max counts the chains' and the trees' profiles together."""
    from benchmarks.hardware import roofline

    grid = device_grid.Grid(grid_args(tmp_path, profile_above=1.5, profile_max=1))
    grid.device = roofline.Device("stated", bytes_per_s=1e9, flops_per_s=1e9, source="a test's")
    chain, tree = device_grid.Point(1, 256, 3), device_grid.Point(2, 256, 15, 8)
    for point in (chain, tree):
        roof_ms = 1e3 * roofline.step_seconds(grid.step(point), grid.device)
        assert not grid._profile_wanted(point, {"step_ms": 1.4 * roof_ms})
        assert grid._profile_wanted(point, {"step_ms": 1.6 * roof_ms})
    assert any(roofline.compute_bound(p, grid.device) for p in grid.step(tree).passes)  # the tree: its FLOPs
    grid.result["trees"].append({"profile": {"ops": []}})  # one tree profiled: the most is reached
    assert not grid._profile_wanted(chain, {"step_ms": 1e9})
