"""Scripted engines for worker tests, hosted in a child process as "scripted_workers:FaultyEngine".

The fault comes from the environment, which the worker inherits: SCRIPTED_FAULT="<method>:<kind>:<n>" makes the
cell of that method fail at its n-th generate call (warm-ups count) by `crash` (os._exit(7)), `hang` (sleep), or
`raise` (ValueError from a nested function). At load, every cell starts a grandchild (`sleep`) and writes
"<worker pid> <grandchild pid>" to SCRIPTED_PIDS/<label>, so a test can check that the whole tree is gone.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from benchmarks.core.engine_io import RequestRecord, SpecCounters


def _deep_failure(n: int) -> None:
    raise ValueError(f"scripted failure at call {n}")


class FaultyEngine:
    name = "scripted"

    def load(self, cell):
        self.cell, self.calls, self.lengths = cell, 0, []
        self.grandchild = subprocess.Popen(["sleep", "600"])
        if os.environ.get("SCRIPTED_PIDS"):
            Path(os.environ["SCRIPTED_PIDS"], cell.label).write_text(f"{os.getpid()} {self.grandchild.pid}")

    def _fault(self) -> None:
        method, kind, n = (os.environ.get("SCRIPTED_FAULT") or "none:none:0").split(":")
        if method != self.cell.method or self.calls != int(n):
            return
        if kind == "crash":
            os.write(2, b"scripted worker: about to crash\n")
            os._exit(7)
        if kind == "hang":
            time.sleep(600)
        if kind == "raise":
            _deep_failure(self.calls)

    def generate(self, prompt_ids, params):
        self.calls += 1
        self._fault()
        out = [(sum(prompt_ids) + i) % 97 for i in range(params.max_new_tokens)]
        tpot = 0.010 if self.cell.method == "baseline" else 0.004
        if self.cell.method != "baseline":
            self.lengths += [2] * 4
        return RequestRecord(out, ttft_s=0.05, last_token_s=0.05 + tpot * (len(out) - 1))

    def sample_many(self, prompt_ids, params, seeds):
        return [[(s + i) % 97 for i in range(params.max_new_tokens)] for s in seeds]

    def generate_batch(self, prompts, params):
        return [self.generate(p, params) for p in prompts]

    def spec_counters(self):
        if self.cell.method == "baseline":
            return None
        return SpecCounters.from_accept_lengths(self.lengths, self.cell.k)

    def describe(self):
        return {"engine": "scripted", "pid": os.getpid()}

    def close(self):
        self.grandchild.kill()
        self.grandchild.wait()


class PlainEngine:
    """An engine without sample_many."""

    name = "plain"

    def load(self, cell):
        pass

    def describe(self):
        return {}

    def close(self):
        pass
