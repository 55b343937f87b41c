"""Whether a static batch fits the device: the weights a cell loads and the KV caches of its B requests (each of
max_model_len positions through the target's and the draft's attention layers) against the device's memory. Checked
when the run is planned, before anything loads; the message names the largest batch that fits."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from benchmarks.core.cells import Cell
from benchmarks.core.shapes import HfConfig
from benchmarks.hardware.provenance import ModelFingerprint

WIDTHS = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}  # bytes per element, by dtype name


def itemsize(dtype: str, cfg: HfConfig) -> int:
    """Bytes per cache element: the cell's dtype option, or the model's own for "auto" (2 when unknown)."""
    name = dtype if dtype != "auto" else str(cfg.get("dtype") or cfg.get("torch_dtype") or "")
    return WIDTHS.get(name, 2)


def kv_bytes_per_token(cfg: HfConfig, width: int) -> int:
    """K and V bytes of one position in every attention layer of an HF config (0 for a config without layers)."""
    if not cfg.get("num_hidden_layers"):
        return 0
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    return 2 * cfg["num_hidden_layers"] * kv_heads * head_dim * width


def batch_bytes(cell: Cell, models: Mapping[str, ModelFingerprint], max_len: int) -> tuple[int, int]:
    """(weight bytes, KV bytes per request) of a cell, from the fingerprints of its model files."""
    found = [m for m in (models.get(cell.target), models.get(cell.draft or "")) if m]
    dtype = str(cell.engine_options.get("dtype", "auto"))
    weights = sum(m.get("weight_bytes") or 0 for m in found)
    per_token = sum(kv_bytes_per_token(m.get("config") or {}, itemsize(dtype, m.get("config") or {})) for m in found)
    return weights, per_token * max_len


def largest_batch(memory: int, weights: int, per_request: int) -> int:
    """The most requests whose caches fit beside the weights (0 when not even one does)."""
    return max(0, (memory - weights) // per_request) if per_request else 2**31


def device_memory_bytes(platform: str) -> tuple[int | None, str]:
    """(bytes, what they are) of the device a batch runs on: a CPU's available memory, a GPU's total (nvidia-smi);
    None where the harness cannot tell without loading an engine (a TPU)."""
    if platform == "cpu":
        meminfo = Path("/proc/meminfo")
        if meminfo.is_file():
            for line in meminfo.read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "the host's available memory"
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"), "the host's free memory"
    if platform == "gpu":
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None, "unknown (nvidia-smi did not answer)"
        if out.returncode == 0 and out.stdout.strip():
            return int(float(out.stdout.split()[0])) * 2**20, "the GPU's total memory"
    return None, f"unknown on {platform}"


def batch_memory_problem(cells: list[Cell], models: Mapping[str, ModelFingerprint], max_len: dict[str, int],
                         memory: int | None, what: str) -> str | None:
    """Why a cell's batch would not fit `memory` bytes (`what`: where the figure comes from), naming the largest
    batch that fits; None when every batch fits or the memory is unknown. `max_len`: max_model_len per engine."""
    if memory is None:
        return None
    for cell in (c for c in cells if c.batch_size > 1):
        weights, per_request = batch_bytes(cell, models, max_len[cell.engine])
        if weights + cell.batch_size * per_request > memory:
            fits = largest_batch(memory, weights, per_request)
            return (f"'batch_size': {cell.batch_size} requests of {cell.engine} {cell.label} need "
                    f"{(weights + cell.batch_size * per_request) / 2**30:.1f} GiB ({weights / 2**30:.2f} GiB of "
                    f"weights + {cell.batch_size} × {per_request / 2**20:.0f} MiB of KV cache at max_model_len "
                    f"{max_len[cell.engine]}), more than {what} ({memory / 2**30:.1f} GiB); the largest batch that "
                    f"fits is {fits}: lower 'batch_size' to it, or lower max_model_len")
    return None
