"""A matrix's keys, declared once, and the validated `Matrix` they fill.

Each `Key` says what it takes, its default, one line of documentation, whether it is part of the run identity (what
changes a measurement, `benchmarks.core.matrix.run_id_for`) and which `make bench` variable and `bench` option set
it. Parsing (`benchmarks.core.config`), the unknown-key error, presets, the run id and the key table of
docs/matrices.md (`key_table`, checked by tests/core/test_matrix_schema.py) all read this table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.core import catalog
from benchmarks.core.cells import METHODS
from benchmarks.core.dataset_registry import DATASETS
from benchmarks.core.numbers import MISSING

REQUEST_TIMEOUT_S = 600.0
LOAD_TIMEOUT_S = 1800.0
EXECUTORS = ("local", "ray")
# What one cell's actor asks of a Ray cluster by default, per platform (benchmarks.core.provenance.detect_platform).
DEFAULT_RESOURCES: dict[str, dict[str, float]] = {"tpu": {"TPU": 4}, "gpu": {"GPU": 1}, "cpu": {"CPU": 1}}
# The lowest temperature above 0 that samples as asked (docs/matrices.md, "Temperatures and seeds"): vLLM raises any
# lower one to it, and a float32 softmax of logits/T below it is greedy but for near ties, then inf/nan.
MIN_TEMPERATURE = 0.01
# The largest seed: seeds are uint32 in the JAX engine's PRNG keys, and the harness adds offsets of up to 2^31 to it
# (per arm, engine and prompt row), which must stay in range.
MAX_SEED = 2**31 - 1


@dataclass(frozen=True)
class Key:
    """One matrix key. `default` is the value an unset key takes (None: none, or the one `shown` describes)."""

    name: str
    takes: str  # the values it accepts, as the docs say them
    doc: str  # what it does
    default: Any = None
    shown: str | None = None  # the default in words, where it is not a plain value
    identity: bool = False  # part of the run identity: a change measures something else
    fills: bool = True  # whether it fills a Matrix field
    field: str = ""  # that field, where it is not named as the key
    make: str | None = None  # the `make bench` variable that sets it
    bench: str | None = None  # the `bench` option that sets it

    @property
    def attr(self) -> str | None:
        """The Matrix field it fills, if any."""
        return (self.field or self.name) if self.fills else None

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


def _serving() -> str:
    return f"engines {', '.join(catalog.serving())} only"


KEYS: tuple[Key, ...] = (
    Key("name", "a safe name (letters, digits, '.', '_', '-')", "a short name for the run; the run folder is "
        "`<name>-<8 hex>`", shown="the file's stem"),
    Key("description", "text", "free text; not part of the run identity", fills=False),
    Key("preset", "a file stem under configs/presets/", "supplies target, drafts and engine options",
        fills=False, make="PRESET", bench="--preset"),
    Key("engine", f"one of {', '.join(catalog.ENGINES)} or a list of them", "the engines whose cells run",
        default=catalog.DEFAULT_ENGINE, identity=True, field="engines", make="ENGINE", bench="--engine"),
    Key("target", "HF id or local folder", "the target model", shown="the preset's", identity=True),
    Key("drafts", "mapping method -> HF id or local folder", "each method's draft model", default={},
        shown="the preset's", identity=True),
    Key("methods", f"list drawn from {', '.join(METHODS)}", "the methods every engine runs where it can",
        default=["baseline", "dflash"], identity=True, make="METHODS", bench="--methods"),
    Key("k", "int, list of ints, or mapping method -> int/list", "speculative tokens per step", default=15,
        identity=True, make="K", bench="--k"),
    Key("datasets", f"list of names from {', '.join(sorted(DATASETS))} or mappings {{name, path}} for a local JSONL",
        "the prompts' sources; a relative path is read from the matrix file's folder", shown="required",
        identity=True, make="DATASET", bench="--dataset"),
    Key("temperature", f"0 or a float >= {MIN_TEMPERATURE:g}, or a list of them", "sampling temperatures",
        default=0.0, identity=True, field="temperatures", make="TEMPERATURE", bench="--temperature"),
    Key("max_new_tokens", "int >= 1", "tokens generated per prompt", default=256, identity=True,
        make="MAX_NEW_TOKENS", bench="--max-new-tokens"),
    Key("num_prompts", "int >= 1", "measured prompts per dataset", default=8, identity=True, make="N",
        bench="--n"),
    Key("warmup_prompts", "int >= 0", "extra prompts run first and excluded from every figure", default=1,
        identity=True),
    Key("seed", f"int in 0..{MAX_SEED}", "prompt subset and sampling", default=0, identity=True, bench="--seed"),
    Key("engine_options", "mapping", "passed to every engine (max_model_len, dtype, ...), with per-engine "
        "sub-mappings 'vllm: {enforce_eager, tensor_parallel_size, ...}' and 'jax: {breakdown, ...}'", default={},
        identity=True),
    Key("block_size", "int >= 2", "the DFlash draft's block size", shown="read from a local draft's config.json",
        identity=True),
    Key("interleave", "bool", "load every cell at once and run them prompt by prompt in turn, so that a host whose "
        "speed drifts slows every cell alike; costs memory for all the cells' models at once (vLLM cells each run in "
        "their own worker process)", default=False, identity=True),
    Key("drift_prompts", "int >= 0", "when cells run one after another, the baseline is measured again on this many "
        "measured prompts (evenly spaced, at most num_prompts) after its speculative cells, and a speedup is flagged "
        "when the baseline's drift is real (its CI over these prompts excludes 0) and moves the speedup out of its "
        "own CI; fewer than 2 give no drift CI and no flag; 0 turns it off", default=8, identity=True),
    Key("concurrency", "int >= 1 or a list of distinct ones", f"requests in flight at once against a server; "
        f"{_serving()}", default=[1], identity=True),
    Key("request_rate", "float > 0", f"requests per second (Poisson arrivals) under the concurrency cap; "
        f"{_serving()}", shown="all at once", identity=True),
    Key("batch_size", "int >= 1 or a list of distinct ones", f"requests decoded together as one static batch "
        f"(consecutive measured prompts in the run's prompt order, chunks of B; each B a cell of its own); engines "
        f"{', '.join(catalog.batching())} only (a server's load is 'concurrency')", shown="1", identity=True),
    Key("executor", f"one of {', '.join(EXECUTORS)}", "where engines run; ray makes each cell an actor on the Ray "
        "cluster at RAY_ADDRESS (else a local Ray) and runs groups of cells concurrently", default="local",
        make="EXECUTOR", bench="--executor"),
    Key("resources", "mapping Ray resource -> amount", "what one cell's actor needs (executor ray)",
        shown=", ".join(f"{{{', '.join(f'{r}: {n}' for r, n in need.items())}}} on {platform}"
                        for platform, need in DEFAULT_RESOURCES.items())),
    Key("workers", "bool", "run every cell's engine in its own worker process (a crash or hang then fails only that "
        "cell's units); vLLM cells of an interleaved matrix always do", default=False),
    Key("request_timeout_s", "number > 0", "a worker's time limit per request", default=REQUEST_TIMEOUT_S,),
    Key("load_timeout_s", "number > 0", "a worker's time limit to start and load its engine", default=LOAD_TIMEOUT_S,),
    Key("context_tokens", "int >= 0 or a list of distinct ones", "each prompt is preceded by other rows of its "
        "dataset with their reference answers (many-shot chat turns) until it holds at least this many tokens; each "
        "value is a workload of its own (units `<dataset>@ctx<N>`); N + max_new_tokens must fit max_model_len",
        shown="the prompts as they are", identity=True),
    Key("turns", "1, 2 or [1, 2]", "the turns of a two-turn dataset (mt-bench) to measure; turn 2 sends the "
        "conversation after the first answer, which the first baseline cell generates once (greedy, untimed; cached "
        "in the run folder's turns/)", shown="1", identity=True),
    Key("chat_template", "mapping of keyword arguments", "for the target tokenizer's chat template, e.g. "
        "{enable_thinking: true}; recorded in the manifest and report.md", shown="{enable_thinking: false}",
        identity=True),
)
KEY: dict[str, Key] = {k.name: k for k in KEYS}
MATRIX_KEYS = tuple(KEY)
# A preset supplies models and defaults; any matrix key but these may appear in one.
PRESET_KEYS = tuple(k for k in MATRIX_KEYS if k not in ("name", "preset", "datasets"))
IDENTITY_FIELDS = tuple(k.attr for k in KEYS if k.identity and k.attr)


def key_table() -> str:
    """The key table of docs/matrices.md, as Markdown."""
    rows = [f"| `{k.name}` | {k.takes} | {k.default_text()} | {'yes' if k.identity else 'no'} | "
            + (f"`{k.make}=` (`{k.bench}`)" if k.make else f"`bench {k.bench}`" if k.bench else MISSING)
            + f" | {k.doc} |" for k in KEYS]
    head = ["| key | takes | default | run id | `make bench` | what it does |", "|---|---|---|---|---|---|"]
    return "\n".join(head + rows) + "\n"


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    path: str | None = None  # a local JSONL file; None means the registry's source


@dataclass
class Matrix:
    """A validated matrix: everything needed to expand into cells (one field per declared key that fills one, its
    file and its mapping as given)."""

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
    engine_options: dict[str, Any]
    block_size: int | None
    interleave: bool
    drift_prompts: int
    executor: str
    resources: dict[str, float] | None  # None: DEFAULT_RESOURCES of the platform the run starts on
    workers: bool
    request_timeout_s: float
    load_timeout_s: float
    raw: dict[str, Any]
    concurrency: list[int]
    request_rate: float | None
    context_tokens: list[int] | None  # None: the prompts as they are
    turns: list[int] | None  # None: the first turn only
    chat_template: dict[str, Any] | None  # None: chat_template.DEFAULT_TEMPLATE
    batch_size: list[int] | None  # None: batch size 1 only
