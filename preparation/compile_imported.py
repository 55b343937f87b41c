"""Write the bytecode of the modules the harness and its engines import, once, at set-up.

    python preparation/compile_imported.py cpu|gpu|tpu|jax

Imports, in this one process and with bytecode writing on, the modules that a run's processes load: what the
harness's entry points, report and JAX engine import and, where installed, vLLM's engine, engine core, worker,
DFlash and EAGLE drafts and attention backend for the platform. Each import writes the bytecode of every module it
loads (the import compiles it anyway), so the engines' processes later read it instead of compiling, where
PYTHONDONTWRITEBYTECODE keeps them from saving their own. Only these modules are compiled, not the whole venv (most
of whose files no run imports: other vLLM models, Ray, API clients, test suites). A module that fails to import is
skipped: it is compiled when, if ever, a run imports it. Prints one line: how many modules now have bytecode.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness's own package, from any directory

# What the harness's modules import (set-up imports no project module: the harness's own few files compile on their
# first import, in a moment)
HARNESS = ("matplotlib.pyplot", "pandas", "yaml", "numpy", "scipy.stats",
           "transformers.models.auto.tokenization_auto", "transformers.models.auto.configuration_auto",
           "transformers.tokenization_utils_tokenizers", "transformers.models.qwen2.tokenization_qwen2",
           "transformers.models.qwen3.configuration_qwen3", "jax.numpy", "safetensors.numpy")
VLLM = ("vllm.entrypoints.llm", "vllm.v1.engine.core", "vllm.v1.engine.llm_engine", "vllm.v1.engine.core_client",
        "vllm.v1.executor.multiproc_executor", "vllm.v1.sample.sampler", "vllm.v1.spec_decode.dflash",
        "vllm.v1.spec_decode.eagle", "vllm.v1.spec_decode.draft_model", "vllm.v1.spec_decode.metrics",
        "vllm.model_executor.model_loader", "vllm.model_executor.models.qwen3",
        "vllm.model_executor.models.qwen3_dflash", "vllm.model_executor.models.qwen3_eagle3",
        "vllm.model_executor.models.llama", "vllm.model_executor.models.llama_eagle3")
PLATFORM = {
    "cpu": ("vllm.v1.worker.cpu_worker", "vllm.v1.worker.cpu_model_runner", "vllm.v1.attention.backends.cpu_attn"),
    "gpu": ("vllm.v1.worker.gpu_worker", "vllm.v1.worker.gpu_model_runner", "vllm.v1.attention.backends.flash_attn"),
    "tpu": ("tpu_inference.platforms.tpu_platform", "tpu_inference.worker.tpu_worker",
            "tpu_inference.runner.tpu_runner", "tpu_inference.spec_decode.jax.dflash",
            "tpu_inference.models.jax.qwen3_dflash", "tpu_inference.models.jax.qwen3"),
    "jax": (),
}


def modules(platform: str) -> tuple[str, ...]:
    """What `platform`'s processes import: the harness's modules, then vLLM's (none for the JAX-only set)."""
    return HARNESS + (() if platform == "jax" else VLLM) + PLATFORM[platform]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PLATFORM:
        print("compile_imported: error: usage: compile_imported.py cpu|gpu|tpu|jax", file=sys.stderr)
        return 2
    sys.dont_write_bytecode = False
    skipped = []
    for name in modules(argv[0]):
        try:
            importlib.import_module(name)
        except Exception as exc:  # a module this set cannot import is compiled when a run imports it, if ever
            skipped.append(f"{name} ({type(exc).__name__})")
    done = sum(1 for m in list(sys.modules.values()) if vars(m).get("__cached__"))  # vars: no lazy attribute loads
    print(f"compile_imported: {done} modules imported with their bytecode written"
          + (f"; not importable here: {', '.join(skipped)}" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
