"""A matrix's keys, each declared once on the `Matrix` field it fills, and the tables that follow from them.

A key's declaration (a `Key`, in its field's metadata: `field(metadata=key(...))`) says what it takes, its parser,
its default, one line of documentation, whether it is part of the run identity (what changes a measurement,
`benchmarks.config.matrix_expand.run_id_for`) and which `make bench` variable and `bench` option set it. The keys
that fill no field are declared on `raw`, the mapping as given, which is where they stay. `PARSE_ORDER` says in which
order the parsers run (`PARSERS`, run by `benchmarks.config.matrix_parse`). The unknown-key error, presets, the run
id and the key table of docs/matrices.md (`key_table`, checked by tests/config/test_matrix_schema.py) all read `KEYS`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterator, ParamSpec

from benchmarks.config import engine_option_keys, placement_keys, run_keys, slo_keys, workload_keys
from benchmarks.config.matrix_checks import Parser, at_least
from benchmarks.config.placement_keys import DEFAULT_RESOURCES, EXECUTORS, LOAD_TIMEOUT_S, REQUEST_TIMEOUT_S
from benchmarks.config.run_keys import MAX_SEED, MIN_TEMPERATURE, DatasetEntry
from benchmarks.core.cells import MAX_TREE_BUDGET, METHODS, TREE_METHODS, CellOptions
from benchmarks.core.numbers import MISSING
from benchmarks.data.dataset_registry import DATASETS
from benchmarks.decide.capacity import AXES, BISECT, MODES
from benchmarks.decide.k_schedules import Schedule
from benchmarks.engines import catalog


@dataclass(frozen=True)
class Key:
    """One matrix key. `default` is the value an unset key takes (None: none, or the one `shown` describes)."""

    name: str
    takes: str  # the values it accepts, as the docs say them
    doc: str  # what it does
    parse: Parser | None = None  # its parser (PARSE_ORDER says when it runs)
    parsed_with: str | None = None  # the key whose parser returns this key's value too, after its own
    default: Any = None
    shown: str | None = None  # the default in words, where it is not a plain value
    identity: bool = False  # part of the run identity: a change measures something else
    in_preset: bool = True  # whether a preset may give it
    make: str | None = None  # the `make bench` variable that sets it
    bench: str | None = None  # the `bench` option that sets it
    attr: str | None = None  # the Matrix field it fills (taken from the field that declares it)

    def default_text(self) -> str:
        """The default as docs/matrices.md shows it."""
        if self.shown is not None:
            return self.shown
        value = self.default
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, list):
            return "[" + ", ".join(map(str, value)) + "]"
        return MISSING if value is None else f"{value:g}" if isinstance(value, float) else str(value)


P = ParamSpec("P")


def _as_metadata(declare: Callable[P, Key]) -> Callable[P, dict[str, Key]]:
    """`declare`, its Key returned as a dataclass field's metadata (typed as `declare` is)."""
    def metadata(*args: P.args, **kwargs: P.kwargs) -> dict[str, Key]:
        return {"key": declare(*args, **kwargs)}

    return metadata


# `field(metadata=key(...))` with Key's arguments: the key that fills this Matrix field, declared.
key = _as_metadata(Key)


def holds(*keys: Key) -> dict[str, tuple[Key, ...]]:
    """The metadata of `raw`: the keys that fill no field, kept only in the mapping as given."""
    return {"holds": keys}


def _serving() -> str:
    return f"engines {', '.join(catalog.serving())} only"


def _default_resources() -> str:
    return ", ".join(f"{{{', '.join(f'{r}: {n}' for r, n in need.items())}}} on {platform}"
                     for platform, need in DEFAULT_RESOURCES.items())


@dataclass
class Matrix:
    """A validated matrix: everything needed to expand into cells (one field per declared key that fills one, in the
    order docs/matrices.md lists the keys), its file and its mapping as given."""

    source: str  # the file it was read from, or what stands for one (`bench --dataset <name>`)
    name: str = field(metadata=key(
        "name", "a safe name (letters, digits, '.', '_', '-')", "a short name for the run; the run folder is "
        "`<name>-<8 hex>`", run_keys.name, shown="the file's stem", in_preset=False))
    raw: dict[str, Any] = field(metadata=holds(
        Key("description", "text", "free text; not part of the run identity"),
        Key("preset", "a file stem under configs/presets/", "supplies target, drafts and engine options",
            in_preset=False, make="PRESET", bench="--preset")))
    engines: list[str] = field(metadata=key(
        "engine", f"one of {', '.join(catalog.ENGINES)} or a list of them", "the engines whose cells run",
        run_keys.engines, default=catalog.DEFAULT_ENGINE, identity=True, make="ENGINE", bench="--engine",
        shown=f"{catalog.DEFAULT_ENGINE} ({catalog.ABSENT_DEFAULT} where vLLM is absent)"))
    target: str = field(metadata=key(
        "target", "HF id or local folder", "the target model", run_keys.target, shown="the preset's", identity=True))
    drafts: dict[str, str] = field(metadata=key(
        "drafts", "mapping method -> HF id or local folder", "each method's draft model", run_keys.drafts, default={},
        shown="the preset's", identity=True))
    methods: list[str] = field(metadata=key(
        "methods", f"list drawn from {', '.join(METHODS)}", "the methods every engine runs where it can",
        run_keys.methods, default=["baseline", "dflash"], identity=True, make="METHODS", bench="--methods"))
    k: dict[str, list[int] | Schedule] = field(metadata=key(
        "k", "int, list of ints, a schedule {first B: K, ...} or [[first B, last B, K], ...], or mapping method -> "
        "any of these", "speculative tokens per step; a schedule gives each batch size's cell the K of its range "
        "(none at K = 0 but at B = 1, which runs the largest K as the identity reference; vLLM takes it whole as "
        "num_speculative_tokens_per_batch_size)", run_keys.k,
        default=15, identity=True, make="K", bench="--k"))
    # None: no tree method
    tree_budget: list[int] | Schedule | None = field(metadata=key(
        "tree_budget", f"int in 1..{MAX_TREE_BUDGET}, list of them, or a schedule {{first B: budget, ...}} or "
        f"[[first B, last B, budget], ...]", f"the node budget of {', '.join(TREE_METHODS)}: draft-tree nodes "
        f"verified per step besides the root, one cell per budget; a schedule gives each batch size's cell the "
        f"budget of its range (none at 0 but at B = 1, which runs the largest); required with "
        f"{', '.join(TREE_METHODS)}, refused without", run_keys.tree_budget, shown="none", identity=True))
    datasets: list[DatasetEntry] = field(metadata=key(
        "datasets", f"list of names from {', '.join(sorted(DATASETS))} or mappings {{name, path}} for a local JSONL",
        "the prompts' sources; a relative path is read from the matrix file's folder", run_keys.datasets,
        shown="required", identity=True, in_preset=False, make="DATASET", bench="--dataset"))
    temperatures: list[float] = field(metadata=key(
        "temperature", f"0 or a float >= {MIN_TEMPERATURE:g}, or a list of them", "sampling temperatures",
        run_keys.temperatures, default=0.0, identity=True, make="TEMPERATURE", bench="--temperature"))
    max_new_tokens: int = field(metadata=key(
        "max_new_tokens", "int >= 1", "tokens generated per prompt", run_keys.max_new_tokens, default=256,
        identity=True, make="MAX_NEW_TOKENS", bench="--max-new-tokens"))
    num_prompts: int = field(metadata=key(
        "num_prompts", "int >= 1", "measured prompts per dataset", at_least("num_prompts", 1), default=8,
        identity=True, make="N", bench="--n"))
    warmup_prompts: int = field(metadata=key(
        "warmup_prompts", "int >= 0", "extra prompts run first and excluded from every figure",
        at_least("warmup_prompts", 0), default=1, identity=True))
    seed: int = field(metadata=key(
        "seed", f"int in 0..{MAX_SEED}", "prompt subset and sampling", run_keys.seed, default=0, identity=True,
        bench="--seed"))
    engine_options: CellOptions = field(metadata=key(
        "engine_options", "mapping", "passed to every engine (max_model_len, dtype, ...), with per-engine "
        "sub-mappings 'vllm: {enforce_eager, tensor_parallel_size, ...}' and 'jax: {breakdown, ...}'",
        engine_option_keys.engine_options, default={}, identity=True))
    block_size: int | None = field(metadata=key(
        "block_size", "int >= 2", "the DFlash draft's block size", run_keys.block_size,
        shown="read from a local draft's config.json", identity=True))
    interleave: bool = field(metadata=key(
        "interleave", "bool", "load every cell at once and run them prompt by prompt in turn, so that a host whose "
        "speed drifts slows every cell alike; costs memory for all the cells' models at once (vLLM cells each run in "
        "their own worker process)", placement_keys.flag("interleave"), default=False, identity=True))
    drift_prompts: int = field(metadata=key(
        "drift_prompts", "int >= 0, at most num_prompts", "when cells run one after another, the baseline is measured "
        "again on this many measured prompts (evenly spaced, at most num_prompts) after its speculative cells, and a "
        "speedup is flagged when the baseline's drift is real (its CI over these prompts excludes 0) and moves the "
        "speedup out of its own CI; fewer than 2 give no drift CI and no flag; 0 turns it off", run_keys.drift_prompts,
        default=8, identity=True))
    concurrency: list[int] = field(metadata=key(
        "concurrency", "int >= 1 or a list of distinct ones", f"requests in flight at once against a server; "
        f"{_serving()}", workload_keys.load, default=[1], identity=True))
    request_rate: float | None = field(metadata=key(
        "request_rate", "float > 0", f"requests per second (Poisson arrivals) under the concurrency cap; "
        f"{_serving()}", parsed_with="concurrency", shown="all at once", identity=True))
    # None: batch size 1 only
    batch_size: list[int] | None = field(metadata=key(
        "batch_size", "int >= 1 or a list of distinct ones", f"requests decoded together as one static batch "
        f"(consecutive measured prompts in the run's prompt order, chunks of B; each B a cell of its own); engines "
        f"{', '.join(catalog.batching())} only (a server's load is 'concurrency')", workload_keys.batch_size,
        shown="1", identity=True))
    # None: no capacity search (and the slo_* keys below are None too)
    slo: list[dict[str, float]] | None = field(metadata=key(
        "slo", "mapping p<percentile>_<metric>_ms -> ms (percentile 50, 90, 95 or 99; metric ttft, tpot, itl "
        "or e2el), or a list of them",
        f"a latency target, every threshold met at once (e.g. {slo_keys.EXAMPLE}): each serving cell's capacity "
        f"is searched, the largest load of slo_range that meets it (docs/serving.md); a list searches each; "
        f"{_serving()}", slo_keys.slo, shown="no search"))
    slo_load: str | None = field(metadata=key(
        "slo_load", f"one of {', '.join(AXES)}", "the load a capacity search varies: requests in flight, or requests "
        "per second (Poisson arrivals, every request of a round may be in flight)", parsed_with="slo",
        default="concurrency"))
    slo_range: list[float] | None = field(metadata=key(
        "slo_range", "[low, high]", "the loads a capacity search covers (concurrency: ints >= 1)", parsed_with="slo",
        shown="required with slo"))
    slo_step: float | None = field(metadata=key(
        "slo_step", "number > 0 (int on concurrency)", "the step between the loads of slo_range", parsed_with="slo",
        default=1))
    slo_requests: int | None = field(metadata=key(
        "slo_requests", "int >= 1, at most num_prompts", "requests of one probe round at a load (the next of the "
        "measured prompts each round), at least three waves at every load of slo_range: 3 × the concurrency, or at a "
        "request rate 3 × the rate × the latency the SLO allows a request; an uncertain load gets another round, "
        "pooled, while num_prompts last",
        parsed_with="slo", shown="num_prompts", identity=True))
    slo_search: str | None = field(metadata=key(
        "slo_search", f"{' or '.join(MODES)}", "bisect: the bracketing search; sweep: every load of slo_range",
        parsed_with="slo", default=BISECT))
    executor: str = field(metadata=key(
        "executor", f"one of {', '.join(EXECUTORS)}", "where engines run; ray makes each cell an actor on the Ray "
        "cluster at RAY_ADDRESS (else a local Ray) and runs groups of cells concurrently", placement_keys.executor,
        default="local", make="EXECUTOR", bench="--executor"))
    # None: DEFAULT_RESOURCES of the platform the run starts on
    resources: dict[str, float] | None = field(metadata=key(
        "resources", "mapping Ray resource -> amount", "what one cell's actor needs (executor ray)",
        placement_keys.resources, shown=_default_resources()))
    workers: bool = field(metadata=key(
        "workers", "bool", "run every cell's engine in its own worker process (a crash or hang then fails only that "
        "cell's units); vLLM cells of an interleaved matrix always do", placement_keys.flag("workers"),
        default=False))
    request_timeout_s: float = field(metadata=key(
        "request_timeout_s", "number > 0, at most a week", "a worker's time limit per request",
        placement_keys.seconds("request_timeout_s"), default=REQUEST_TIMEOUT_S))
    load_timeout_s: float = field(metadata=key(
        "load_timeout_s", "number > 0, at most a week", "a worker's time limit to start and load its engine",
        placement_keys.seconds("load_timeout_s"), default=LOAD_TIMEOUT_S))
    # None: the prompts as they are
    context_tokens: list[int] | None = field(metadata=key(
        "context_tokens", "int >= 0 or a list of distinct ones", "each prompt is preceded by other rows of its "
        "dataset with their reference answers (many-shot chat turns) until it holds at least this many tokens; each "
        "value is a workload of its own (units `<dataset>@ctx<N>`); N + max_new_tokens must fit max_model_len",
        workload_keys.context_tokens, shown="the prompts as they are", identity=True))
    # None: the first turn only
    turns: list[int] | None = field(metadata=key(
        "turns", "1, 2 or [1, 2]", "the turns of a two-turn dataset (mt-bench) to measure; turn 2 sends the "
        "conversation after the first answer, which the first baseline cell generates once (greedy, untimed; cached "
        "in the run folder's turns/)", workload_keys.turns, shown="1", identity=True))
    # None: chat_template.DEFAULT_TEMPLATE
    chat_template: dict[str, Any] | None = field(metadata=key(
        "chat_template", "mapping of keyword arguments", "for the target tokenizer's chat template, e.g. "
        "{enable_thinking: true}; recorded in the manifest and report.md", workload_keys.chat_template,
        shown="{enable_thinking: false}", identity=True))


def _declared() -> Iterator[Key]:
    """Every key, in the order of the Matrix fields that declare them."""
    for f in fields(Matrix):
        if "key" in f.metadata:
            yield replace(f.metadata["key"], attr=f.name)
        yield from f.metadata.get("holds", ())


KEYS: tuple[Key, ...] = tuple(_declared())
KEY: dict[str, Key] = {k.name: k for k in KEYS}
MATRIX_KEYS = tuple(KEY)
# A preset supplies models and defaults; any matrix key it may give.
PRESET_KEYS = tuple(k.name for k in KEYS if k.in_preset)
IDENTITY_FIELDS = tuple(k.attr for k in KEYS if k.identity and k.attr)

# The keys whose parsers run, in the order they run: a parser reads the values parsed before it (`Parsing.parsed`).
PARSE_ORDER = ("engine", "target", "methods", "drafts", "k", "tree_budget", "block_size", "datasets", "temperature",
               "engine_options", "interleave", "workers", "request_timeout_s", "load_timeout_s", "concurrency",
               "executor", "resources", "name", "max_new_tokens", "context_tokens", "turns", "chat_template",
               "num_prompts", "warmup_prompts", "seed", "drift_prompts", "batch_size", "slo")


def _parser(name: str) -> tuple[tuple[str, ...], Parser]:
    """Key `name`'s declared parser, with the keys it fills: its own, then those declared `parsed_with` it."""
    parse = KEY[name].parse
    if parse is None:
        raise ValueError(f"matrix key {name!r} has no parser of its own to run")
    return (name, *(k.name for k in KEYS if k.parsed_with == name)), parse


# Each parser with the keys it fills, in PARSE_ORDER.
PARSERS = tuple(map(_parser, PARSE_ORDER))


def key_table() -> str:
    """The key table of docs/matrices.md, as Markdown."""
    rows = [f"| `{k.name}` | {k.takes} | {k.default_text()} | {'yes' if k.identity else 'no'} | "
            + (f"`{k.make}=` (`{k.bench}`)" if k.make else f"`bench {k.bench}`" if k.bench else MISSING)
            + f" | {k.doc} |" for k in KEYS]
    head = ["| key | takes | default | run id | `make bench` | what it does |", "|---|---|---|---|---|---|"]
    return "\n".join(head + rows) + "\n"


# What a manifest written before a key existed means by its absence, where the key's declared default is not in
# the parsed form (the rest take their declared default).
_ABSENT: dict[str, Any] = {"source": "", "name": "", "raw": {}, "engines": [], "target": "", "k": {}, "datasets": [],
                           "temperatures": [], "methods": []}


def matrix_of_manifest(config: dict[str, Any]) -> Matrix:
    """The Matrix a run's manifest.json `config` holds (`dataclasses.asdict` of the one the run took): its nested
    values as their types again (each K schedule a `Schedule`, each dataset a `DatasetEntry`), a key the run's harness
    did not have yet at what its absence means. Values are taken as written: the run was validated when it ran."""
    values: dict[str, Any] = {}
    for f in fields(Matrix):
        if f.name in config:
            values[f.name] = config[f.name]
        elif f.name in _ABSENT:
            values[f.name] = copy.deepcopy(_ABSENT[f.name])
        else:
            values[f.name] = copy.deepcopy(f.metadata["key"].default)
    values["k"] = {method: Schedule.from_json(v) if isinstance(v, dict) else v for method, v in values["k"].items()}
    if isinstance(values["tree_budget"], dict):
        values["tree_budget"] = Schedule.from_json(values["tree_budget"])
    values["datasets"] = [DatasetEntry(**d) if isinstance(d, dict) else DatasetEntry(str(d))
                          for d in values["datasets"]]
    return Matrix(**values)
