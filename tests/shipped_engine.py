"""A scripted stand-in for the catalog's batch engines, to run the shipped matrices' axes through the reports
(tests/run/test_shipped_matrices.py): every optional capability (a catalog row still offers only those it declares),
and the `extra` each real engine writes that the reports read (the JAX engine's step times, breakdown and batch
counts; vLLM's batch clock). Nothing is timed: each record states its times.

A greedy speculative cell emits its baseline's tokens, except in bfloat16, where a DFlash cell flips the last token
of every other prompt and the baseline's `token_scores` calls the two a tie one bf16 ulp apart, as at a real bf16
near-tie (benchmarks/run/tie_pass.py). At T > 0 every arm samples one distribution: the distribution check passes."""
from __future__ import annotations

import math
import random
from typing import Any

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters, TokenScores

SAMPLED = {5: 0.4, 6: 0.3, 7: 0.2, 8: 0.1}  # the distribution every arm samples at T > 0: token id -> probability
TIE_LOGIT, BF16_ULP = 12.0, 0.0625  # the logit at a bf16 divergence, and one bf16 ulp there


class ShippedEngine:
    name = "shipped"

    def load(self, cell: Cell) -> None:
        self.cell, self.lengths, self.drafted = cell, [], []
        self.accepted = min(cell.k, 1 if cell.temperature > 0 else 2)  # drafts accepted per verify step

    def _tokens(self, prompt_ids: list[int], n: int) -> list[int]:
        out = [(sum(prompt_ids) + 7 * i) % 97 + 10 for i in range(n)]
        bf16 = self.cell.engine_options.get("dtype") == "bfloat16"
        if self.cell.method == "dflash" and bf16 and sum(prompt_ids) % 2 == 0:
            out[-1] += 1
        return out

    def _record(self, prompt_ids: list[int], params: SamplingParams, batch: int) -> RequestRecord:
        cell, out = self.cell, self._tokens(prompt_ids, params.max_new_tokens)
        jitter = 1.0 + ((sum(prompt_ids) + 3 * cell.k) % 11 - 5) / 100  # ±5 % per prompt and K: speedups with CIs
        step_s = 0.010 * (1 + 0.1 * (batch - 1)) * jitter
        accepts, steps = None, len(out) - 1
        if cell.method != "baseline":
            accepts = [self.accepted] * math.ceil(steps / (self.accepted + 1))
            self.lengths += accepts
            self.drafted += [cell.k] * len(accepts)
            step_s *= 1.1 + 0.05 * cell.k
            steps = len(accepts)
        ttft_s = 0.02 + 1e-5 * len(prompt_ids)
        extra: dict[str, Any] = {"decode_steps": steps}
        if cell.engine == "jax":
            extra |= {"step_s": step_s, "step_floor_s": step_s / 4}
            if cell.engine_options.get("breakdown"):
                extra |= {"draft_s": 0.3 * step_s * steps, "verify_s": 0.6 * step_s * steps,
                          "host_s": 0.1 * step_s * steps}
            if batch > 1:
                extra |= {"batch_size": batch, "batch_step_s": step_s, "wasted_row_steps": 0}
        elif batch > 1:
            extra |= {"batch_size": batch, "queued_offset_s": 0.0}
        return RequestRecord(out, ttft_s, ttft_s + step_s * steps, accepts, extra)

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord:
        return self._record(prompt_ids, params, 1)

    def generate_batch(self, prompts: list[list[int]], params: SamplingParams) -> list[RequestRecord]:
        return [self._record(p, params, len(prompts)) for p in prompts]

    def sample_many(self, prompt_ids: list[int], params: SamplingParams, seeds: list[int]) -> list[list[int]]:
        return [random.Random(s).choices(list(SAMPLED), list(SAMPLED.values()), k=params.max_new_tokens)
                for s in seeds]

    def score_many(self, prompt_ids: list[int], continuations: list[list[int]]) -> list[float]:
        return [sum(math.log(SAMPLED[t]) for t in c) for c in continuations]

    def token_scores(self, prompt_ids: list[int], prefix_ids: list[int], token_ids: list[int],
                     top_n: int) -> TokenScores:
        logits = [TIE_LOGIT - BF16_ULP * i for i in range(len(token_ids))]
        return TokenScores(str(self.cell.engine_options.get("dtype", "float32")), token_ids[:top_n], logits, logits)

    def spec_counters(self) -> SpecCounters | None:
        if self.cell.method == "baseline":
            return None
        return SpecCounters.from_accept_lengths(self.lengths, self.cell.k, self.drafted)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.cell.engine, "scripted": True}

    def close(self) -> None:
        pass
