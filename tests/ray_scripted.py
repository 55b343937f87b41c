"""Scripted engines that tests/run/test_ray_executor.py hosts in Ray actors (`tests.ray_scripted:<Class>` specs)."""
from __future__ import annotations

import time

import pytest

from benchmarks.core.engine_io import RequestRecord, SpecCounters

ray = pytest.importorskip("ray", reason="ray is not installed")

FAULT_AT = 2  # the dflash engine's fault strikes at its second request (of the first dataset)


class ScriptedEngine:
    """Tokens follow the prompt; dflash accepts 2 drafts per verify step. Subclasses add a fault."""

    name = "scripted"

    def load(self, cell):
        self.cell, self.lengths, self.calls = cell, [], 0

    def generate(self, prompt_ids, params):
        self.calls += 1
        if self.cell.method == "dflash" and self.calls == FAULT_AT:
            self.fault()
        out = [(sum(prompt_ids) + i) % 97 for i in range(params.max_new_tokens)]
        if self.cell.method != "baseline":
            self.lengths += [2] * 2
        return RequestRecord(out, ttft_s=0.01, last_token_s=0.01 + 0.001 * (len(out) - 1))

    def fault(self):
        pass

    def spec_counters(self):
        return None if self.cell.method == "baseline" else SpecCounters.from_accept_lengths(self.lengths, self.cell.k)

    def describe(self):
        return {"scripted": True}

    def close(self):
        pass


class KilledEngine(ScriptedEngine):
    """Its actor is killed mid-cell."""

    def fault(self):
        ray.kill(ray.get_runtime_context().current_actor)


class HungEngine(ScriptedEngine):
    """Hangs mid-cell."""

    def fault(self):
        time.sleep(120)


class SamplingEngine(ScriptedEngine):
    """Has batched sampling whose draws ignore their seeds (as vLLM's on CPU)."""

    samples_seeded = False

    def sample_many(self, prompt_ids, params, seeds):
        return [[s % 97] * params.max_new_tokens for s in seeds]
