"""A scripted engine that joins the harness through one catalog row (tests/run/test_catalog.py): baseline and
dflash emit the same tokens; dflash steps take 4 ms against the baseline's 10 ms and accept 2 of K drafts; a load
takes the option `load_s`."""
from __future__ import annotations

import os
import time
from typing import Any

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters


class CatalogEngine:
    name = "scripted"

    def load(self, cell: Cell) -> None:
        start = time.monotonic()  # one clock for every process of the machine (CLOCK_MONOTONIC)
        time.sleep(float(cell.engine_options.get("load_s", 0.0)))
        self.loaded = (start, time.monotonic())
        self.cell, self.lengths = cell, []
        self.step_s = float(cell.engine_options.get("step_ms", 10.0 if cell.method == "baseline" else 4.0)) / 1e3

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord:
        out = [(sum(prompt_ids) + i) % 97 for i in range(params.max_new_tokens)]
        if self.cell.method != "baseline":
            self.lengths += [2] * 4
        return RequestRecord(out, ttft_s=0.05, last_token_s=0.05 + self.step_s * (len(out) - 1))

    def spec_counters(self) -> SpecCounters | None:
        return None if self.cell.method == "baseline" else SpecCounters.from_accept_lengths(self.lengths, self.cell.k)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "pid_of_host": os.getpid(), "loaded": self.loaded}

    def close(self) -> None:
        pass
