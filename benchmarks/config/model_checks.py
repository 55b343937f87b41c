"""What a matrix's models must be for its run to start, checked before anything is written (by `validate` and the
run plan): a hub id in reach (cached, or the hub online; else what this machine lacks), a DFlash draft (of dflash
or a draft tree) that is one and whose block holds every K, and a target tokenizer that loads and has a chat
template."""
from __future__ import annotations

from functools import cache
from typing import Any

from benchmarks.config.matrix_parse import Matrix
from benchmarks.config.model_refs import load_tokenizer, materialize
from benchmarks.core.cells import TREE_METHODS
from benchmarks.decide.k_schedules import ks_of
from benchmarks.hardware.provenance import hub_offline

HUB_TIMEOUT_S = 10  # how long the hub is given to answer whether it holds a repository
DFLASH_ARCHITECTURE = "DFlashDraftModel"  # what the JAX loader and vLLM's model registry load as a DFlash draft
DFLASH_DRAFT_METHODS = ("dflash", *TREE_METHODS)  # the methods whose draft is a DFlash draft


def hub_out_of_reach(repo: str, repo_type: str = "model") -> str | None:
    """Why the Hugging Face hub cannot give `repo` (HF_HUB_OFFLINE set, or no answer), or None where it answers (even
    that there is no such repository: then the id is wrong, not the machine)."""
    return "HF_HUB_OFFLINE is set" if hub_offline() else _hub_answer(repo, repo_type)[0]


@cache
def _hub_answer(repo: str, repo_type: str) -> tuple[str | None, bool]:
    """What the hub said about `repo` (asked once a process): why it gave no answer (None where it answered), and
    whether it holds the repository."""
    from huggingface_hub import dataset_info, model_info  # lazy: huggingface_hub
    from huggingface_hub.errors import HfHubHTTPError  # lazy: huggingface_hub

    try:
        (dataset_info if repo_type == "dataset" else model_info)(repo, timeout=HUB_TIMEOUT_S)
    except HfHubHTTPError:  # the hub answered: no such repository, gated, or another refusal
        return None, False
    except Exception as exc:  # no network, no DNS, a timeout: httpx, OSError and others
        return f"the hub does not answer: {type(exc).__name__}", False
    return None, True


def hub_problem(ref: str, role: str, source: str) -> tuple[str, bool]:
    """The line for a hub id that is not in the local cache and that the run could not fetch either, and whether it
    is what this machine lacks (the hub out of reach) rather than the matrix's own error (the hub answers that there
    is no such repository, or a gated one, or holds one without a model's config.json)."""
    why = hub_out_of_reach(ref)
    if why is not None:
        return (f"{source}: {role} {ref!r} is not in this machine's Hugging Face cache and the hub is out of reach "
                f"({why}): fetch it where the hub is in reach with `hf download {ref}` (into the HF_HOME this "
                f"machine reads), or give a local folder"), True
    if _hub_answer(ref, "model")[1]:
        return (f"{source}: {role} {ref!r}: the hub holds this repository, but no model with a config.json could be "
                f"fetched from it (not a model repository, or the cache folder full or not writable): check the id, "
                f"the disk and HF_HOME, or give a local folder"), False
    return (f"{source}: {role} {ref!r} is not in the local Hugging Face cache and the hub does not give it (a "
            f"misspelt or gated repository?): check the id (HF_TOKEN for a gated one), or give a local folder"), False


def draft_problems(matrix: Matrix, configs: dict[str, dict[str, Any]]) -> list[str]:
    """The DFlash drafts' configs (`configs`: method -> config.json) against what the engines load, for each method
    that loads one (dflash, and the draft trees built from its distributions): its architecture, its block size, the
    matrix's block_size and every dflash K."""
    return [line for method in DFLASH_DRAFT_METHODS if method in matrix.methods and method in configs
            for line in _dflash_draft_problems(matrix, method, configs[method])]


def _dflash_draft_problems(matrix: Matrix, method: str, cfg: dict[str, Any]) -> list[str]:
    ref, source = matrix.drafts.get(method), matrix.source
    archs = cfg.get("architectures") or []
    if DFLASH_ARCHITECTURE not in archs:
        return [f"{source}: {method} draft {ref!r} is not a DFlash draft: its config.json names {archs or 'no'} "
                f"architectures, not {DFLASH_ARCHITECTURE} (a target or another method's draft?); give a DFlash draft "
                f"such as z-lab/Qwen3-4B-DFlash-b16"]
    block = cfg.get("block_size")
    if isinstance(block, bool) or not isinstance(block, int) or block < 2:
        return [f"{source}: {method} draft {ref!r}: its config.json gives block_size {block!r}, not an int >= 2; the "
                f"draft cannot be loaded"]
    if matrix.block_size is not None and matrix.block_size != block:
        return [f"{source}: 'block_size': {matrix.block_size} given, but the {method} draft {ref!r} was built with "
                f"block_size {block} (its config.json), which the engines use: drop block_size or give {block}"]
    return [f"{source}: 'k': K={k} exceeds the dflash draft's block_size-1={block - 1} ({ref!r}); the draft proposes "
            f"at most block_size-1 tokens" for k in ks_of(matrix.k.get(method, [])) if k > block - 1]


def target_tokenizer(matrix: Matrix, config: dict[str, Any]) -> tuple[Any, list[str]]:
    """The target's tokenizer, loaded as the run loads it, and what is wrong with it: it does not load, it encodes
    nothing (transformers builds an empty one for a folder without tokenizer files), it has more ids than the
    target's `config` embeds, or it has no chat template (every prompt is rendered with it). None for a builtin
    fixture, which the run builds."""
    if matrix.target.startswith("builtin:"):
        return None, []
    source = matrix.source
    try:
        tokenizer = load_tokenizer(materialize(matrix.target) or matrix.target)
        probe = tokenizer("a b c", add_special_tokens=False)["input_ids"]
    except Exception as exc:  # transformers raises OSError, ValueError and others for a folder without a tokenizer
        return None, [f"{source}: target {matrix.target!r}: its tokenizer does not load ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''}); give a model folder with its tokenizer files"]
    if not probe:
        return None, [f"{source}: target {matrix.target!r}: its tokenizer encodes nothing (no tokenizer.json or "
                      f"vocabulary files in the folder?); give a model folder with its tokenizer files"]
    vocab = config.get("vocab_size")
    if isinstance(vocab, int) and len(tokenizer) > vocab:
        return None, [f"{source}: target {matrix.target!r}: its tokenizer has {len(tokenizer)} ids but the model "
                      f"embeds {vocab} (config.json vocab_size): the tokenizer is another model's; give its own"]
    if not getattr(tokenizer, "chat_template", None):
        return None, [f"{source}: target {matrix.target!r} has no chat template (no 'chat_template' in "
                      f"tokenizer_config.json, no chat_template.jinja), and every prompt is rendered with it: use the "
                      f"model's chat or instruct variant, or add its template to the folder"]
    return tokenizer, []
