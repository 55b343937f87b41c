"""A scripted serving engine that joins the harness through one catalog row (tests/run/test_catalog.py): it serves
the scripted batch engine of tests/catalog_engine.py behind no HTTP at all. Every request of a level answers the same
text; a baseline token takes 10 ms and a dflash token 4 ms, with 2 of K drafts accepted per step; C requests run at
once, so a level lasts ceil(n / C) requests' time."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import LoadResult, SpecCounters
from benchmarks.engines.server import Load, ServerCounters

ANSWER = " the answer is forty two"


class CatalogServer:
    def __init__(self, cell: Cell, log_path: Path, sequences: int = 1):
        from transformers import AutoTokenizer

        self.cell, self.sequences, self.port = cell, sequences, 0
        self.tokenizer = AutoTokenizer.from_pretrained(cell.target)
        self.step_s = (10.0 if cell.method == "baseline" else 4.0) / 1e3
        self.lengths: list[int] = []
        self.tpot = (0.0, 0.0)

    def __enter__(self) -> CatalogServer:
        self.port = 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self.port = 0

    def prompt_ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def counters(self) -> ServerCounters:
        spec = None if self.cell.method == "baseline" else SpecCounters.from_accept_lengths(self.lengths, self.cell.k)
        return ServerCounters(spec, self.tpot)

    def run_load(self, load: Load, workdir: Path, tag: str) -> LoadResult:
        n_out = len(self.prompt_ids(ANSWER))
        latency = 0.05 + self.step_s * (n_out - 1)
        n = len(load.prompts)
        if self.cell.method != "baseline":
            self.lengths += [2] * (n * math.ceil((n_out - 1) / 2))
        self.tpot = (self.tpot[0] + n * self.step_s, self.tpot[1] + n)
        return LoadResult(ttfts=[0.05] * n, itls=[[self.step_s] * (n_out - 1)] * n, latencies=[latency] * n,
                          start_times=[0.0] * n, input_lens=[len(self.prompt_ids(p)) for p in load.prompts],
                          output_lens=[n_out] * n, generated_texts=[ANSWER] * n, errors=[""] * n, completed=n,
                          failed=0, total_output_tokens=n * n_out, max_concurrent_requests=load.concurrency,
                          duration=latency * math.ceil(n / load.concurrency))

    def explain(self, exc: BaseException) -> BaseException:
        return exc

    def describe(self) -> dict[str, Any]:
        return {"engine": self.cell.engine, "sequences": self.sequences}
