"""Model shapes: a decoder's widths and numerics (ModelConfig), the published ones by name (SHAPES, HF_SHAPES), and a
DFlash draft's (DraftConfig), read from an HF config.json or laid out as the released drafts are.

The one definition the roofline (step_cost, roofline), the cost model and the JAX engine share; it imports nothing
but the standard library, so pricing a chip never loads an engine.

    shape = ModelConfig.from_hf(read_config("path/or/hub-id"))     # or SHAPES["qwen3-4b"]
    draft = released_draft(shape, block_size=16)                   # or DraftConfig.from_hf(a draft's config.json)
"""
from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypedDict

QWEN3_MASK_TOKEN = 151669  # dflash_config.mask_token_id of the released Qwen3 drafts


class RopeParameters(TypedDict, total=False):
    """An HF config's `rope_parameters` (transformers 5) or `rope_scaling` (4): the fields read here."""

    rope_theta: float
    rope_type: str | None
    type: str | None
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: float


class DFlashConfig(TypedDict, total=False):
    """A DFlash draft's `dflash_config`: the fields read here."""

    mask_token_id: int | None
    target_layer_ids: list[int] | None


class HfConfig(TypedDict, total=False):
    """An HF config.json, as the fields the harness reads (a checkpoint carries others; any may be absent)."""

    model_type: str
    architectures: list[str] | None
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int | None
    rms_norm_eps: float | None
    tie_word_embeddings: bool | None
    attention_bias: bool
    mlp_bias: bool
    rope_theta: float | None
    rope_parameters: RopeParameters | None
    rope_scaling: RopeParameters | None
    max_position_embeddings: int | None
    dtype: str | None
    torch_dtype: str | None
    # a DFlash draft's
    dflash_config: DFlashConfig | None
    mask_token_id: int | None
    block_size: int | None
    target_layer_ids: list[int] | None
    num_target_layers: int | None


DefaultedField = Literal["num_key_value_heads", "head_dim", "rms_norm_eps", "tie_word_embeddings"]


@dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a Qwen3 (qk_norm=True) or Llama-3 (qk_norm=False) decoder. Hashable: a jit static arg."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0  # Qwen3's released value, for the named SHAPES below; from_hf never defaults it
    rms_norm_eps: float = 1e-6
    qk_norm: bool = True
    tie_word_embeddings: bool = True
    # Llama-3 RoPE scaling as sorted (name, value) pairs: factor, high_freq_factor, low_freq_factor,
    # original_max_position_embeddings. Empty for plain RoPE.
    rope_scaling: tuple[tuple[str, float], ...] = ()
    weight_layout: str = "oi"  # how matrices are stored: "oi" HF's [out, in], "io" [in, out]

    @classmethod
    def from_hf(cls, hf: HfConfig, source: str = "config.json") -> "ModelConfig":
        """From an HF config.json dict (transformers 4 `rope_theta`/`rope_scaling` or 5 `rope_parameters`).

        A missing shape field or RoPE base fails naming `source` and the key; the fields transformers' own Qwen3 /
        Llama configs default (ARCH_DEFAULTS) take that default with a warning that says so.
        """
        model_type = hf.get("model_type")
        if model_type not in ("qwen3", "llama"):
            raise ValueError(f"{source}: unsupported model_type {model_type!r}: the JAX engine runs qwen3 and llama")
        if hf.get("attention_bias") or hf.get("mlp_bias"):
            raise ValueError(f"{source}: attention/MLP biases are not supported")
        missing = [key for key in REQUIRED_FIELDS if hf.get(key) is None]
        if missing:
            raise ValueError(f"{source}: missing {', '.join(repr(k) for k in missing)}; the JAX engine needs the "
                             f"model's shape ({', '.join(REQUIRED_FIELDS)})")
        rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        theta = hf.get("rope_theta") or rope.get("rope_theta")
        if theta is None:
            raise ValueError(f"{source}: no RoPE base: add 'rope_theta' (transformers 4) or "
                             f"'rope_parameters: {{rope_theta: ...}}' (transformers 5) with the model's value")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        scaling: tuple[tuple[str, float], ...] = ()
        if rope_type == "llama3":
            names: tuple[Literal["factor", "low_freq_factor", "high_freq_factor",
                                 "original_max_position_embeddings"], ...] = (
                "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
            absent = [n for n in names if n not in rope]
            if absent:
                raise ValueError(f"{source}: llama3 RoPE scaling lacks {', '.join(absent)}")
            scaling = tuple(sorted((n, float(rope[n])) for n in names))
        elif rope_type not in ("default", None):
            raise ValueError(f"{source}: unsupported RoPE type {rope_type!r}")
        heads = hf["num_attention_heads"]

        def field(key: DefaultedField) -> Any:
            if hf.get(key) is not None:
                return hf[key]
            value = ARCH_DEFAULTS[key](hf)
            warnings.warn(f"{source}: no {key!r}; using the {model_type} default {value!r} (as transformers does)",
                          stacklevel=3)
            return value

        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=field("num_key_value_heads"),
            head_dim=field("head_dim"),
            rope_theta=float(theta),
            rms_norm_eps=float(field("rms_norm_eps")),
            qk_norm=model_type == "qwen3",
            tie_word_embeddings=bool(field("tie_word_embeddings")),
            rope_scaling=scaling,
        )


REQUIRED_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
# What transformers' Qwen3Config and LlamaConfig take when config.json omits a field (the same for both).
ARCH_DEFAULTS: dict[DefaultedField, Callable[[HfConfig], int | float | bool]] = {
    "num_key_value_heads": lambda hf: hf["num_attention_heads"],
    "head_dim": lambda hf: hf["hidden_size"] // hf["num_attention_heads"],
    "rms_norm_eps": lambda hf: 1e-6,
    "tie_word_embeddings": lambda hf: False,
}

_LLAMA3_ROPE = (("factor", 8.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                ("original_max_position_embeddings", 8192.0))

# Published shapes, for timing with random weights (values from the models' config.json on the HF hub).
SHAPES: dict[str, ModelConfig] = {
    "qwen3-tiny": ModelConfig(1024, 256, 512, 6, 2, 1, 128),
    "qwen3-1.7b": ModelConfig(151936, 2048, 6144, 28, 16, 8, 128),
    "qwen3-4b": ModelConfig(151936, 2560, 9728, 36, 32, 8, 128),
    "qwen3-8b": ModelConfig(151936, 4096, 12288, 36, 32, 8, 128, tie_word_embeddings=False),
    "llama3.1-8b": ModelConfig(128256, 4096, 14336, 32, 32, 8, 128, rope_theta=500_000.0, rms_norm_eps=1e-5,
                               qk_norm=False, tie_word_embeddings=False, rope_scaling=_LLAMA3_ROPE),
}

# Other names the studies take for SHAPES.
SHAPE_ALIASES = {"tiny": "qwen3-tiny", "llama-3.1-8b": "llama3.1-8b"}

# The published checkpoints behind SHAPES, by the HF id the reference tables name them with.
HF_SHAPES = {"Qwen/Qwen3-1.7B": "qwen3-1.7b", "Qwen/Qwen3-4B": "qwen3-4b", "Qwen/Qwen3-8B": "qwen3-8b",
             "meta-llama/Llama-3.1-8B-Instruct": "llama3.1-8b"}


def read_config(ref: str | Path) -> HfConfig:
    """The config.json of a checkpoint folder, or of an HF hub id (that one file, from the local cache or the hub)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return json.loads((path / "config.json").read_text())
    try:
        from huggingface_hub import hf_hub_download  # lazy: optional: huggingface_hub

        return json.loads(Path(hf_hub_download(str(ref), "config.json")).read_text())
    except Exception as err:
        raise FileNotFoundError(f"{str(ref)!r} is neither a checkpoint folder nor a downloadable HF id: {err}") from err


# ---------------------------------------------------------------------------------------------------------------
# The DFlash draft

def default_target_layer_ids(num_target_layers: int, num_taps: int) -> tuple[int, ...]:
    """The reference rule when a checkpoint names no taps: round(1 + i*(L-4)/(n-1)), or [L//2] for one tap."""
    if num_taps == 1:
        return (num_target_layers // 2,)
    return tuple(round(1 + i * (num_target_layers - 4) / (num_taps - 1)) for i in range(num_taps))


def tap_ids_for(num_layers: int, num_taps: int = 5) -> tuple[int, ...]:
    """The released drafts' taps on a target of `num_layers`: the reference rule, with at most L-4 taps for shallow
    models."""
    return default_target_layer_ids(num_layers, max(1, min(num_taps, num_layers - 4)))


@dataclass(frozen=True)
class DraftConfig:
    layers: ModelConfig  # shapes of the draft's decoder layers (Qwen3: q/k norm); vocab and head are the target's
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]

    @classmethod
    def from_hf(cls, hf: HfConfig, source: str = "config.json") -> "DraftConfig":
        layers = ModelConfig.from_hf({**hf, "model_type": "qwen3"}, source)
        dflash = hf.get("dflash_config") or {}
        mask = dflash.get("mask_token_id", hf.get("mask_token_id"))
        if mask is None:
            raise ValueError(f"{source}: no 'dflash_config: {{mask_token_id: ...}}'")
        block = hf.get("block_size")
        if block is None:
            raise ValueError(f"{source}: no 'block_size'")
        ids: Sequence[int] | None = dflash.get("target_layer_ids") or hf.get("target_layer_ids")
        if not ids:
            targets = hf.get("num_target_layers")
            if targets is None:
                raise ValueError(f"{source}: neither 'dflash_config: {{target_layer_ids}}' nor 'num_target_layers'")
            # the reference's default: one tap per draft layer
            ids = default_target_layer_ids(targets, hf["num_hidden_layers"])
        return cls(layers, int(block), int(mask), tuple(int(i) for i in ids))


def released_draft(target: ModelConfig, block_size: int = 16) -> DraftConfig:
    """The released Qwen3 drafts' layout on a target shape: one Qwen3 layer of the target's widths per tap."""
    taps = tap_ids_for(target.num_layers)
    layers = replace(target, num_layers=len(taps), qk_norm=True)
    mask = QWEN3_MASK_TOKEN if target.vocab_size > QWEN3_MASK_TOKEN else target.vocab_size - 1
    return DraftConfig(layers, block_size, mask, taps)
