"""The parsers of the keys that say what a run measures: its name, engines, target, methods and drafts, K, a draft
tree's node budget, the DFlash block size, datasets, temperatures, tokens per prompt and seed. Each reads a `Parsing`
and raises one ConfigError that names the file, the key and what is allowed."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.config.engine_option_keys import max_model_lens
from benchmarks.config.matrix_checks import Parsing, as_list, check_distinct, check_int, check_name, fail, got
from benchmarks.config.model_files import draft_block_size
from benchmarks.core.cells import DRAFT_METHODS, MAX_TREE_BUDGET, METHODS, SPEC_METHODS, TREE_METHODS
from benchmarks.core.numbers import is_finite
from benchmarks.data.dataset_registry import DATASETS
from benchmarks.decide import k_schedules
from benchmarks.engines import catalog

# The lowest temperature above 0 that samples as asked (docs/matrices.md, "Temperatures and seeds"): vLLM raises any
# lower one to it, and a float32 softmax of logits/T below it is greedy but for near ties, then inf/nan.
MIN_TEMPERATURE = 0.01
# The largest seed: seeds are uint32 in the JAX engine's PRNG keys, and the harness adds offsets of up to 2^31 to it
# (per arm, engine and prompt row), which must stay in range.
MAX_SEED = 2**31 - 1


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    path: str | None = None  # a local JSONL file; None means the registry's source


def engines(p: Parsing) -> list[str]:
    """The engines named, else the default: catalog.DEFAULT_ENGINE, or ABSENT_DEFAULT where vLLM is absent
    (`p.vllm_absent`: the reason), where an engine that needs vLLM is refused with that reason."""
    source = p.source
    default = catalog.DEFAULT_ENGINE if p.vllm_absent is None else catalog.ABSENT_DEFAULT
    engines = [str(e) for e in as_list(p.merged.get("engine", default))]
    if not engines:
        raise fail(source, "engine", f"empty; give one of {', '.join(catalog.ENGINES)} or a list of them")
    for e in engines:
        if e not in catalog.ENGINES:
            raise fail(source, "engine", f"unknown engine {e!r}; allowed: {', '.join(catalog.ENGINES)}")
    check_distinct(source, "engine", engines)
    needs = [e for e in engines if e in catalog.VLLM_ENGINES]
    if needs and p.vllm_absent is not None:
        raise fail(source, "engine", f"{', '.join(needs)} cannot run here: {p.vllm_absent}. Give engine: "
                                     f"{catalog.ABSENT_DEFAULT} (the default here), or run it in an environment with "
                                     "vLLM")
    return engines


def target(p: Parsing) -> str:
    target = p.get("target")
    if not target or not isinstance(target, str):
        raise fail(p.source, "target", "missing; give an HF id or a local folder, or a 'preset'")
    return target


def methods(p: Parsing) -> list[str]:
    source, engines = p.source, p.parsed["engine"]
    methods = as_list(p.get("methods"))
    if not methods:
        raise fail(source, "methods", f"empty; list at least one of {', '.join(METHODS)}")
    for m in methods:
        if m not in METHODS:
            raise fail(source, "methods", f"unknown method {m!r}; allowed: {', '.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise fail(source, "methods", "lists a method twice")
    for m in methods:
        runs = [e for e in engines if m in catalog.engine(e).methods]
        if not runs:
            others = [e for e, row in catalog.ENGINES.items() if m in row.methods]
            raise fail(source, "methods", f"{m!r} runs on no engine of the matrix ({', '.join(engines)}); engines "
                                          f"that run it: {', '.join(others)}; add one to 'engine', or drop {m}")
    return list(methods)


def drafts(p: Parsing) -> dict[str, str]:
    drafts = p.get("drafts")
    for m, ref in drafts.items():
        if m not in DRAFT_METHODS:
            raise fail(p.source, "drafts", f"{m!r} is not a method that takes a draft; those are: "
                                           f"{', '.join(DRAFT_METHODS)}")
        if not isinstance(ref, str) or not ref.strip():
            raise fail(p.source, "drafts", f"{m}: expected an HF id or a local folder, got {ref!r}")
    for m in p.parsed["methods"]:
        if m in DRAFT_METHODS and not drafts.get(m):
            raise fail(p.source, "drafts", f"method {m!r} needs a draft model: add 'drafts: {{{m}: <HF id or "
                                           f"folder>}}'")
    return {m: str(v) for m, v in drafts.items()}


def k(p: Parsing) -> dict[str, list[int] | k_schedules.Schedule]:
    """Per speculative method its Ks, or its schedule over batch sizes ({first B: K} or [[first, last, K], ...]:
    each batch size's cell runs the K its range gives, none where that is 0)."""
    source, value = p.source, p.get("k")
    chain = [m for m in SPEC_METHODS if m not in TREE_METHODS]
    spec_methods = [m for m in p.parsed["methods"] if m in chain]
    if isinstance(value, dict) and not k_schedules.looks_like(value):
        for m in value:
            if m not in chain:
                raise fail(source, "k", f"unknown method {m!r} in the K mapping; allowed: {', '.join(chain)}"
                           + (f" ({m} takes 'tree_budget')" if m in TREE_METHODS else ""))
        missing = [m for m in spec_methods if m not in value]
        if missing:
            raise fail(source, "k", f"no K given for {', '.join(missing)}")
        given = {m: value[m] for m in spec_methods}
    else:
        given = dict.fromkeys(spec_methods, value)
    per_method: dict[str, list[int] | k_schedules.Schedule] = {}
    for m, v in given.items():
        if k_schedules.looks_like(v):
            try:
                schedule = k_schedules.parse(v)
            except ValueError as err:
                raise fail(source, "k", f"the schedule of {m}: {err}") from None
            if not schedule.ks():
                raise fail(source, "k", f"the schedule of {m} gives K = 0 at every batch size, so {m} would run no "
                                        f"cell; give a K >= 1 in some range, or drop {m} from methods")
            per_method[m] = schedule
            continue
        ks = as_list(v)
        if not ks:
            raise fail(source, "k", f"no K given for {m}; give an int >= 1, a list of them, or a schedule "
                                    "{first B: K, ...}")
        for kk in ks:
            check_int(source, "k", kk, 1)
        check_distinct(source, "k", ks, f" for {m}")
        per_method[m] = ks
    return per_method


def tree_budget(p: Parsing) -> list[int] | k_schedules.Schedule | None:
    """The node budgets of the tree methods (a draft tree's nodes verified per step besides the root): a list, or a
    schedule over batch sizes written as `k` writes one (each batch size's cell runs its range's budget, none where
    that is 0 but at B = 1); None when the matrix runs no tree method."""
    source, value = p.source, p.get("tree_budget")
    trees = [m for m in p.parsed["methods"] if m in TREE_METHODS]
    bounds = f"an int in 1..{MAX_TREE_BUDGET}"
    if value is None:
        if trees:
            raise fail(source, "tree_budget", f"method {trees[0]} needs a node budget: add 'tree_budget: 64' "
                                              f"({bounds}, a list of them, or a schedule {{first B: budget, ...}})")
        return None
    if not trees:
        raise fail(source, "tree_budget", f"sets the node budget of {', '.join(TREE_METHODS)}, which 'methods' lacks; "
                                          f"add {TREE_METHODS[0]} to methods or drop tree_budget")
    if k_schedules.looks_like(value):
        try:
            schedule = k_schedules.parse(value, "budget")
        except ValueError as err:
            raise fail(source, "tree_budget", f"the schedule: {err}") from None
        if not schedule.ks():
            raise fail(source, "tree_budget", "the schedule gives a budget of 0 at every batch size, so no tree cell "
                                              "would run; give a budget >= 1 in some range")
        if schedule.max_k() > MAX_TREE_BUDGET:
            raise fail(source, "tree_budget", f"the schedule's budget {schedule.max_k()} is above {MAX_TREE_BUDGET}; "
                                              f"give budgets in 0..{MAX_TREE_BUDGET} (0: no tree cell at that B)")
        return schedule
    budgets = as_list(value)
    for b in budgets:
        if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= MAX_TREE_BUDGET:
            raise fail(source, "tree_budget", f"expected {bounds} (draft-tree nodes verified per step), a list of "
                                              f"them, or a schedule {{first B: budget, ...}}; got {got(b)}")
    check_distinct(source, "tree_budget", budgets)
    return budgets


def block_size(p: Parsing) -> int | None:
    """The DFlash block size, given or read from a local draft; every dflash K must fit within it."""
    source, block_size = p.source, p.merged.get("block_size")
    if block_size is None:  # unset only: a 0 given is checked below, never taken as unset
        block_size = draft_block_size(str(p.merged["drafts"].get("dflash") or "") or None)
    if block_size is not None:
        check_int(source, "block_size", block_size, 2)
        for kk in k_schedules.ks_of(p.parsed["k"].get("dflash", [])):
            if kk > block_size - 1:
                raise fail(source, "k", f"K={kk} exceeds block_size-1={block_size - 1} for dflash; "
                                        f"the draft proposes at most block_size-1 tokens")
    return block_size


def _dataset(source: str, entry: Any, base_dir: Path | None) -> DatasetEntry:
    if isinstance(entry, str):
        name, path = entry, None
    elif isinstance(entry, dict) and set(entry) <= {"name", "path"} and "name" in entry:
        name, path = str(entry["name"]), entry.get("path")
    else:
        raise fail(source, "datasets", f"entry {entry!r} must be a name or a mapping {{name, path}}")
    check_name(source, "datasets", name)
    if name not in DATASETS and path is None:
        raise fail(source, "datasets", f"unknown dataset {name!r}; choose from {', '.join(sorted(DATASETS))}, "
                                       f"or give {{name: {name}, path: prompts.jsonl}}")
    if path is not None and "://" in str(path):
        shown = re.sub(r"(\w+://)[^/@\s]+@", r"\1***@", str(path))
        raise fail(source, "datasets", f"{name}: path {shown} is a URL; give a local JSONL file (download it first)")
    if path is not None and base_dir is not None and not Path(str(path)).expanduser().is_absolute():
        path = os.path.normpath(base_dir / str(path))
    return DatasetEntry(name=name, path=str(path) if path is not None else None)


def datasets(p: Parsing) -> list[DatasetEntry]:
    datasets = [_dataset(p.source, d, p.base_dir) for d in as_list(p.merged.get("datasets", []))]
    if not datasets:
        raise fail(p.source, "datasets", f"missing; choose from {', '.join(sorted(DATASETS))}")
    check_distinct(p.source, "datasets", [d.name for d in datasets])  # a dataset's name keys its prompts and units
    return datasets


def temperatures(p: Parsing) -> list[float]:
    source, temps = p.source, as_list(p.get("temperature"))
    if not temps:
        raise fail(source, "temperature", "empty; give a float >= 0 or a list of them")
    for t in temps:
        if not is_finite(t) or t < 0:
            infinite = isinstance(t, float) and not is_finite(t)
            raise fail(source, "temperature", f"expected a float >= 0, got {got(t)}"
                                              + (" (not a finite number)" if infinite else ""))
        floor = MIN_TEMPERATURE
        if 0 < t < floor:
            raise fail(source, "temperature", f"{t!r} is above 0 but below {floor:g}, where sampling is greedy but for "
                                              f"near ties and vLLM raises it to {floor:g} (docs/matrices.md, "
                                              f"'Temperatures and seeds'); give 0 for greedy decoding, or a "
                                              f"temperature >= {floor:g}")
    check_distinct(source, "temperature", [float(t) for t in temps])
    return [float(t) for t in temps]


def name(p: Parsing) -> str:
    # an explicit name must keep to SAFE_NAME; the default, the file's stem, is one path component already
    name = p.merged.get("name")
    return check_name(p.source, "name", name) if name is not None else Path(p.source).stem


def max_new_tokens(p: Parsing) -> int:
    """max_new_tokens, and every max_model_len an int that leaves room for a prompt beside it."""
    source, engines, options = p.source, p.parsed["engine"], p.parsed["engine_options"]
    max_new_tokens = check_int(source, "max_new_tokens", p.get("max_new_tokens"), 1)
    for where, value in max_model_lens(engines, options):
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise fail(source, where, f"max_model_len: expected an int >= 2 (prompt + output tokens), got {got(value)}")
        if max_new_tokens >= value:
            raise fail(source, where, f"max_model_len {value} leaves no room for a prompt beside max_new_tokens "
                                      f"{max_new_tokens}; raise max_model_len or lower max_new_tokens")
    return max_new_tokens


def seed(p: Parsing) -> int:
    """The seed, within the range every engine takes with the harness's offsets added (`MAX_SEED`)."""
    seed, most = check_int(p.source, "seed", p.get("seed"), 0), MAX_SEED
    if seed > most:
        raise fail(p.source, "seed", f"{seed} is above {most} (2^31 - 1): the engines take uint32 seeds and the "
                                     f"harness adds offsets of up to 2^31 per arm, engine and prompt; give a "
                                     f"smaller seed")
    return seed


def drift_prompts(p: Parsing) -> int:
    """The baseline's prompts measured again (an int >= 0): when given, at most num_prompts, since they are drawn
    from the measured prompts (the default is cut to num_prompts instead)."""
    value = check_int(p.source, "drift_prompts", p.get("drift_prompts"), 0)
    if "drift_prompts" in p.merged and value > p.parsed["num_prompts"]:
        raise fail(p.source, "drift_prompts", f"{value} asked, but the baseline is measured again on its measured "
                                              f"prompts, num_prompts = {p.parsed['num_prompts']}: give at most that")
    return value
