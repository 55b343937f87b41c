"""Drive tpu-inference's DFlash draft and ours on the same inputs, step by step (needs tpu-inference; Python >= 3.12).

Used by benchmarks/studies/tpu_parity.py, which holds the command line. Our side is a greedy DFlash loop over the JAX
engine's functions (`trajectory`); their side is built and stepped as tpu-inference's model registry, weight loader
and proposer do (`TheirDraft`), with its TPU-only attention kernel routed to the kernel module's pure-JAX reference
(`reference_attention`). The method in full: docs/engine-findings.md.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.core.metrics import accepted_within
from benchmarks.data.datasets import load_prompts
from benchmarks.engines.jax import draft as D
from benchmarks.engines.jax import loader
from benchmarks.engines.jax import model as M
from benchmarks.engines.jax.decode import Decoder
from verification.draft_parity import StepDiff, compare_step

PAGE_SIZE = 16
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@contextlib.contextmanager
def reference_attention() -> Iterator[None]:
    """Route tpu-inference's ragged paged attention to its kernel module's pure-JAX reference (CPU has no Pallas TPU).

    The swap replaces `sharded_ragged_paged_attention`, the shard_map around the kernel: the reference loops over
    requests in Python, which a shard_map trace cannot do. On a one-device mesh the shard_map is the identity, and
    the arguments go to the reference as the wrapper passes them to the kernel.
    """
    import tpu_inference.layers.common.attention_interface as ai  # lazy: tpu_inference
    from tpu_inference.kernels.ragged_paged_attention.v3 import kernel as rpa  # lazy: tpu_inference

    def ref(mesh: Any, q: jax.Array, k: jax.Array, v: jax.Array, kv_cache: jax.Array, kv_lens: jax.Array,
            page_indices: jax.Array, cu_q_lens: jax.Array, distribution: jax.Array, attention_sink: Any,
            sm_scale: float, attention_chunk_size: int | None = None, q_scale: float | None = None,
            k_scale: float | None = None, v_scale: float | None = None, update_kv_cache: bool = True,
            use_causal_mask: bool = True, attn_logits_soft_cap: float | None = None) -> Any:
        if attention_sink is not None or not update_kv_cache or mesh.devices.size != 1:
            raise NotImplementedError("the reference route covers one device, no sinks, a written KV cache")
        return rpa.ref_ragged_paged_attention(
            q, k, v, kv_cache, kv_lens, page_indices, cu_q_lens, distribution, use_causal_mask=use_causal_mask,
            sm_scale=sm_scale, sliding_window=attention_chunk_size, soft_cap=attn_logits_soft_cap, q_scale=q_scale,
            k_scale=k_scale, v_scale=v_scale)

    saved = ai.sharded_ragged_paged_attention
    ai.sharded_ragged_paged_attention = ref
    try:
        yield
    finally:
        ai.sharded_ragged_paged_attention = saved


def versions() -> dict[str, str]:
    out = {}
    for name in ("tpu-inference", "vllm", "transformers", "jax", "flax"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def hf_config(path: Path) -> Any:
    """The HF config as vLLM parses it for an engine (its own parser, then its RoPE patching)."""
    from vllm.transformers_utils.config import get_config  # lazy: vllm

    return get_config(str(path), trust_remote_code=False)


class _ModelConfig(SimpleNamespace):
    """The part of vLLM's ModelConfig that tpu-inference's DFlash model and weight loader read."""

    def get_vocab_size(self) -> int:
        return self.hf_config.vocab_size

    def get_hidden_size(self) -> int:
        return self.hf_config.hidden_size

    def get_head_size(self) -> int:
        c = self.hf_config
        return getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads


def vllm_config(target: Path, draft: Path, target_hf: Any, draft_hf: Any, num_spec: int) -> Any:
    """A stand-in for vLLM's VllmConfig with the fields the draft's constructor and loader read.

    The dtype is bfloat16, the one tpu-inference runs a bfloat16 checkpoint in (its DFlash model fixes bfloat16
    parameters in any case)."""
    common = dict(seed=0, is_multimodal_model=False, dtype=jnp.bfloat16, revision=None)
    return SimpleNamespace(
        model_config=_ModelConfig(hf_config=target_hf, model=str(target), **common),
        speculative_config=SimpleNamespace(
            method="dflash", num_speculative_tokens=num_spec,
            draft_model_config=_ModelConfig(hf_config=draft_hf, model=str(draft), **common)),
        load_config=SimpleNamespace(download_dir=None, load_format="auto"),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
        cache_config=SimpleNamespace(cache_dtype="auto"),
        quant_config=None, additional_config={})


def mesh() -> Any:
    from jax.sharding import Mesh  # lazy: jax

    devices = np.array(jax.local_devices()[:1]).reshape(1, 1, 1, 1)
    return Mesh(devices, axis_names=("data", "attn_dp", "expert", "model"))


class TheirDraft:
    """tpu-inference's DFlash draft for one (target, draft) pair, run the way its proposer runs it.

    Built as tpu-inference builds a draft: its model registry picks the class for the checkpoint's architecture
    (`DFlashDraftModel`), the class reads the HF configs that vLLM's config parser returns, its own `load_weights`
    reads the checkpoint, and the target's embedding and LM head are shared into it by the proposer's parameter
    paths. Each step follows its proposer (spec_decode/jax/dflash.py): the context feature is `combine_hidden_states`
    of the taps (cast to bfloat16, as the proposer does, in the bfloat16 run), the block [anchor, MASK...] sits at
    positions s..s+B-1, the context tokens at their own positions, seq_lens = s, and the logits are `compute_logits`
    of rows 1..B-1. The draft KV cache is paged and kept across steps, as in the proposer.
    """

    def __init__(self, target: Path, draft: Path, embed: jax.Array, dtype: Any,
                 rope_theta: float | None = None) -> None:
        """rope_theta: None builds the draft from the configs as parsed; a value first sets rope_theta to it and
        rope_scaling to None on both configs (the draft's constructor copies them from the target's)."""
        from flax import nnx  # lazy: flax
        from tpu_inference.kernels.ragged_paged_attention.v3 import kernel as rpa  # lazy: tpu_inference
        from tpu_inference.models.common.model_loader import _get_model_architecture  # lazy: tpu_inference
        from tpu_inference.spec_decode.jax import dflash as proposer  # lazy: tpu_inference

        target_hf, draft_hf = hf_config(target), hf_config(draft)
        self.block = int(draft_hf.block_size)
        self.mask = int(draft_hf.dflash_config["mask_token_id"])
        if rope_theta is not None:
            for c in (target_hf, draft_hf):
                c.rope_theta, c.rope_scaling = float(rope_theta), None
        self.mesh = mesh()
        cfg = vllm_config(target, draft, target_hf, draft_hf, self.block - 1)
        cls = _get_model_architecture(draft_hf)
        rng = jax.random.key(0)
        with jax.set_mesh(self.mesh):
            model = nnx.eval_shape(lambda: cls(cfg, rng, self.mesh))
            model.load_weights(rng)
        self._share_target_weights(model, embed, proposer)
        if dtype == jnp.float32:
            state = nnx.state(model)
            nnx.update(model, jax.tree.map(
                lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, state))
        self.model, self.dtype = model, dtype
        attn = model.model.layers[0].self_attn
        self.settings = {"class": f"{cls.__module__}.{cls.__name__}", "rope_theta": attn.rope_theta,
                         "rope_scaling": attn.rope_scaling, "head_dim": attn.head_dim,
                         "head_dim_original": attn.head_dim_original,
                         "tie_word_embeddings": getattr(draft_hf, "tie_word_embeddings", None),
                         "param_dtype": str(model.model.fc.kernel.value.dtype)}
        num_kv = attn.num_kv_heads
        self._cache_shape = lambda pages: rpa.get_kv_cache_shape(pages, PAGE_SIZE, num_kv, attn.head_dim, dtype)
        self.caches: list[jax.Array] = []

    @staticmethod
    def _share_target_weights(model: Any, embed: jax.Array, proposer: Any) -> None:
        """The proposer's load_model step: the target's embedding into the draft, and its LM head ([V, H], tied)."""
        from flax import nnx  # lazy: flax

        state = nnx.state(model)
        emb = proposer._find_param(state, proposer.DRAFT_EMBED_PATHS)
        head = proposer._find_param(state, proposer.DRAFT_LM_HEAD_PATHS)
        if emb is None or head is None:
            raise RuntimeError("tpu-inference's draft has no embedding or LM head parameter at the proposer's paths")
        emb.value = embed.astype(emb.value.dtype)
        head.value = (embed if head.value.shape == embed.shape else embed.T).astype(head.value.dtype)
        nnx.update(model, state)

    def reset(self, max_len: int) -> None:
        pages = -(-max_len // PAGE_SIZE)
        self.caches = [jnp.zeros(self._cache_shape(pages), self.dtype) for _ in self.model.model.layers]
        self.pages = pages

    def logits(self, taps: jax.Array, ctx_start: int, anchor: int, s: int) -> np.ndarray:
        """Draft logits [B-1, V] of the block [anchor, MASK...] at s, after the context taps at ctx_start..s-1."""
        from tpu_inference.layers.common.attention_metadata import AttentionMetadata  # lazy: tpu_inference

        ctx = self.model.combine_hidden_states(taps.astype(self.dtype))
        if self.dtype == jnp.bfloat16:
            ctx = ctx.astype(jnp.bfloat16)  # as the proposer's prepare_inputs does
        n = taps.shape[0]
        ids = jnp.full((self.block,), self.mask, jnp.int32).at[0].set(anchor)
        md = AttentionMetadata(
            input_positions=s + jnp.arange(self.block, dtype=jnp.int32),
            block_tables=jnp.arange(self.pages, dtype=jnp.int32), seq_lens=jnp.array([s], jnp.int32),
            query_start_loc=jnp.array([0, self.block], jnp.int32),
            request_distribution=jnp.array([0, 0, 1], jnp.int32))
        hidden = (ctx, jnp.array([0, n], jnp.int32), ctx_start + jnp.arange(n, dtype=jnp.int32))
        with jax.set_mesh(self.mesh):
            self.caches, h, *_ = self.model(self.caches, ids, hidden, md)
            out = self.model.compute_logits(h[1:])
        return np.asarray(out, np.float32)


@dataclass(frozen=True)
class Step:
    """What the draft sees at one step, and what our draft says: context taps [C, n*H] at positions start..s-1, the
    anchor at s, our logits [B-1, V]."""

    taps: jax.Array
    start: int
    anchor: int
    s: int
    logits: np.ndarray


def trajectory(tcfg: M.ModelConfig, tparams: M.Params, dcfg: D.DraftConfig, dparams: M.Params, prompt: list[int],
               new: int, dtype: Any, out: list[int], accepted: list[int]) -> Iterator[Step]:
    """Greedy DFlash with K = B-1 on our engine's functions, one Step per draft call; fills `out` with the committed
    tokens and `accepted` with the accept length of each step."""
    b = dcfg.block_size
    length = len(prompt) + new + 2 * b
    tcache, dcache = M.init_cache(tcfg, length, dtype), M.init_cache(dcfg.layers, length, dtype)
    logits, taps, tcache = M.prefill(tparams, jnp.asarray(prompt, jnp.int32), jnp.int32(len(prompt)), tcache,
                                     cfg=tcfg, tap_ids=dcfg.target_layer_ids)
    out.append(int(jnp.argmax(logits)))
    pending, start, s = taps, 0, len(prompt)
    while len(out) < new:
        ours, dcache = D.draft_logits(dparams, tparams, dcache, pending, jnp.int32(start), jnp.int32(out[-1]),
                                      jnp.int32(s), dcfg, tcfg, b)
        yield Step(pending, start, out[-1], s, np.asarray(ours, np.float32))
        drafts = jnp.argmax(ours, axis=-1).astype(jnp.int32)
        tokens = jnp.concatenate([jnp.asarray([out[-1]], jnp.int32), drafts])
        vlogits, vtaps, tcache = M.forward(tparams, tokens, jnp.int32(s), tcache, cfg=tcfg,
                                           tap_ids=dcfg.target_layer_ids)
        picked = np.asarray(jnp.argmax(vlogits, axis=-1))
        n = int(np.cumprod(np.asarray(drafts) == picked[:-1]).sum())
        accepted.append(n)
        out.extend(int(t) for t in picked[: n + 1])
        pending, start, s = vtaps[: n + 1], s, s + n + 1


def agrees(out: list[int], accepted: list[int], tokens: list[int], accept_lengths: list[int]) -> bool:
    """Whether `trajectory`'s tokens and accept lengths are the engine's: both within the engine's output, whose
    last step the engine counts only up to that output's end (`metrics.accepted_within`)."""
    return out[:len(tokens)] == tokens and accepted_within(accepted, len(tokens)) == accept_lengths


def run(target: Path, draft: Path, dataset: str, n_prompts: int, new: int, seed: int, dtype_name: str,
        ropes: tuple[str, ...], log: Callable[[str], None]) -> dict[str, list[StepDiff]]:
    """Per-step comparisons over n_prompts chat-templated prompts of a dataset, for each RoPE variant of their draft
    (all fed the same steps of one trajectory)."""
    from benchmarks.config.model_refs import load_tokenizer  # lazy: imports yaml

    jax.config.update("jax_default_matmul_precision", "highest")
    dtype = DTYPES[dtype_name]
    tcfg, tparams = loader.load_target(target, dtype_name)
    dcfg, dparams = loader.load_draft(draft, dtype_name)
    log(f"versions: {json.dumps(versions())}; JAX backend {jax.default_backend()}; {dtype_name}")
    log("attention: tpu-inference's ragged paged attention kernel (Pallas, TPU only) is routed to its pure-JAX "
        "reference ref_ragged_paged_attention (kernels/ragged_paged_attention/v3/kernel.py)")
    log(f"our draft: rope_theta {dcfg.layers.rope_theta}, rope_scaling {dict(dcfg.layers.rope_scaling) or None}, "
        f"head_dim {dcfg.layers.head_dim}, block {dcfg.block_size}, taps {list(dcfg.target_layer_ids)}")
    prompts = load_prompts(dataset, n_prompts, seed, load_tokenizer(str(target)), max_prompt_tokens=1024)
    diffs: dict[str, list[StepDiff]] = {rope: [] for rope in ropes}
    with reference_attention():
        theirs = {rope: TheirDraft(target, draft, tparams["embed"], dtype,
                                   dcfg.layers.rope_theta if rope == "corrected" else None) for rope in ropes}
        for rope, t in theirs.items():
            log(f"tpu-inference draft, RoPE {rope}: {json.dumps(t.settings, default=str)}")
        for i, prompt in enumerate(prompts):
            for t in theirs.values():
                t.reset(len(prompt.ids) + new + 2 * dcfg.block_size)
            decoder = Decoder(tcfg, tparams, len(prompt.ids) + new + 1, dtype, dcfg, dparams, k=dcfg.block_size - 1)
            engine = decoder.generate(prompt.ids, new)
            assert engine.accept_lengths is not None  # a speculative decoder's
            out: list[int] = []
            accepted: list[int] = []
            for step in trajectory(tcfg, tparams, dcfg, dparams, prompt.ids, new, dtype, out, accepted):
                for rope, t in theirs.items():
                    diffs[rope].append(compare_step(step.logits, t.logits(step.taps, step.start, step.anchor, step.s),
                                                    i, len(accepted), step.s))
            same = agrees(out, accepted, engine.tokens, engine.accept_lengths)
            if not same and dtype == jnp.float32:
                raise RuntimeError(f"prompt {i}: this loop's tokens or accept lengths differ from the JAX engine's "
                                   "Decoder in float32")
            # In bfloat16 the engine's padded prefill and fused step round differently and may break a near tie;
            # both drafts still see the same inputs at every step of this loop.
            log(f"prompt {i} ({dataset} #{prompt.index}, {len(prompt.ids)} prompt tokens): {len(accepted)} steps, "
                f"tokens and accept lengths {'identical to' if same else 'NOT identical to (bfloat16 rounding)'} "
                "the JAX engine's")
    return diffs
