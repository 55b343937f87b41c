"""A resolved matrix cell: one engine instance to build, named by its content hash."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeAlias, TypeGuard

METHODS = ("baseline", "dflash", "eagle3", "ngram")
SPEC_METHODS = tuple(m for m in METHODS if m != "baseline")
DRAFT_METHODS = ("dflash", "eagle3")  # the methods that load a draft model
CELL_FIELDS = ("engine", "target", "method", "draft", "k", "temperature", "max_new_tokens", "seed")  # required
# Bounds of a cell read from a file, beyond any run: K and the batch (2^16), tokens (2^24), a seed (2^31 - 1)
MAX_K, MAX_TOKENS, MAX_SEED = 1 << 16, 1 << 24, 2**31 - 1
# An engine option's value as a matrix gives it (YAML): a scalar, or a list or mapping of them (vLLM's engine
# arguments, a K schedule passed whole); a matrix's per-engine sub-mappings are values of its engine_options too.
OptionValue: TypeAlias = int | float | str | bool | None | list["OptionValue"] | dict[str, "OptionValue"]
CellOptions: TypeAlias = dict[str, OptionValue]


def cell_label(method: str, k: int | None) -> str:
    """A cell's name in records and reports: "baseline", else method-kK (dflash-k15)."""
    return "baseline" if method == "baseline" else f"{method}-k{k}"


@dataclass(frozen=True)
class Cell:
    """One engine instance to build: (engine, target, method, draft, K) plus the sampling budget.

    Datasets are not part of a cell: one loaded engine serves every dataset of the matrix. `weights` identifies the
    content of the model files the cell loads (benchmarks.hardware.provenance.weights_id), so new weights get a new
    cell id.
    `batch_size` is the static batch its prompts are decoded in (an engine argument: vLLM's max_num_seqs), so each
    batch size is a cell of its own.
    """

    engine: str
    target: str
    method: str
    draft: str | None
    k: int
    temperature: float
    max_new_tokens: int
    seed: int
    engine_options: CellOptions = field(default_factory=dict)
    weights: str = ""
    batch_size: int = 1

    @property
    def cell_id(self) -> str:
        """Content hash: the same settings and model files always give the same id, so reruns resume."""
        fields = asdict(self)
        if not fields["weights"]:  # a cell whose files are not identified keeps the id it had before they were
            del fields["weights"]
        if fields["batch_size"] == 1:  # a batch-1 cell keeps the id it had before batches existed
            del fields["batch_size"]
        blob = json.dumps(fields, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @classmethod
    def from_json(cls, value: Any, where: str) -> "Cell":
        """A cell as a manifest holds it (`dataclasses.asdict`; `weights` and `batch_size` absent in older runs);
        ValueError naming `where` and the field when it does not hold one."""
        if not isinstance(value, dict):
            raise ValueError(f"{where}: a cell is a mapping of its fields, not {type(value).__name__}")
        missing = [f for f in CELL_FIELDS if f not in value]
        if missing:
            raise ValueError(f"{where}: the cell lacks {', '.join(missing)}")
        cell = cls(**{f: value[f] for f in (*CELL_FIELDS, "engine_options", "weights", "batch_size") if f in value})
        problem = cell._problem()
        if problem:
            raise ValueError(f"{where}: {problem}")
        return cell

    def _problem(self) -> str | None:
        """What is wrong with a cell read from a file, or None."""
        def is_int(x: Any, low: int, high: int) -> bool:
            return isinstance(x, int) and not isinstance(x, bool) and low <= x <= high
        checks = [
            (isinstance(self.engine, str) and isinstance(self.target, str), "engine and target must be text"),
            (self.method in METHODS, f"method {self.method!r} is not one of {', '.join(METHODS)}"),
            (self.draft is None or isinstance(self.draft, str), f"draft {self.draft!r} is not text or null"),
            (is_int(self.k, 0, MAX_K), f"k {self.k!r:.40} is not an int in 0..{MAX_K}"),
            (isinstance(self.temperature, (int, float)) and not isinstance(self.temperature, bool)
             and 0 <= self.temperature < float("inf"), f"temperature {self.temperature!r:.40} is not a number >= 0"),
            (is_int(self.max_new_tokens, 1, MAX_TOKENS),
             f"max_new_tokens {self.max_new_tokens!r:.40} is not an int in 1..{MAX_TOKENS}"),
            (is_int(self.seed, 0, MAX_SEED), f"seed {self.seed!r:.40} is not an int in 0..{MAX_SEED}"),
            (isinstance(self.engine_options, dict), "engine_options is not a mapping"),
            (isinstance(self.weights, str), "weights is not text"),
            (is_int(self.batch_size, 1, MAX_K), f"batch_size {self.batch_size!r:.40} is not an int in 1..{MAX_K}"),
        ]
        return next((why for ok, why in checks if not ok), None)

    @property
    def label(self) -> str:
        return cell_label(self.method, self.k)


def int_option(options: Mapping[str, OptionValue], key: str, default: int | None = None) -> int:
    """`int()` of an option that holds a number (or its text), `default` where it is unset; TypeError on any other
    value."""
    value = options.get(key, default)
    if isinstance(value, (int, float, str)):
        return int(value)
    raise TypeError(f"engine option {key}: {value!r:.40} is not a number")


def k_ranges(value: OptionValue) -> list[list[int]]:
    """A K schedule that a cell's options pass to its engine whole, [[first B, last B, K], ...] (as
    benchmarks.config.matrix_expand writes it); [] for none. ValueError on any other value."""
    if not value:
        return []
    if _is_k_ranges(value):
        return value
    raise ValueError(f"{value!r:.60} is not a K schedule [[first B, last B, K], ...]")


def _is_k_ranges(value: OptionValue) -> TypeGuard[list[list[int]]]:
    return isinstance(value, list) and all(
        isinstance(r, list) and len(r) == 3 and all(isinstance(x, int) for x in r) for r in value)


def has_batch_one(cell: Cell, cells: Iterable[Cell], scheduled: bool = False) -> bool:
    """Whether `cells` hold the batch-1 cell whose verdicts (greedy identity, the distribution check) stand for
    static-batch cell `cell`: the same engine, method, K and temperature; for a method whose K is a schedule over
    batch sizes (`scheduled`), its batch-1 cell whatever K it runs there."""
    keys = ("engine", "method", "temperature") if scheduled else ("engine", "method", "k", "temperature")
    return any(c.batch_size == 1 and all(getattr(c, k) == getattr(cell, k) for k in keys) for c in cells)
