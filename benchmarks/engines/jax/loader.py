"""HF checkpoint folders -> JAX params: config.json plus one safetensors file or shards listed in an index json."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jax.numpy as jnp
from safetensors import safe_open

from benchmarks.core.shapes import DraftConfig, HfConfig, ModelConfig, read_config
from benchmarks.engines.jax.model import Params, head_in_layout, layer_shapes, platform_layout

# Our layer keys -> the HF tensors under "layers.{i}." that they stack along the output axis (identical for Qwen3,
# Llama-3 and the DFlash draft).
HF_LAYER_NAMES = {
    "qkv_proj": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "o_proj": ("self_attn.o_proj.weight",), "q_norm": ("self_attn.q_norm.weight",),
    "k_norm": ("self_attn.k_norm.weight",), "gate_up_proj": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
    "down_proj": ("mlp.down_proj.weight",), "input_norm": ("input_layernorm.weight",),
    "post_norm": ("post_attention_layernorm.weight",),
}
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def resolve_dtype(name: str | None, hf: HfConfig) -> Any:
    """An explicit dtype name, or ("auto"/None) the checkpoint's own `dtype`/`torch_dtype` (bfloat16 if absent)."""
    if name in (None, "auto"):
        name = hf.get("dtype") or hf.get("torch_dtype") or "bfloat16"
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {name!r}; choose one of {', '.join(DTYPES)} or auto")
    return DTYPES[name]


class Checkpoint:
    """The tensors of a checkpoint folder (model.safetensors, or the shards its index json lists), read one at a time,
    so that loading never holds a second copy of the weights."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        index = path / "model.safetensors.index.json"
        if index.exists():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        else:
            files = sorted(p.name for p in path.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no safetensors weights in {path}")
        self.path = path
        self._files = {name: safe_open(str(path / name), framework="flax") for name in files}
        self._where = {key: name for name, f in self._files.items() for key in f.keys()}

    def __contains__(self, key: str) -> bool:
        return key in self._where

    def take(self, key: str, dtype: Any) -> Any:
        if key not in self._where:
            raise KeyError(f"{self.path} lacks tensor {key}")
        return self._files[self._where[key]].get_tensor(key).astype(dtype)


def _matrix(w: Any, layout: str) -> Any:
    """An HF [out, in] matrix in `layout`."""
    return jnp.transpose(w) if layout == "io" else w


def _layers(ckpt: Checkpoint, prefix: str, cfg: ModelConfig, dtype: Any) -> list[Params]:
    def stacked(i: int, key: str) -> Any:
        parts = [ckpt.take(f"{prefix}layers.{i}.{name}", dtype) for name in HF_LAYER_NAMES[key]]
        w = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
        return _matrix(w, cfg.weight_layout) if w.ndim == 2 else w

    return [{key: stacked(i, key) for key in layer_shapes(cfg)} for i in range(cfg.num_layers)]


def load_target(path: str | Path, dtype: str | None = None, layout: str | None = None) -> tuple[ModelConfig, Params]:
    """A Qwen3ForCausalLM / LlamaForCausalLM folder -> (config, params in model.py's layout: `layout`, default the
    platform's)."""
    hf = read_config(path)
    cfg = ModelConfig.from_hf(hf, str(Path(path) / "config.json"))
    cfg = dataclasses.replace(cfg, weight_layout=layout or platform_layout())
    dt = resolve_dtype(dtype, hf)
    ckpt = Checkpoint(path)
    params: Params = {"embed": ckpt.take("model.embed_tokens.weight", dt), "norm": ckpt.take("model.norm.weight", dt),
                      "layers": _layers(ckpt, "model.", cfg, dt)}
    if not cfg.tie_word_embeddings:
        params["lm_head"] = ckpt.take("lm_head.weight", dt)
    return cfg, head_in_layout(params, cfg)


def load_draft(path: str | Path, dtype: str | None = None, layout: str | None = None) -> tuple[DraftConfig, Params]:
    """A z-lab DFlash draft folder (DFlashDraftModel) -> (config, params in draft.py's layout: `layout`, default the
    platform's)."""
    hf = read_config(path)
    if "DFlashDraftModel" not in (hf.get("architectures") or []):
        raise ValueError(f"{path} is not a DFlash draft (architectures={hf.get('architectures')})")
    dcfg = DraftConfig.from_hf(hf, str(Path(path) / "config.json"))
    dcfg = dataclasses.replace(dcfg, layers=dataclasses.replace(dcfg.layers, weight_layout=layout or platform_layout()))
    dt = resolve_dtype(dtype, hf)
    ckpt = Checkpoint(path)
    prefix = "model." if "model.fc.weight" in ckpt else ""
    params: Params = {name: ckpt.take(f"{prefix}{name}.weight", dt) for name in ("fc", "hidden_norm", "norm")}
    expected = (dcfg.layers.hidden_size, len(dcfg.target_layer_ids) * dcfg.layers.hidden_size)
    if tuple(params["fc"].shape) != expected:
        raise ValueError(f"fc.weight has shape {tuple(params['fc'].shape)}, expected {expected} "
                         f"for target_layer_ids {list(dcfg.target_layer_ids)}")
    params["fc"] = _matrix(params["fc"], dcfg.layers.weight_layout)
    params["layers"] = _layers(ckpt, prefix, dcfg.layers, dt)
    return dcfg, params
