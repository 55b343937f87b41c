"""Hand-made records and manifests, as the tests write them (JSON objects), read as the harness reads a run folder:
typed lines and a typed manifest (benchmarks/records/records.py, benchmarks/records/manifest_read.py), then
summarised. A hand-made record names what its test is about; the fields it leaves out take the defaults below."""
from __future__ import annotations

from typing import Any

from benchmarks.analysis.summary import Summary, summarize
from benchmarks.records.manifest_read import Manifest
from benchmarks.records.records import Line, parse_lines
from benchmarks.records.summary_row import SummaryRow

CELL_DEFAULTS = {"target": "t", "draft": None, "k": 0, "temperature": 0.0, "max_new_tokens": 8, "seed": 0,
                 "engine_options": {}}
REQUEST_DEFAULTS = {"kind": "request", "cell_id": "c", "label": "baseline", "engine": "jax", "method": "baseline",
                    "k": 0, "dataset": "humaneval", "prompt_index": 0, "n_prompt_tokens": 4, "ttft_ms": 10.0,
                    "decode_s": 0.1, "accept_lengths": None}
DEFAULTS: dict[str, dict[str, Any]] = {
    "request": REQUEST_DEFAULTS,
    "recheck": REQUEST_DEFAULTS,
    "spec": {"label": "spec", "dataset": "humaneval"},
    "load": {"label": "load", "engine": "vllm-serve", "method": "baseline", "k": 0, "dataset": "humaneval",
             "max_concurrent_requests": None, "server_tpot_sum_s": None, "server_tpot_count": None, "failed": 0},
    "samples": {"label": "samples", "dataset": "humaneval", "prompt_index": 0, "temperature": 0.6, "length": 6,
                "seeds": None, "loglik": None, "scoring": None},
    "error": {"label": "error", "dataset": "humaneval", "traceback": ""},
    "tie_check": {"dataset": "humaneval", "engine": "jax", "prompt_index": 0, "dtype": "bfloat16"},
}


def request(**fields: Any) -> dict[str, Any]:
    """A request record of the given fields, REQUEST_DEFAULTS for the rest (n_out from output_ids)."""
    out = {**REQUEST_DEFAULTS, "output_ids": [1, 2, 3], **fields}
    return {"n_out": len(out["output_ids"]), "prompt_sha256": f"p{out['prompt_index']}", "tpot_ms": 1.0, **out}


def lines(records: list[dict[str, Any] | Line]) -> list[Line]:
    """Typed lines of hand-made records (lines given as such are kept)."""
    out: list[Line] = []
    for r in records:
        if isinstance(r, Line):
            out.append(r)
        else:
            fields = {**DEFAULTS.get(r.get("kind", ""), {}), **r}
            if fields.get("kind") in ("request", "recheck"):
                fields = request(**fields)
            out += parse_lines([fields], "test records")
    return out


def manifest(value: dict[str, Any]) -> Manifest:
    """A manifest of the given fields (`config` empty and cells' unset fields CELL_DEFAULTS where not given)."""
    cells = {cid: {**CELL_DEFAULTS, **c} for cid, c in (value.get("cells") or {}).items()}
    return Manifest.from_json({"config": {}, **value, "cells": cells}, "test manifest")


def summary_json(records: list[dict[str, Any] | Line], value: dict[str, Any]) -> Summary:
    """Hand-made records summarised under a hand-made manifest."""
    return summarize(lines(records), manifest(value))


def summary_row(**fields: Any) -> SummaryRow:
    """A hand-made summary row: the columns a test names, a greedy jax baseline on humaneval for the identity it does
    not name, every other column at its type's default (None where a column does not apply)."""
    identity = {"engine": "jax", "method": "baseline", "dataset": "humaneval", "temperature": 0.0}
    merged = {**identity, **fields}
    return SummaryRow(**{"label": merged["method"], **merged})
