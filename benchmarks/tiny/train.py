"""Train the tiny model set shipped under models/tiny (`python -m benchmarks tiny train --out models/tiny`): its
options, recipe and data here, its torch work in benchmarks/tiny/training.py (imported once the options are checked).

Corpus: the running Python's standard library sources (`stdlib_corpus`), present offline on every machine.
Every function becomes one HumanEval-style chat sample: the user asks for a solution that passes the tests and
shows the function's header and docstring in a fenced block; the assistant continues the code from there.

Steps, all seeded and run with a fixed thread count (deterministic on one machine and torch build):
1. byte-level BPE tokenizer with the chat template and <|MASK|> (`build_tokenizer`);
2. the target, a Qwen3 LM trained on the packed chat samples (bf16 autocast), rounded to bf16 and saved;
3. the target regenerates greedy continuations of the first chat prompts: the drafts learn what it actually emits;
4. the DFlash draft: random anchors in the generated part, block [x_a, MASK×15] at positions a..a+15 seeing the
   context before a, labels x[a+k], CE weighted by exp(-(k-1)/γ), target embedding and LM head frozen;
5. the EAGLE-3 draft: next-next-token prediction from fc(3 taps) and the next token's embedding, unrolled over
   the K draft steps (training-time test) as vLLM chains them.
"""
from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.core.cells import MAX_SEED
from benchmarks.core.numbers import Bounded
from benchmarks.data.tiny_checkpoints import TinyShape

INSTRUCTION = "Write a solution that passes the tests."


def user_message(code: str) -> str:
    """The user turn of a HumanEval-style chat: the instruction and the code prefix in a fenced block."""
    return f"{INSTRUCTION}\n```python\n{code}```"


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    threads: int = 1
    shape: TinyShape = TinyShape(vocab_size=2048, num_taps=3, draft_layers=2)
    eagle_layer_ids: tuple[int, ...] = (1, 3, 5)
    continuation_chars: int = 1000
    seq_len: int = 512
    target_batch: int = 8
    target_steps: int = 480
    target_lr: float = 3e-3
    compile: bool = True
    regen_prompts: int = 2048
    regen_max_prompt_tokens: int = 384
    regen_batch: int = 128
    regen_new_tokens: int = 160
    dflash_steps: int = 2500
    dflash_layer_ids: tuple[int, ...] | None = None  # None: the reference rule (NOTES §1) for the target's depth
    dflash_batch: int = 16
    dflash_anchors: int = 16
    dflash_lr: float = 3e-3
    gamma: float = 7.0
    eagle_steps: int = 200
    eagle_batch: int = 4
    eagle_unroll: int = 3
    eagle_lr: float = 2e-3


def scaled(cfg: TrainConfig, factor: float) -> TrainConfig:
    """The same recipe with every step and prompt count multiplied by `factor` (at least 2 each), and below 1 the
    training batches too (at least 1 each): a smoke run's step then costs a fraction of a full step."""
    counts = ("target_steps", "regen_prompts", "dflash_steps", "eagle_steps")
    batches = ("target_batch", "dflash_batch", "eagle_batch")
    return replace(cfg, **{k: max(2, round(getattr(cfg, k) * factor)) for k in counts},
                   **{k: max(1, round(getattr(cfg, k) * min(factor, 1.0))) for k in batches})


# ----------------------------------------------------------------------------------------------- data


def _dedent(line: str, indent: int) -> str:
    return line[min(indent, len(line) - len(line.lstrip(" "))):]


def function_samples(texts: list[str], continuation_chars: int) -> list[tuple[str, str]]:
    """(code prefix, continuation) per function: header (+docstring) dedented, then the following code.

    Top-level functions carry the module's first import lines, as HumanEval prompts do. The continuation runs
    past the function's end until `continuation_chars` (cut at a line end) or the end of the file.
    """
    out = []
    for text in texts:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        imports = [lines[n.lineno - 1] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                   and n.end_lineno == n.lineno][:2]
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
            has_doc = ast.get_docstring(node) is not None
            head_end = node.body[0].end_lineno if has_doc else node.body[0].lineno - 1
            indent = node.col_offset
            prefix = "".join(_dedent(x, indent) for x in lines[start:head_end])
            if indent == 0 and imports:
                prefix = "".join(imports) + "\n\n" + prefix
            cont: list[str] = []
            size = 0
            for x in lines[head_end:]:
                if size >= continuation_chars:
                    break
                cont.append(_dedent(x, indent))
                size += len(cont[-1])
            if size >= continuation_chars // 4 and prefix.endswith("\n"):
                out.append((prefix, "".join(cont)))
    return out


def chat_ids(tok, prefix: str, continuation: str | None = None) -> list[int]:
    """Token ids of the chat prompt (ending with the assistant header), plus the assistant turn if given.

    The turn is tokenized on its own, so that its first token starts right after the header exactly as in
    generation (tokenized together, the header's newline would merge with the code's indentation).
    """
    messages = [{"role": "user", "content": user_message(prefix)}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    if continuation is None:
        return ids
    return ids + tok(continuation + "<|im_end|>\n", add_special_tokens=False)["input_ids"]


# As `tiny build`'s, and training.json (benchmarks/cli/__init__.py)
OUTPUT_ARGS = ("out",)
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS = ("target/*", "dflash/config.json", "dflash/model.safetensors", "eagle3/config.json",
           "eagle3/model.safetensors", "training.json")


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=Bounded(int, 0, MAX_SEED), default=TrainConfig.seed)
    ap.add_argument("--threads", type=Bounded(int, 1, 1024), default=TrainConfig.threads,
                    help="torch threads; fixed for determinism (1 is also the fastest on busy shared cores)")
    ap.add_argument("--eager", action="store_true",
                    help="train without torch.compile (no C++ toolchain; slower, and other rounding)")
    ap.add_argument("--scale", type=Bounded(float, 1e-6, 100), default=1.0,
                    help="multiply every step and prompt count, and below 1 the training batches (a quick smoke run "
                         "with e.g. 0.02)")


def main(args: argparse.Namespace) -> int:
    cfg = scaled(replace(TrainConfig(), seed=args.seed, threads=args.threads, compile=not args.eager),
                 args.scale)
    # torch, imported only here: without it the CLI names the package once the options are checked
    from benchmarks.tiny.training import train

    return train(cfg, args.out)
