"""The torch half of `tiny train` (benchmarks/tiny/train.py): the target, its regenerated continuations, the DFlash
and EAGLE-3 drafts, and their export. `tiny train` imports it only once its options and output folder are checked, so
that an environment without torch (a TPU's JAX-only venv) still answers `tiny train --help` and refuses bad input."""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.core.atomic import atomic_write_bytes, atomic_write_text, output_folder
from benchmarks.data.tiny_checkpoints import (
    build_tokenizer,
    dflash_config,
    eagle3_config,
    save_target,
    stdlib_corpus,
)
from benchmarks.tiny.recipe import TrainConfig, chat_ids, function_samples
from benchmarks.tiny.torch_modules import DFlashDraft, Eagle3Draft, Qwen3Target, weighted_ce

# ----------------------------------------------------------------------------------------------- training


def _schedule(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10 %."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _optimise(params: list[torch.nn.Parameter], steps: int, lr: float, loss_fn, label: str) -> list[float]:
    """AdamW with warm-up/cosine and clipping; `loss_fn(step)` returns the loss. Returns the logged losses."""
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    losses = []
    t0 = time.time()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = _schedule(step, steps, lr, warmup=max(1, steps // 20))
        loss = loss_fn(step)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 25 == 0 or step == steps - 1:
            print(f"{label} step {step}/{steps} loss {np.mean(losses[-25:]):.3f} ({time.time() - t0:.0f}s)", flush=True)
    return losses


def train_target(cfg: TrainConfig, model_cfg: dict, stream: list[int]) -> tuple[Qwen3Target, list[float]]:
    """Causal LM on the packed token stream, rows of seq_len tokens in a seeded order."""
    gen = torch.Generator().manual_seed(cfg.seed)
    model = Qwen3Target(model_cfg)
    model.init_weights(gen)
    data = torch.tensor(stream)
    rows = data[: len(data) // (cfg.seq_len + 1) * (cfg.seq_len + 1)].view(-1, cfg.seq_len + 1)
    order = torch.cat([torch.randperm(len(rows), generator=gen)
                       for _ in range(math.ceil(cfg.target_steps * cfg.target_batch / len(rows)))])
    print(f"target: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, {len(rows)} rows of "
          f"{cfg.seq_len} tokens, {cfg.target_steps * cfg.target_batch / len(rows):.2f} epochs", flush=True)

    def lm_loss(batch: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden, _ = model(batch[:, :-1])
            logits = model.lm_head(hidden)
        return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())

    step_loss = torch.compile(lm_loss) if cfg.compile else lm_loss
    losses = _optimise(list(model.parameters()), cfg.target_steps, cfg.target_lr,
                       lambda step: step_loss(rows[order[step * cfg.target_batch:(step + 1) * cfg.target_batch]]),
                       "target")
    with torch.no_grad():  # ship bf16: train the drafts against exactly the shipped weights
        for p in model.parameters():
            p.copy_(p.bfloat16().float())
    return model, losses


def regenerate(model: Qwen3Target, prompts: list[list[int]], cfg: TrainConfig, eos: list[int],
               pad: int) -> list[list[int]]:
    """Greedy continuations by the (bf16-rounded, fp32-run) target, stopped after <|im_end|>: prompt + output."""
    t0 = time.time()
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths share a batch
    results: dict[int, list[int]] = {}
    for start in range(0, len(order), cfg.regen_batch):
        chunk = order[start:start + cfg.regen_batch]
        for i, new in zip(chunk, model.generate([prompts[i] for i in chunk], cfg.regen_new_tokens, set(eos), pad)):
            results[i] = prompts[i] + new
        print(f"regenerate {len(results)}/{len(prompts)} ({time.time() - t0:.0f}s)", flush=True)
    return [results[i] for i in range(len(prompts))]


@torch.no_grad()
def target_states(model: Qwen3Target, seqs: list[list[int]], layers: list[int], pad: int) -> list[torch.Tensor]:
    """Per sequence [T, len(layers), H] bf16: the residual stream after `layers[i]` decoder layers."""
    out = []
    for i in range(0, len(seqs), 16):
        chunk = seqs[i:i + 16]
        width = max(len(s) for s in chunk)
        ids = torch.tensor([s + [pad] * (width - len(s)) for s in chunk])
        _, states = model(ids)
        stacked = torch.stack([states[k] for k in layers], dim=2).bfloat16()
        out += [stacked[j, :len(s)].clone() for j, s in enumerate(chunk)]
    return out


@dataclass
class Regenerated:
    seqs: list[list[int]]
    prompt_lens: list[int]
    states: list[torch.Tensor]  # [T, n, H] per sequence, layers as in `layers`
    layers: list[int]

    def batch(self, idx: list[int], layers: list[int], pad: int, width: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids [B, T] and concatenated taps [B, T, len(layers)*H] (fp32), right-padded to `width` (default: longest)."""
        sel = [self.layers.index(k) for k in layers]
        width = width or max(len(self.seqs[i]) for i in idx)
        ids = torch.full((len(idx), width), pad)
        h = self.states[0].shape[-1]
        taps = torch.zeros(len(idx), width, len(layers) * h)
        for j, i in enumerate(idx):
            n = len(self.seqs[i])
            ids[j, :n] = torch.tensor(self.seqs[i])
            taps[j, :n] = self.states[i][:, sel].float().reshape(n, -1)
        return ids, taps


def _init_draft(draft: torch.nn.Module, target: Qwen3Target, gen: torch.Generator) -> None:
    """Normal(0, 0.02) matrices; the final norm starts as the target's, which feeds the same LM head."""
    with torch.no_grad():
        for p in draft.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02, generator=gen)
        draft.norm.weight.copy_(target.model.norm.weight)


def _init_dflash_from_target(draft: DFlashDraft, target: Qwen3Target, tap_layers: list[int]) -> None:
    """Start the draft layers as the target layers that follow the deepest tap, reading that tap.

    fc starts as the identity on the deepest tap and hidden_norm as the input_layernorm of the target layer that
    reads it, so the first draft layer's context K/V start as exactly that target layer's own K/V: its learned
    attention (recency, copying) is there from step 0 instead of being rediscovered by a tiny draft.
    """
    h = target.cfg["hidden_size"]
    first = max(tap_layers)
    with torch.no_grad():
        for i, layer in enumerate(draft.layers):
            layer.load_state_dict(target.model.layers[min(first + i, len(target.model.layers) - 1)].state_dict())
        draft.fc.weight.zero_()
        col = tap_layers.index(first) * h
        draft.fc.weight[:, col:col + h] = torch.eye(h)
        draft.hidden_norm.weight.copy_(target.model.layers[first].input_layernorm.weight)


def train_dflash(cfg: TrainConfig, draft_cfg: dict, target: Qwen3Target, data: Regenerated, mask_id: int,
                 pad: int) -> tuple[DFlashDraft, list[float]]:
    """The DFlash objective of the notes on the regenerated sequences (anchors in the generated part)."""
    shape = cfg.shape
    tap_layers = [k + 1 for k in draft_cfg["dflash_config"]["target_layer_ids"]]
    draft = DFlashDraft(draft_cfg, len(tap_layers))
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    _init_draft(draft, target, gen)
    _init_dflash_from_target(draft, target, tap_layers)
    embed = target.model.embed_tokens.weight.detach()
    s = shape.block_size
    k = torch.arange(1, s)
    k_weight = torch.exp(-(k - 1).float() / cfg.gamma)
    width = max(len(x) for x in data.seqs)  # one static shape, so that the loss compiles once

    def block_loss(taps: torch.Tensor, block: torch.Tensor, anchors: torch.Tensor, labels: torch.Tensor,
                   weights: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = draft(taps, F.embedding(block, embed), anchors)[:, :, 1:]
            logits = out @ embed.t().to(out.dtype)
        return weighted_ce(logits, labels, weights)

    step_loss = torch.compile(block_loss, dynamic=False) if cfg.compile else block_loss

    def loss_fn(step: int) -> torch.Tensor:
        idx = torch.randint(len(data.seqs), (cfg.dflash_batch,), generator=gen).tolist()
        ids, taps = data.batch(idx, tap_layers, pad, width)
        anchors = torch.zeros(len(idx), cfg.dflash_anchors, dtype=torch.long)
        for j, i in enumerate(idx):
            lo, hi = data.prompt_lens[i], len(data.seqs[i]) - 2  # anchor a needs label a+1 inside the sequence
            anchors[j] = lo + torch.randint(hi - lo + 1, (cfg.dflash_anchors,), generator=gen)
        lengths = torch.tensor([len(data.seqs[i]) for i in idx])
        label_pos = anchors[:, :, None] + k  # [B, A, S-1]
        valid = label_pos < lengths[:, None, None]
        labels = torch.gather(ids, 1, label_pos.clamp(max=ids.shape[1] - 1).flatten(1)).view_as(label_pos)
        block = torch.full((len(idx), cfg.dflash_anchors, s), mask_id)
        block[:, :, 0] = torch.gather(ids, 1, anchors)
        return step_loss(taps, block, anchors, labels, valid * k_weight)

    losses = _optimise(list(draft.parameters()), cfg.dflash_steps, cfg.dflash_lr, loss_fn, "dflash")
    return draft, losses


def train_eagle3(cfg: TrainConfig, draft_cfg: dict, target: Qwen3Target, data: Regenerated,
                 pad: int) -> tuple[Eagle3Draft, list[float]]:
    """Next-next-token prediction from the taps, unrolled over `eagle_unroll` draft steps, on generated labels."""
    layers = list(cfg.eagle_layer_ids)
    draft = Eagle3Draft(draft_cfg, len(layers))
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    _init_draft(draft, target, gen)
    embed = target.model.embed_tokens.weight.detach()
    with torch.no_grad():
        draft.lm_head.weight.copy_(embed)  # start from the target's (tied) head
    n = cfg.eagle_unroll
    step_weight = [0.8 ** j for j in range(n)]

    def loss_fn(step: int) -> torch.Tensor:
        idx = torch.randint(len(data.seqs), (cfg.eagle_batch,), generator=gen).tolist()
        ids, taps = data.batch(idx, layers, pad)
        b, t = ids.shape
        lengths = torch.tensor([len(data.seqs[i]) for i in idx])
        starts = torch.tensor([data.prompt_lens[i] for i in idx])
        padded = torch.cat([ids, torch.full((b, n + 1), pad)], dim=1)
        pos = torch.arange(t)
        next_embeds = torch.stack([F.embedding(padded[:, 1 + j:1 + j + t], embed) for j in range(n)], dim=1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = draft(taps, next_embeds, n)
        loss = torch.zeros(())
        for j in range(n):
            label_pos = pos + 2 + j
            valid = (label_pos[None] < lengths[:, None]) & (label_pos[None] >= starts[:, None])
            loss = loss + step_weight[j] * weighted_ce(logits[j], padded[:, 2 + j:2 + j + t], valid.float())
        return loss / sum(step_weight)

    losses = _optimise(list(draft.parameters()), cfg.eagle_steps, cfg.eagle_lr, loss_fn, "eagle3")
    return draft, losses


# ----------------------------------------------------------------------------------------------- export


def _save_bf16(out_dir: Path, config: dict, weights: dict[str, torch.Tensor]) -> None:
    """Write bf16 safetensors and config.json (with dtype bfloat16)."""
    from safetensors.torch import save  # lazy: safetensors

    output_folder(out_dir)
    config = {k: v for k, v in config.items() if k != "torch_dtype"} | {"dtype": "bfloat16"}
    atomic_write_text(out_dir / "config.json", json.dumps(config, indent=2) + "\n")
    atomic_write_bytes(out_dir / "model.safetensors", save({k: v.detach().to(torch.bfloat16).contiguous()
                                                            for k, v in weights.items()}, metadata={"format": "pt"}))


def export_target(out_dir: Path, cfg: TrainConfig, model: Qwen3Target, eos: list[int]) -> None:
    """HF Qwen3ForCausalLM checkpoint (`save_target`), then stored as bf16."""
    state = {k: v.float().numpy() for k, v in model.state_dict().items()}
    save_target(out_dir, cfg.shape, eos, cfg.seed, tie=True, state=state)
    from safetensors.torch import load_file  # lazy: safetensors

    config = json.loads((out_dir / "config.json").read_text())
    _save_bf16(out_dir, config, load_file(str(out_dir / "model.safetensors")))


def train(cfg: TrainConfig, out: Path) -> int:
    """Train the set of `cfg` into `out` (target/, dflash/, eagle3/, training.json): `tiny train`'s work."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    shape = cfg.shape
    t_start = time.time()
    times: dict[str, float] = {}

    def lap(name: str) -> None:
        times[name] = round(time.time() - t_start - sum(times.values()), 1)

    paths = {name: out / name for name in ("target", "dflash", "eagle3")}
    texts = stdlib_corpus()
    tok = build_tokenizer(paths["target"], shape.vocab_size, texts)
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    mask_id = tok.convert_tokens_to_ids("<|MASK|>")
    samples = function_samples(texts, cfg.continuation_chars)
    random.Random(cfg.seed).shuffle(samples)
    stream = [t for prefix, cont in samples for t in chat_ids(tok, prefix, cont)]
    # the drafts learn the target's own continuations of these prompts (HumanEval itself is not in the corpus)
    prompts = [ids for ids in (chat_ids(tok, prefix) for prefix, _ in samples[:cfg.regen_prompts])
               if len(ids) <= cfg.regen_max_prompt_tokens]
    lap("data")
    print(f"{len(texts)} files, {len(samples)} samples, {len(stream)} training tokens", flush=True)

    model_cfg = asdict(shape) | {"num_hidden_layers": shape.num_layers, "num_attention_heads": shape.num_heads,
                  "num_key_value_heads": shape.num_kv_heads}
    target, target_losses = train_target(cfg, model_cfg, stream)
    export_target(paths["target"], cfg, target, eos)
    lap("target")

    seqs = regenerate(target, prompts, cfg, eos, tok.pad_token_id)
    lap("regenerate")

    dcfg = dflash_config(shape, mask_id)
    if cfg.dflash_layer_ids is not None:
        dcfg["dflash_config"]["target_layer_ids"] = list(cfg.dflash_layer_ids)
    state_layers = sorted({k + 1 for k in dcfg["dflash_config"]["target_layer_ids"]} | set(cfg.eagle_layer_ids))
    data = Regenerated(seqs, [len(p) for p in prompts], target_states(target, seqs, state_layers, tok.pad_token_id),
                       state_layers)
    draft_cfg = model_cfg | {"num_hidden_layers": shape.draft_layers}
    dflash, dflash_losses = train_dflash(cfg, draft_cfg | dcfg, target, data, mask_id, tok.pad_token_id)
    _save_bf16(paths["dflash"], dcfg, dflash.state_dict())
    lap("dflash")

    ecfg = eagle3_config(shape)
    ecfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(cfg.eagle_layer_ids)}
    eagle, eagle_losses = train_eagle3(cfg, model_cfg | {"num_hidden_layers": 1}, target, data, tok.pad_token_id)
    _save_bf16(paths["eagle3"], ecfg, eagle.state_dict())
    lap("eagle3")

    generated = [len(s) - len(p) for s, p in zip(seqs, prompts)]
    report = {
        "config": asdict(cfg),
        "torch": torch.__version__,
        "corpus": {"files": len(texts), "samples": len(samples), "training_tokens": len(stream),
                   "regenerated": len(seqs), "mean_generated_tokens": float(np.mean(generated))},
        "seconds": times | {"total": round(time.time() - t_start, 1)},
        "final_loss": {"target": float(np.mean(target_losses[-25:])), "dflash": float(np.mean(dflash_losses[-25:])),
                       "eagle3": float(np.mean(eagle_losses[-25:]))},
        "dflash_target_layer_ids": dcfg["dflash_config"]["target_layer_ids"],
    }
    atomic_write_text(out / "training.json", json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["seconds"]), flush=True)
    return 0
