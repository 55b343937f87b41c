"""A step's time from what it reads and computes (benchmarks.hardware.step_cost), and the floor below which no honest
time can fall.

    matmul  max(weight bytes / bandwidth, FLOPs / peak)   on a chip (CHIPS);  the measured time of that shape on a CPU
    pass    its matmuls + max(other bytes / bandwidth, attention FLOPs / peak) + overhead (stated, per forward pass)
    step    the sum of its passes (an AR step: one; a DFlash step: the draft and the verify)
    floor   step bytes / bandwidth: the time of a step that only reads what it must, at the memory's full speed
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from benchmarks.core import metrics
from benchmarks.hardware import measure
from benchmarks.hardware.chips import Chip
from benchmarks.hardware.step_cost import Matmul, Pass, Step, matmul_shapes


@dataclass(frozen=True)
class Device:
    """What a step's time is predicted from: bandwidth, peak FLOP/s at the step's dtype, where they come from, on a
    CPU the measured time per matmul shape (rows, n_in, n_out), and the overhead stated per forward pass."""

    name: str
    bytes_per_s: float
    flops_per_s: float
    source: str
    matmul_s: Callable[[int, int, int], float] | None = None
    overhead_s: float = 0.0


def chip_device(chip: Chip, dtype: str, overhead_s: float = 0.0) -> Device:
    flops = chip.fp32_flops_per_s if dtype == "float32" else chip.bf16_flops_per_s
    return Device(chip.name, chip.bytes_per_s, flops, chip.source, None, overhead_s)


def cpu_device(name: str, dtype: str, layout: str, resident: bool, steps: Iterable[Step],
               overhead_s: float = 0.0) -> Device:
    """This machine's CPU (benchmarks.hardware.measure, cached): its read stream, a large matmul's FLOP/s, and the
    time of each matmul shape of `steps` measured as the engine runs it (`layout`), weights streamed from DRAM unless
    `resident` (a model that fits the CPU cache)."""

    table = measure.matmul_table([s for step in steps for s in matmul_shapes(step)], dtype, layout, resident)
    return Device(name, measure.read_bytes_per_s(), measure.matmul_flops_per_s(dtype),
                  f"measured on this machine: read stream, XLA matmuls per shape in layout [{layout}]",
                  lambda rows, n_in, n_out: table[(rows, n_in, n_out)], overhead_s)


def matmul_seconds(m: Matmul, itemsize: int, device: Device) -> float:
    if device.matmul_s is not None:
        return m.count * device.matmul_s(m.rows, m.n_in, m.n_out)
    return max(m.weight_elems() * itemsize / device.bytes_per_s, m.flops() / device.flops_per_s)


def pass_seconds(p: Pass, device: Device) -> float:
    rest = max(p.other_bytes / device.bytes_per_s, p.attention_flops / device.flops_per_s)
    return sum(matmul_seconds(m, p.itemsize, device) for m in p.matmuls) + rest + device.overhead_s


def compute_bound(p: Pass, device: Device) -> bool:
    """Whether the pass's FLOPs take longer at the peak than its bytes at the bandwidth (what batching turns)."""
    return p.flops() / device.flops_per_s > p.bytes() / device.bytes_per_s


def step_seconds(step: Step, device: Device) -> float:
    return sum(pass_seconds(p, device) for p in step.passes)


def floor_seconds(step: Step, bytes_per_s: float) -> float:
    return step.bytes() / bytes_per_s


def floor_applies(bandwidth_bytes_per_s: float | None, bandwidth_source: str, cache_bytes: int | None,
                  working_set_bytes: float) -> tuple[bool, str]:
    """Whether the DRAM/HBM floor binds: not when the bandwidth is unknown or a CPU cache holds the working set."""
    if bandwidth_bytes_per_s is None:
        return False, bandwidth_source
    if cache_bytes is not None and working_set_bytes <= cache_bytes:
        return False, (f"the {working_set_bytes / 2**20:.0f} MiB working set fits the "
                       f"{cache_bytes / 2**20:.0f} MiB CPU cache")
    return True, ""


def timing_error(step_s: float, floor_s: float) -> str | None:
    """A message when a measured step time is below the physical floor (a timing bug), else None."""
    if metrics.below_floor(step_s * 1e3, floor_s * 1e3):
        return (f"timing error: step time {step_s * 1e3:.3f} ms is below the memory-bandwidth floor "
                f"{floor_s * 1e3:.3f} ms; the clock is not measuring the work")
    return None
