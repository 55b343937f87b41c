"""The device check's summary: the JAX study's figures, verify(K)/verify(0) read back per context, the steps failed,
dropped and skipped, and a verdict whose exit status says which (a failed step, a time below its floor, a drop)."""
import csv
import json

from benchmarks.cli import main
from benchmarks.core.exit_codes import Exit
from benchmarks.studies.kflat import CSV_COLUMNS


def write_kflat(folder, rows):
    folder.mkdir(parents=True)
    with open(folder / "kflat.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for k, context, median, floor, verdict in rows:  # predicted: 1.8 ms at K=0, 10 % more per K step here
            predicted = 1.8 * (1.0 + k / 75)
            writer.writerow({"engine": "jax", "k": k, "context_len": context, "median_ms": median, "ci_low": median,
                             "ci_high": median, "repeats": 5, "floor_ms": floor, "below_floor": verdict != "ok",
                             "normalised_to_k0": median / 2.0, "predicted_ms": predicted,
                             "predicted_normalised": predicted / 1.8, "verdict": verdict})


def test_ratios_per_context_and_ok_verdict(tmp_path, capsys):
    write_kflat(tmp_path / "kflat-qwen3-4b", [(0, 2048, 2.0, 1.5, "ok"), (15, 2048, 2.2, 1.5, "ok")])
    assert main(["device", "summary", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "context 2048 (K=0 2.000 ms, predicted 1.800 ms, floor 1.500 ms): K=0: 1.00 (1.00)  K=15: 1.10 (1.20)" in out
    assert out.strip().endswith("verdict: ok")


def test_point_below_floor_or_failed_step_fails(tmp_path, capsys):
    write_kflat(tmp_path / "kflat-llama-3.1-8b", [(0, 2048, 2.0, 1.5, "ok"), (7, 2048, 1.0, 1.5, "IMPOSSIBLE")])
    assert main(["device", "summary", str(tmp_path)]) == Exit.VIOLATION
    out = capsys.readouterr().out
    assert "IMPOSSIBLE: K=7 context 2048" in out and "K=7: 0.50 (1.09)" in out  # flagged, its ratio still shown
    (tmp_path / "kflat-llama-3.1-8b" / "kflat.csv").unlink()
    assert main(["device", "summary", str(tmp_path), "--failed", "bench-jax (exit 1, see bench-jax.log)"]) == 1
    assert "FAILED step: bench-jax" in capsys.readouterr().out


def test_dropped_and_skipped_steps_are_named(tmp_path, capsys):
    code = main(["device", "summary", str(tmp_path), "--dropped", "device-llama-3.1-8b (needs >= 90 s, 12 s left)",
                 "--skipped", "bench-vllm: vLLM does not import (No module named 'vllm')", "--note", "set-up: x"])
    assert code == Exit.NOT_CHECKED  # dropped for time; a skipped step is only reported
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1] == "set-up: x"
    assert "DROPPED step: device-llama-3.1-8b (needs >= 90 s, 12 s left)" in lines
    assert "skipped: bench-vllm: vLLM does not import (No module named 'vllm')" in lines
    assert lines[-1] == "verdict: INCOMPLETE (a step dropped for time)"


def split(loop, device):
    return {"loop_ms": loop, "dispatch_ms": 0.05, "fixed_ms": 0.08, "device_ms": device, "host_ms": loop - device,
            "counted_ms": device - 0.1, "steps": 10}


def test_device_study_figures(tmp_path, capsys):
    folder = tmp_path / "device-qwen3-4b"
    folder.mkdir()
    compiled = {"compile_s": 7.5, "compiles": {"prefill 32": 2.5, "steps 256": 5.0}}
    ar = {"tpot_ms": 2.0, "step_ms": 2.0, "requests": 4, "floor_ms": 1.675, "floor_applies": True,
          "floor_note": "", "below_floor": False, "predicted_ms": 1.7, "round_trips": [1, 1, 1, 1],
          "split": split(2.0, 1.8), **compiled}
    dflash = {"k": 15, "tau": 16.0, "step_ms": 3.0, "floor_ms": 1.9, "floor_applies": True, "floor_note": "",
              "below_floor": False, "predicted_ms": 2.0, "predicted_cost_ar_steps": 2.0 / 1.7, "cost_ar_steps": 1.5,
              "speedup_at_oracle_tau": 10.5, "split": split(3.0, 2.9), **compiled,
              "implied_speedup": {"math500": {"tau": 8.8, "speedup": 8.8 / 1.5},
                                  "mean": {"tau": 5.42, "speedup": 5.42 / 1.5}}}
    (folder / "device.json").write_text(json.dumps({
        "shape": "qwen3-4b", "dtype": "bfloat16", "device": "NVIDIA H200", "bandwidth_bytes_per_s": 4.8e12,
        "bandwidth_source": "datasheet", "weight_bytes": 8.04e9, "ar": ar, "dflash": dflash,
        "dropped": ["verify K=31,63: dropped, needs ~20 s and 5 s of the budget are left"],
        "violations": ["AR TPOT 1.0 ms is below its floor"]}))
    write_kflat(tmp_path / "x", [(0, 2048, 2.0, 1.5, "ok"), (15, 2048, 2.2, 1.5, "ok")])
    (tmp_path / "x" / "kflat.csv").rename(folder / "kflat.csv")
    assert main(["device", "summary", str(tmp_path)]) == Exit.VIOLATION
    out = capsys.readouterr().out
    assert ("AR TPOT 2.000 ms, step 2.000 ms (predicted 1.700 ms; floor 1.675 ms, 1.19x it); 4 requests, host round "
            "trips per request [1, 1, 1, 1]") in out
    assert ("per step: engine loop 2.000 ms, device 1.800 ms (a loop of known trip count: 1.700 ms), the host adds "
            "0.200 ms (10.0 %); per request the host dispatches the loop in 0.050 ms, and a loop with nothing to do "
            "costs 0.080 ms") in out
    assert "compiled in 7.5 s (prefill 32: 2.5 s, steps 256: 5.0 s)" in out
    assert ("= 1.50 AR steps (predicted 1.18): implied speedup 3.61x at tau 5.42 (mean), 5.87x at tau 8.80 "
            "(math500); 10.50x measured at tau 16.00") in out
    assert "context 2048 (K=0 2.000 ms, predicted 1.800 ms, floor 1.500 ms): K=0: 1.00 (1.00)  K=15: 1.10 (1.20)" in out
    assert "dropped: verify K=31,63" in out and "VIOLATION: AR TPOT 1.0 ms is below its floor" in out
