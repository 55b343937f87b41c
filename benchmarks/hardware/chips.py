"""Accelerators as data: memory bandwidth and peak matmul FLOP/s per chip, each figure with its source.

`CHIPS` holds the chips the roofline predicts for (`cost-model --chip`); `TPU_GBS` and `GPU_GBS` the bandwidth of
every chip the floors know by name (a JAX device kind, an nvidia-smi name, a Cloud TPU accelerator type). A CPU is not
in the table: its figures are measured on the machine (benchmarks.hardware.measure).
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Chip:
    name: str
    bytes_per_s: float  # HBM bandwidth
    bf16_flops_per_s: float  # dense (no structured sparsity)
    fp32_flops_per_s: float  # float32 at full precision ("highest")
    source: str


# On TPUs float32 at full precision is 6 bf16 passes (jax.lax.DotAlgorithmPreset BF16_BF16_F32_X6, JAX's "matmul
# precision" page), so its peak is the bf16 peak / 6; GPUs run it on CUDA cores (datasheet "FP32").
_TPU_FP32 = "; float32 = bf16 / 6 (6 bf16 passes, docs.jax.dev matmul precision)"
CHIPS: dict[str, Chip] = {
    "v5e": Chip("TPU v5e", 819e9, 197e12, 197e12 / 6,
                "cloud.google.com/tpu/docs/v5e: 819 GBps HBM2, 197 TFLOPs bf16 per chip" + _TPU_FP32),
    "v5p": Chip("TPU v5p", 2765e9, 459e12, 459e12 / 6,
                "cloud.google.com/tpu/docs/v5p: 2765 GBps HBM2e, 459 TFLOPs bf16 per chip" + _TPU_FP32),
    "v6e": Chip("TPU v6e", 1638e9, 918e12, 918e12 / 6,
                "cloud.google.com/tpu/docs/v6e: 1638 GBps HBM, 918 TFLOPs bf16 per chip" + _TPU_FP32),
    "h100": Chip("NVIDIA H100 SXM", 3.35e12, 989e12, 67e12,
                 "nvidia.com H100 datasheet (SXM): 3.35 TB/s HBM3, BF16 tensor 1,979 TFLOPS with sparsity (989 "
                 "dense), FP32 67 TFLOPS"),
    "h200": Chip("NVIDIA H200 SXM", 4.8e12, 989e12, 67e12,
                 "nvidia.com/en-us/data-center/h200: 4.8 TB/s HBM3e, BF16 tensor 1,979 TFLOPS with sparsity (989 "
                 "dense), FP32 67 TFLOPS"),
    "b200": Chip("NVIDIA B200 (HGX, 1000 W)", 8e12, 2.25e15, 80e12,
                 "nvidia.com HGX B200 / Blackwell datasheet: 8 TB/s HBM3e, BF16 tensor 4.5 PFLOPS with sparsity (2.25 "
                 "dense), FP32 80 TFLOPS"),
}

# Peak memory bandwidth per TPU generation in GB/s; generations are told apart by `tpu_generation`, never by substring.
TPU_GBS: dict[str, float] = {
    "v3": 900.0,  # cloud.google.com/tpu/docs/v3: 900 GBps HBM per chip
    "v4": 1200.0,  # cloud.google.com/tpu/docs/v4: 1200 GBps HBM2 per chip
    "v5e": CHIPS["v5e"].bytes_per_s / 1e9,
    "v5p": CHIPS["v5p"].bytes_per_s / 1e9,
    "v6e": CHIPS["v6e"].bytes_per_s / 1e9,
    "v7": 7380.0,  # cloud.google.com/tpu/docs/tpu7x (Ironwood): 7380 GBps HBM3e per chip (launch blog: ~7.2 TB/s)
}
# JAX device kinds and Cloud TPU accelerator types (TPU_ACCELERATOR_TYPE), lower-cased, first match wins. "TPU v5"
# alone is JAX's name for a v5p; a v5e calls itself "TPU v5 lite" or v5litepod-N, so the v5e rule comes first.
TPU_KINDS: list[tuple[str, str]] = [
    (r"v5\s*lite|v5litepod|\bv5e\b", "v5e"),
    (r"\bv5p\b|^tpu v5$|v5p-\d", "v5p"),
    (r"v6\s*lite|\bv6e\b", "v6e"),
    (r"tpu\s*7x?\b|\bv7x?\b|ironwood", "v7"),
    (r"\bv4\b|\bv4-\d|^tpu v4", "v4"),
    (r"\bv3\b|\bv3-\d", "v3"),
]
# GPUs by nvidia-smi / JAX name, lower-cased regex, first match wins (specific variants before the family); the
# third field names the CHIPS entry whose FLOP/s apply, where there is one.
GPU_GBS: list[tuple[str, float, str | None]] = [
    (r"gb200|b200", 8000.0, "b200"),
    (r"h200", 4800.0, "h200"),
    (r"h100.*pcie", 2000.0, None),  # nvidia.com/en-us/data-center/h100 datasheet: H100 PCIe 2.0 TB/s HBM2e
    (r"h100.*nvl", 3900.0, None),  # same datasheet: H100 NVL 3.9 TB/s
    (r"h100", 3350.0, "h100"),
    (r"a100.*80gb.*pcie|a100.*pcie.*80gb", 1935.0, None),  # nvidia.com A100 datasheet: 80 GB PCIe 1935 GB/s
    (r"a100.*80gb", 2039.0, None),  # same datasheet: 80 GB SXM 2039 GB/s
    (r"a100", 1555.0, None),  # same datasheet: 40 GB 1555 GB/s
    (r"l40s", 864.0, None),  # nvidia.com L40S datasheet: 864 GB/s GDDR6
    (r"\bl4\b", 300.0, None),  # nvidia.com L4 datasheet: 300 GB/s GDDR6
    (r"a10g", 600.0, None),  # AWS G5 (A10G): 600 GB/s GDDR6
    (r"\ba10\b", 600.0, None),  # nvidia.com A10 datasheet: 600 GB/s GDDR6
    (r"\bt4\b", 320.0, None),  # nvidia.com T4 datasheet: 320 GB/s GDDR6
    (r"v100", 900.0, None),  # nvidia.com V100 datasheet: SXM2/PCIe 900 GB/s HBM2
    (r"rtx 6000 ada", 960.0, None),  # nvidia.com RTX 6000 Ada datasheet: 960 GB/s GDDR6
    (r"rtx 2000 ada", 224.0, None),  # nvidia.com RTX 2000 Ada datasheet: 224 GB/s GDDR6
    (r"rtx 5090", 1792.0, None),  # nvidia.com GeForce RTX 5090 specs: 1792 GB/s GDDR7
    (r"rtx 4090", 1008.0, None),  # nvidia.com GeForce RTX 4090 specs: 1008 GB/s GDDR6X
    (r"rtx 3090", 936.0, None),  # nvidia.com GeForce RTX 3090 specs: 936 GB/s GDDR6X
]


def tpu_generation(*names: str | None) -> str | None:
    """The TPU generation (v4, v5e, v5p, v6e, v7, …) of a JAX device kind or accelerator type; None if unknown."""
    for name in names:
        text = (name or "").strip().lower()
        for pattern, gen in TPU_KINDS if text else ():
            if re.search(pattern, text):
                return gen
    return None


def gpu_entry(device: str) -> tuple[str, float, str | None] | None:
    """The GPU_GBS row of an accelerator name, or None."""
    return next((row for row in GPU_GBS if re.search(row[0], device.lower())), None)


def chip_for(platform: str, device: str, accelerator_type: str | None = None) -> Chip | None:
    """The CHIPS entry of a detected device, None for a CPU or a chip without FLOP/s figures."""
    if platform == "tpu" or device.lower().startswith("tpu"):
        return CHIPS.get(tpu_generation(device, accelerator_type) or "")
    row = gpu_entry(device) if platform != "cpu" else None
    return CHIPS.get(row[2] or "") if row else None
