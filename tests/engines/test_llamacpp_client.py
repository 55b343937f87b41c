"""The llama.cpp engine's client against a scripted llama-server on 127.0.0.1 (no build): the streamed /completion
on token ids, the server's timings and /metrics counters, the request body, and the start-up errors."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams, SpecCounters
from benchmarks.data.prompts import Prompt
from benchmarks.engines.llamacpp.llamacpp_build import Install
from benchmarks.engines.llamacpp.llamacpp_engine import (
    LlamaCppEngine,
    LlamaServer,
    completion_body,
    parse_metrics,
    read_stream,
    server_command,
)
from benchmarks.engines.llamacpp.llamacpp_gguf import Gguf
from benchmarks.engines.llamacpp.llamacpp_serve import LlamaCppServer, _arrivals
from benchmarks.engines.llamacpp.llamacpp_steps import mark, stream_steps
from benchmarks.engines.server import Load, ServerStartError
from benchmarks.run.serving import level_records
from tests.machine import needs_loopback

K = 3  # the scripted server's --spec-draft-n-max (the cells' k)
EOS_PROMPT = 7  # a prompt that starts with it ends on EOS at its 6th token, inside the second verify step


def decode(n_predict: int, eos_at: int | None) -> tuple[list[dict], dict, SpecCounters]:
    """llama-server's speculative loop, scripted: a step drafts min(K, tokens left - 1) and accepts 2 of them (a step
    with one token left drafts nothing: a plain step); its accepted drafts join the totals before its tokens are
    emitted, and EOS (token `eos_at`) ends the stream where it falls. Returns the token events (ids 100, 101, ...;
    `timings_per_token`), the final event and the verify steps as /metrics counts them."""
    events, n, drafted, accepted, steps = [], 0, 0, 0, SpecCounters()

    def emit(count: int) -> bool:
        nonlocal n
        for _ in range(count):
            n += 1
            timings = {"predicted_n": n} | ({"draft_n": drafted, "draft_n_accepted": accepted} if drafted else {})
            events.append({"content": "x", "tokens": [99 + n], "stop": False, "tokens_predicted": n,
                           "timings": timings})
            if n == eos_at:
                return False
        return True

    going = emit(1)  # the prefill's token
    while going and n < n_predict:
        d = min(K, n_predict - n - 1)
        a = min(2, d)
        drafted, accepted = drafted + d, accepted + a
        steps += SpecCounters.from_accept_lengths([a], K) if d else SpecCounters()
        going = emit(a + 1)
    final = {"content": "", "tokens": [], "stop": True, "stop_type": "eos" if n == eos_at else "limit",
             "tokens_predicted": n, "timings": {"predicted_n": n, "predicted_per_token_ms": 0.4,
                                                "predicted_ms": 0.4 * (n - 1), "draft_n": drafted,
                                                "draft_n_accepted": accepted}}
    return events, final, steps


class Scripted(BaseHTTPRequestHandler):
    """Streams `decode`'s token events and final event for each request, and serves the verify steps of every request
    so far on /metrics (none while `frozen`; `extra` adds steps no request made)."""

    bodies: list[dict] = []
    counted = SpecCounters()
    frozen = False
    extra = SpecCounters()

    def log_message(self, *args):
        pass

    def do_GET(self):
        c = Scripted.counted + Scripted.extra
        text = "{}" if self.path != "/metrics" else "".join(
            [f"llamacpp:spec_decode_num_drafts_total {c.num_drafts}\n",
             f"llamacpp:spec_decode_num_draft_tokens_total {c.num_draft_tokens}\n",
             f"llamacpp:spec_decode_num_accepted_tokens_total {c.num_accepted_tokens}\n"]
            + [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}\n'
               for i, v in enumerate(c.accepted_per_pos)])
        self.send_response(200)
        self.end_headers()
        self.wfile.write(text.encode())

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps({"tokens": [ord(c) for c in body["content"]]}).encode())
            return
        Scripted.bodies.append(body)
        time.sleep(0.1)  # long enough for concurrent requests to overlap
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        events, final, steps = decode(body["n_predict"], 6 if body["prompt"][0] == EOS_PROMPT else None)
        for event in [*events, final]:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        if not Scripted.frozen:
            Scripted.counted += steps


def cell(method: str = "dflash") -> Cell:
    return Cell("llama.cpp", "models/tiny/target", method, "models/tiny/dflash", K, 0.0, 8, 0)


@pytest.fixture
def scripted(tmp_path):
    """A llama-server object (never started) whose port is the scripted handler's."""
    needs_loopback()
    http = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    gguf = Gguf(tmp_path / "t.gguf", "sha", "src", "srcsha", "f32")
    server = LlamaCppServer.__new__(LlamaCppServer)
    server.tpot_sum_s, server.tpot_count = 0.0, 0
    LlamaServer.__init__(server, cell(), tmp_path / "log", Install(tmp_path, tmp_path / "llama-server", "key", {}),
                         gguf, gguf, {"threads": 2, "max_model_len": 64, "flash_attn": "on"}, sequences=2)
    server.port = http.server_address[1]
    Scripted.bodies, Scripted.counted, Scripted.frozen, Scripted.extra = [], SpecCounters(), False, SpecCounters()
    yield server
    http.shutdown()


@pytest.fixture
def engine(scripted):
    e = LlamaCppEngine()
    e.server, e.cell = scripted, cell()
    return e


def test_a_request_goes_as_token_ids_and_its_ids_and_timings_come_back(engine):
    r = engine.generate([5, 6, 7], SamplingParams(0.0, 8, seed=3))
    assert r.output_ids == list(range(100, 108)) and 0 < r.ttft_s <= r.extra["client_last_token_s"]
    assert r.last_token_s - r.ttft_s == pytest.approx(0.4 * 7 / 1000)  # the server's decode span, not the client's
    assert r.extra["server_timings"]["predicted_per_token_ms"] == 0.4 and r.extra["stop_type"] == "limit"
    [body] = Scripted.bodies
    assert body["prompt"] == [5, 6, 7] and body["return_tokens"] and body["cache_prompt"] is False
    assert (body["temperature"], body["top_k"], body["seed"], body["stream"]) == (0.0, 1, 3, True)
    assert body["timings_per_token"]


def test_the_last_one_token_step_is_a_verify_step_that_accepted_nothing(engine):
    """8 tokens at K = 3: two steps accept 2 of 3 drafts (tokens 2-7), then one token is left and llama-server takes
    a plain step, which /metrics does not count: the records and counters count it, τ = (8 - 1) / 3."""
    r = engine.generate([5], SamplingParams(0.0, 8))
    assert (r.accept_lengths, r.extra["draft_lengths"], r.extra["accept_lengths_reported"]) == ([2, 2, 0], [3, 3, 0],
                                                                                             [2, 2])
    c = engine.spec_counters()
    assert c == SpecCounters(3, 6, 4, [2, 2, 0]) and metrics.acceptance(c).tau == pytest.approx((8 - 1) / 3)
    assert metrics.tau_prompt_mean([r.accept_lengths]) == pytest.approx(metrics.acceptance(c).tau)


def test_a_request_ending_on_eos_mid_step_counts_the_drafts_before_eos(engine):
    """EOS is the 6th token, the second of the second step's 2 accepted drafts: the server counts both (and /metrics
    with it); the record and the counters count the one before EOS, and the step's drafts past it not at all."""
    r = engine.generate([EOS_PROMPT], SamplingParams(0.0, 64))
    assert r.output_ids == list(range(100, 106)) and r.extra["stop_type"] == "eos"
    assert r.extra["server_timings"]["draft_n_accepted"] == 4 and r.extra["accept_lengths_reported"] == [2, 2]
    assert (r.accept_lengths, r.extra["draft_lengths"]) == ([2, 1], [3, 1])
    c = engine.spec_counters()
    assert c == SpecCounters(2, 4, 3, [2, 1, 0]) and metrics.acceptance(c).tau == (6 - 1) / 2
    assert metrics.acceptance(c).alpha == 3 / 4


def test_the_counters_are_checked_against_the_servers_metrics(engine):
    engine.generate([1], SamplingParams(0.0, 8))
    assert engine.spec_counters() == SpecCounters(3, 6, 4, [2, 2, 0])
    Scripted.extra = SpecCounters.from_accept_lengths([1], K)  # a verify step no stream showed
    with pytest.raises(RuntimeError, match="/metrics counted"):
        engine.spec_counters()
    Scripted.extra, Scripted.frozen = SpecCounters(), True
    engine.generate([1], SamplingParams(0.0, 8))  # its counts never join the server's totals
    with pytest.raises(RuntimeError, match="behind the requests"):
        engine.spec_counters()


def test_steps_whose_totals_are_not_the_final_events_raise():
    events, final, _ = decode(8, None)
    marks = [mark(e, i + 1) for i, e in enumerate(events)]
    assert stream_steps(marks, final, 8).accepted == [2, 2, 0]
    with pytest.raises(RuntimeError, match="per-token timings"):
        stream_steps([(m[0], 0, 0) for m in marks], final, 8)  # a server that sent no per-token timings


def test_an_ngram_step_that_drafts_nothing_is_no_verify_step():
    """A plain step before the last (an n-gram lookup that found nothing) is not counted, as on vLLM; the positions
    of the steps after it still are: EOS at token 6 cuts the last step's 2 accepted drafts to the 1 before it."""
    marks = [(1, 0, 0), (2, 3, 1), (3, 3, 1), (4, 3, 1), (5, 6, 3), (6, 6, 3)]
    steps = stream_steps(marks, {"timings": {"predicted_n": 6, "draft_n": 6, "draft_n_accepted": 3}}, 64)
    assert (steps.accepted, steps.drafted, steps.reported, steps.reported_drafted) == ([1, 1], [3, 1], [1, 2], [3, 3])


def test_the_baseline_has_no_counters_and_a_server_without_drafts_reads_none():
    e = LlamaCppEngine()
    e.cell = cell("baseline")
    assert e.spec_counters() is None
    assert parse_metrics("llamacpp:prompt_tokens_total 3\n") is None
    assert parse_metrics(
        "llamacpp:spec_decode_num_drafts_total 10\nllamacpp:spec_decode_num_draft_tokens_total 30\n"
        "llamacpp:spec_decode_num_accepted_tokens_total 7\n"
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5\n'
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 2\n') == SpecCounters(10, 30, 7, [5, 2])


def test_a_stream_with_an_error_or_without_its_end_raises():
    with pytest.raises(RuntimeError, match="boom"):
        read_stream([b'data: {"error": "boom"}'], 0.0)
    with pytest.raises(RuntimeError, match="without its final event"):
        read_stream([b'data: {"tokens": [1], "stop": false}'], 0.0)
    ids, first, last, final = read_stream(iter([b"", b'data: {"tokens": [1, 2]}', b'data: {"tokens": [3]}',
                                                b'data: {"tokens": [], "stop": true}']), 0.0,
                                          clock=iter([1.0, 2.0, 3.0]).__next__)
    assert (ids, first, last) == ([1, 2, 3], 1.0, 2.0) and final["stop"]


def test_sampling_at_t_above_zero_turns_the_truncations_off():
    body = completion_body([1], SamplingParams(0.7, 5, 1))
    assert (body["top_k"], body["top_p"], body["min_p"], body["temperature"]) == (0, 1.0, 0.0, 0.7)


def test_the_command_names_the_spec_type_k_and_the_slots(tmp_path):
    opts = {"threads": 2, "max_model_len": 512, "flash_attn": "on", "ngram_n": 5}
    cmd = server_command(Path("s"), 9, Path("t.gguf"), "dflash", 15, Path("d.gguf"), 0, opts, slots=4)
    assert cmd[cmd.index("--spec-type") + 1] == "draft-dflash" and cmd[cmd.index("--spec-draft-n-max") + 1] == "15"
    assert cmd[cmd.index("-np") + 1] == "4" and cmd[cmd.index("-c") + 1] == "2048" and "--metrics" in cmd
    ngram = server_command(Path("s"), 9, Path("t.gguf"), "ngram", 4, None, 0, opts)
    assert ngram[ngram.index("--spec-type") + 1] == "ngram-simple" and "-md" not in ngram
    assert ngram[ngram.index("--spec-ngram-simple-size-n") + 1] == "5"
    assert ngram[ngram.index("--spec-ngram-simple-size-m") + 1] == "4"
    assert "--spec-type" not in server_command(Path("s"), 9, Path("t.gguf"), "baseline", 0, None, 0, opts)
    assert "-ngl" not in cmd
    gpu = server_command(Path("s"), 9, Path("t.gguf"), "eagle3", 3, Path("d.gguf"), 0, opts, gpu=True)
    assert gpu[gpu.index("-ngl") + 1] == "999" and gpu[gpu.index("-ngld") + 1] == "999"


def test_a_port_in_use_is_one_clear_error(tmp_path):
    needs_loopback()  # the server is given a free port of the loopback first
    fake = tmp_path / "llama-server"
    fake.write_text('#!/bin/sh\necho "srv    start: couldn\'t bind HTTP server socket, hostname: 127.0.0.1"\nexit 1\n')
    fake.chmod(0o755)
    gguf = Gguf(tmp_path / "t.gguf", "sha", "src", "srcsha", "f32")
    server = LlamaServer(cell("baseline"), tmp_path / "log", Install(tmp_path, fake, "key", {}), gguf, None,
                         {"threads": 1, "max_model_len": 64, "flash_attn": "on"})
    with pytest.raises(ServerStartError, match=r"^llama.cpp server: port \d+ on 127.0.0.1 is in use"):
        server.__enter__()
    assert server.proc is None


def test_a_load_sends_token_ids_and_its_records_carry_the_servers_ids(scripted, tmp_path):
    """Under load too, each request's verify steps come from its own stream, counted within its output (the third
    ends on EOS mid-step), and they make the level's spec record: the server's /metrics is not read for τ."""
    texts = ["ab", "abc", chr(EOS_PROMPT) + "bcd"]
    load = Load(texts, 8, 0.0, concurrency=2, request_rate=None, seed=0)
    result = scripted.run_load(load, tmp_path, "tag")
    assert (result.completed, result.failed, result.max_concurrent_requests) == (3, 0, 2)
    assert sorted(b["prompt"] for b in Scripted.bodies) == sorted([ord(c) for c in t] for t in texts)
    assert result.output_ids == [list(range(100, 108))] * 2 + [list(range(100, 106))]
    assert result.input_lens == [2, 3, 4] and result.total_output_tokens == 22
    assert [len(itl) for itl in result.itls] == [7, 7, 5]
    assert result.accept_lengths == [[2, 2, 0], [2, 2, 0], [2, 1]]
    assert result.draft_lengths == [[3, 3, 0], [3, 3, 0], [3, 1]]
    prompts = [Prompt("local", i, t, [ord(c) for c in t], f"sha{i}") for i, t in enumerate(texts)]
    counters = scripted.counters()
    assert counters.tpot == (pytest.approx(3 * 0.4 / 1000), 3) and counters.spec is None  # server-side TPOT
    records = level_records(cell(), prompts, result, tokenizer=None, concurrency=2, request_rate=None,
                            spec=counters.spec, server_tpot=counters.tpot)
    records = [r.to_json() for r in records]
    requests = [r for r in records if r["kind"] == "request"]
    assert [r["output_ids"] for r in requests] == result.output_ids
    assert [r["accept_lengths"] for r in requests] == result.accept_lengths
    assert {r["extra"]["output_ids_from"] for r in requests} == {"server"}
    assert [r["kind"] for r in records[-2:]] == ["spec", "load"] and records[-1]["server_tpot_count"] == 3
    spec = records[-2]
    assert (spec["num_drafts"], spec["num_draft_tokens"], spec["num_accepted_tokens"]) == (8, 16, 11)
    assert spec["accepted_per_pos"] == [6, 5, 0]  # per level: τ = (7 + 7 + 5) / 8 = 1 + 11 / 8


def test_poisson_arrivals_are_seeded_and_increasing():
    times = _arrivals(5, 2.0, seed=1)
    assert times == _arrivals(5, 2.0, seed=1) and times[0] == 0.0 and times == sorted(times)
    assert _arrivals(3, None, 0) == [0.0, 0.0, 0.0]
