"""PyTorch modules that train the tiny checkpoints: a Qwen3 target, a DFlash draft and an EAGLE-3 draft.

Parameter names equal the checkpoint names (HF Qwen3 for the target, the z-lab DFlash layout, the EAGLE-3
`midlayer` layout), and each forward restates what vLLM computes at inference, so that training and serving agree:

- target taps: vLLM's auxiliary hidden state `L` is the residual stream after `L` decoder layers (HF
  `hidden_states[L]`, pre-norm); a DFlash `target_layer_ids` entry `k` is read as `k + 1`, EAGLE-3 ids as they are;
- DFlash: context = hidden_norm(fc(concat taps)), projected by each layer's k_proj/v_proj (+k_norm, RoPE at the
  context positions) without input_layernorm; block queries attend non-causally to the context before the anchor
  and to their own block;
- EAGLE-3: one layer over concat(input_layernorm(embed(next token)), hidden_norm(h)), residual h, where h is
  fc(concat taps) on the first draft step and the layer's own pre-norm output afterwards.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """Qwen3/Llama RMSNorm: normalise in fp32, scale by the weight in the input dtype."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class Rope:
    """Neox-style rotary embedding (rotate_half), as HF Qwen3/Llama and vLLM's default apply it."""

    def __init__(self, head_dim: int, theta: float) -> None:
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin of shape positions.shape + (head_dim,)."""
        freqs = positions.float()[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: [B, heads, T, D]; cos/sin: [B, T, D] or [T, D]."""
        if cos.dim() == 3:
            cos, sin = cos[:, None], sin[:, None]
        x1, x2 = x.chunk(2, dim=-1)
        return (x * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)


class Attention(nn.Module):
    """GQA attention; with `qk_norm` the per-head q_norm/k_norm of Qwen3, without it Llama's."""

    def __init__(self, in_dim: int, hidden: int, heads: int, kv_heads: int, head_dim: int, eps: float,
                 qk_norm: bool = True) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(in_dim, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        if qk_norm:
            self.q_norm = RMSNorm(head_dim, eps)
            self.k_norm = RMSNorm(head_dim, eps)
        self.qk_norm = qk_norm

    def _split(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.head_dim).transpose(1, 2)

    def queries(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q = self._split(self.q_proj(x), self.heads)
        if self.qk_norm:
            q = self.q_norm(q)
        return Rope.apply(q, cos, sin)

    def keys_values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = self._split(self.k_proj(x), self.kv_heads)
        if self.qk_norm:
            k = self.k_norm(k)
        return Rope.apply(k, cos, sin), self._split(self.v_proj(x), self.kv_heads)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
               causal: bool = False) -> torch.Tensor:
        out = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask, is_causal=causal,
                                             enable_gqa=self.heads != self.kv_heads)
        b, _, t, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3Layer(nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        h, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.self_attn = Attention(h, h, cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], eps)
        self.mlp = MLP(h, cfg["intermediate_size"])
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None = None,
                cache: tuple[torch.Tensor, torch.Tensor] | None = None, start: int = 0) -> torch.Tensor:
        """Self-attention block, causal unless `mask` is given. With `cache` (preallocated K/V buffers
        [B, kv_heads, T_max, D]) the new K/V are written at `start` and the queries see the cache up to them."""
        a = self.self_attn
        h = self.input_layernorm(x)
        q = a.queries(h, cos, sin)
        k, v = a.keys_values(h, cos, sin)
        if cache is not None:
            end = start + k.shape[2]
            cache[0][:, :, start:end] = k
            cache[1][:, :, start:end] = v
            k, v = cache[0][:, :, :end], cache[1][:, :, :end]
        x = x + a.attend(q, k, v, mask=mask, causal=mask is None)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Target(nn.Module):
    """HF Qwen3ForCausalLM with a tied LM head; `state_dict()` keys are the HF checkpoint keys (minus lm_head)."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.model.layers = nn.ModuleList(Qwen3Layer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.model.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.rope = Rope(cfg["head_dim"], cfg["rope_theta"])

    def init_weights(self, generator: torch.Generator, std: float = 0.02) -> None:
        """Normal(0, std) matrices, residual-output projections scaled down by depth, unit norms."""
        depth_scale = 1.0 / math.sqrt(2 * self.cfg["num_hidden_layers"])
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    scale = depth_scale if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                    p.normal_(0.0, std * scale, generator=generator)

    def lm_head(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.model.embed_tokens.weight.t().to(x.dtype)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Final normed hidden states [B, T, H] and the residual stream after each layer (index 0: embeddings)."""
        cos, sin = self.rope.cos_sin(torch.arange(ids.shape[1]))
        x = self.model.embed_tokens(ids)
        states = [x]
        for layer in self.model.layers:
            x = layer(x, cos, sin)
            states.append(x)
        return self.model.norm(x), states

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, eos: set[int], pad: int) -> list[list[int]]:
        """Greedy continuations (stopped after an `eos` token) of left-padded prompts, with a K/V cache."""
        b, width = len(prompts), max(len(p) for p in prompts)
        total = width + max_new_tokens
        offset = torch.tensor([width - len(p) for p in prompts])
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        positions = (torch.arange(width) - offset[:, None]).clamp(min=0)
        valid = torch.arange(total)[None] >= offset[:, None]  # [B, T_max]: real (not padding) keys
        # padding queries also see themselves, so that no attention row is empty
        mask = (valid[:, None, :width] & torch.tril(torch.ones(width, width, dtype=torch.bool))) | torch.eye(
            width, dtype=torch.bool)
        shape = (b, self.cfg["num_key_value_heads"], total, self.cfg["head_dim"])
        caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in self.model.layers]
        x = self.model.embed_tokens(ids)
        cos, sin = self.rope.cos_sin(positions)
        for layer, cache in zip(self.model.layers, caches):
            x = layer(x, cos, sin, mask=mask[:, None], cache=cache)
        out: list[list[int]] = [[] for _ in prompts]
        done = torch.zeros(b, dtype=torch.bool)
        eos_ids = torch.tensor(sorted(eos))
        for step in range(max_new_tokens):
            nxt = self.lm_head(self.model.norm(x[:, -1])).argmax(-1)
            for i in (~done).nonzero().flatten().tolist():
                out[i].append(int(nxt[i]))
            done |= torch.isin(nxt, eos_ids)
            if bool(done.all()) or step == max_new_tokens - 1:
                break
            positions = positions[:, -1:] + 1
            cos, sin = self.rope.cos_sin(positions)
            x = self.model.embed_tokens(nxt[:, None])
            step_mask = valid[:, None, None, :width + step + 1]
            for layer, cache in zip(self.model.layers, caches):
                x = layer(x, cos, sin, mask=step_mask, cache=cache, start=width + step)
        return out


def weighted_ce(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Cross-entropy weighted per token and normalised by the weight sum; weight 0 drops a position."""
    ce = F.cross_entropy(logits.float().flatten(0, -2), labels.flatten(), reduction="none")
    w = weights.flatten().to(ce.dtype)
    return (ce * w).sum() / w.sum().clamp_min(1e-9)


class DFlashDraft(nn.Module):
    """z-lab DFlash draft (`layers.*`, `fc`, `hidden_norm`, `norm`) borrowing the frozen target embedding/head."""

    def __init__(self, cfg: dict, num_taps: int) -> None:
        super().__init__()
        h = cfg["hidden_size"]
        self.layers = nn.ModuleList(Qwen3Layer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.fc = nn.Linear(num_taps * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, cfg["rms_norm_eps"])
        self.norm = RMSNorm(h, cfg["rms_norm_eps"])
        self.rope = Rope(cfg["head_dim"], cfg["rope_theta"])

    def forward(self, taps: torch.Tensor, block_embeds: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        """Normed block outputs [B, A, S, H].

        taps: [B, T, n*H] target taps at positions 0..T-1; block_embeds: [B, A, S, H] embeddings of
        [x_anchor, MASK…] per anchor; anchors: [B, A] anchor positions. Block i sits at positions
        anchor_i..anchor_i+S-1, sees the context strictly before its anchor and its whole block.
        """
        b, t, _ = taps.shape
        a, s = block_embeds.shape[1:3]
        ctx = self.hidden_norm(self.fc(taps))
        ctx_cos, ctx_sin = self.rope.cos_sin(torch.arange(t))
        blk_cos, blk_sin = self.rope.cos_sin((anchors[:, :, None] + torch.arange(s)).reshape(b, a * s))
        sees_ctx = torch.arange(t) < anchors.repeat_interleave(s, dim=1)[:, :, None]  # [B, A*S, T]
        block_id = torch.arange(a).repeat_interleave(s)
        sees_block = (block_id[:, None] == block_id[None, :]).expand(b, -1, -1)  # [B, A*S, A*S]
        mask = torch.cat([sees_ctx, sees_block], dim=-1)[:, None]
        x = block_embeds.reshape(b, a * s, -1)
        for layer in self.layers:
            attn = layer.self_attn
            hq = layer.input_layernorm(x)
            q = attn.queries(hq, blk_cos, blk_sin)
            kb, vb = attn.keys_values(hq, blk_cos, blk_sin)
            kc, vc = attn.keys_values(ctx, ctx_cos, ctx_sin)
            x = x + attn.attend(q, torch.cat([kc, kb.to(kc.dtype)], dim=2), torch.cat([vc, vb.to(vc.dtype)], dim=2),
                                mask=mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x).view(b, a, s, -1)


class Eagle3Draft(nn.Module):
    """vLLM's LlamaForCausalLMEagle3 (`midlayer.*`, `fc`, `norm`, `lm_head`), sharing the target embedding."""

    def __init__(self, cfg: dict, num_taps: int = 3) -> None:
        super().__init__()
        h, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.midlayer = nn.Module()
        self.midlayer.self_attn = Attention(2 * h, h, cfg["num_attention_heads"], cfg["num_key_value_heads"],
                                            cfg["head_dim"], eps, qk_norm=False)
        self.midlayer.mlp = MLP(h, cfg["intermediate_size"])
        self.midlayer.input_layernorm = RMSNorm(h, eps)
        self.midlayer.hidden_norm = RMSNorm(h, eps)
        self.midlayer.post_attention_layernorm = RMSNorm(h, eps)
        self.fc = nn.Linear(num_taps * h, h, bias=False)
        self.norm = RMSNorm(h, eps)
        self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)
        self.rope = Rope(cfg["head_dim"], cfg["rope_theta"])

    def forward(self, taps: torch.Tensor, next_embeds: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Logits of `steps` unrolled draft steps (training-time test), each [B, T, V].

        Step 1 at position t reads fc(taps[t]) and embed(x[t+1]) and predicts x[t+2]. Step j reads its own
        pre-norm output of step j-1 at position t+j-2, sits at t+j-1 and reads embed(x[t+j]) (teacher forcing:
        next_embeds[:, j-1] holds embed(x[t+j]) per position t). Step j's query sees the step-1 keys at positions
        ≤ t and the keys of steps 2..j at its own t, as vLLM's draft KV cache holds them.
        """
        m = self.midlayer
        attn = m.self_attn
        b, t, _ = taps.shape
        h = self.fc(taps)
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        logits = []
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        eye = torch.eye(t, dtype=torch.bool)
        for j in range(steps):
            cos, sin = self.rope.cos_sin(torch.arange(t) + j)
            x = torch.cat([m.input_layernorm(next_embeds[:, j]), m.hidden_norm(h)], dim=-1)
            q = attn.queries(x, cos, sin)
            k, v = attn.keys_values(x, cos, sin)
            keys.append(k)
            values.append(v)
            mask = torch.cat([causal] + [eye] * j, dim=-1)
            r = h + attn.attend(q, torch.cat(keys, dim=2), torch.cat(values, dim=2), mask=mask)
            h = r + m.mlp(m.post_attention_layernorm(r))
            logits.append(self.lm_head(self.norm(h)))
        return logits
