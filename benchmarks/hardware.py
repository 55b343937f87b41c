"""The physical floor of a decode step: weight bytes / memory bandwidth.

An AR step reads every weight once, so TPOT >= weight bytes / bandwidth; a DFlash step reads the target and draft
weights once, so (decode time / verify steps) >= their bytes / bandwidth. A measured time below the floor is a timing
bug (an unsynchronised clock, a cached result), never a fast engine.

Bandwidth: a table for accelerators, a measured memory copy for CPUs, or the DFLASH_BANDWIDTH_GBS environment variable
(GB/s = 1e9 bytes/s), which overrides both. On a CPU whose last-level cache holds the whole working set (tiny models)
the weights never touch DRAM, so the DRAM floor does not apply and is not checked.
"""
from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import metrics

# Peak memory bandwidth in GB/s, matched as case-insensitive substrings of the device name (first match wins).
HBM_GBS: list[tuple[str, float]] = [
    ("TPU v5 lite", 819.0),  # v5e, as JAX names it; cloud.google.com/tpu/docs/v5e: 819 GBps HBM
    ("TPU v5e", 819.0),
    ("TPU v5p", 2765.0),  # cloud.google.com/tpu/docs/v5p: 2765 GBps HBM2e
    ("TPU v5", 2765.0),  # JAX names v5p "TPU v5"
    ("TPU v6 lite", 1640.0),  # v6e (Trillium), as JAX names it; cloud.google.com/tpu/docs/v6e: 1640 GBps
    ("TPU v6e", 1640.0),
    ("H200", 4800.0),  # nvidia.com/en-us/data-center/h200: H200 SXM 4.8 TB/s HBM3e
    ("H100 PCIe", 2000.0),  # nvidia.com/en-us/data-center/h100 datasheet: H100 PCIe 2.0 TB/s HBM2e
    ("H100 NVL", 3900.0),  # same datasheet: H100 NVL 3.9 TB/s
    ("H100", 3350.0),  # same datasheet: H100 SXM 3.35 TB/s HBM3
]
ENV_BANDWIDTH = "DFLASH_BANDWIDTH_GBS"


@dataclass(frozen=True)
class Hardware:
    platform: str  # cpu | gpu | tpu
    device: str
    bandwidth_bytes_per_s: float | None
    bandwidth_source: str
    cache_bytes: int | None  # the CPU's last-level cache; None on accelerators or when unknown


def platform_name() -> str:
    import jax

    p = jax.default_backend()
    return "gpu" if p in ("cuda", "rocm", "gpu") else p


def device_name() -> str:
    import jax

    if platform_name() == "cpu":
        from benchmarks.provenance import cpu_name

        return cpu_name()
    return jax.devices()[0].device_kind


def detect() -> Hardware:
    """Platform, device and memory bandwidth of JAX's default device."""
    platform, device = platform_name(), device_name()
    bw, source = _bandwidth(platform, device)
    return Hardware(platform, device, bw, source, last_level_cache_bytes() if platform == "cpu" else None)


def bandwidth_bytes_per_s(platform: str, device: str | None = None) -> float | None:
    """Memory bandwidth of a device (bytes/s): env override, table, CPU measurement; None for an unknown accelerator."""
    return _bandwidth(platform, device if device is not None else device_name())[0]


def _bandwidth(platform: str, device: str) -> tuple[float | None, str]:
    if os.environ.get(ENV_BANDWIDTH):
        return float(os.environ[ENV_BANDWIDTH]) * 1e9, f"${ENV_BANDWIDTH}"
    for pattern, gbs in HBM_GBS:
        if pattern.lower() in device.lower():
            return gbs * 1e9, f"datasheet ({pattern})"
    if platform == "cpu":
        return measure_copy_bytes_per_s(), "measured: numpy copy of 256 MiB"
    return None, f"unknown device {device!r}; set {ENV_BANDWIDTH}"


@functools.lru_cache(maxsize=None)
def measure_copy_bytes_per_s(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Best-of-n DRAM copy bandwidth: bytes read + written per second over a buffer larger than most caches."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return 2 * src.nbytes / best


def last_level_cache_bytes() -> int | None:
    """The largest CPU cache (Linux sysfs), None when unknown."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        if text.rstrip("KMG").isdigit():
            sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes) if sizes else None


def weight_bytes(params: Any) -> int:
    """Bytes of every array in a parameter pytree."""
    import jax

    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params)))


def floor_applies(hw: Hardware, working_set_bytes: float) -> tuple[bool, str]:
    """Whether the DRAM/HBM floor binds: not when the bandwidth is unknown or a CPU cache holds the working set."""
    if hw.bandwidth_bytes_per_s is None:
        return False, hw.bandwidth_source
    if hw.cache_bytes is not None and working_set_bytes <= hw.cache_bytes:
        return False, (f"the {working_set_bytes / 2**20:.0f} MiB working set fits the "
                       f"{hw.cache_bytes / 2**20:.0f} MiB CPU cache")
    return True, ""


def timing_error(step_s: float, floor_s: float) -> str | None:
    """A message when a measured step time is below the physical floor (a timing bug), else None."""
    if metrics.below_floor(step_s * 1e3, floor_s * 1e3):
        return (f"timing error: step time {step_s * 1e3:.3f} ms is below the memory-bandwidth floor "
                f"{floor_s * 1e3:.3f} ms; the clock is not measuring the work")
    return None
