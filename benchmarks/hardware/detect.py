"""The device this process runs on (detection) and the memory bandwidth a floor divides by.

Bandwidth: the chip table (benchmarks.hardware.chips) for accelerators, a measured read stream for CPUs
(benchmarks.hardware.measure, cached per machine), or the DFLASH_BANDWIDTH_GBS environment variable (GB/s = 1e9
bytes/s), which overrides both. On a CPU whose last-level cache holds the whole working set (tiny models) the weights
never touch DRAM, so the DRAM floor does not apply and is not checked. Floors and the roofline:
benchmarks.hardware.roofline.
"""
from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.core.environment import read_number
from benchmarks.hardware import measure
from benchmarks.hardware.chips import TPU_GBS, chip_for, gpu_entry, tpu_generation
from benchmarks.hardware.roofline import Device, chip_device, cpu_device, floor_applies, timing_error
from benchmarks.hardware.step_cost import Step

__all__ = ["TPU_GBS", "tpu_generation", "timing_error"]  # where callers that predate the split look

ENV_BANDWIDTH = "DFLASH_BANDWIDTH_GBS"


@dataclass(frozen=True)
class Hardware:
    platform: str  # cpu | gpu | tpu
    device: str
    bandwidth_bytes_per_s: float | None
    bandwidth_source: str
    cache_bytes: int | None  # the CPU's last-level cache; None on accelerators or when unknown

    def floor_applies(self, working_set_bytes: float) -> tuple[bool, str]:
        """Whether the DRAM/HBM floor binds: not when the bandwidth is unknown or a CPU cache holds the working set."""
        return floor_applies(self.bandwidth_bytes_per_s, self.bandwidth_source, self.cache_bytes, working_set_bytes)

    def predictor(self, dtype: str, layout: str, steps: Iterable[Step], working_set_bytes: float,
                  overhead_s: float = 0.0) -> Device | None:
        """What the roofline predicts this device's steps from: the chip table, this CPU's measurements (matmuls of
        `steps` in `layout`, resident when the working set fits its cache), or None for a chip not in the table."""
        if self.platform == "cpu":
            resident = self.cache_bytes is not None and working_set_bytes <= self.cache_bytes
            return cpu_device(self.device, dtype, layout, resident, steps, overhead_s)
        chip = chip_for(self.platform, self.device, accelerator_type())
        return chip_device(chip, dtype, overhead_s) if chip else None


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


def visible_tpu_chips(dev: Path = Path("/dev")) -> int | None:
    """TPU chips this process can open (/dev/accelN, else /dev/vfio/N), or None where it sees none: a sandbox may
    show one chip of a host whose TPU_ACCELERATOR_TYPE names four."""
    for pattern in ("accel[0-9]*", "vfio/[0-9]*"):
        if n := len(list(dev.glob(pattern))):
            return n
    return None


def device_name_without_jax(platform_name: str) -> str:
    """A readable accelerator name without initialising JAX (which would reserve GPU memory vLLM needs): a TPU's
    accelerator type, and the chips visible here."""
    if platform_name == "tpu":
        chips = visible_tpu_chips()
        seen = f", {chips} chip{'s' if chips > 1 else ''} visible" if chips else ""
        return f"TPU {accelerator_type() or 'unknown type'}{seen}"
    if platform_name == "gpu":
        return nvidia_gpu_name() or "NVIDIA GPU"
    return cpu_name()


def jax_platform() -> str:
    import jax  # lazy: jax

    p = jax.default_backend()
    return "gpu" if p in ("cuda", "rocm", "gpu") else p


def jax_device_name() -> str:
    import jax  # lazy: jax

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
    given = read_number(ENV_BANDWIDTH)  # BadInput, one line, for a value that is no bandwidth
    if given is not None:
        return given * 1e9, f"${ENV_BANDWIDTH}"
    if platform_name == "tpu" or device.lower().startswith("tpu"):
        gen = tpu_generation(device, accelerator_type())
        if gen:
            return TPU_GBS[gen] * 1e9, f"datasheet: TPU {gen}, per chip"
    elif platform_name != "cpu":
        row = gpu_entry(device)
        if row:
            return row[1] * 1e9, f"datasheet: /{row[0]}/"
    if platform_name == "cpu":
        return measure.read_bytes_per_s(), (f"measured: fastest read stream on {measure.cpu_threads()} threads, "
                                            f"cached per machine")
    return None, f"unknown device {device!r}: set {ENV_BANDWIDTH} (GB/s) to its memory bandwidth"


def last_level_cache_bytes() -> int | None:
    """The largest CPU cache (Linux sysfs), None when unknown."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        if text.rstrip("KMG").isdigit():
            sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes) if sizes else None
