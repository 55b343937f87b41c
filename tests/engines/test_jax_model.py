"""The JAX target against transformers' PyTorch models, and the JAX DFlash draft against a direct reference."""
from __future__ import annotations

import dataclasses
import json

import jax  # required on every platform: a missing one fails this module, never skips it
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.core import metrics
from benchmarks.core.shapes import SHAPES
from benchmarks.engines.jax import draft as D
from benchmarks.engines.jax import model as M
from benchmarks.engines.jax.loader import load_draft, load_target
from benchmarks.hardware import detect, step_cost

pytestmark = pytest.mark.jax  # compiles and runs the JAX engine

TOL = 1e-4


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A tiny untied Llama-3 checkpoint with llama3 RoPE scaling, saved in several shards with an index json."""
    torch = pytest.importorskip("torch", reason="torch is not installed: the HF reference model needs it")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5,
                      max_position_embeddings=256, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 32})
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.05)
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path, safe_serialization=True, max_shard_size="300KB")
    assert (path / "model.safetensors.index.json").exists()
    return path


def hf_reference(path, ids: np.ndarray):
    torch = pytest.importorskip("torch", reason="torch is not installed: the HF reference model needs it")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(torch.tensor(ids)[None], output_hidden_states=True)
    return out.logits[0].numpy(), [h[0].numpy() for h in out.hidden_states]


def run_jax(path, ids: np.ndarray, prompt_len: int, tap_ids: tuple[int, ...], layout: str):
    """Prefill prompt_len tokens (padded to 32), then decode the rest one token at a time, then re-verify a block."""
    cfg, params = load_target(path, "float32", layout)
    cache = M.init_cache(cfg, 64, jnp.float32)
    tokens = np.zeros(32, np.int32)
    tokens[:prompt_len] = ids[:prompt_len]
    last, taps, cache = M.prefill(params, jnp.asarray(tokens), jnp.int32(prompt_len), cache, cfg=cfg, tap_ids=tap_ids)
    steps = []
    for p in range(prompt_len, len(ids)):
        logits, _, cache = M.forward(params, jnp.asarray(ids[p:p + 1], jnp.int32), jnp.int32(p), cache, cfg=cfg)
        steps.append(np.asarray(logits[0]))
    # a K+1 block over positions already cached: overwrites them with the same K/V, as a verify step does
    s = prompt_len + 1
    block, block_taps, _ = M.forward(params, jnp.asarray(ids[s:s + 4], jnp.int32), jnp.int32(s), cache, cfg=cfg,
                                     tap_ids=tap_ids)
    return np.asarray(last), np.asarray(taps)[:prompt_len], np.stack(steps), np.asarray(block), np.asarray(block_taps)


@pytest.mark.parametrize("layout", ["oi", "io"])  # the accelerators' weight layout, and the CPU's
@pytest.mark.parametrize("which", ["qwen3", "llama"])
def test_target_logits_match_transformers(which, layout, random_pair, llama_dir):
    path = random_pair["target"] if which == "qwen3" else llama_dir
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    ids = np.random.default_rng(0).integers(0, vocab, 30)
    prompt_len, tap_ids = 21, (0, 1)
    ref_logits, ref_hidden = hf_reference(path, ids)
    last, taps, steps, block, block_taps = run_jax(path, ids, prompt_len, tap_ids, layout)
    h = ref_hidden[0].shape[-1]
    diffs = {
        "prefill": np.abs(last - ref_logits[prompt_len - 1]).max(),
        "decode": np.abs(steps - ref_logits[prompt_len:]).max(),
        "block": np.abs(block - ref_logits[prompt_len + 1:prompt_len + 5]).max(),
        "taps": max(np.abs(taps[:, i * h:(i + 1) * h] - ref_hidden[k + 1][:prompt_len]).max()
                    for i, k in enumerate(tap_ids)),
        "block_taps": np.abs(block_taps[:, h:] - ref_hidden[2][prompt_len + 1:prompt_len + 5]).max(),
    }
    print(which, {k: f"{v:.2e}" for k, v in diffs.items()})
    assert max(diffs.values()) <= TOL, diffs


def test_llama3_rope_scaling_matters(llama_dir):
    """The scaled frequencies differ from plain RoPE, so the logit test above exercises the scaling."""
    cfg, _ = load_target(llama_dir, "float32")
    assert dict(cfg.rope_scaling)["factor"] == 8.0
    plain = dataclasses.replace(cfg, rope_scaling=())
    assert not np.allclose(M.inv_freq(cfg), M.inv_freq(plain))


def test_config_from_transformers4_fields():
    hf = {"model_type": "llama", "vocab_size": 8, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 500000.0,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192}}
    with pytest.warns(UserWarning) as notes:
        cfg = M.ModelConfig.from_hf(hf)
    assert (cfg.head_dim, cfg.rope_theta, cfg.qk_norm, cfg.tie_word_embeddings) == (16, 500000.0, False, False)
    assert cfg.rope_scaling == SHAPES["llama3.1-8b"].rope_scaling
    # the fields left out take transformers' defaults, each with a note naming the file and the key
    assert sorted(str(n.message).split("'")[1] for n in notes) == ["head_dim", "rms_norm_eps", "tie_word_embeddings"]
    assert any(str(n.message) == "config.json: no 'rms_norm_eps'; using the llama default 1e-06 (as transformers does)"
               for n in notes)
    with pytest.raises(ValueError, match="model_type"):
        M.ModelConfig.from_hf({**hf, "model_type": "gpt2"})


QWEN3_TF5 = {"model_type": "qwen3", "vocab_size": 8, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
             "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}}


def test_config_from_transformers5_rope_parameters():
    cfg = M.ModelConfig.from_hf(QWEN3_TF5)
    assert (cfg.rope_theta, cfg.rope_scaling, cfg.qk_norm) == (1000000.0, (), True)
    llama = {**QWEN3_TF5, "model_type": "llama", "rope_parameters": {
        "rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    assert M.ModelConfig.from_hf(llama).rope_scaling == SHAPES["llama3.1-8b"].rope_scaling


def test_config_without_a_rope_base_or_a_shape_field_fails_naming_file_and_key():
    no_theta = {k: v for k, v in QWEN3_TF5.items() if k != "rope_parameters"}
    with pytest.raises(ValueError, match=r"^m/config.json: no RoPE base: add 'rope_theta'"):
        M.ModelConfig.from_hf(no_theta, "m/config.json")
    with pytest.raises(ValueError, match=r"m/config.json: no RoPE base"):
        M.ModelConfig.from_hf({**no_theta, "rope_parameters": {"rope_type": "default"}}, "m/config.json")
    with pytest.raises(ValueError, match=r"^m/config.json: missing 'hidden_size'"):
        M.ModelConfig.from_hf({k: v for k, v in QWEN3_TF5.items() if k != "hidden_size"}, "m/config.json")


def test_loader_names_the_checkpoint_file(tmp_path):
    import json

    from benchmarks.engines.jax.loader import load_target

    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in QWEN3_TF5.items() if k != "rope_parameters"}))
    with pytest.raises(ValueError, match=f"^{tmp_path / 'config.json'}: no RoPE base"):
        load_target(tmp_path)


def reference_draft_logits(dp, tp, dcfg, taps: np.ndarray, block: np.ndarray, start: int) -> np.ndarray:
    """DFlash draft written out directly in numpy: context features and block side by side, no cache."""
    cfg = dcfg.layers
    f = {k: np.asarray(v, np.float64) for k, v in dp.items() if k != "layers"}
    layers = [{k: np.asarray(v, np.float64) for k, v in lp.items()} for lp in dp["layers"]]
    embed = np.asarray(tp["embed"], np.float64)
    eps, d, nh, kvh = cfg.rms_norm_eps, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads

    def norm(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rot(x, pos):
        a = pos[:, None].astype(np.float64) * M.inv_freq(cfg).astype(np.float64)[None]
        c, s = np.cos(a)[:, None], np.sin(a)[:, None]
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    ctx = norm(taps @ f["fc"].T, f["hidden_norm"])
    c, b = len(ctx), len(block)
    pos_ctx, pos_blk = np.arange(c), start + np.arange(b)
    h = embed[block]
    for lp in layers:
        x = norm(h, lp["input_norm"])
        both = np.concatenate([ctx, x])  # ctx skips input_layernorm
        wq, wk, wv = np.split(lp["qkv_proj"], [nh * d, (nh + kvh) * d])
        q = rot(norm((x @ wq.T).reshape(b, nh, d), lp["q_norm"]), pos_blk)
        k = rot(norm((both @ wk.T).reshape(c + b, kvh, d), lp["k_norm"]),
                np.concatenate([pos_ctx, pos_blk]))
        v = (both @ wv.T).reshape(c + b, kvh, d)
        k, v = np.repeat(k, nh // kvh, 1), np.repeat(v, nh // kvh, 1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(d)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        h = h + np.einsum("hts,shd->thd", p, v).reshape(b, nh * d) @ lp["o_proj"].T
        x = norm(h, lp["post_norm"])
        g, u = np.split(x @ lp["gate_up_proj"].T, 2, axis=-1)
        h = h + ((g / (1 + np.exp(-g))) * u) @ lp["down_proj"].T
    return norm(h[1:], f["norm"]) @ embed.T  # the tiny target ties its lm_head to the embedding


@pytest.mark.parametrize("layout", ["oi", "io"])
def test_draft_matches_direct_reference(layout, random_pair):
    tcfg, tp = load_target(random_pair["target"], "float32", layout)
    dcfg, dp = load_draft(random_pair["dflash"], "float32", layout)
    hf_dp = load_draft(random_pair["dflash"], "float32", "oi")[1]
    rng = np.random.default_rng(1)
    prompt_len = 13
    taps = rng.normal(0, 1, (prompt_len, len(dcfg.target_layer_ids) * tcfg.hidden_size)).astype(np.float32)
    anchor = 7
    ref = reference_draft_logits(hf_dp, tp, dcfg, taps, np.array([anchor] + [dcfg.mask_token_id] * 15), prompt_len)

    # the prompt's context (9 rows, padded to 16), then a step whose pending context has 6 rows of which 4 were
    # committed: the 2 rejected rows (positions >= the anchor's) must stay unseen
    dcache = M.init_cache(dcfg.layers, 64, jnp.float32)
    dcache = jax.jit(D.prefill_context, static_argnames="dcfg")(
        dp, jnp.asarray(np.pad(taps[:9], ((0, 7), (0, 0)))), dcache, dcfg=dcfg)
    pending = np.concatenate([taps[9:], rng.normal(0, 1, (2, taps.shape[1])).astype(np.float32)])
    step = jax.jit(D.draft_logits, static_argnames=("dcfg", "tcfg", "num_queries", "span"))
    spanned, _ = step(dp, tp, dcache, jnp.asarray(pending), jnp.int32(9), jnp.int32(anchor), jnp.int32(prompt_len),
                      dcfg=dcfg, tcfg=tcfg, num_queries=dcfg.block_size, span=16)  # reads cache rows 0..15 only
    logits, dcache = step(dp, tp, dcache, jnp.asarray(pending), jnp.int32(9), jnp.int32(anchor), jnp.int32(prompt_len),
                          dcfg=dcfg, tcfg=tcfg, num_queries=dcfg.block_size)
    diff = np.abs(np.asarray(logits) - ref).max()
    print(f"draft logits max abs diff {diff:.2e}")
    assert diff <= TOL
    assert np.abs(np.asarray(spanned) - ref).max() <= TOL
    # the pending rows are now in the cache: the same block from the cache alone gives the same logits
    again, _ = step(dp, tp, dcache, jnp.zeros((1, taps.shape[1])), jnp.int32(prompt_len), jnp.int32(anchor),
                    jnp.int32(prompt_len), dcfg=dcfg, tcfg=tcfg, num_queries=dcfg.block_size)
    assert np.abs(np.asarray(again) - ref).max() <= TOL


def test_hardware_floor(random_pair):
    assert detect.bandwidth_bytes_per_s("tpu", "TPU v5 lite") == 819e9
    assert detect.bandwidth_bytes_per_s("tpu", "TPU v5") == 2765e9
    assert detect.bandwidth_bytes_per_s("gpu", "NVIDIA H100 80GB HBM3") == 3350e9
    assert detect.bandwidth_bytes_per_s("gpu", "NVIDIA H200") == 4800e9
    floor = metrics.tpot_floor_ms(8e9, 2765e9) / 1e3
    assert floor == pytest.approx(2.893e-3, rel=1e-3)
    assert detect.timing_error(1.31e-3, floor) is not None  # the published v5p forward time is impossible
    assert detect.timing_error(3e-3, floor) is None
    # the step counts read every matrix the loaded target holds (its tied head once), and the draft's besides
    tcfg, tp = load_target(random_pair["target"], "float32", "oi")
    dcfg, dp = load_draft(random_pair["dflash"], "float32", "oi")
    assert step_cost.ar_step(tcfg, 0, 4).weight_bytes() == sum(x.nbytes for x in jax.tree.leaves(tp) if x.ndim == 2)
    step = step_cost.dflash_step(tcfg, dcfg.layers, len(dcfg.target_layer_ids), 4, 16, 0, 4)
    draft_matrices = sum(x.nbytes for x in jax.tree.leaves(dp) if x.ndim == 2)
    assert step.passes[0].weight_bytes() == draft_matrices + tp["embed"].nbytes  # + the target's head it borrows


@pytest.mark.parametrize("batched", [(True, True, True), (True, True, False), (False, True, True),
                                     (True, False, True)])
def test_a_batchs_cache_write_is_each_requests_own(batched):
    """write_rows under vmap (one update per request, the batch axis of the cache at 1 as batch.batch_cache keeps
    it) writes what each request's own write does, whichever of cache, rows and start carry the batch."""
    size, layers, heads, span, dim, t = 3, 2, 2, 8, 4, 2
    key = iter(jax.random.split(jax.random.key(0), 3))
    cache = jax.random.normal(next(key), (layers, size, heads, span, dim))
    rows = jax.random.normal(next(key), (layers, size, heads, t, dim))
    start = jnp.asarray([0, 3, 6], jnp.int32)
    args = [x if b else x.take(0, axis=a) for x, b, a in zip((cache, rows, start), batched, (1, 1, 0))]
    axes = tuple(a if b else None for b, a in zip(batched, (1, 1, 0)))
    got = jax.jit(jax.vmap(M.write_rows, in_axes=axes, out_axes=1))(*args)
    own = [M.write_rows(*(x.take(i, axis=a) if b else x for x, b, a in zip(args, batched, (1, 1, 0))))
           for i in range(size)]
    np.testing.assert_array_equal(np.asarray(got), np.stack(own, axis=1))
    assert got.shape == (layers, size, heads, span, dim)
