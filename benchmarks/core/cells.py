"""A resolved matrix cell: one engine instance to build, named by its content hash; its speculation shape (a fixed
K, a K schedule over batch sizes, or a draft tree's node budget)."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeAlias, TypeGuard

METHODS = ("baseline", "dflash", "eagle3", "ngram", "ddtree")  # a new method goes last: engine seeds index them
SPEC_METHODS = tuple(m for m in METHODS if m != "baseline")
DRAFT_METHODS = ("dflash", "eagle3", "ddtree")  # the methods that load a draft model
TREE_METHODS = ("ddtree",)  # the methods that verify a draft tree under a node budget (no K)
CELL_FIELDS = ("engine", "target", "method", "draft", "k", "temperature", "max_new_tokens", "seed")  # required
# Bounds of a cell read from a file, beyond any run: K and the batch (2^16), tokens (2^24), a seed (2^31 - 1)
MAX_K, MAX_TOKENS, MAX_SEED = 1 << 16, 1 << 24, 2**31 - 1
MAX_TREE_BUDGET = 1024  # a draft tree's node budget is 1..MAX_TREE_BUDGET
# The engine option under which manifests written before cells had a shape held a K schedule passed whole (vLLM's
# name); the cell id of such a cell still hashes its ranges there.
LEGACY_SCHEDULE_OPTION = "num_speculative_tokens_per_batch_size"
# An engine option's value as a matrix gives it (YAML): a scalar, or a list or mapping of them (vLLM's engine
# arguments); a matrix's per-engine sub-mappings are values of its engine_options too.
OptionValue: TypeAlias = int | float | str | bool | None | list["OptionValue"] | dict[str, "OptionValue"]
CellOptions: TypeAlias = dict[str, OptionValue]
KRange: TypeAlias = tuple[int, int, int]  # (first B, last B, K)


@dataclass(frozen=True)
class KSchedule:
    """A chain cell's K read from a K schedule at its batch size. `ranges`: the schedule as (first B, last B, K),
    closed at the cell's batch size; `whole`: its engine takes the ranges whole and runs, at each step, the K of the
    number of requests running (vLLM), so the tail of a batch runs the K of fewer; else every step runs the cell's K."""

    ranges: tuple[KRange, ...]
    whole: bool = False


@dataclass(frozen=True)
class TreeBudget:
    """A tree cell's node budget: draft-tree nodes verified per step besides the root (1..MAX_TREE_BUDGET);
    `scheduled`: read from a budget schedule at the cell's batch size."""

    budget: int
    scheduled: bool = False


# How a speculative cell drafts: None is the fixed K of `Cell.k` (or no speculation, for the baseline).
Shape: TypeAlias = KSchedule | TreeBudget | None


def cell_label(method: str, k: int | None, tree_budget: int = 0) -> str:
    """A cell's name in records and reports: "baseline", method-bB for a tree (ddtree-b64), else method-kK
    (dflash-k15)."""
    if method == "baseline":
        return "baseline"
    return f"{method}-b{tree_budget}" if method in TREE_METHODS else f"{method}-k{k}"


@dataclass(frozen=True)
class Cell:
    """One engine instance to build: (engine, target, method, draft, K) plus the sampling budget.

    Datasets are not part of a cell: one loaded engine serves every dataset of the matrix. `weights` identifies the
    content of the model files the cell loads (benchmarks.hardware.provenance.weights_id), so new weights get a new
    cell id.
    `batch_size` is the static batch its prompts are decoded in (an engine argument: vLLM's max_num_seqs), so each
    batch size is a cell of its own.
    `k` is the K a chain cell drafts (0 for the baseline and a tree cell); `shape` says where it came from: None for
    a fixed K, a KSchedule for a K schedule's, a TreeBudget for a tree method's node budget. Each engine maps the
    shape to its own arguments.
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
    shape: Shape = None

    @property
    def tree_budget(self) -> int:
        """The draft tree's node budget; 0 unless the cell verifies a tree."""
        return self.shape.budget if isinstance(self.shape, TreeBudget) else 0

    @property
    def scheduled(self) -> bool:
        """Whether the cell's K or tree budget is a schedule's value at its batch size."""
        return isinstance(self.shape, KSchedule) or (isinstance(self.shape, TreeBudget) and self.shape.scheduled)

    @property
    def whole_schedule(self) -> tuple[KRange, ...]:
        """The K schedule the cell's engine takes whole, as (first B, last B, K); () for none."""
        return self.shape.ranges if isinstance(self.shape, KSchedule) and self.shape.whole else ()

    @property
    def cell_id(self) -> str:
        """Content hash: the same settings and model files always give the same id, so reruns resume."""
        fields = asdict(self)
        if not fields["weights"]:  # a cell whose files are not identified keeps the id it had before they were
            del fields["weights"]
        if fields["batch_size"] == 1:  # a batch-1 cell keeps the id it had before batches existed
            del fields["batch_size"]
        del fields["shape"]  # a cell of a fixed K, or of a schedule's K at its B, keeps the id it had before shapes
        if self.whole_schedule:  # ... and one taking its schedule whole, the id of the ranges among its options
            fields["engine_options"] = {**self.engine_options,
                                        LEGACY_SCHEDULE_OPTION: [list(r) for r in self.whole_schedule]}
        if self.tree_budget:
            fields["tree_budget"] = self.tree_budget
        blob = json.dumps(fields, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @classmethod
    def from_json(cls, value: Any, where: str) -> "Cell":
        """A cell as a manifest holds it (`dataclasses.asdict`; `weights`, `batch_size` and `shape` absent in older
        runs, whose K schedule passed whole lies among the engine options); ValueError naming `where` and the field
        when it does not hold one."""
        if not isinstance(value, dict):
            raise ValueError(f"{where}: a cell is a mapping of its fields, not {type(value).__name__}")
        missing = [f for f in CELL_FIELDS if f not in value]
        if missing:
            raise ValueError(f"{where}: the cell lacks {', '.join(missing)}")
        fields = {f: value[f] for f in (*CELL_FIELDS, "engine_options", "weights", "batch_size") if f in value}
        options = fields.get("engine_options")
        try:
            shape = _shape_of(value.get("shape"))
            if isinstance(options, dict) and options.get(LEGACY_SCHEDULE_OPTION) and shape is None:
                fields["engine_options"] = {k: v for k, v in options.items() if k != LEGACY_SCHEDULE_OPTION}
                shape = KSchedule(_ranges_of(options[LEGACY_SCHEDULE_OPTION]), whole=True)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        cell = cls(**fields, shape=shape)
        problem = cell._problem()
        if problem:
            raise ValueError(f"{where}: {problem}")
        return cell

    def _problem(self) -> str | None:
        """What is wrong with a cell read from a file, or None."""
        def is_int(x: Any, low: int, high: int) -> bool:
            return isinstance(x, int) and not isinstance(x, bool) and low <= x <= high
        tree = self.method in TREE_METHODS
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
            (tree == isinstance(self.shape, TreeBudget),
             f"method {self.method} {'needs a' if tree else 'takes no'} tree budget"),
            (not tree or (self.k == 0 and is_int(self.tree_budget, 1, MAX_TREE_BUDGET)),
             f"a {self.method} cell has k 0 and a tree budget in 1..{MAX_TREE_BUDGET}, not k {self.k!r:.20} and "
             f"budget {self.tree_budget!r:.20}"),
            (not isinstance(self.shape, KSchedule) or self.method in SPEC_METHODS,
             f"method {self.method} takes no K schedule"),
        ]
        return next((why for ok, why in checks if not ok), None)

    @property
    def label(self) -> str:
        return cell_label(self.method, self.k, self.tree_budget)


def _shape_of(value: Any) -> Shape:
    """A cell's shape as `dataclasses.asdict` writes it ({"ranges", "whole"} or {"budget", "scheduled"}), or None."""
    if value is None:
        return None
    if isinstance(value, dict) and set(value) == {"ranges", "whole"} and isinstance(value["whole"], bool):
        return KSchedule(_ranges_of(value["ranges"]), value["whole"])
    if isinstance(value, dict) and set(value) == {"budget", "scheduled"} and isinstance(value["scheduled"], bool) \
            and isinstance(value["budget"], int) and not isinstance(value["budget"], bool):
        return TreeBudget(value["budget"], value["scheduled"])
    raise ValueError(f"shape {value!r:.60} is not a K schedule {{ranges, whole}} or a tree budget "
                     f"{{budget, scheduled}}")


def _ranges_of(value: Any) -> tuple[KRange, ...]:
    """A K schedule's ranges read from JSON, [[first B, last B, K], ...]; ValueError on any other value."""
    if _is_k_ranges(value):
        return tuple((r[0], r[1], r[2]) for r in value)
    raise ValueError(f"{value!r:.60} is not a K schedule [[first B, last B, K], ...]")


def _is_k_ranges(value: Any) -> TypeGuard[list[list[int]]]:
    return isinstance(value, list) and bool(value) and all(
        isinstance(r, list) and len(r) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
        for r in value)


def int_option(options: Mapping[str, OptionValue], key: str, default: int | None = None) -> int:
    """`int()` of an option that holds a number (or its text), `default` where it is unset; TypeError on any other
    value."""
    value = options.get(key, default)
    if isinstance(value, (int, float, str)):
        return int(value)
    raise TypeError(f"engine option {key}: {value!r:.40} is not a number")


def has_batch_one(cell: Cell, cells: Iterable[Cell]) -> bool:
    """Whether `cells` hold the batch-1 cell whose verdicts (greedy identity, the distribution check) stand for
    static-batch cell `cell`: the same engine, method, K, tree budget and temperature; for a cell whose K or budget
    is a schedule's, its batch-1 cell whatever K or budget it runs there."""
    keys = ("engine", "method", "temperature") if cell.scheduled else ("engine", "method", "k", "tree_budget",
                                                                         "temperature")
    return any(c.batch_size == 1 and all(getattr(c, k) == getattr(cell, k) for k in keys) for c in cells)
