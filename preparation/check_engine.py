"""Import every module the platform's engines load; exit 1 naming the first that fails.

    python preparation/check_engine.py tpu

jax (a TPU environment without vLLM: preparation/tpu_plan.sh) needs JAX alone; cpu and gpu need ``vllm`` and JAX.
tpu also needs the tpu-inference modules that vLLM loads to run DFlash there:
its platform and layer plugins (the ``vllm.*_plugins`` entry points), the TPU worker and model runner, the model
loader, the DFlash proposer and the DFlash draft/target models.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

COMMON = ("jax", "vllm")
TPU_INFERENCE = (
    "tpu_inference.platforms.tpu_platform",
    "tpu_inference.worker.tpu_worker",
    "tpu_inference.runner.tpu_runner",
    "tpu_inference.models.common.model_loader",
    "tpu_inference.spec_decode.jax.dflash",
    "tpu_inference.models.jax.dflash",
    "tpu_inference.models.jax.qwen3_dflash",
    "tpu_inference.models.jax.qwen3",
)
PLUGIN_GROUPS = ("vllm.platform_plugins", "vllm.general_plugins")


def plugin_modules(prefix: str) -> list[str]:
    """Modules named by the vLLM plugin entry points of installed distributions whose module starts with ``prefix``."""
    names = {
        ep.value.split(":")[0]
        for group in PLUGIN_GROUPS
        for ep in importlib.metadata.entry_points(group=group)
    }
    return sorted(n for n in names if n.startswith(prefix))


def required_modules(platform: str) -> list[str]:
    if platform == "jax":
        return ["jax"]
    if platform in ("cpu", "gpu"):
        return list(COMMON)
    if platform == "tpu":
        return [*COMMON, *plugin_modules("tpu_inference"), *TPU_INFERENCE]
    raise ValueError(f"platform must be cpu, gpu, tpu or jax, not {platform!r}")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("cpu", "gpu", "tpu", "jax"):
        print("check_engine: error: usage: check_engine.py cpu|gpu|tpu|jax", file=sys.stderr)
        return 2
    modules = required_modules(argv[0])
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # any import-time failure means the engine cannot start
            print(f"check_engine: error: cannot import {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    import jax

    print(f"check_engine: {len(modules)} modules import on {argv[0]}: {', '.join(modules)}")
    vllm = importlib.import_module("vllm").__version__ if "vllm" in modules else "absent"
    print(f"check_engine: jax {jax.__version__} on {jax.default_backend()}, vllm {vllm}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
