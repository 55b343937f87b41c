"""The device check's summary: verify(K)/verify(0) read back per context, and a verdict that fails on a failed step
or a time below its physical floor."""
import csv

from benchmarks.cli import main
from benchmarks.studies.kflat import CSV_COLUMNS


def write_kflat(folder, rows):
    folder.mkdir(parents=True)
    with open(folder / "kflat.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for k, context, median, floor, verdict in rows:
            writer.writerow({"engine": "jax", "k": k, "context_len": context, "median_ms": median, "ci_low": median,
                             "ci_high": median, "repeats": 5, "floor_ms": floor, "below_floor": verdict != "ok",
                             "normalised_to_k0": "" if verdict != "ok" else median / 2.0, "verdict": verdict})


def test_ratios_per_context_and_ok_verdict(tmp_path, capsys):
    write_kflat(tmp_path / "kflat-qwen3-4b", [(0, 2048, 2.0, 1.5, "ok"), (15, 2048, 2.2, 1.5, "ok")])
    assert main(["device", "summary", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "context 2048 (K=0 2.000 ms, floor 1.500 ms): K=0: 1.00  K=15: 1.10" in out
    assert out.strip().endswith("verdict: ok")


def test_point_below_floor_or_failed_step_fails(tmp_path, capsys):
    write_kflat(tmp_path / "kflat-llama-3.1-8b", [(0, 2048, 2.0, 1.5, "ok"), (7, 2048, 1.0, 1.5, "IMPOSSIBLE")])
    assert main(["device", "summary", str(tmp_path)]) == 1
    assert "IMPOSSIBLE: K=7 context 2048" in capsys.readouterr().out
    (tmp_path / "kflat-llama-3.1-8b" / "kflat.csv").unlink()
    assert main(["device", "summary", str(tmp_path), "bench-vllm (exit 1, see bench-vllm.log)"]) == 1
    assert "FAILED step: bench-vllm" in capsys.readouterr().out
