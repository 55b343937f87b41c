"""llama.cpp under load (`LlamaCppServer`, a `Server` of benchmarks/engines/server.py): one llama-server per cell
with `--parallel` = the matrix's largest concurrency (continuous batching over its slots), driven by a load generator
of our own that sends each prompt as token ids and returns, besides the per-request lists `vllm bench serve` saves,
the output ids themselves (`output_ids`), so no output is tokenised again, and each request's verify steps counted
within its output (`accept_lengths`, `draft_lengths`: llamacpp_steps.py), which give the level's τ.

The server, its options and its files are the batch engine's (benchmarks/engines/llamacpp/llamacpp_engine.py): the
same GGUF files, tokenizer check and warm-up. The slots share the context: each gets the cell's max_model_len.
"""
from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypedDict

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import LoadResult, SamplingParams
from benchmarks.engines.llamacpp.llamacpp_engine import (
    LlamaServer,
    ServerInfo,
    check_tokenizer,
    completion_body,
    options,
    prepare,
    warm_up,
)
from benchmarks.engines.llamacpp.llamacpp_steps import Mark, stream_steps
from benchmarks.engines.server import Load, ServerCounters


class ServeInfo(ServerInfo):
    """`ServerInfo` plus the module that generated the load."""

    load_generator: str


class _Outcome(TypedDict, total=False):
    """One request of a load (empty until it ends): its start, ids, first and last token times and every token
    event's (s from the load's start or its own), its verify steps, and its error ("" for none)."""

    start: float
    ids: list[int]
    ttft: float
    last: float
    times: list[float]
    accepted: list[int]
    drafted: list[int]
    error: str


class LlamaCppServer(LlamaServer):
    """One llama-server with `sequences` slots for one serving cell."""

    def __init__(self, cell: Cell, log_path: Path, startup_timeout_s: float = 300.0, sequences: int = 1):
        opts = options(cell)
        install, self.target_dir, target, draft = prepare(cell, opts)
        super().__init__(cell, log_path, install, target, draft, opts, startup_timeout_s, sequences)
        self.tpot_sum_s, self.tpot_count = 0.0, 0  # the requests' own TPOT on the server's clock, summed

    def __enter__(self) -> LlamaCppServer:
        super().__enter__()
        try:
            self.probes = check_tokenizer(self, self.target_dir)
            warm_up(self, self.cell.seed)
        except BaseException:
            self.stop()
            raise
        return self

    def prompt_ids(self, text: str) -> list[int]:
        """The ids the server makes of a chat-templated prompt (special tokens parsed, none added)."""
        return list(self.post("/tokenize", {"content": text, "add_special": False, "parse_special": True})["tokens"])

    def counters(self) -> ServerCounters:
        """The (sum s, count) of the finished requests' TPOT on the server's clock (each request's
        `timings.predicted_per_token_ms`; llama-server keeps no TPOT histogram). No speculative counters: the load's
        result carries each request's verify steps, which the level's records count (run/serving.level_records)."""
        return ServerCounters(None, (self.tpot_sum_s, self.tpot_count))

    def describe(self) -> ServeInfo:
        return {**super().describe(), "load_generator": "benchmarks.engines.llamacpp.llamacpp_serve"}

    def run_load(self, load: Load, workdir: Path, tag: str) -> LoadResult:
        """Send the load's prompts (as the server's ids of their text) with at most `load.concurrency` in flight,
        all at once or at Poisson arrivals of `load.request_rate`; the result with the server's `output_ids`."""
        ids = [self.prompt_ids(p) for p in load.prompts]
        params = SamplingParams(load.temperature, load.max_new_tokens, load.seed)
        arrivals = _arrivals(len(ids), load.request_rate, load.seed)
        results: list[_Outcome] = [{} for _ in ids]
        slots = threading.Semaphore(load.concurrency)
        speculative = self.cell.method != "baseline"
        in_flight = peak = 0
        lock = threading.Lock()
        t0 = time.perf_counter()

        def one(i: int) -> None:
            nonlocal in_flight, peak
            time.sleep(max(0.0, arrivals[i] - (time.perf_counter() - t0)))
            with slots:
                with lock:
                    in_flight += 1
                    peak = max(peak, in_flight)
                start = time.perf_counter() - t0
                times: list[float] = []
                marks: list[Mark] = []
                try:
                    out, ttft, last, final = self.stream(completion_body(ids[i], params), times, marks)
                    per_token = (final.get("timings") or {}).get("predicted_per_token_ms")
                    if len(out) > 1 and per_token:
                        with lock:
                            self.tpot_sum_s, self.tpot_count = self.tpot_sum_s + per_token / 1000.0, self.tpot_count + 1
                    steps = stream_steps(marks, final, load.max_new_tokens) if speculative else None
                    results[i] = {"start": start, "ids": out, "ttft": ttft, "last": last, "times": times,
                                  "accepted": steps.accepted if steps else [],
                                  "drafted": steps.drafted if steps else [], "error": ""}
                except Exception as exc:  # a failed request is reported, the others go on
                    results[i] = {"start": start, "ids": [], "ttft": 0.0, "last": 0.0, "times": [], "accepted": [],
                                  "drafted": [], "error": f"{type(exc).__name__}: {exc}"}
                finally:
                    with lock:
                        in_flight -= 1

        with ThreadPoolExecutor(max_workers=len(ids)) as pool:
            list(pool.map(one, range(len(ids))))
        duration = time.perf_counter() - t0
        ok = [r for r in results if not r["error"]]
        return LoadResult(duration=duration, completed=len(ok), failed=len(results) - len(ok),
                          total_output_tokens=sum(len(r["ids"]) for r in ok), max_concurrent_requests=peak,
                          ttfts=[r["ttft"] for r in results], latencies=[r["last"] for r in results],
                          itls=[[b - a for a, b in zip(r["times"], r["times"][1:])] for r in results],
                          start_times=[r["start"] for r in results], input_lens=[len(x) for x in ids],
                          output_lens=[len(r["ids"]) for r in results], output_ids=[r["ids"] for r in results],
                          errors=[r["error"] for r in results],
                          accept_lengths=[r["accepted"] for r in results] if speculative else None,
                          draft_lengths=[r["drafted"] for r in results] if speculative else None)


def _arrivals(n: int, rate: float | None, seed: int) -> list[float]:
    """Send times (s from the start): all at 0, or a Poisson process of `rate` requests per second."""
    if rate is None:
        return [0.0] * n
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out
