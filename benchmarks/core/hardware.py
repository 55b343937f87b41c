"""The physical floor of a decode step: weight bytes / memory bandwidth.

An AR step reads every weight once, so TPOT >= weight bytes / bandwidth; a DFlash step reads the target and draft
weights once, so (decode time / verify steps) >= their bytes / bandwidth. A measured time below the floor is a timing
bug (an unsynchronised clock, a cached result), never a fast engine.

Bandwidth: a table for accelerators, a measured memory copy for CPUs, or the DFLASH_BANDWIDTH_GBS environment variable
(GB/s = 1e9 bytes/s), which overrides both. The CPU copy runs on every core this process may use, one thread per chunk
(numpy releases the GIL while it copies): a multi-threaded engine reads memory with all cores, and a single-threaded
copy would set the floor too high and flag honest times as below it. On a CPU whose last-level cache holds the whole
working set (tiny models) the weights never touch DRAM, so the DRAM floor does not apply and is not checked.
"""
from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.core import metrics

# Peak memory bandwidth per chip in GB/s. TPU generations are told apart by `tpu_generation`, never by substring.
TPU_GBS: dict[str, float] = {
    "v3": 900.0,  # cloud.google.com/tpu/docs/v3: 900 GBps HBM per chip
    "v4": 1200.0,  # cloud.google.com/tpu/docs/v4: 1200 GBps HBM2 per chip
    "v5e": 819.0,  # cloud.google.com/tpu/docs/v5e: 819 GBps HBM2 per chip
    "v5p": 2765.0,  # cloud.google.com/tpu/docs/v5p: 2765 GBps HBM2e per chip
    "v6e": 1640.0,  # cloud.google.com/tpu/docs/v6e (Trillium): 1640 GBps HBM per chip
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
# GPUs by nvidia-smi / JAX name, lower-cased regex, first match wins (specific variants before the family).
GPU_GBS: list[tuple[str, float]] = [
    (r"gb200|b200", 8000.0),  # nvidia.com DGX/HGX B200 datasheet: 8 TB/s HBM3e per GPU
    (r"h200", 4800.0),  # nvidia.com/en-us/data-center/h200: H200 SXM and NVL 4.8 TB/s HBM3e
    (r"h100.*pcie", 2000.0),  # nvidia.com/en-us/data-center/h100 datasheet: H100 PCIe 2.0 TB/s HBM2e
    (r"h100.*nvl", 3900.0),  # same datasheet: H100 NVL 3.9 TB/s
    (r"h100", 3350.0),  # same datasheet: H100 SXM 3.35 TB/s HBM3
    (r"a100.*80gb.*pcie|a100.*pcie.*80gb", 1935.0),  # nvidia.com A100 datasheet: 80 GB PCIe 1935 GB/s
    (r"a100.*80gb", 2039.0),  # same datasheet: 80 GB SXM 2039 GB/s
    (r"a100", 1555.0),  # same datasheet: 40 GB 1555 GB/s
    (r"l40s", 864.0),  # nvidia.com L40S datasheet: 864 GB/s GDDR6
    (r"\bl4\b", 300.0),  # nvidia.com L4 datasheet: 300 GB/s GDDR6
    (r"a10g", 600.0),  # AWS G5 (A10G): 600 GB/s GDDR6
    (r"\ba10\b", 600.0),  # nvidia.com A10 datasheet: 600 GB/s GDDR6
    (r"\bt4\b", 320.0),  # nvidia.com T4 datasheet: 320 GB/s GDDR6
    (r"v100", 900.0),  # nvidia.com V100 datasheet: SXM2/PCIe 900 GB/s HBM2
    (r"rtx 6000 ada", 960.0),  # nvidia.com RTX 6000 Ada datasheet: 960 GB/s GDDR6
    (r"rtx 2000 ada", 224.0),  # nvidia.com RTX 2000 Ada datasheet: 224 GB/s GDDR6
    (r"rtx 5090", 1792.0),  # nvidia.com GeForce RTX 5090 specs: 1792 GB/s GDDR7
    (r"rtx 4090", 1008.0),  # nvidia.com GeForce RTX 4090 specs: 1008 GB/s GDDR6X
    (r"rtx 3090", 936.0),  # nvidia.com GeForce RTX 3090 specs: 936 GB/s GDDR6X
]
ENV_BANDWIDTH = "DFLASH_BANDWIDTH_GBS"


@dataclass(frozen=True)
class Hardware:
    platform: str  # cpu | gpu | tpu
    device: str
    bandwidth_bytes_per_s: float | None
    bandwidth_source: str
    cache_bytes: int | None  # the CPU's last-level cache; None on accelerators or when unknown


def tpu_generation(*names: str | None) -> str | None:
    """The TPU generation (v4, v5e, v5p, v6e, v7, …) of a JAX device kind or accelerator type; None if unknown."""
    for name in names:
        text = (name or "").strip().lower()
        for pattern, gen in TPU_KINDS if text else ():
            if re.search(pattern, text):
                return gen
    return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def accelerator_type() -> str | None:
    """The Cloud TPU accelerator type (e.g. v5litepod-8, v5p-8), from the VM's environment."""
    return os.environ.get("TPU_ACCELERATOR_TYPE", "").strip() or None


def nvidia_gpu_name() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def device_name_without_jax(platform_name: str) -> str:
    """A readable accelerator name without initialising JAX (which would reserve GPU memory vLLM needs)."""
    if platform_name == "tpu":
        return f"TPU {accelerator_type() or 'unknown type'}"
    if platform_name == "gpu":
        return nvidia_gpu_name() or "NVIDIA GPU"
    return cpu_name()


def jax_platform() -> str:
    import jax

    p = jax.default_backend()
    return "gpu" if p in ("cuda", "rocm", "gpu") else p


def jax_device_name() -> str:
    import jax

    return cpu_name() if jax_platform() == "cpu" else jax.devices()[0].device_kind


def detect() -> Hardware:
    """Platform, device and memory bandwidth of JAX's default device."""
    platform_name, device = jax_platform(), jax_device_name()
    bw, source = bandwidth(platform_name, device)
    return Hardware(platform_name, device, bw, source, last_level_cache_bytes() if platform_name == "cpu" else None)


def bandwidth_bytes_per_s(platform_name: str, device: str | None = None) -> float | None:
    """Memory bandwidth of a device (bytes/s): env override, table, CPU measurement; None for an unknown accelerator."""
    return bandwidth(platform_name, device if device is not None else jax_device_name())[0]


def bandwidth(platform_name: str, device: str) -> tuple[float | None, str]:
    """(bytes/s, where the figure comes from). A TPU also reads TPU_ACCELERATOR_TYPE when its name says too little."""
    if os.environ.get(ENV_BANDWIDTH):
        return float(os.environ[ENV_BANDWIDTH]) * 1e9, f"${ENV_BANDWIDTH}"
    if platform_name == "tpu" or device.lower().startswith("tpu"):
        gen = tpu_generation(device, accelerator_type())
        if gen:
            return TPU_GBS[gen] * 1e9, f"datasheet: TPU {gen}, per chip"
    elif platform_name != "cpu":
        for pattern, gbs in GPU_GBS:
            if re.search(pattern, device.lower()):
                return gbs * 1e9, f"datasheet: /{pattern}/"
    if platform_name == "cpu":
        threads = cpu_threads()
        return measure_copy_bytes_per_s(threads=threads), f"measured: numpy copy of 256 MiB on {threads} threads"
    return None, f"unknown device {device!r}: set {ENV_BANDWIDTH} (GB/s) to its memory bandwidth"


def cpu_threads() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def parallel_copy(dst: np.ndarray, src: np.ndarray, threads: int) -> None:
    """Copy src into dst, one contiguous chunk per thread, all threads released at once."""
    bounds = np.linspace(0, len(src), threads + 1).astype(int)
    start = threading.Barrier(threads)

    def copy(lo: int, hi: int) -> None:
        start.wait()
        np.copyto(dst[lo:hi], src[lo:hi])

    workers = [threading.Thread(target=copy, args=(lo, hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


@functools.lru_cache(maxsize=None)
def measure_copy_bytes_per_s(nbytes: int = 256 << 20, repeats: int = 5, threads: int = 1) -> float:
    """Best-of-n DRAM copy bandwidth on `threads` threads: bytes read + written per second over a buffer larger than
    most caches."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        parallel_copy(dst, src, threads)
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
