"""Released DFlash drafts and the chat-template thinking mode each was trained for, where a public source says so.

The run plan and report.md warn when a matrix renders its prompts with thinking set the other way: acceptance then
falls well below the draft's published figures (docs/matrices.md, "Thinking").
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ReleasedDraft:
    draft: str  # Hugging Face id
    target: str
    thinking: bool | None  # the template's thinking mode it was trained for; None: its target's template has none
    source: str


README = "github.com/z-lab/dflash README"
RELEASED = (
    ReleasedDraft("z-lab/Qwen3-4B-DFlash-b16", "Qwen/Qwen3-4B", False,
                  f"{README} lists it as \"Qwen3-4B (non-thinking)\"; z-lab's dflash/benchmark.py refuses "
                  f"--enable-thinking for the Qwen3-4B/8B drafts (\"not trained with thinking traces\")"),
    ReleasedDraft("z-lab/Qwen3-8B-DFlash-b16", "Qwen/Qwen3-8B", False,
                  f"{README} lists it as \"Qwen3-8B (non-thinking)\"; z-lab/dflash#133: acceptance below the paper's "
                  f"with thinking on, acceptance length ~8 on gsm8k with it off"),
    ReleasedDraft("z-lab/Qwen3.5-35B-A3B-DFlash", "Qwen/Qwen3.5-35B-A3B", True,
                  "z-lab/dflash#60: 9.5 accepted tokens per round with thinking on, 2.7-3.9 with it off; the "
                  f"{README}'s SGLang benchmark command for it passes --enable-thinking"),
    ReleasedDraft("z-lab/Qwen3.5-27B-DFlash", "Qwen/Qwen3.5-27B", True,
                  f"the {README}'s vLLM benchmark command for it passes --enable-thinking"),
    ReleasedDraft("z-lab/Qwen3.5-4B-DFlash", "Qwen/Qwen3.5-4B", True,
                  f"the {README}'s MLX example and benchmark command for it render with enable_thinking=True"),
    ReleasedDraft("z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat", "meta-llama/Llama-3.1-8B-Instruct", None,
                  "Llama 3.1's chat template has no thinking mode; the draft is trained on UltraChat"),
)


def released(ref: str) -> ReleasedDraft | None:
    """The released draft a model reference names: its Hugging Face id, or a local folder of the id's name."""
    ref = ref.rstrip("/").lower()
    for d in RELEASED:
        if ref == d.draft.lower() or ref.rsplit("/", 1)[-1] == d.draft.rsplit("/", 1)[-1].lower():
            return d
    return None


def thinking_warnings(drafts: dict[str, str], template: Mapping[str, object]) -> list[str]:
    """One line per draft known to be trained with thinking set otherwise than `template` (the chat template's
    keyword arguments, `enable_thinking` among them) renders the prompts."""
    thinking = bool(template.get("enable_thinking"))
    out = []
    for method, ref in drafts.items():
        d = released(ref)
        if d is not None and d.thinking is not None and d.thinking != thinking:
            out.append(f"{method} draft {d.draft} was trained with thinking {'on' if d.thinking else 'off'}, but the "
                       f"prompts are rendered with enable_thinking={thinking}: expect acceptance well below its "
                       f"published figures (source: {d.source})")
    return out
