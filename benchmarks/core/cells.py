"""A resolved matrix cell: one engine instance to build, named by its content hash."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

METHODS = ("baseline", "dflash", "eagle3", "ngram")
SPEC_METHODS = tuple(m for m in METHODS if m != "baseline")
DRAFT_METHODS = ("dflash", "eagle3")  # the methods that load a draft model


def cell_label(method: str, k: int | None) -> str:
    """A cell's name in records and reports: "baseline", else method-kK (dflash-k15)."""
    return "baseline" if method == "baseline" else f"{method}-k{k}"


@dataclass(frozen=True)
class Cell:
    """One engine instance to build: (engine, target, method, draft, K) plus the sampling budget.

    Datasets are not part of a cell: one loaded engine serves every dataset of the matrix. `weights` identifies the
    content of the model files the cell loads (benchmarks.core.provenance.weights_id), so new weights get a new cell id.
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
    engine_options: dict[str, Any] = field(default_factory=dict)
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

    @property
    def label(self) -> str:
        return cell_label(self.method, self.k)
