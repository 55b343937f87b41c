"""The practical roofline of benchmarks.hardware.matmul_rate on made-up rates: a pass costs its bytes at the stream's
rate or its FLOPs at the rate of its row count, whichever is longer; rates between row counts are linear in log2."""
import pytest

from benchmarks.hardware import matmul_rate
from benchmarks.hardware.step_cost import Matmul, Pass, Step


def measured(name, n_in, n_out, rates):
    return [{"name": name, "n_in": n_in, "n_out": n_out, "rows": r, "seconds": 2.0 * r * n_in * n_out / v,
             "flops": 2.0 * r * n_in * n_out} for r, v in rates.items()]


def test_rates_by_row_count_interpolate_in_log_rows_and_hold_their_ends():
    rates = {16: 1e12, 64: 3e12}
    assert matmul_rate.at_rows(rates, 32) == pytest.approx(2e12)  # halfway in log2
    assert matmul_rate.at_rows(rates, 4) == 1e12 and matmul_rate.at_rows(rates, 4096) == 3e12
    ms = measured("a", 8, 8, {16: 1e12, 64: 3e12}) + measured("b", 8, 24, {16: 2e12, 64: 4e12})
    by = matmul_rate.by_rows(ms)  # FLOPs over seconds: b has 3x a's FLOPs at each row count
    assert by[16] == pytest.approx(4 / (1 / 1 + 3 / 2) * 1e12)
    rate = matmul_rate.rate_lookup(ms)
    assert rate(16, 8, 24) == pytest.approx(2e12)  # its own shape's
    assert rate(16, 8, 999) == pytest.approx(by[16])  # a shape not measured: every shape's


def test_a_pass_costs_its_bytes_or_its_flops_at_the_measured_rates():
    mm = Matmul("w", 64, 100, 100)
    p = Pass("p", (mm,), other_bytes=0.0, attention_flops=1e6, itemsize=2)
    step = Step((p,))
    rate = lambda rows, n_in, n_out: 1e9 * rows  # noqa: E731 (the rate grows with the rows)
    seconds, compute = matmul_rate.practical_seconds(step, 1e12, rate, 1e12)
    flops_s = mm.flops() / (64e9) + 1e6 / 1e12
    assert flops_s > p.bytes() / 1e12 and compute and seconds == pytest.approx(flops_s)
    seconds, compute = matmul_rate.practical_seconds(step, 1e6, rate, 1e12)  # a slow stream: bytes bound it
    assert not compute and seconds == pytest.approx(p.bytes() / 1e6)
    assert matmul_rate.practical_seconds(step + step, 1e6, rate, 1e12)[0] == pytest.approx(2 * seconds)


def test_the_layer_shapes_are_the_models_widths():
    from benchmarks.core.shapes import SHAPES

    cfg = SHAPES["qwen3-4b"]
    shapes = dict((name, (i, o)) for name, i, o in matmul_rate.layer_shapes(cfg))
    h, f = cfg.hidden_size, cfg.intermediate_size
    assert shapes["gate_up_proj"] == (h, 2 * f) and shapes["down_proj"] == (f, h)
    assert shapes["qkv_proj"] == (h, (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim)
