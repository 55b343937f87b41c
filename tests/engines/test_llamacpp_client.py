"""The llama.cpp engine's client against a scripted llama-server on 127.0.0.1 (no build): the streamed /completion
on token ids, the server's timings and /metrics counters, the request body, and the start-up errors."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import SamplingParams, SpecCounters
from benchmarks.core.prompts import Prompt
from benchmarks.engines.llamacpp import (
    LlamaCppEngine,
    LlamaServer,
    completion_body,
    parse_metrics,
    read_stream,
    server_command,
)
from benchmarks.engines.llamacpp_build import Install
from benchmarks.engines.llamacpp_gguf import Gguf
from benchmarks.engines.llamacpp_serve import LlamaCppServer, _arrivals
from benchmarks.engines.server import Load, ServerStartError
from benchmarks.run.serving import level_records

METRICS = """# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
llamacpp:spec_decode_num_draft_tokens_total 30
llamacpp:spec_decode_num_accepted_tokens_total 7
llamacpp:spec_decode_num_drafts_total 10
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 2
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 0
"""


class Scripted(BaseHTTPRequestHandler):
    """Streams the prompt's ids + 100.. back as the output, one event per token, and a final event with timings."""

    bodies: list[dict] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        text = METRICS if self.path == "/metrics" else "{}"
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
        out = [100 + i for i in range(body["n_predict"])]
        for t in out:
            self.wfile.write(f"data: {json.dumps({'content': 'x', 'tokens': [t], 'stop': False})}\n\n".encode())
        final = {"content": "", "tokens": [], "stop": True, "stop_type": "limit", "tokens_predicted": len(out),
                 "timings": {"predicted_n": len(out), "predicted_per_token_ms": 0.4,
                             "predicted_ms": 0.4 * (len(out) - 1), "draft_n": 30,
                             "draft_n_accepted": 7}}
        self.wfile.write(f"data: {json.dumps(final)}\n\n".encode())


def cell(method: str = "dflash") -> Cell:
    return Cell("llama.cpp", "models/tiny/target", method, "models/tiny/dflash", 3, 0.0, 8, 0)


@pytest.fixture
def scripted(tmp_path):
    """A llama-server object (never started) whose port is the scripted handler's."""
    http = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    gguf = Gguf(tmp_path / "t.gguf", "sha", "src", "srcsha", "f32")
    server = LlamaCppServer.__new__(LlamaCppServer)
    server.tpot_sum_s, server.tpot_count = 0.0, 0
    LlamaServer.__init__(server, cell(), tmp_path / "log", Install(tmp_path, tmp_path / "llama-server", "key", {}),
                         gguf, gguf, {"threads": 2, "max_model_len": 64, "flash_attn": "on"}, sequences=2)
    server.port = http.server_address[1]
    Scripted.bodies = []
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


def test_the_counters_are_the_servers_once_they_hold_the_requests_timings(engine):
    engine.generate([1], SamplingParams(0.0, 4))
    c = engine.spec_counters()
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens, c.accepted_per_pos) == (10, 30, 7, [5, 2, 0])
    engine.generate([1], SamplingParams(0.0, 4))  # the requests now hold 60 drafted; the server's totals say 30
    with pytest.raises(RuntimeError, match="behind the requests"):
        engine.spec_counters()


def test_the_baseline_has_no_counters_and_a_server_without_drafts_reads_none():
    e = LlamaCppEngine()
    e.cell = cell("baseline")
    assert e.spec_counters() is None
    assert parse_metrics("llamacpp:prompt_tokens_total 3\n") is None
    assert parse_metrics(METRICS) == SpecCounters(10, 30, 7, [5, 2, 0])


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
    texts = ["ab", "abc", "abcd"]
    load = Load(texts, 5, 0.0, concurrency=2, request_rate=None, seed=0)
    result = scripted.run_load(load, tmp_path, "tag")
    assert (result.completed, result.failed, result.max_concurrent_requests) == (3, 0, 2)
    assert sorted(b["prompt"] for b in Scripted.bodies) == [[ord(c) for c in t] for t in texts]
    assert result.output_ids == [list(range(100, 105))] * 3 and result.input_lens == [2, 3, 4]
    assert all(len(itl) == 4 for itl in result.itls) and result.total_output_tokens == 15
    prompts = [Prompt("local", i, t, [ord(c) for c in t], f"sha{i}") for i, t in enumerate(texts)]
    counters = scripted.counters()
    assert counters.tpot == (pytest.approx(3 * 0.4 / 1000), 3)  # each request's server-side TPOT
    records = level_records(cell(), prompts, result, tokenizer=None, concurrency=2, request_rate=None,
                            spec=counters.spec, server_tpot=counters.tpot)
    records = [r.to_json() for r in records]
    requests = [r for r in records if r["kind"] == "request"]
    assert [r["output_ids"] for r in requests] == [list(range(100, 105))] * 3
    assert {r["extra"]["output_ids_from"] for r in requests} == {"server"}
    assert [r["kind"] for r in records[-2:]] == ["spec", "load"] and records[-2]["num_drafts"] == 10
    assert records[-1]["server_tpot_count"] == 3


def test_poisson_arrivals_are_seeded_and_increasing():
    times = _arrivals(5, 2.0, seed=1)
    assert times == _arrivals(5, 2.0, seed=1) and times[0] == 0.0 and times == sorted(times)
    assert _arrivals(3, None, 0) == [0.0, 0.0, 0.0]
