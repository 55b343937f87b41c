"""The declared record kinds: written as today's lines plus a schema version, read back with validation, and listed
in docs/outputs.md as declared."""
from __future__ import annotations

import json
import re

import pytest

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import LoadResult, RequestRecord, SpecCounters, TokenScores
from benchmarks.core.paths import ROOT
from benchmarks.data.datasets import Prompt
from benchmarks.records import store as store_module
from benchmarks.records.records import (
    KINDS,
    SCHEMA_VERSION,
    Level,
    RecordError,
    checked,
    error_line,
    json_fields,
    load_line,
    probe_of,
    recheck_of,
    request_line,
    samples_line,
    served_spec_line,
    spec_line,
    tie_check_line,
)
from benchmarks.records.store import RunStore

CELL = Cell("jax", "t", "dflash", "d", 3, 0.0, 4, 0)
PROMPT = Prompt("humaneval", 2, "q", [5, 6, 7], "sha", context_tokens=700)
RESULT = LoadResult(duration=2.0, completed=1, failed=0, total_output_tokens=4, max_concurrent_requests=None,
                    ttfts=[], itls=[], latencies=[], start_times=[], input_lens=[], output_lens=[], errors=[])


def test_a_batch_request_line_is_todays_dict_plus_the_version():
    line = request_line(CELL, PROMPT, RequestRecord([1, 2, 3], 0.01, 0.03, [2, 1])).to_json()
    assert line == {"kind": "request", "schema_version": SCHEMA_VERSION, "cell_id": CELL.cell_id, "label": "dflash-k3",
                    "engine": "jax", "method": "dflash", "k": 3, "dataset": "humaneval@ctx700", "context_tokens": 700,
                    "prompt_index": 2, "prompt_sha256": "sha", "n_prompt_tokens": 3, "n_out": 3, "ttft_ms": 10.0,
                    "tpot_ms": pytest.approx(10.0), "decode_s": pytest.approx(0.02), "output_ids": [1, 2, 3],
                    "accept_lengths": [2, 1]}


def test_optional_fields_appear_only_where_they_apply():
    served = request_line(CELL, PROMPT, RequestRecord([1], 0.01, 0.02, extra={"x": 1}), n_out=2,
                          level=Level(4, None), itl_ms=[1.0], start_s=0.5).to_json()
    assert (served["concurrency"], served["request_rate"], served["n_out"], served["extra"]) == (4, None, 2, {"x": 1})
    assert set(spec_line(CELL, "humaneval", SpecCounters(1, 3, 2, [1, 1, 0])).to_json()) == {
        "kind", "schema_version", "cell_id", "label", "dataset", "num_drafts", "num_draft_tokens",
        "num_accepted_tokens", "accepted_per_pos"}
    assert served_spec_line(CELL, PROMPT, Level(2, 1.5), SpecCounters()).to_json()["request_rate"] == 1.5
    assert "concurrency" not in error_line(CELL, "humaneval", ValueError("x")).to_json()


def test_every_kind_reads_back_as_written():
    try:
        raise ValueError("boom")
    except ValueError as exc:
        error = error_line(CELL, "humaneval", exc, concurrency=2)
    request = request_line(CELL, PROMPT, RequestRecord([1], 0.0, 0.0))
    lines = [request_line(CELL, PROMPT, RequestRecord([1], 0.0, 0.0), level=Level(1, None)), error,
             spec_line(CELL, "humaneval", SpecCounters(1, 3, 2, [1, 1, 0])),
             served_spec_line(CELL, PROMPT, Level(2, None), SpecCounters(1, 3, 2, [1, 1, 0])),
             load_line(CELL, PROMPT, Level(2, None), RESULT, (1.0, 4)),
             samples_line(CELL, "humaneval", PROMPT, 8, [1], [[3]], None, None, 1),
             tie_check_line(CELL, "humaneval", PROMPT, 1, 3, 4, TokenScores("bfloat16", [3], [1.0], [1.0, 0.5]))]
    for line in lines:
        assert type(line).from_json(line.to_json()) == line
    assert error.error == "ValueError: boom" and "boom" in error.traceback
    recheck = recheck_of(request).to_json()
    assert recheck == {**request.to_json(), "kind": "recheck", "label": "dflash-k3 recheck"}
    assert recheck_of(error).error == "drift recheck: ValueError: boom"
    probe = probe_of(lines, 1)  # a serving level's lines as a capacity probe's round
    for line in probe:
        assert type(line).from_json(line.to_json()) == line and line.round == 1
    assert [line.kind for line in probe] == ["probe_request", "probe"]
    assert probe[1].counters() == SpecCounters(1, 3, 2, [1, 1, 0]) and probe[1].duration_s == 2.0
    assert {line.kind for line in lines + probe} | {"recheck"} == set(KINDS)


def test_unknown_kinds_and_versions_are_named_and_old_lines_read(tmp_path):
    old = {"kind": "request", "cell_id": "c"}  # a run folder written before the version field
    assert checked([old], "u.jsonl") == [old]
    with pytest.raises(RecordError, match=r"u.jsonl line 2: record kind 'mystery' is not one this harness reads"):
        checked([old, {"kind": "mystery"}], "u.jsonl")
    with pytest.raises(RecordError, match=r"line 1: spec record of schema version 9; this harness reads version 1"):
        checked([{"kind": "spec", "schema_version": 9}], "u.jsonl")
    store = RunStore(tmp_path)
    (tmp_path / "units").mkdir(parents=True, exist_ok=True)
    (tmp_path / "units" / "c__humaneval.jsonl").write_text(json.dumps({"kind": "spec", "schema_version": 2}) + "\n")
    assert not store.is_done("c", "humaneval")
    with pytest.raises(RecordError, match="c__humaneval.jsonl line 1"):
        store_module.read_jsonl(tmp_path / "units" / "c__humaneval.jsonl")


def test_docs_list_every_kind_with_its_declared_fields():
    text = (ROOT / "docs" / "outputs.md").read_text().split("**Record kinds.**", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", text, re.M))
    assert set(rows) == set(KINDS)
    for kind, cls in KINDS.items():
        documented = rows[kind].strip()
        if documented.startswith("the fields of `"):
            documented = rows[documented.removeprefix("the fields of `").rstrip("`")].strip()
        assert documented == ", ".join(n + "?" * o for n, o in json_fields(cls)[2:]), kind


def test_a_probes_requests_fall_in_waves_of_what_was_in_flight_in_the_order_they_were_sent():
    from benchmarks.records.probe_rounds import waves_of

    def sent(*starts: float) -> list:
        return [type("R", (), {"start_s": s, "ttft_ms": 100.0, "decode_s": 0.9})() for s in starts]
    assert waves_of(2, "concurrency", sent(0.3, 0.0, 0.1, 0.2, 0.4)) == [1, 0, 0, 1, 2]
    assert waves_of(4.0, "request_rate", sent(*range(6))) == [0, 0, 0, 0, 1, 1]  # 4 req/s × 1 s in flight
    assert waves_of(1, "concurrency", sent(0.0, 1.0, 2.0)) == [0, 1, 2]  # one alone
    assert waves_of(2, "concurrency", sent(0.0, None)) is None
    assert waves_of(2, "concurrency", sent(0.0, 0.0, 0.0)) is None  # no order to group by
