"""YAML test matrices and model presets: schema, validation with errors that name file, key and what is allowed."""
from __future__ import annotations

import difflib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.core import catalog
from benchmarks.core.datasets import DATASETS, has_answers
from benchmarks.core.exit_codes import BadInput
from benchmarks.core.paths import PRESETS_DIR, resolve_model_ref
from benchmarks.core.records import DRAFT_METHODS, METHODS, SPEC_METHODS

REQUEST_TIMEOUT_S = 600.0
LOAD_TIMEOUT_S = 1800.0
EXECUTORS = ("local", "ray")
# What one cell's actor asks of a Ray cluster by default, per platform (benchmarks.core.provenance.detect_platform).
DEFAULT_RESOURCES = {"tpu": {"TPU": 4}, "gpu": {"GPU": 1}, "cpu": {"CPU": 1}}

MATRIX_KEYS = {
    "name": "a short name for the run",
    "description": "free text",
    "preset": "a file stem under configs/presets/ supplying target, drafts and engine options",
    "engine": f"one of {list(catalog.ENGINES)} or a list of them",
    "target": "HF id or local folder of the target model",
    "drafts": "mapping method -> HF id or local folder of its draft",
    "methods": f"list drawn from {list(METHODS)}",
    "k": "int, list of ints, or mapping method -> int/list (speculative tokens per step)",
    "datasets": f"list of dataset names from {sorted(DATASETS)} or mappings {{name, path}} for a local JSONL",
    "temperature": "float >= 0, or a list of them",
    "max_new_tokens": "int >= 1",
    "num_prompts": "int >= 1 (measured prompts per dataset)",
    "warmup_prompts": "int >= 0 (extra prompts run first and excluded from every figure)",
    "seed": "int (prompt subset and sampling)",
    "engine_options": "mapping passed to every engine (max_model_len, dtype, ...), with per-engine sub-mappings "
                      "'vllm: {enforce_eager, tensor_parallel_size, ...}' and 'jax: {breakdown, ...}'",
    "block_size": "int, the DFlash draft's block size (read from a local draft's config.json when omitted)",
    "interleave": "bool (default false): load every cell at once and run them prompt by prompt in turn, so that a "
                  "host whose speed drifts slows every cell alike; costs memory for all the cells' models at once "
                  "(vLLM cells each run in their own worker process)",
    "drift_prompts": "int >= 0 (default 8; at most num_prompts are used): when cells run one after another, the "
                     "baseline is measured again on this many measured prompts (evenly spaced) after its speculative "
                     "cells, and a speedup is flagged when the baseline's drift is real (its CI over these prompts "
                     "excludes 0) and moves the speedup out of its own CI; fewer than 2 give no drift CI and no "
                     "flag; 0 turns it off",
    "concurrency": f"int >= 1 or a list of distinct ones (default [1]): requests in flight at once against a "
                   f"server; engines {catalog.serving()} only",
    "request_rate": f"float > 0, requests per second (Poisson arrivals) under the concurrency cap; default: all "
                    f"at once; engines {catalog.serving()} only",
    "executor": f"one of {list(EXECUTORS)} (default local): where engines run; ray makes each cell an actor on the "
                f"Ray cluster at RAY_ADDRESS (else a local Ray) and runs groups of cells concurrently",
    "resources": f"mapping Ray resource -> amount that one cell's actor needs (executor ray; default per platform: "
                 f"{DEFAULT_RESOURCES})",
    "workers": "bool (default false): run every cell's engine in its own worker process (a crash or hang then "
               "fails only that cell's units); vLLM cells of an interleaved matrix always do",
    "request_timeout_s": f"number > 0 (default {REQUEST_TIMEOUT_S:g}): a worker's time limit per request",
    "load_timeout_s": f"number > 0 (default {LOAD_TIMEOUT_S:g}): a worker's time limit to start and load its engine",
    "context_tokens": "int >= 0 or a list of distinct ones: each prompt is preceded by other rows of its dataset with "
                      "their reference answers (many-shot chat turns) until it holds at least this many tokens; each "
                      "value is a workload of its own (units <dataset>@ctx<N>); N + max_new_tokens must fit "
                      "max_model_len",
    "turns": "1, 2 or [1, 2] (default 1): the turns of a two-turn dataset (mt-bench) to measure; turn 2 sends the "
             "conversation after the first answer, which the first baseline cell generates once (greedy, untimed; "
             "cached in the run folder's turns/)",
    "chat_template": "mapping of keyword arguments for the target tokenizer's chat template (default "
                     "{enable_thinking: false}), e.g. {enable_thinking: true}; recorded in the manifest and report.md",
}
# Workload keys a matrix may leave out; unset, they leave the run id as it was before they existed.
WORKLOAD_KEYS = ("context_tokens", "turns", "chat_template")
TURNS = (1, 2)
# Arguments of `apply_chat_template` that the harness sets itself (or that are not keyword arguments of a template).
TEMPLATE_RESERVED = ("conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
                     "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors",
                     "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs")
# Keys that choose where and how cells run, not what they measure: they leave the run id unchanged.
PLACEMENT_KEYS = ("executor", "resources", "workers", "request_timeout_s", "load_timeout_s")
# A preset supplies models and defaults; any matrix key but these may appear in one.
PRESET_KEYS = tuple(k for k in MATRIX_KEYS if k not in ("name", "preset", "datasets"))


class ConfigError(BadInput):
    """A matrix or preset that cannot run; the message names the file, the key and what is allowed."""


# Names that become file or folder names (the run folder, its unit files, a preset file): one path component of a
# safe character set, so that no name can lead outside results/ or configs/presets/.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
SAFE_NAME_RULE = "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 80 characters"


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    path: str | None = None  # a local JSONL file; None means the registry's source


@dataclass
class Matrix:
    """A validated matrix: everything needed to expand into cells."""

    name: str
    source: str
    engines: list[str]
    target: str
    drafts: dict[str, str]
    methods: list[str]
    k: dict[str, list[int]]
    datasets: list[DatasetEntry]
    temperatures: list[float]
    max_new_tokens: int
    num_prompts: int
    warmup_prompts: int
    seed: int
    engine_options: dict[str, Any] = field(default_factory=dict)
    block_size: int | None = None
    interleave: bool = False
    drift_prompts: int = 8
    executor: str = "local"
    resources: dict[str, float] | None = None  # None: DEFAULT_RESOURCES of the platform the run starts on
    workers: bool = False
    request_timeout_s: float = REQUEST_TIMEOUT_S
    load_timeout_s: float = LOAD_TIMEOUT_S
    raw: dict[str, Any] = field(default_factory=dict)
    concurrency: list[int] = field(default_factory=lambda: [1])
    request_rate: float | None = None
    context_tokens: list[int] | None = None  # None: the prompts as they are
    turns: list[int] | None = None  # None: the first turn only
    chat_template: dict[str, Any] | None = None  # None: datasets.DEFAULT_TEMPLATE


def _fail(source: str, key: str, msg: str) -> ConfigError:
    return ConfigError(f"{source}: '{key}': {msg}")


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def check_name(source: str, key: str, name: Any) -> str:
    """A name that becomes a file or folder name, if it keeps to SAFE_NAME."""
    if isinstance(name, bool) or not isinstance(name, (str, int)) or not SAFE_NAME.fullmatch(str(name)):
        raise _fail(source, key, f"{name!r} becomes a file or folder name; use {SAFE_NAME_RULE}")
    return str(name)


def _check_distinct(source: str, key: str, values: list[Any], where: str = "") -> None:
    """An axis of the matrix lists each value once (a repeat would run, or silently replace, the same cells)."""
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise _fail(source, key, f"lists {', '.join(repeated)} more than once{where}; give each value once")


def _finite(value: Any) -> bool:
    """A number that is neither a bool, NaN nor infinite."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _check_int(source: str, key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(source, key, f"expected an int >= {minimum}, got {value!r}")
    return value


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that gives one key twice (YAML itself would keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (lines {seen[key]} and {key_node.start_mark.line + 1}); "
                                f"give it once", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """A YAML file's content, or ConfigError naming the file: unreadable, not UTF-8, not YAML, a key twice."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: " + " ".join(str(exc).split())) from None


def load_preset(name: str) -> dict[str, Any]:
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
        raise ConfigError(f"preset {name!r} not found in {PRESETS_DIR}; known presets: {', '.join(known)}")
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a preset must be a mapping of keys ({', '.join(PRESET_KEYS)})")
    for key in data:
        if key not in PRESET_KEYS:
            raise _fail(str(path), key, f"unknown key; allowed: {', '.join(PRESET_KEYS)}")
    return data


def load_matrix(path: str | Path) -> Matrix:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such matrix file; the shipped ones are in configs/matrices/")
    return parse_matrix(read_yaml(path), str(path), path.parent)


def parse_matrix(raw: Any, source: str = "<matrix>", base_dir: Path | None = None) -> Matrix:
    """Validate a matrix mapping (after merging its preset) and return it resolved; relative prompt file paths are
    resolved from `base_dir` (the matrix file's folder), else from the working directory."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a matrix must be a mapping of keys ({', '.join(MATRIX_KEYS)})")
    for key in raw:
        if key not in MATRIX_KEYS:
            close = difflib.get_close_matches(str(key), list(MATRIX_KEYS), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise _fail(source, key, f"unknown key; {hint}allowed: {', '.join(MATRIX_KEYS)} (docs/matrices.md says "
                                     f"what each takes)")

    preset = load_preset(check_name(source, "preset", raw["preset"])) if raw.get("preset") else {}
    for key in ("engine_options", "drafts"):
        if not isinstance(raw.get(key) or {}, dict):
            raise _fail(source, key, "expected a mapping")
    preset_options, own_options = preset.get("engine_options", {}), raw.get("engine_options") or {}
    merged_options = {**preset_options, **own_options}
    for e in catalog.ENGINES:
        if isinstance(preset_options.get(e), dict) and isinstance(own_options.get(e), dict):
            merged_options[e] = {**preset_options[e], **own_options[e]}
    merged = {**{k: v for k, v in preset.items() if k != "description"}, **raw, "engine_options": merged_options}
    merged["drafts"] = {**preset.get("drafts", {}), **(raw.get("drafts") or {})}

    engines = [str(e) for e in _as_list(merged.get("engine", catalog.DEFAULT_ENGINE))]
    if not engines:
        raise _fail(source, "engine", f"empty; give one of {', '.join(catalog.ENGINES)} or a list of them")
    for e in engines:
        if e not in catalog.ENGINES:
            raise _fail(source, "engine", f"unknown engine {e!r}; allowed: {', '.join(catalog.ENGINES)}")
    _check_distinct(source, "engine", engines)

    if not merged.get("target") or not isinstance(merged["target"], str):
        raise _fail(source, "target", "missing; give an HF id or a local folder, or a 'preset'")

    methods = _as_list(merged.get("methods", ["baseline", "dflash"]))
    if not methods:
        raise _fail(source, "methods", f"empty; list at least one of {', '.join(METHODS)}")
    for m in methods:
        if m not in METHODS:
            raise _fail(source, "methods", f"unknown method {m!r}; allowed: {', '.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise _fail(source, "methods", "lists a method twice")
    for m in methods:
        runs = [e for e in engines if m in catalog.engine(e).methods]
        if not runs:
            others = [e for e, row in catalog.ENGINES.items() if m in row.methods]
            raise _fail(source, "methods", f"{m!r} runs on no engine of the matrix ({', '.join(engines)}); engines "
                                           f"that run it: {', '.join(others)}")

    drafts = merged["drafts"]
    for m in methods:
        if m in DRAFT_METHODS and not drafts.get(m):
            raise _fail(source, "drafts", f"method {m!r} needs a draft model: add 'drafts: {{{m}: <HF id or folder>}}'")

    k = _parse_k(source, merged.get("k", 15), [m for m in methods if m in SPEC_METHODS])
    block_size = merged.get("block_size") or _draft_block_size(str(merged["drafts"].get("dflash") or "") or None)
    if block_size is not None:
        _check_int(source, "block_size", block_size, 2)
        for kk in k.get("dflash", []):
            if kk > block_size - 1:
                raise _fail(source, "k", f"K={kk} exceeds block_size-1={block_size - 1} for dflash; "
                                         f"the draft proposes at most block_size-1 tokens")

    datasets = [_parse_dataset(source, d, base_dir) for d in _as_list(merged.get("datasets", []))]
    if not datasets:
        raise _fail(source, "datasets", f"missing; choose from {', '.join(sorted(DATASETS))}")
    _check_distinct(source, "datasets", [d.name for d in datasets])  # a dataset's name keys its prompts and units

    temps = _as_list(merged.get("temperature", 0.0))
    if not temps:
        raise _fail(source, "temperature", "empty; give a float >= 0 or a list of them")
    for t in temps:
        if not _finite(t) or t < 0:
            infinite = isinstance(t, float) and not math.isfinite(t)
            raise _fail(source, "temperature", f"expected a float >= 0, got {t!r}"
                                               + (" (not a finite number)" if infinite else ""))
    _check_distinct(source, "temperature", [float(t) for t in temps])

    options = merged["engine_options"]
    for e in catalog.ENGINES:
        if not isinstance(options.get(e) or {}, dict):
            raise _fail(source, "engine_options", f"'{e}' must be a mapping of {e}-only options")
    _check_engine_options(source, engines, options)
    flags = {}
    for key in ("interleave", "workers"):
        flags[key] = merged.get(key, False)
        if not isinstance(flags[key], bool):
            raise _fail(source, key, f"expected true or false, got {flags[key]!r}")
        if flags[key] and any(e in catalog.serving() for e in engines):
            raise _fail(source, key, f"a serving engine ({', '.join(catalog.serving())}) runs a server per cell, one "
                                     f"cell at a time, with a load of many requests: drop '{key}'")
    limits = {}
    for key, default in (("request_timeout_s", REQUEST_TIMEOUT_S), ("load_timeout_s", LOAD_TIMEOUT_S)):
        limits[key] = merged.get(key, default)
        if not _finite(limits[key]) or limits[key] <= 0:
            raise _fail(source, key, f"expected a number of seconds > 0 (default {default:g}), got {limits[key]!r}")
    concurrency, request_rate = _parse_load(source, merged, engines)
    executor = check_executor(source, merged.get("executor", "local"), engines)
    resources = merged.get("resources")
    if resources is not None:
        resources = parse_resources(source, resources)
    # an explicit name must keep to SAFE_NAME; the default, the file's stem, is one path component already
    name = check_name(source, "name", merged["name"]) if merged.get("name") is not None else Path(source).stem
    max_new_tokens = _check_int(source, "max_new_tokens", merged.get("max_new_tokens", 256), 1)
    _check_lengths(source, engines, options, max_new_tokens)
    context_tokens = _parse_context(source, merged, datasets, engines, options, max_new_tokens)
    turns = _parse_turns(source, merged, datasets, methods, context_tokens)
    chat_template = _parse_chat_template(source, merged)
    return Matrix(
        name=str(name),
        source=source,
        engines=engines,
        target=merged["target"],
        drafts={m: str(v) for m, v in drafts.items()},
        methods=list(methods),
        k=k,
        datasets=datasets,
        temperatures=[float(t) for t in temps],
        max_new_tokens=max_new_tokens,
        num_prompts=_check_int(source, "num_prompts", merged.get("num_prompts", 8), 1),
        warmup_prompts=_check_int(source, "warmup_prompts", merged.get("warmup_prompts", 1), 0),
        seed=_check_int(source, "seed", merged.get("seed", 0), 0),
        engine_options=options,
        block_size=block_size,
        interleave=flags["interleave"],
        drift_prompts=_check_int(source, "drift_prompts", merged.get("drift_prompts", 8), 0),
        executor=executor,
        resources=resources,
        workers=flags["workers"],
        request_timeout_s=float(limits["request_timeout_s"]),
        load_timeout_s=float(limits["load_timeout_s"]),
        raw=raw,
        concurrency=concurrency,
        request_rate=request_rate,
        context_tokens=context_tokens,
        turns=turns,
        chat_template=chat_template,
    )


def engine_max_model_len(engine: str, options: dict[str, Any]) -> int | None:
    """The max_model_len a cell of `engine` gets (its own options, the served engine's, the shared ones, the engine's
    default); None where the engine takes the model's own."""
    row = catalog.engine(engine)
    for scope in (options.get(engine) or {}, (options.get(row.serves) or {}) if row.serves else {}, options):
        if "max_model_len" in scope:
            value = scope["max_model_len"]
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    return row.defaults.get("max_model_len")


def _parse_context(source: str, merged: dict[str, Any], datasets: list[DatasetEntry], engines: list[str],
                   options: dict[str, Any], max_new_tokens: int) -> list[int] | None:
    """The context lengths: distinct ints >= 0, on datasets with reference answers, each fitting every engine's
    max_model_len with max_new_tokens."""
    if merged.get("context_tokens") is None:
        return None
    values = _as_list(merged["context_tokens"])
    if not values:
        raise _fail(source, "context_tokens", "empty; give an int >= 0 or a list of them")
    for v in values:
        _check_int(source, "context_tokens", v, 0)
    _check_distinct(source, "context_tokens", values)
    for d in datasets:
        if not has_answers(d.name, d.path):
            with_answers = sorted(n for n in DATASETS if has_answers(n, None))
            raise _fail(source, "context_tokens", f"dataset {d.name!r} has no reference answers to build many-shot "
                                                  f"context from (a local file's rows carry none); datasets with "
                                                  f"them: {', '.join(with_answers)}")
    for e in engines:
        limit = engine_max_model_len(e, options)
        if limit is not None and max(values) + max_new_tokens > limit:
            raise _fail(source, "context_tokens",
                        f"{max(values)} context tokens + max_new_tokens {max_new_tokens} exceed max_model_len {limit} "
                        f"of engine {e}; the largest context that fits is {max(limit - max_new_tokens, 0)} tokens: "
                        f"lower it, or raise max_model_len (at most the target's max_position_embeddings)")
    return sorted(values)


def _parse_turns(source: str, merged: dict[str, Any], datasets: list[DatasetEntry], methods: list[str],
                 context_tokens: list[int] | None) -> list[int] | None:
    """The turns to measure: distinct values of TURNS; turn 2 only on two-turn datasets, with a baseline to write the
    first answers, and not with a context axis."""
    if merged.get("turns") is None:
        return None
    values = _as_list(merged["turns"])
    if not values or any(isinstance(t, bool) or t not in TURNS for t in values):
        raise _fail(source, "turns", f"expected {TURNS[0]}, {TURNS[1]} or a list of them, got {merged['turns']!r}")
    _check_distinct(source, "turns", values)
    if 2 in values:
        two_turn = sorted(n for n, spec in DATASETS.items() if spec.second_turn)
        for d in datasets:
            if d.path is not None or d.name not in DATASETS or DATASETS[d.name].second_turn is None:
                raise _fail(source, "turns", f"dataset {d.name!r} has no second turn (two-turn datasets: "
                                             f"{', '.join(two_turn)}); measure it in a matrix of its own")
        if "baseline" not in methods:
            raise _fail(source, "turns", "turn 2 continues the first answer, which the baseline cell generates: add "
                                         "'baseline' to 'methods'")
        if context_tokens is not None:
            raise _fail(source, "turns", "turn 2 and 'context_tokens' do not combine; give them in separate matrices")
    return sorted(values)


def _parse_chat_template(source: str, merged: dict[str, Any]) -> dict[str, Any] | None:
    """The chat template's keyword arguments: a mapping of names, none that the harness sets itself."""
    value = merged.get("chat_template")
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier() for k in value):
        raise _fail(source, "chat_template", f"expected a mapping of keyword arguments such as "
                                             f"{{enable_thinking: true}}, got {value!r}")
    reserved = sorted(set(value) & set(TEMPLATE_RESERVED))
    if reserved:
        raise _fail(source, "chat_template", f"{', '.join(reserved)}: set by the harness, not a template argument")
    return dict(value)


def check_executor(source: str, executor: Any, engines: list[str]) -> str:
    """The executor, if it exists and can run every engine of the matrix."""
    if executor not in EXECUTORS:
        raise _fail(source, "executor", f"unknown executor {executor!r}; allowed: {', '.join(EXECUTORS)}")
    if executor == "ray" and any(e in catalog.serving() for e in engines):
        raise _fail(source, "executor", f"ray runs engines one request at a time in actors; a serving engine "
                                        f"({', '.join(catalog.serving())}) runs its server on the driver's host: drop "
                                        f"the ray executor for this matrix")
    return executor


def _parse_load(source: str, merged: dict[str, Any], engines: list[str]) -> tuple[list[int], float | None]:
    """The serving load axis: distinct concurrency levels (>= 1) and an optional request rate, only on engines
    that serve (a batch-1 engine takes the default concurrency [1] and no rate)."""
    levels = _as_list(merged.get("concurrency", [1]))
    if not levels:
        raise _fail(source, "concurrency", "empty; give an int >= 1 or a list of them")
    for c in levels:
        _check_int(source, "concurrency", c, 1)
    if len(set(levels)) != len(levels):
        raise _fail(source, "concurrency", f"lists a level twice: {levels}")
    rate = merged.get("request_rate")
    if rate is not None and (not _finite(rate) or not rate > 0):
        raise _fail(source, "request_rate", f"expected a finite float > 0 (requests per second), got {rate!r}; "
                                            f"omit it to send every request at once")
    batch = [e for e in engines if e in catalog.batch()]
    for key, used in (("concurrency", levels != [1]), ("request_rate", rate is not None)):
        if used and batch:
            raise _fail(source, key, f"engine {', '.join(batch)} runs one prompt at a time and cannot serve a "
                                     f"load; use engine {' or '.join(catalog.serving())}, or drop '{key}'")
    return [int(c) for c in levels], None if rate is None else float(rate)


def _check_engine_options(source: str, engines: list[str], options: dict[str, Any]) -> None:
    """Each shared option must be one every engine of the matrix accepts, and each engine's sub-mapping its own
    (benchmarks.core.engine_options: data, so no engine is imported)."""
    shared = [key for key in options if key not in catalog.ENGINES]
    for e in engines:
        row = catalog.engine(e)
        known = row.options()
        own = [e, row.serves] if row.serves else [e]  # a server takes its engine's options too
        for key, where in [(k, "engine_options") for k in shared] + [(k, f"engine_options.{o}") for o in own
                                                                      for k in options.get(o) or {}]:
            if key in known:
                value = (options if where == "engine_options" else options[where.split(".", 1)[1]])[key]
                allowed = row.choices.get(key)
                if allowed is not None and (isinstance(value, bool) != isinstance(allowed[0], bool)
                                            or value not in allowed):
                    raise _fail(source, where, f"{key}: {value!r} is not a value the {e} engine takes; allowed: "
                                               f"{', '.join(map(str, allowed))}")
                continue
            close = difflib.get_close_matches(key, sorted(known), n=3)
            allowed = (f"did you mean {', '.join(close)}?" if close
                       else f"{e} accepts {', '.join(sorted(known))}" if len(known) <= 12 else f"see {e}'s engine "
                       f"arguments")
            scope = (f"a shared option goes to every engine of the matrix ({', '.join(engines)}): put it under "
                     f"'engine_options: {{<engine>: {{{key}: ...}}}}' for the engine that takes it, or drop it; "
                     if where == "engine_options" else "")
            raise _fail(source, where, f"{key!r} is not an option of the {e} engine; {scope}{allowed}")


def max_model_lens(engines: list[str], options: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each max_model_len a matrix sets (shared, or an engine's own), with where it is set."""
    found = [("engine_options", options.get("max_model_len"))] + [
        (f"engine_options.{e}", (options.get(e) or {}).get("max_model_len")) for e in engines]
    return [(where, value) for where, value in found if value is not None]


def _check_lengths(source: str, engines: list[str], options: dict[str, Any], max_new_tokens: int) -> None:
    """max_model_len, shared or an engine's own, is an int that leaves room for a prompt beside max_new_tokens."""
    for where, value in max_model_lens(engines, options):
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise _fail(source, where, f"max_model_len: expected an int >= 2 (prompt + output tokens), got {value!r}")
        if max_new_tokens >= value:
            raise _fail(source, where, f"max_model_len {value} leaves no room for a prompt beside max_new_tokens "
                                       f"{max_new_tokens}; raise max_model_len or lower max_new_tokens")


def parse_resources(source: str, value: Any) -> dict[str, float]:
    """A cell's Ray resources: a non-empty mapping of resource name (CPU, GPU, TPU, memory or a custom one) to an
    amount > 0."""
    if not isinstance(value, dict) or not value:
        raise _fail(source, "resources", f"expected a mapping such as {{TPU: 4}} or {{GPU: 1}}, got {value!r}")
    for key, amount in value.items():
        if not isinstance(key, str) or not _finite(amount) or amount <= 0:
            raise _fail(source, "resources", f"{key!r}: {amount!r}: expected a resource name and an amount > 0")
    return {key: float(amount) for key, amount in value.items()}


def in_worker(matrix: Matrix, engine: str) -> bool:
    """Whether a cell of `engine` runs in its own worker process (else in the runner's process)."""
    return matrix.workers or (matrix.interleave and catalog.engine(engine).worker)


def interleave_problem(matrix: Matrix, engines: list[str], platform: str) -> str | None:
    """Why the cells (`engines`: one entry per cell) cannot be loaded side by side on `platform`, or None.

    A TPU is owned by one process, so there only cells that share the runner's process (JAX) may interleave. A GPU
    is shared, but each vLLM engine takes `gpu_memory_utilization` of its memory (vLLM's default 0.9), so n engines
    need at most 1/n each; the JAX engine allocates on demand (XLA_PYTHON_CLIENT_PREALLOCATE=false unless set).
    """
    if not matrix.interleave or len(engines) < 2:
        return None
    workers = sum(in_worker(matrix, e) for e in engines)
    processes = workers + (workers < len(engines))
    where = f"{matrix.source}: 'interleave'"
    if platform == "tpu" and processes > 1:
        return (f"{where}: a TPU is owned by one process, but these {len(engines)} cells would need {processes} "
                f"({workers} in worker processes); drop 'interleave' (and 'workers') so that cells run one after "
                f"another, or use engine: jax")
    row = next((r for r in map(catalog.engine, engines) if r.gpu_share), None)  # an engine that reserves a share
    if platform == "gpu" and row is not None and processes > 1:
        option = row.gpu_share
        share = {**matrix.engine_options, **(matrix.engine_options.get(row.name) or {})}.get(option)
        if share is None or share * processes > 1.0:
            return (f"{where}: {processes} processes share the GPU, and each vLLM engine takes {option}="
                    f"{share if share is not None else '0.9 (the vLLM default)'} of it; set engine_options: "
                    f"{{{row.name}: {{{option}: {int(100 / processes) / 100:.2f}}}}} or less, "
                    f"or drop 'interleave'")
    return None


def _draft_block_size(ref: str | None) -> int | None:
    """block_size from a local DFlash draft's config.json, when the draft is on disk."""
    if not ref:
        return None
    cfg = Path(resolve_model_ref(ref)) / "config.json"
    try:
        data = json.loads(cfg.read_bytes().decode("utf-8"))
    except (OSError, ValueError):  # not on disk, or not a config: the input check names it
        return None
    return data.get("block_size") if isinstance(data, dict) else None


def _parse_k(source: str, value: Any, spec_methods: list[str]) -> dict[str, list[int]]:
    if isinstance(value, dict):
        for m in value:
            if m not in SPEC_METHODS:
                raise _fail(source, "k", f"unknown method {m!r} in the K mapping; allowed: {', '.join(SPEC_METHODS)}")
        missing = [m for m in spec_methods if m not in value]
        if missing:
            raise _fail(source, "k", f"no K given for {', '.join(missing)}")
        per_method = {m: _as_list(value[m]) for m in spec_methods}
    else:
        per_method = {m: _as_list(value) for m in spec_methods}
    for m, ks in per_method.items():
        if not ks:
            raise _fail(source, "k", f"no K given for {m}; give an int >= 1 or a list of them")
        for kk in ks:
            _check_int(source, "k", kk, 1)
        _check_distinct(source, "k", ks, f" for {m}")
    return per_method


def _parse_dataset(source: str, entry: Any, base_dir: Path | None) -> DatasetEntry:
    if isinstance(entry, str):
        name, path = entry, None
    elif isinstance(entry, dict) and set(entry) <= {"name", "path"} and "name" in entry:
        name, path = str(entry["name"]), entry.get("path")
    else:
        raise _fail(source, "datasets", f"entry {entry!r} must be a name or a mapping {{name, path}}")
    check_name(source, "datasets", name)
    if name not in DATASETS and path is None:
        raise _fail(source, "datasets", f"unknown dataset {name!r}; choose from {', '.join(sorted(DATASETS))}, "
                                        f"or give {{name: {name}, path: prompts.jsonl}}")
    if path is not None and "://" in str(path):
        shown = re.sub(r"(\w+://)[^/@\s]+@", r"\1***@", str(path))
        raise _fail(source, "datasets", f"{name}: path {shown} is a URL; give a local JSONL file (download it first)")
    if path is not None and base_dir is not None and not Path(str(path)).expanduser().is_absolute():
        path = os.path.normpath(base_dir / str(path))
    return DatasetEntry(name=name, path=str(path) if path is not None else None)
