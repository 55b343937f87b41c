"""What the tiny pair is trained on and how much (torch-free): the chat samples drawn from the standard library's
functions, their token ids, and the recipe's sizes (`TrainConfig`). `tiny train` (benchmarks/tiny/train.py) reads the
options into it; its torch work (benchmarks/tiny/training.py) trains from it; `tiny check` asks as it does."""
from __future__ import annotations

import ast
from dataclasses import dataclass, replace

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
