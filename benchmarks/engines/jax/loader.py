"""HF checkpoint folders -> JAX params: config.json plus one safetensors file or shards listed in an index json."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax.numpy as jnp
from safetensors import safe_open

from benchmarks.engines.jax.draft import DraftConfig
from benchmarks.engines.jax.model import ModelConfig, Params, layer_shapes

# Our layer keys -> HF names under "layers.{i}." (identical for Qwen3, Llama-3 and the DFlash draft).
HF_LAYER_NAMES = {
    "q_proj": "self_attn.q_proj.weight", "k_proj": "self_attn.k_proj.weight", "v_proj": "self_attn.v_proj.weight",
    "o_proj": "self_attn.o_proj.weight", "q_norm": "self_attn.q_norm.weight", "k_norm": "self_attn.k_norm.weight",
    "gate_proj": "mlp.gate_proj.weight", "up_proj": "mlp.up_proj.weight", "down_proj": "mlp.down_proj.weight",
    "input_norm": "input_layernorm.weight", "post_norm": "post_attention_layernorm.weight",
}
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def read_config(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / "config.json").read_text())


def resolve_dtype(name: str | None, hf: dict[str, Any]) -> Any:
    """An explicit dtype name, or ("auto"/None) the checkpoint's own `dtype`/`torch_dtype` (bfloat16 if absent)."""
    if name in (None, "auto"):
        name = hf.get("dtype") or hf.get("torch_dtype") or "bfloat16"
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {name!r}; choose one of {', '.join(DTYPES)} or auto")
    return DTYPES[name]


def read_tensors(path: str | Path) -> dict[str, Any]:
    """Every tensor of a checkpoint folder, by name, from model.safetensors or the shards of its index json."""
    path = Path(path)
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {path}")
    tensors: dict[str, Any] = {}
    for name in files:
        with safe_open(str(path / name), framework="flax") as f:
            tensors |= {key: f.get_tensor(key) for key in f.keys()}
    return tensors


def _stacked_layers(tensors: dict[str, Any], prefix: str, cfg: ModelConfig, dtype: Any) -> Params:
    layers = {}
    for key in layer_shapes(cfg):
        names = [f"{prefix}layers.{i}.{HF_LAYER_NAMES[key]}" for i in range(cfg.num_layers)]
        missing = [n for n in names if n not in tensors]
        if missing:
            raise KeyError(f"checkpoint lacks {missing[0]} (and {len(missing) - 1} more)")
        layers[key] = jnp.stack([tensors.pop(n).astype(dtype) for n in names])
    return layers


def load_target(path: str | Path, dtype: str | None = None) -> tuple[ModelConfig, Params]:
    """A Qwen3ForCausalLM / LlamaForCausalLM folder -> (config, params in model.py's layout)."""
    hf = read_config(path)
    cfg = ModelConfig.from_hf(hf)
    dt = resolve_dtype(dtype, hf)
    tensors = read_tensors(path)
    params: Params = {
        "embed": tensors.pop("model.embed_tokens.weight").astype(dt),
        "norm": tensors.pop("model.norm.weight").astype(dt),
        "layers": _stacked_layers(tensors, "model.", cfg, dt),
    }
    if not cfg.tie_word_embeddings:
        if "lm_head.weight" not in tensors:
            raise KeyError(f"{path}: tie_word_embeddings is false but lm_head.weight is missing")
        params["lm_head"] = tensors.pop("lm_head.weight").astype(dt)
    return cfg, params


def load_draft(path: str | Path, dtype: str | None = None) -> tuple[DraftConfig, Params]:
    """A z-lab DFlash draft folder (DFlashDraftModel) -> (config, params in draft.py's layout)."""
    hf = read_config(path)
    if "DFlashDraftModel" not in (hf.get("architectures") or []):
        raise ValueError(f"{path} is not a DFlash draft (architectures={hf.get('architectures')})")
    dcfg = DraftConfig.from_hf(hf)
    dt = resolve_dtype(dtype, hf)
    tensors = read_tensors(path)
    prefix = "model." if "model.fc.weight" in tensors else ""
    params: Params = {
        "fc": tensors.pop(prefix + "fc.weight").astype(dt),
        "hidden_norm": tensors.pop(prefix + "hidden_norm.weight").astype(dt),
        "norm": tensors.pop(prefix + "norm.weight").astype(dt),
        "layers": _stacked_layers(tensors, prefix, dcfg.layers, dt),
    }
    expected = (dcfg.layers.hidden_size, len(dcfg.target_layer_ids) * dcfg.layers.hidden_size)
    if tuple(params["fc"].shape) != expected:
        raise ValueError(f"fc.weight has shape {tuple(params['fc'].shape)}, expected {expected} "
                         f"for target_layer_ids {list(dcfg.target_layer_ids)}")
    return dcfg, params
