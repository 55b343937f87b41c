"""Loading and parsing a matrix (its preset merged in): one parser per key or group of keys, run in the order of
`PARSERS`, each raising one ConfigError that names the file, the key and what is allowed. The keys themselves are
declared in `benchmarks.core.matrix_schema`; placement rules in `benchmarks.core.placement`."""
from __future__ import annotations

import copy
import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchmarks.core import catalog, matrix_schema
from benchmarks.core.cells import DRAFT_METHODS, METHODS, SPEC_METHODS
from benchmarks.core.dataset_registry import DATASETS, has_answers
from benchmarks.core.matrix_checks import ConfigError, as_list, check_distinct, check_int, check_name, fail
from benchmarks.core.matrix_schema import KEY, KEYS, MATRIX_KEYS, PRESET_KEYS, DatasetEntry, Matrix
from benchmarks.core.model_files import draft_block_size
from benchmarks.core.numbers import is_finite
from benchmarks.core.paths import PRESETS_DIR
from benchmarks.core.placement import check_executor, check_flag, check_seconds, parse_resources
from benchmarks.core.yaml_files import read_yaml

TURNS = (1, 2)
# Arguments of `apply_chat_template` that the harness sets itself (or that are not keyword arguments of a template).
TEMPLATE_RESERVED = ("conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
                     "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors",
                     "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs")


def load_preset(name: str) -> dict[str, Any]:
    """The keys of configs/presets/<name>.yaml, each one a preset may give."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
        raise ConfigError(f"preset {name!r} not found in {PRESETS_DIR}; known presets: {', '.join(known)}")
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a preset must be a mapping of keys ({', '.join(PRESET_KEYS)})")
    for key in data:
        if key not in PRESET_KEYS:
            raise fail(str(path), key, f"unknown key; allowed: {', '.join(PRESET_KEYS)}")
    return data


def load_matrix(path: str | Path) -> Matrix:
    """The matrix of a YAML file, validated (`parse_matrix`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such matrix file; the shipped ones are in configs/matrices/")
    return parse_matrix(read_yaml(path), str(path), path.parent)


@dataclass
class Parsing:
    """One matrix being parsed: its file, the folder its relative paths start from, its keys merged over its
    preset's, and the values parsed so far (by key)."""

    source: str
    base_dir: Path | None
    merged: dict[str, Any]
    parsed: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        """The key's value as given, else its declared default."""
        return self.merged[key] if key in self.merged else copy.deepcopy(KEY[key].default)


def _merge(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """The matrix's keys over its preset's (engine options merged per engine, drafts per method)."""
    preset = load_preset(check_name(source, "preset", raw["preset"])) if raw.get("preset") else {}
    for key in ("engine_options", "drafts"):
        if not isinstance(raw.get(key) or {}, dict):
            raise fail(source, key, "expected a mapping")
    preset_options, own_options = preset.get("engine_options", {}), raw.get("engine_options") or {}
    merged_options = {**preset_options, **own_options}
    for e in catalog.ENGINES:
        if isinstance(preset_options.get(e), dict) and isinstance(own_options.get(e), dict):
            merged_options[e] = {**preset_options[e], **own_options[e]}
    merged = {**{k: v for k, v in preset.items() if k != "description"}, **raw, "engine_options": merged_options}
    merged["drafts"] = {**preset.get("drafts", {}), **(raw.get("drafts") or {})}
    return merged


def parse_matrix(raw: Any, source: str = "<matrix>", base_dir: Path | None = None) -> Matrix:
    """Validate a matrix mapping (after merging its preset) and return it resolved; relative prompt file paths are
    resolved from `base_dir` (the matrix file's folder), else from the working directory."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a matrix must be a mapping of keys ({', '.join(MATRIX_KEYS)})")
    for key in raw:
        if key not in MATRIX_KEYS:
            close = difflib.get_close_matches(str(key), list(MATRIX_KEYS), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise fail(source, key, f"unknown key; {hint}allowed: {', '.join(MATRIX_KEYS)} (docs/matrices.md says "
                                    f"what each takes)")
    p = Parsing(source, base_dir, _merge(raw, source))
    for keys, parse in PARSERS:
        value = parse(p)
        p.parsed.update(zip(keys, value) if len(keys) > 1 else [(keys[0], value)])
    return Matrix(source=source, raw=raw, **{k.attr: p.parsed[k.name] for k in KEYS if k.attr})


def _engines(p: Parsing) -> list[str]:
    source, merged = p.source, p.merged
    engines = [str(e) for e in as_list(merged.get("engine", catalog.DEFAULT_ENGINE))]
    if not engines:
        raise fail(source, "engine", f"empty; give one of {', '.join(catalog.ENGINES)} or a list of them")
    for e in engines:
        if e not in catalog.ENGINES:
            raise fail(source, "engine", f"unknown engine {e!r}; allowed: {', '.join(catalog.ENGINES)}")
    check_distinct(source, "engine", engines)
    return engines


def _target(p: Parsing) -> str:
    target = p.get("target")
    if not target or not isinstance(target, str):
        raise fail(p.source, "target", "missing; give an HF id or a local folder, or a 'preset'")
    return target


def _methods(p: Parsing) -> list[str]:
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
                                          f"that run it: {', '.join(others)}")
    return list(methods)


def _drafts(p: Parsing) -> dict[str, str]:
    drafts = p.get("drafts")
    for m in p.parsed["methods"]:
        if m in DRAFT_METHODS and not drafts.get(m):
            raise fail(p.source, "drafts", f"method {m!r} needs a draft model: add 'drafts: {{{m}: <HF id or "
                                           f"folder>}}'")
    return {m: str(v) for m, v in drafts.items()}


def _k(p: Parsing) -> dict[str, list[int]]:
    source, value = p.source, p.get("k")
    spec_methods = [m for m in p.parsed["methods"] if m in SPEC_METHODS]
    if isinstance(value, dict):
        for m in value:
            if m not in SPEC_METHODS:
                raise fail(source, "k", f"unknown method {m!r} in the K mapping; allowed: {', '.join(SPEC_METHODS)}")
        missing = [m for m in spec_methods if m not in value]
        if missing:
            raise fail(source, "k", f"no K given for {', '.join(missing)}")
        per_method = {m: as_list(value[m]) for m in spec_methods}
    else:
        per_method = {m: as_list(value) for m in spec_methods}
    for m, ks in per_method.items():
        if not ks:
            raise fail(source, "k", f"no K given for {m}; give an int >= 1 or a list of them")
        for kk in ks:
            check_int(source, "k", kk, 1)
        check_distinct(source, "k", ks, f" for {m}")
    return per_method


def _block_size(p: Parsing) -> int | None:
    """The DFlash block size, given or read from a local draft; every dflash K must fit within it."""
    source = p.source
    block_size = p.merged.get("block_size") or draft_block_size(str(p.merged["drafts"].get("dflash") or "") or None)
    if block_size is not None:
        check_int(source, "block_size", block_size, 2)
        for kk in p.parsed["k"].get("dflash", []):
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


def _datasets(p: Parsing) -> list[DatasetEntry]:
    datasets = [_dataset(p.source, d, p.base_dir) for d in as_list(p.merged.get("datasets", []))]
    if not datasets:
        raise fail(p.source, "datasets", f"missing; choose from {', '.join(sorted(DATASETS))}")
    check_distinct(p.source, "datasets", [d.name for d in datasets])  # a dataset's name keys its prompts and units
    return datasets


def _temperatures(p: Parsing) -> list[float]:
    source, temps = p.source, as_list(p.get("temperature"))
    if not temps:
        raise fail(source, "temperature", "empty; give a float >= 0 or a list of them")
    for t in temps:
        if not is_finite(t) or t < 0:
            infinite = isinstance(t, float) and not is_finite(t)
            raise fail(source, "temperature", f"expected a float >= 0, got {t!r}"
                                              + (" (not a finite number)" if infinite else ""))
        floor = matrix_schema.MIN_TEMPERATURE
        if 0 < t < floor:
            raise fail(source, "temperature", f"{t!r} is above 0 but below {floor:g}, where sampling is greedy but for "
                                              f"near ties and vLLM raises it to {floor:g} (docs/matrices.md, "
                                              f"'Temperatures and seeds'); give 0 for greedy decoding, or a "
                                              f"temperature >= {floor:g}")
    check_distinct(source, "temperature", [float(t) for t in temps])
    return [float(t) for t in temps]


def _engine_options(p: Parsing) -> dict[str, Any]:
    options = p.merged["engine_options"]
    for e in catalog.ENGINES:
        if not isinstance(options.get(e) or {}, dict):
            raise fail(p.source, "engine_options", f"'{e}' must be a mapping of {e}-only options")
    _check_engine_options(p.source, p.parsed["engine"], options)
    return options


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
                    raise fail(source, where, f"{key}: {value!r} is not a value the {e} engine takes; allowed: "
                                              f"{', '.join(map(str, allowed))}")
                continue
            close = difflib.get_close_matches(key, sorted(known), n=3)
            suggest = (f"did you mean {', '.join(close)}?" if close
                       else f"{e} accepts {', '.join(sorted(known))}" if len(known) <= 12 else f"see {e}'s engine "
                       f"arguments")
            scope = (f"a shared option goes to every engine of the matrix ({', '.join(engines)}): put it under "
                     f"'engine_options: {{<engine>: {{{key}: ...}}}}' for the engine that takes it, or drop it; "
                     if where == "engine_options" else "")
            raise fail(source, where, f"{key!r} is not an option of the {e} engine; {scope}{suggest}")


def engine_max_model_len(engine: str, options: dict[str, Any]) -> int | None:
    """The max_model_len a cell of `engine` gets (its own options, the served engine's, the shared ones, the engine's
    default); None where the engine takes the model's own."""
    row = catalog.engine(engine)
    for scope in (options.get(engine) or {}, (options.get(row.serves) or {}) if row.serves else {}, options):
        if "max_model_len" in scope:
            value = scope["max_model_len"]
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    return row.defaults.get("max_model_len")


def max_model_lens(engines: list[str], options: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each max_model_len a matrix sets (shared, or an engine's own), with where it is set."""
    found = [("engine_options", options.get("max_model_len"))] + [
        (f"engine_options.{e}", (options.get(e) or {}).get("max_model_len")) for e in engines]
    return [(where, value) for where, value in found if value is not None]


def _flag(key: str) -> Callable[[Parsing], bool]:
    return lambda p: check_flag(p.source, key, p.get(key), p.parsed["engine"])


def _seconds(key: str) -> Callable[[Parsing], float]:
    return lambda p: check_seconds(p.source, key, p.get(key), KEY[key].default)


def _load(p: Parsing) -> tuple[list[int], float | None]:
    """The serving load axis: distinct concurrency levels (>= 1) and an optional request rate, only on engines
    that serve (a batch-1 engine takes the default concurrency [1] and no rate)."""
    source, levels = p.source, as_list(p.get("concurrency"))
    if not levels:
        raise fail(source, "concurrency", "empty; give an int >= 1 or a list of them")
    for c in levels:
        check_int(source, "concurrency", c, 1)
    if len(set(levels)) != len(levels):
        raise fail(source, "concurrency", f"lists a level twice: {levels}")
    rate = p.get("request_rate")
    if rate is not None and (not is_finite(rate) or not rate > 0):
        raise fail(source, "request_rate", f"expected a finite float > 0 (requests per second), got {rate!r}; "
                                           f"omit it to send every request at once")
    batch = [e for e in p.parsed["engine"] if e in catalog.batch()]
    for key, used in (("concurrency", levels != [1]), ("request_rate", rate is not None)):
        if used and batch:
            raise fail(source, key, f"engine {', '.join(batch)} runs one prompt at a time and cannot serve a "
                                    f"load; use engine {' or '.join(catalog.serving())}, or drop '{key}' (a static "
                                    f"batch of a batch engine is 'batch_size')")
    return [int(c) for c in levels], None if rate is None else float(rate)


def _resources(p: Parsing) -> dict[str, float] | None:
    resources = p.get("resources")
    return parse_resources(p.source, resources) if resources is not None else None


def _name(p: Parsing) -> str:
    # an explicit name must keep to SAFE_NAME; the default, the file's stem, is one path component already
    name = p.merged.get("name")
    return check_name(p.source, "name", name) if name is not None else Path(p.source).stem


def _max_new_tokens(p: Parsing) -> int:
    """max_new_tokens, and every max_model_len an int that leaves room for a prompt beside it."""
    source, engines, options = p.source, p.parsed["engine"], p.parsed["engine_options"]
    max_new_tokens = check_int(source, "max_new_tokens", p.get("max_new_tokens"), 1)
    for where, value in max_model_lens(engines, options):
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise fail(source, where, f"max_model_len: expected an int >= 2 (prompt + output tokens), got {value!r}")
        if max_new_tokens >= value:
            raise fail(source, where, f"max_model_len {value} leaves no room for a prompt beside max_new_tokens "
                                      f"{max_new_tokens}; raise max_model_len or lower max_new_tokens")
    return max_new_tokens


def _distinct_ints(p: Parsing, key: str, minimum: int) -> list[int] | None:
    """A key's int or list of distinct ints >= `minimum`; None where the matrix does not set it."""
    value = p.get(key)
    if value is None:
        return None
    values = as_list(value)
    if not values:
        raise fail(p.source, key, f"empty; give an int >= {minimum} or a list of them")
    for v in values:
        check_int(p.source, key, v, minimum)
    check_distinct(p.source, key, values)
    return values


def _context_tokens(p: Parsing) -> list[int] | None:
    """The context lengths: distinct ints >= 0, on datasets with reference answers, each fitting every engine's
    max_model_len with max_new_tokens."""
    source, values = p.source, _distinct_ints(p, "context_tokens", 0)
    if values is None:
        return None
    for d in p.parsed["datasets"]:
        if not has_answers(d.name, d.path):
            with_answers = sorted(n for n in DATASETS if has_answers(n, None))
            raise fail(source, "context_tokens", f"dataset {d.name!r} has no reference answers to build many-shot "
                                                 f"context from (a local file's rows carry none); datasets with "
                                                 f"them: {', '.join(with_answers)}")
    max_new_tokens = p.parsed["max_new_tokens"]
    for e in p.parsed["engine"]:
        limit = engine_max_model_len(e, p.parsed["engine_options"])
        if limit is not None and max(values) + max_new_tokens > limit:
            raise fail(source, "context_tokens",
                       f"{max(values)} context tokens + max_new_tokens {max_new_tokens} exceed max_model_len {limit} "
                       f"of engine {e}; the largest context that fits is {max(limit - max_new_tokens, 0)} tokens: "
                       f"lower it, or raise max_model_len (at most the target's max_position_embeddings)")
    return sorted(values)


def _turns(p: Parsing) -> list[int] | None:
    """The turns to measure: distinct values of TURNS; turn 2 only on two-turn datasets, with a baseline to write the
    first answers, and not with a context axis."""
    source, value = p.source, p.get("turns")
    if value is None:
        return None
    values = as_list(value)
    if not values or any(isinstance(t, bool) or t not in TURNS for t in values):
        raise fail(source, "turns", f"expected {TURNS[0]}, {TURNS[1]} or a list of them, got {value!r}")
    check_distinct(source, "turns", values)
    if 2 in values:
        two_turn = sorted(n for n, spec in DATASETS.items() if spec.second_turn)
        for d in p.parsed["datasets"]:
            if d.path is not None or d.name not in DATASETS or DATASETS[d.name].second_turn is None:
                raise fail(source, "turns", f"dataset {d.name!r} has no second turn (two-turn datasets: "
                                            f"{', '.join(two_turn)}); measure it in a matrix of its own")
        if "baseline" not in p.parsed["methods"]:
            raise fail(source, "turns", "turn 2 continues the first answer, which the baseline cell generates: add "
                                        "'baseline' to 'methods'")
        if p.parsed["context_tokens"] is not None:
            raise fail(source, "turns", "turn 2 and 'context_tokens' do not combine; give them in separate matrices")
    return sorted(values)


def _chat_template(p: Parsing) -> dict[str, Any] | None:
    """The chat template's keyword arguments: a mapping of names, none that the harness sets itself."""
    value = p.get("chat_template")
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier() for k in value):
        raise fail(p.source, "chat_template", f"expected a mapping of keyword arguments such as "
                                              f"{{enable_thinking: true}}, got {value!r}")
    reserved = sorted(set(value) & set(TEMPLATE_RESERVED))
    if reserved:
        raise fail(p.source, "chat_template", f"{', '.join(reserved)}: set by the harness, not a template argument")
    return dict(value)


def _seed(p: Parsing) -> int:
    """The seed, within the range every engine takes with the harness's offsets added (`MAX_SEED`)."""
    seed, most = check_int(p.source, "seed", p.get("seed"), 0), matrix_schema.MAX_SEED
    if seed > most:
        raise fail(p.source, "seed", f"{seed} is above {most} (2^31 - 1): the engines take uint32 seeds and the "
                                     f"harness adds offsets of up to 2^31 per arm, engine and prompt; give a "
                                     f"smaller seed")
    return seed


def _batch_size(p: Parsing) -> list[int] | None:
    """The static batch sizes: distinct ints >= 1, each within every engine's own limit and the measured prompts, on
    engines that batch only (a server's load is its concurrency), and not beside a vLLM max_num_seqs of the matrix's
    own (the batch size sets it). None for batch size 1 alone, given or not (the run id stays as it was)."""
    source, sizes = p.source, _distinct_ints(p, "batch_size", 1)
    if sizes is None:
        return None
    if sizes == [1]:
        return None
    engines, top = p.parsed["engine"], max(sizes)
    served = [e for e in engines if e in catalog.serving()]
    if served:
        raise fail(source, "batch_size", f"engine {', '.join(served)} serves a load: its requests in flight are "
                                         f"'concurrency', not a static batch; drop 'batch_size', or measure the batch "
                                         f"engines ({', '.join(catalog.batching())}) in a matrix of their own")
    unable = [e for e in engines if e not in catalog.batching()]
    if unable:
        raise fail(source, "batch_size", f"engine {', '.join(unable)} decodes one prompt at a time; engines that "
                                         f"batch: {', '.join(catalog.batching())}")
    for e in engines:
        limit = catalog.engine(e).max_batch
        if limit is not None and top > limit:
            raise fail(source, "batch_size", f"{top} exceeds the {e} engine's largest batch, {limit}; give "
                                             f"batch sizes of at most {limit}")
    if top > p.parsed["num_prompts"]:
        raise fail(source, "batch_size", f"a batch of {top} needs at least {top} measured prompts, and num_prompts "
                                         f"is {p.parsed['num_prompts']}; raise num_prompts or lower the batch size")
    for where, options in [("engine_options", p.parsed["engine_options"])] + [
            (f"engine_options.{e}", p.parsed["engine_options"].get(e) or {}) for e in engines]:
        if "max_num_seqs" in options:
            raise fail(source, where, "max_num_seqs: set by 'batch_size' (each batch size's vLLM engine gets "
                                      "max_num_seqs = B); drop it")
    return sorted(int(b) for b in sizes)


def _int(key: str, minimum: int) -> Callable[[Parsing], int]:
    return lambda p: check_int(p.source, key, p.get(key), minimum)


# Each parser with the keys it fills, in the order they are checked (a parser reads the values parsed before it).
PARSERS: tuple[tuple[tuple[str, ...], Callable[[Parsing], Any]], ...] = (
    (("engine",), _engines),
    (("target",), _target),
    (("methods",), _methods),
    (("drafts",), _drafts),
    (("k",), _k),
    (("block_size",), _block_size),
    (("datasets",), _datasets),
    (("temperature",), _temperatures),
    (("engine_options",), _engine_options),
    (("interleave",), _flag("interleave")),
    (("workers",), _flag("workers")),
    (("request_timeout_s",), _seconds("request_timeout_s")),
    (("load_timeout_s",), _seconds("load_timeout_s")),
    (("concurrency", "request_rate"), _load),
    (("executor",), lambda p: check_executor(p.source, p.get("executor"), p.parsed["engine"])),
    (("resources",), _resources),
    (("name",), _name),
    (("max_new_tokens",), _max_new_tokens),
    (("context_tokens",), _context_tokens),
    (("turns",), _turns),
    (("chat_template",), _chat_template),
    (("num_prompts",), _int("num_prompts", 1)),
    (("warmup_prompts",), _int("warmup_prompts", 0)),
    (("seed",), _seed),
    (("drift_prompts",), _int("drift_prompts", 0)),
    (("batch_size",), _batch_size),
)
