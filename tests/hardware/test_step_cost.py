"""What a step reads and computes (step_cost), the chip table and the roofline built on them, by hand."""
from __future__ import annotations

import dataclasses

import pytest

from benchmarks.core.shapes import SHAPES
from benchmarks.hardware import chips, roofline, step_cost

QWEN3_4B = SHAPES["qwen3-4b"]  # Qwen/Qwen3-4B config.json
DRAFT = dataclasses.replace(QWEN3_4B, num_layers=5)  # the released draft: 5 layers of the target's widths
BF16 = 2


def test_qwen3_4b_steps_count_the_draft_the_head_it_borrows_and_the_kv_rows():
    ar = step_cost.ar_step(QWEN3_4B, 0, BF16)
    assert ar.weight_bytes() == pytest.approx(8.04e9, rel=1e-3)  # 4.02 B parameters, the tied head once
    spec = step_cost.dflash_step(QWEN3_4B, DRAFT, 5, 15, 16, 0, BF16)
    draft, verify = spec.passes
    head = QWEN3_4B.vocab_size * QWEN3_4B.hidden_size * BF16
    assert draft.weight_bytes() - head == pytest.approx(1.07e9, rel=1e-2)  # the draft's own layers and fc
    assert verify.weight_bytes() == ar.weight_bytes()
    assert spec.bytes() == pytest.approx(9.90e9, rel=1e-3)  # not the 9.09 GB of target + draft alone
    kv = step_cost.kv_bytes_per_token(QWEN3_4B, BF16)
    assert kv == 2 * 36 * 8 * 128 * BF16
    assert step_cost.ar_step(QWEN3_4B, 2048, BF16).bytes() - ar.bytes() == 2048 * kv  # the context's KV rows
    # a verify of 16 tokens: 2 FLOPs per parameter per token, plus attention
    assert step_cost.verify_step(QWEN3_4B, 15, 0, BF16).flops() == pytest.approx(2 * 4.02e9 * 16, rel=1e-2)


def test_floors_and_roofline_on_the_h200():
    h200 = roofline.chip_device(chips.CHIPS["h200"], "bfloat16")
    ar = step_cost.ar_step(QWEN3_4B, 0, BF16)
    spec = step_cost.dflash_step(QWEN3_4B, DRAFT, 5, 15, 16, 0, BF16)
    assert roofline.floor_seconds(ar, h200.bytes_per_s) == pytest.approx(1.676e-3, rel=1e-3)
    assert roofline.floor_seconds(spec, h200.bytes_per_s) == pytest.approx(2.063e-3, rel=1e-3)
    # memory-bound at batch 1: the roofline is the floor (plus the stated overhead, per forward pass)
    assert roofline.step_seconds(ar, h200) == pytest.approx(roofline.floor_seconds(ar, h200.bytes_per_s), rel=1e-3)
    slow = dataclasses.replace(h200, overhead_s=1e-4)
    assert roofline.step_seconds(spec, slow) == pytest.approx(roofline.step_seconds(spec, h200) + 2e-4)
    # a compute-bound matmul takes its FLOPs over the peak
    big = step_cost.Matmul("x", 4096, 4096, 4096)
    assert roofline.matmul_seconds(big, BF16, h200) == pytest.approx(big.flops() / 989e12)


def test_a_cpu_predicts_from_its_measured_matmuls():
    table = {(1, 8, 16): 1e-3, (1, 16, 8): 2e-3}
    cpu = roofline.Device("cpu", 1e9, 1e12, "test", lambda r, i, o: table[(r, i, o)])
    p = step_cost.Pass("x", (step_cost.Matmul("a", 1, 8, 16, 3), step_cost.Matmul("b", 1, 16, 8)), 1e6, 0.0, 4)
    assert roofline.pass_seconds(p, cpu) == pytest.approx(3e-3 + 2e-3 + 1e-3)


def test_every_chip_names_its_source_and_detection_finds_it():
    for name, chip in chips.CHIPS.items():
        assert chip.bytes_per_s > 0 and chip.bf16_flops_per_s > chip.fp32_flops_per_s > 0 and chip.source, name
    assert chips.chip_for("gpu", "NVIDIA H200") is chips.CHIPS["h200"]
    assert chips.chip_for("gpu", "NVIDIA H100 80GB HBM3") is chips.CHIPS["h100"]
    assert chips.chip_for("gpu", "NVIDIA H100 PCIe") is None  # other figures than the SXM's
    assert chips.chip_for("tpu", "TPU v5 lite") is chips.CHIPS["v5e"]
    assert chips.chip_for("tpu", "TPU unknown", "v5p-8") is chips.CHIPS["v5p"]
    assert chips.chip_for("cpu", "AMD EPYC") is None


def test_floor_verdicts():
    assert roofline.floor_applies(None, "unknown device", None, 1e9) == (False, "unknown device")
    applies, why = roofline.floor_applies(1e9, "x", 32 << 20, 16 << 20)
    assert not applies and "fits the 32 MiB CPU cache" in why
    assert roofline.floor_applies(1e9, "x", 32 << 20, 64 << 20) == (True, "")
    assert roofline.timing_error(1.31e-3, 2.9e-3).startswith("timing error: step time 1.310 ms")
    assert roofline.timing_error(3e-3, 2.9e-3) is None


def test_a_batch_reads_the_weights_once_and_the_kv_rows_of_each_request():
    one, eight = step_cost.verify_step(QWEN3_4B, 15, 256, BF16), step_cost.verify_step(QWEN3_4B, 15, 256, BF16, 8)
    kv = step_cost.kv_bytes_per_token(QWEN3_4B, BF16)
    assert eight.weight_bytes() == one.weight_bytes()
    assert eight.bytes() - one.bytes() == pytest.approx(7 * (kv * (256 + 16) + 16 * QWEN3_4B.hidden_size * BF16))
    assert eight.flops() == pytest.approx(8 * one.flops())  # FLOPs in proportion to B·(K+1)
    draft1 = step_cost.dflash_step(QWEN3_4B, DRAFT, 5, 15, 16, 256, BF16).passes[0]
    draft4 = step_cost.dflash_step(QWEN3_4B, DRAFT, 5, 15, 16, 256, BF16, 4).passes[0]
    assert draft4.weight_bytes() == draft1.weight_bytes() and draft4.flops() == pytest.approx(4 * draft1.flops())
    v5p = roofline.chip_device(chips.CHIPS["v5p"], "bfloat16")
    assert not roofline.compute_bound(step_cost.verify_step(QWEN3_4B, 15, 256, BF16, 8).passes[0], v5p)
    assert roofline.compute_bound(step_cost.verify_step(QWEN3_4B, 15, 256, BF16, 16).passes[0], v5p)
