"""What a decode step reads and computes: the one place that counts bytes and FLOPs (floors, roofline, studies).

A step is a list of passes (an AR step: one target forward; a DFlash step: the draft, then the verify forward; a
draft tree's step: the same, its verify over budget + 1 rows), a pass a list of matmuls plus its attention over the
KV rows it reads. Counted: every weight matrix a pass multiplies by (the target's `lm_head` again in the draft, which
borrows it), the norms, the embedding rows it gathers, the KV rows of the span it attends over and the rows it
writes. A step of `batch` requests reads the weights once and the
KV rows of each request; its matmul rows and attention FLOPs grow with the batch. A floor (`Step.bytes`) counts each
weight once per pass: the draft and the verify depend on each other, so neither can reuse the other's read. Shapes
are benchmarks.core.shapes' ModelConfig; the draft's layers are such a shape of the draft's own depth.
"""
from __future__ import annotations

from dataclasses import dataclass

from benchmarks.core.shapes import ModelConfig


@dataclass(frozen=True)
class Matmul:
    """`count` products of `rows` activations by one weight [n_in, n_out] (`name` tells the weight apart)."""

    name: str
    rows: int
    n_in: int
    n_out: int
    count: int = 1

    def weight_elems(self) -> int:
        return self.count * self.n_in * self.n_out

    def flops(self) -> float:
        return 2.0 * self.count * self.rows * self.n_in * self.n_out


@dataclass(frozen=True)
class Pass:
    """One forward: its matmuls, the other bytes it moves (norms, gathered embedding rows, KV rows read and written)
    and its attention FLOPs."""

    name: str
    matmuls: tuple[Matmul, ...]
    other_bytes: float
    attention_flops: float
    itemsize: int

    def weight_bytes(self) -> float:
        """Each weight once, as a floor counts it."""
        unique = {m.name: m.weight_elems() for m in self.matmuls}
        return float(sum(unique.values()) * self.itemsize)

    def bytes(self) -> float:
        return self.weight_bytes() + self.other_bytes

    def flops(self) -> float:
        return sum(m.flops() for m in self.matmuls) + self.attention_flops


@dataclass(frozen=True)
class Step:
    passes: tuple[Pass, ...]

    def bytes(self) -> float:
        """What the step must read and write at least: the floor's numerator."""
        return sum(p.bytes() for p in self.passes)

    def weight_bytes(self) -> float:
        return sum(p.weight_bytes() for p in self.passes)

    def flops(self) -> float:
        return sum(p.flops() for p in self.passes)

    def __add__(self, other: "Step") -> "Step":
        return Step(self.passes + other.passes)


def kv_bytes_per_token(shape: ModelConfig, itemsize: int) -> int:
    """K and V of one position in every layer."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * itemsize


def layer_matmuls(shape: ModelConfig, rows: int, prefix: str = "") -> list[Matmul]:
    """The four matmuls of a decoder layer over `rows` tokens, for all layers (q/k/v and gate/up stacked, as the
    engine runs them)."""
    h, d, f, n = shape.hidden_size, shape.head_dim, shape.intermediate_size, shape.num_layers
    return [Matmul(f"{prefix}qkv_proj", rows, h, (shape.num_heads + 2 * shape.num_kv_heads) * d, n),
            Matmul(f"{prefix}o_proj", rows, shape.num_heads * d, h, n),
            Matmul(f"{prefix}gate_up_proj", rows, h, 2 * f, n),
            Matmul(f"{prefix}down_proj", rows, f, h, n)]


def _attention_flops(shape: ModelConfig, queries: int, keys: int) -> float:
    """Scores and the weighted sum: 2 matmuls of [queries, D] by [keys, D] per head and layer."""
    return 4.0 * shape.num_layers * shape.num_heads * shape.head_dim * queries * keys


def _norm_bytes(shape: ModelConfig, itemsize: int) -> int:
    return (2 * shape.num_layers + 1) * shape.hidden_size * itemsize


def forward(shape: ModelConfig, rows: int, context: int, itemsize: int, batch: int = 1) -> Pass:
    """A target forward of `rows` tokens of each of `batch` requests after `context` cached positions each (AR: rows
    1; verify(K): rows K+1): the weights once, logits for every row, each request's KV rows, the tied head counted
    with the weights, an untied embedding by its gathered rows only."""
    n = batch * rows
    mms = layer_matmuls(shape, n) + [Matmul("lm_head", n, shape.hidden_size, shape.vocab_size)]
    kv = kv_bytes_per_token(shape, itemsize)
    other = batch * kv * (context + rows) + _norm_bytes(shape, itemsize) + n * shape.hidden_size * itemsize
    flops = batch * _attention_flops(shape, rows, context + rows)
    return Pass("target", tuple(mms), float(other), flops, itemsize)


def ar_step(shape: ModelConfig, context: int, itemsize: int, batch: int = 1) -> Step:
    return Step((forward(shape, 1, context, itemsize, batch),))


def verify_step(shape: ModelConfig, k: int, context: int, itemsize: int, batch: int = 1) -> Step:
    return Step((forward(shape, k + 1, context, itemsize, batch),))


def draft_pass(target: ModelConfig, layers: ModelConfig, num_taps: int, queries: int, pending: int, context: int,
               itemsize: int, batch: int = 1) -> Pass:
    """The DFlash draft of `batch` requests: `fc` over each one's pending taps [pending, num_taps*H], each layer's K/V
    of that context (the engine projects it through the stacked q/k/v), each block of `queries` tokens through every
    layer, attending over its context and block, and the target's lm_head over queries-1 rows of each."""
    h = layers.hidden_size
    kv_out = (layers.num_heads + 2 * layers.num_kv_heads) * layers.head_dim
    mms = [Matmul("fc", batch * pending, num_taps * h, h),
           Matmul("qkv_proj", batch * pending, h, kv_out, layers.num_layers)]
    mms += layer_matmuls(layers, batch * queries)
    mms.append(Matmul("target lm_head", batch * (queries - 1), h, target.vocab_size))
    kv = kv_bytes_per_token(layers, itemsize)
    other = batch * (kv * (context + pending) + (pending + queries) * h * itemsize) + _norm_bytes(layers, itemsize)
    flops = batch * _attention_flops(layers, queries, context + pending + queries)
    return Pass("draft", tuple(mms), float(other), flops, itemsize)


def dflash_step(target: ModelConfig, layers: ModelConfig, num_taps: int, k: int, queries: int, context: int,
                itemsize: int, batch: int = 1) -> Step:
    """One draft + verify step at K with `queries` draft queries (the released drafts: block_size; vLLM: K+1), for
    `batch` requests decoding together."""
    return Step((draft_pass(target, layers, num_taps, queries, k + 1, context, itemsize, batch),
                 forward(target, k + 1, context, itemsize, batch)))


def tree_step(target: ModelConfig, layers: ModelConfig, num_taps: int, budget: int, queries: int, context: int,
              itemsize: int, batch: int = 1) -> Step:
    """One draft-tree (DDTree) step of `budget` nodes: the draft over its block of `queries` (its pending context:
    the root and a path of up to queries - 1 nodes), then one verify of budget + 1 rows, for `batch` requests."""
    return Step((draft_pass(target, layers, num_taps, queries, queries, context, itemsize, batch),
                 forward(target, budget + 1, context, itemsize, batch)))


def matmul_shapes(step: Step) -> list[tuple[int, int, int]]:
    """The distinct (rows, n_in, n_out) a step multiplies: what a CPU's per-shape rates are measured on."""
    return sorted({(m.rows, m.n_in, m.n_out) for p in step.passes for m in p.matmuls})

