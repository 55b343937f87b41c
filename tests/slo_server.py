"""A scripted serving engine whose latencies grow with load, for capacity searches without an engine: it joins the
harness through one catalog row (`ROW`), as tests/catalog_server.py does. At C requests in flight (or, on the
request-rate axis, at the rate) a baseline token takes 2 + 2·C ms and a dflash token 1 + 1·C ms (2 of K drafts
accepted per step), spread over the requests evenly between 0.95 and 1.05 of that; TTFT is 5 ms per request in
flight. So a p90 TPOT threshold of 20 ms is met up to C = 8 by the baseline and C = 18 by dflash. Each load it runs
is appended to the file named by SLO_SERVER_LOG (its tag), and takes SLO_SERVER_SLEEP_S of wall time, if set."""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

from benchmarks.core.engine_io import LoadResult, SpecCounters
from benchmarks.engines.catalog import EngineOptions, EngineRow
from benchmarks.engines.server import Load, ServerCounters
from tests.catalog_server import CatalogServer

ANSWER = " the answer is forty two and then some more words to decode"
ROW = EngineRow("slo-scripted", "tests.slo_server:SloServer", ("baseline", "dflash"),
                EngineOptions(lambda: frozenset({"max_model_len", "dtype"})), serves="scripted")


def token_ms(method: str, load: float) -> float:
    """The scripted per-token time at a load (before the spread over requests)."""
    return 2.0 + 2.0 * load if method == "baseline" else 1.0 + 1.0 * load


class SloServer(CatalogServer):
    def counters(self) -> ServerCounters:
        spec = None if self.cell.method == "baseline" else SpecCounters.from_accept_lengths(self.lengths, self.cell.k)
        return ServerCounters(spec, None)

    def run_load(self, load: Load, workdir: Path, tag: str) -> LoadResult:
        if os.environ.get("SLO_SERVER_LOG"):
            with open(os.environ["SLO_SERVER_LOG"], "a") as f:
                f.write(f"{self.cell.label} {tag}\n")
        time.sleep(float(os.environ.get("SLO_SERVER_SLEEP_S", "0")))
        level = load.request_rate or load.concurrency
        n, n_out = len(load.prompts), len(self.prompt_ids(ANSWER))
        spread = [0.95 + 0.1 * i / max(n - 1, 1) for i in range(n)]
        step_s = [token_ms(self.cell.method, level) * s / 1e3 for s in spread]
        ttft = 0.005 * level
        if self.cell.method != "baseline":
            self.lengths += [2] * (n * math.ceil((n_out - 1) / 2))
        return LoadResult(ttfts=[ttft] * n, itls=[[s] * (n_out - 1) for s in step_s],
                          latencies=[ttft + s * (n_out - 1) for s in step_s], start_times=[0.0] * n,
                          input_lens=[len(self.prompt_ids(p)) for p in load.prompts], output_lens=[n_out] * n,
                          generated_texts=[ANSWER] * n, errors=[""] * n, completed=n, failed=0,
                          total_output_tokens=n * n_out, max_concurrent_requests=min(n, load.concurrency),
                          duration=(ttft + max(step_s) * (n_out - 1)) * math.ceil(n / load.concurrency))
