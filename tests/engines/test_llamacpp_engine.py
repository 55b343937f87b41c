"""The real llama-server on the shipped tiny set (marked llamacpp: skipped with its reason when it is not built,
required under make test ALL=1). One DFlash server is shared by the module's tests; the orphan and port checks start
a baseline server of their own."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams, SpecCounters
from benchmarks.core.paths import ROOT
from benchmarks.engines import server as server_module
from benchmarks.engines.llamacpp import llamacpp_engine
from benchmarks.engines.llamacpp.llamacpp_engine import LlamaCppEngine
from benchmarks.engines.server import ServerStartError

pytestmark = pytest.mark.llamacpp
TINY = ROOT / "models" / "tiny"
OPTIONS = {"dtype": "float32", "max_model_len": 512, "threads": 2}


def tiny_cell(method: str, k: int = 15) -> Cell:
    draft = str(TINY / method) if method in ("dflash", "eagle3") else None
    return Cell("llama.cpp", str(TINY / "target"), method, draft, k if draft else 0, 0.0, 64, 0, OPTIONS)


@pytest.fixture(scope="module")
def dflash():
    engine = LlamaCppEngine()
    engine.load(tiny_cell("dflash"))
    yield engine
    engine.close()


def prompt_ids() -> list[int]:
    from transformers import AutoTokenizer

    return list(AutoTokenizer.from_pretrained(str(TINY / "target"))("def fib(n):\n    ")["input_ids"])


def test_the_server_tokenises_like_the_hf_tokenizer_and_records_its_gguf_hashes(dflash):
    info = dflash.describe()
    assert info["tokenizer_probes_matched"] == 5
    assert len(info["target_gguf"]["sha256"]) == 64 and len(info["draft_gguf"]["sha256"]) == 64
    assert "--spec-type" in info["command"] and info["spec_type"] == "draft-dflash"


def test_a_last_step_that_would_overshoot_is_capped_at_the_tokens_still_wanted(dflash):
    """K=15 with 20 tokens wanted: no step drafts or accepts past the limit, so the steps account for exactly the
    tokens emitted (the prefill's token, each verify step's own token and its accepted drafts), the one-token step
    included where the server takes it; spec_counters checks the same steps against /metrics."""
    before = dflash.spec_counters()
    r = dflash.generate(prompt_ids(), SamplingParams(0.0, 20, 0))
    level = dflash.spec_counters() - before
    assert level.num_drafts == len(r.accept_lengths) > 0 and len(r.output_ids) == 20
    assert 1 + level.num_drafts + level.num_accepted_tokens == len(r.output_ids)
    assert r.extra["server_timings"]["draft_n_accepted"] == level.num_accepted_tokens == sum(r.accept_lengths)


def test_the_one_token_last_step_is_a_verify_step_that_accepted_nothing(dflash):
    """The first limit (from 3 tokens up) that leaves one token after a step: llama-server takes it in a plain step,
    which /metrics does not count; the record counts it as a step that drafted and accepted 0, and the counters (as
    checked against /metrics) with it, so τ = (n_out - 1) / steps."""
    ids = prompt_ids()
    free = dflash.generate(ids, SamplingParams(0.0, 64, 0))
    for limit in range(3, 64):
        before = dflash.spec_counters()
        r = dflash.generate(ids, SamplingParams(0.0, limit, 0))
        counters = dflash.spec_counters() - before
        if len(r.extra.get("accept_lengths_reported", r.accept_lengths)) < len(r.accept_lengths):
            break
    print(f"{limit} tokens: {r.accept_lengths}, as llama.cpp counted {r.extra['accept_lengths_reported']}")
    assert r.output_ids == free.output_ids[:limit] and r.extra["accept_lengths_reported"] == r.accept_lengths[:-1]
    assert r.accept_lengths[-1] == r.extra["draft_lengths"][-1] == 0
    assert metrics.acceptance(counters).tau == pytest.approx((limit - 1) / len(r.accept_lengths))


def test_a_request_ending_on_eos_mid_step_is_counted_within_its_output(dflash, monkeypatch):
    """A server whose EOS is the second token of a step that accepted 3 or more drafts (`--override-kv`): its greedy
    verification stops accepting at EOS, so it counts the one draft before EOS as the harness's rule does (and
    /metrics with it, as spec_counters checks); the step's drafts past EOS are cut from the drafted count."""
    ids = prompt_ids()
    free = dflash.generate(ids, SamplingParams(0.0, 64, 0))
    starts = np.cumsum([1] + [a + 1 for a in free.accept_lengths])  # each step's first token
    step, at = next((i, int(c) + 1) for i, (c, a) in enumerate(zip(starts, free.accept_lengths))
                    if a >= 3 and free.output_ids[int(c) + 1] not in free.output_ids[:int(c) + 1])
    command = llamacpp_engine.server_command
    monkeypatch.setattr(llamacpp_engine, "server_command", lambda *a, **kw: [
        *command(*a, **kw), "--override-kv", f"tokenizer.ggml.eos_token_id=int:{free.output_ids[at]}"])
    engine = LlamaCppEngine()
    engine.load(tiny_cell("dflash"))
    try:
        before = engine.spec_counters()
        r = engine.generate(ids, SamplingParams(0.0, 64, 0))
        counters = engine.spec_counters() - before
    finally:
        engine.close()
    want = free.accept_lengths[:step] + [1]
    print(f"EOS at token {at + 1}: accept lengths {free.accept_lengths[:step + 1]} -> {r.accept_lengths}")
    assert r.output_ids == free.output_ids[:at + 1] and r.extra["stop_type"] == "eos"
    assert r.accept_lengths == want and "accept_lengths_reported" not in r.extra
    assert r.extra["server_timings"]["draft_n_accepted"] == sum(want)
    assert r.extra["server_timings"]["draft_n"] == 15 * len(want) > sum(r.extra["draft_lengths"])
    assert r.extra["draft_lengths"] == metrics.drafted_within(want, [15] * len(want), len(r.output_ids))
    assert counters == SpecCounters.from_accept_lengths(want, 15, r.extra["draft_lengths"])
    assert metrics.acceptance(counters).tau == pytest.approx((len(r.output_ids) - 1) / len(want))


def test_the_tie_scores_put_the_greedy_token_first(dflash):
    ids = prompt_ids()
    r = dflash.generate(ids, SamplingParams(0.0, 4, 0))
    scores = dflash.token_scores(ids, r.output_ids[:2], [r.output_ids[2]], 8)
    assert scores.top_ids[0] == r.output_ids[2] and scores.dtype == "float32"
    assert scores.token_logits[0] == scores.top_logits[0]


def test_a_port_in_use_is_one_clear_error(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(server_module, "free_port", lambda: taken.getsockname()[1])
        engine = LlamaCppEngine()
        with pytest.raises(ServerStartError, match=r"^llama.cpp server: port \d+ on 127.0.0.1 is in use"):
            engine.load(tiny_cell("baseline"))
    assert engine.server is None


HOLD = """
import sys, time
from benchmarks.core.cells import Cell
from benchmarks.engines.llamacpp.llamacpp_engine import LlamaCppEngine
e = LlamaCppEngine()
e.load(Cell("llama.cpp", sys.argv[1], "baseline", None, 0, 0.0, 8, 0, {"dtype": "float32", "max_model_len": 256,
                                                                       "threads": 1}))
print(e.server.proc.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.is_file() and stat.read_text().split(") ", 1)[1].startswith("Z"))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_no_llama_server_outlives_its_harness(sig):
    # the harness takes SIGINT as a user's would: a shell that starts the suite in the background (`cmd &`) leaves it
    # ignored, and an ignored signal stays ignored across exec
    harness = subprocess.Popen([sys.executable, "-c", HOLD, str(TINY / "target")], stdout=subprocess.PIPE, text=True,
                               cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        server_pid = int(harness.stdout.readline())
        assert alive(server_pid)
        harness.send_signal(sig)
        harness.wait(30)
        deadline = time.monotonic() + 30
        while alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(server_pid), f"llama-server {server_pid} outlived its harness after {sig.name}"
    finally:
        harness.kill()
