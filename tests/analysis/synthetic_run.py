"""A hand-made run that fills every summary column: greedy and sampled JAX cells with spec counters, accepted
lengths that add up to them, step-time breakdowns, a tie check, a violation, a baseline recheck, a failed unit and a
check that could not run; a faster llama.cpp baseline (the strongest baseline); workloads by context length and by
turn; a served pair at two concurrency levels, one with Poisson arrivals; and (`batches`) a JAX pair at batch size 2.
Its summary.csv and report.md are compared with golden files, and so are those of the run without its batch cells
(the batch-1 run's report stays as it was before batches existed)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.core.cells import cell_label
from benchmarks.records.store import RunStore

CELL = {"target": "t", "max_new_tokens": 8, "seed": 0, "engine_options": {}}
CELLS = {
    "base": {**CELL, "engine": "jax", "method": "baseline", "draft": None, "k": 0, "temperature": 0.0},
    "dfl": {**CELL, "engine": "jax", "method": "dflash", "draft": "d", "k": 3, "temperature": 0.0},
    "eag": {**CELL, "engine": "jax", "method": "eagle3", "draft": "e", "k": 2, "temperature": 0.0},
    "sbase": {**CELL, "engine": "jax", "method": "baseline", "draft": None, "k": 0, "temperature": 0.6},
    "sdfl": {**CELL, "engine": "jax", "method": "dflash", "draft": "d", "k": 3, "temperature": 0.6},
    "seag": {**CELL, "engine": "jax", "method": "eagle3", "draft": "e", "k": 2, "temperature": 0.6},
    "B": {**CELL, "engine": "vllm-serve", "method": "baseline", "draft": None, "k": 0, "temperature": 0.0},
    "D": {**CELL, "engine": "vllm-serve", "method": "dflash", "draft": "d", "k": 3, "temperature": 0.0},
    "L": {**CELL, "engine": "llama.cpp", "method": "baseline", "draft": None, "k": 0, "temperature": 0.0},
}
BATCH_CELLS = {
    "bbase": {**CELLS["base"], "batch_size": 2},
    "bdfl": {**CELLS["dfl"], "batch_size": 2},
}
ALL = {**CELLS, **BATCH_CELLS}
LABELS = {cid: cell_label(c["method"], c["k"]) for cid, c in ALL.items()}
OUTPUTS = [[1, 2, 3, 4, 5], [6, 7, 8, 9], [10, 11, 12, 13, 14, 15]]
# Each prompt's accepted lengths by K: at K = 3 they add up to spec()'s counters, at K = 2 none is beyond K.
ACCEPTED = {3: [[3, 3], [1, 2], [0, 0, 1, 1]], 2: [[2, 2], [2, 1], [1, 2, 2, 1]]}


def jitter(cid: str, i: int) -> float:
    """A cell's own wobble on prompt i (within ±4 %), so that paired ratios have a spread and intervals a width."""
    return 1 + 0.02 * ((i + 1) * (sum(map(ord, cid)) % 7 + 3) % 5 - 2)


def request(cid: str, dataset: str, i: int, tpot: float, ids: list[int], **extra: Any) -> dict[str, Any]:
    cell = ALL[cid]
    step = {"step_s": tpot / 1000 * 2.5, "decode_steps": 4, "draft_s": 0.001 * (i + 1), "verify_s": 0.004,
            "host_s": 0.0005} if cell["engine"] == "jax" else {}
    return {"kind": "request", "cell_id": cid, "label": LABELS[cid], "engine": cell["engine"],
            "method": cell["method"], "k": cell["k"], "dataset": dataset, "prompt_index": i,
            "prompt_sha256": f"{dataset}-{i}", "n_prompt_tokens": 10 + 3 * i, "n_out": len(ids),
            "ttft_ms": 20.0 + i, "tpot_ms": tpot * (1 + 0.07 * i) * jitter(cid, i),
            "decode_s": tpot * jitter(cid, i) * (len(ids) - 1) / 1000,
            "output_ids": ids, "accept_lengths": None if cell["method"] == "baseline" else ACCEPTED[cell["k"]][i],
            "extra": step, **extra}


def spec(cid: str, dataset: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "spec", "cell_id": cid, "label": LABELS[cid], "dataset": dataset, "num_drafts": 8,
            "num_draft_tokens": 24, "num_accepted_tokens": 11, "accepted_per_pos": [6, 3, 2][: ALL[cid]["k"]],
            **extra}


def level(cid: str, c: int, tpot: float, tok_s: float, outputs: list[list[int]],
          rate: float | None = None) -> list[dict[str, Any]]:
    recs = [request(cid, "humaneval", i, tpot, out, concurrency=c, itl_ms=[tpot, 2 * tpot])
            for i, out in enumerate(outputs)]
    recs.append({"kind": "load", "cell_id": cid, "label": LABELS[cid], "engine": CELLS[cid]["engine"],
                 "method": CELLS[cid]["method"], "k": CELLS[cid]["k"], "dataset": "humaneval", "concurrency": c,
                 "request_rate": rate, "max_concurrent_requests": c, "duration_s": 2.0, "completed": len(outputs),
                 "failed": 0, "total_output_tokens": 2 * tok_s,
                 "server_tpot_sum_s": tpot / 1000 * len(outputs), "server_tpot_count": len(outputs)})
    if CELLS[cid]["method"] != "baseline":
        recs.append(spec(cid, "humaneval", concurrency=c))
    return recs


def samples(cid: str, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [{"kind": "samples", "cell_id": cid, "label": LABELS[cid], "dataset": "gsm8k", "prompt_index": i,
             "prompt_sha256": f"gsm8k-{i}", "temperature": 0.6, "seeds": None,
             "samples": rng.choice(3, size=(120, 6), p=[0.5, 0.3, 0.2]).tolist(),
             "loglik": rng.normal(0, 1, 120).tolist(), "length": 6, "scoring": "target"} for i in range(2)]


def batch_unit(cid: str, step_ms: float) -> list[dict[str, Any]]:
    """A cell at batch size 2 on humaneval: prompts 0-1, then 2 alone; every request of a batch timed on its clock."""
    out = []
    for j, chunk in enumerate(([0, 1], [2])):
        span = step_ms * 4 / 1000
        for i in chunk:
            out.append(request(cid, "humaneval", i, step_ms, OUTPUTS[i], batch_index=j, ttft_ms=30.0 + j,
                               decode_s=span, tpot_ms=1000 * span / (len(OUTPUTS[i]) - 1),
                               extra={"batch_size": len(chunk), "batch_bucket": 2, "wasted_row_steps": 2 - j}))
    return out + ([spec(cid, "humaneval")] if cid != "bbase" else [])


def manifest(batches: bool = True) -> dict[str, Any]:
    workloads = {key: [{"tokens": 10 + 3 * i, "form": form, "context_tokens": ctx, "shot_rows": [1, 2]}
                       for i in range(3)]
                 for key, form, ctx in (("humaneval@ctx1024", "many-shot", 1024),
                                        ("humaneval@ctx4096", "many-shot", 4096))}
    workloads["mt-bench@turn2"] = [{"tokens": 40 + i, "form": "turn", "first_answer_tokens": 12} for i in range(3)]
    return {"run_id": "synthetic", "created_utc": "now", "config_path": "m.yaml", "git_sha": "abc",
            "config": {"target": "t", "max_new_tokens": 8, "num_prompts": 3, "warmup_prompts": 1,
                       "concurrency": [1, 4], **({"batch_size": [1, 2]} if batches else {})},
            "cells": {**CELLS, **(BATCH_CELLS if batches else {})}, "packages": {"jax": "0.4"}, "platform": "cpu",
            "hardware": {"device": "Test CPU", "bandwidth_gbps": 50.0, "cache_bytes": None},
            "models": {"t": {"config_sha256": "x", "weight_bytes": 2.0e6, "config": {"max_position_embeddings": 8192}}},
            "prompts": {"workloads": workloads, "first_answers_by": {"engine": "jax", "label": "baseline"},
                        "chat_template": {"enable_thinking": False}, "chat_template_sha256": "cafe"}}


def write_run(run_dir: Path, batches: bool = True) -> Path:
    """Write the run's manifest and units into run_dir (with its batch-2 cells unless `batches` is off)."""
    store = RunStore(run_dir)
    store.write_manifest(manifest(batches))
    if batches:
        store.write_unit_json("bbase", "humaneval", batch_unit("bbase", 9.0))
        store.write_unit_json("bdfl", "humaneval", batch_unit("bdfl", 6.0))
    base = [request("base", "humaneval", i, 10.0, ids) for i, ids in enumerate(OUTPUTS)]
    store.write_unit_json("base", "humaneval", base)
    store.write_unit_json("base", "humaneval@recheck", [{**r, "kind": "recheck", "tpot_ms": r["tpot_ms"] * 1.3}
                                                   for r in base])
    # a second engine's baseline, faster than the JAX one: the strongest baseline of humaneval
    store.write_unit_json("L", "humaneval", [request("L", "humaneval", i, 2.0, ids) for i, ids in enumerate(OUTPUTS)])
    diverged = [OUTPUTS[0], OUTPUTS[1][:2] + [99, 98], OUTPUTS[2]]
    store.write_unit_json("dfl", "humaneval", [request("dfl", "humaneval", i, 4.0 + i, ids)
                                          for i, ids in enumerate(diverged)] + [spec("dfl", "humaneval")])
    store.write_unit_json("dfl", "humaneval@ties", [{
        "kind": "tie_check", "cell_id": "dfl", "label": "dflash-k3 tie check", "engine": "jax", "dataset": "humaneval",
        "prompt_sha256": "humaneval-1", "prompt_index": 1, "divergence": 2, "baseline_token": 8, "spec_token": 99,
        "dtype": "bfloat16", "top_ids": [8, 99], "top_logits": [5.2, 5.19], "token_logits": [5.2, 5.19]}])
    store.write_unit_json("eag", "humaneval", [{"kind": "error", "cell_id": "eag", "label": "eagle3-k2",
                                           "dataset": "humaneval", "error": "engine did not start",
                                           "traceback": ""}])
    for key, ctx, turn in (("humaneval@ctx1024", 1024, None), ("humaneval@ctx4096", 4096, None),
                           ("mt-bench@turn2", None, 2)):
        where = {"context_tokens": ctx, "turn": turn}
        store.write_unit_json("base", key, [request("base", key, i, 11.0, ids, **where)
                                            for i, ids in enumerate(OUTPUTS)])
        outputs = [*OUTPUTS[:2], OUTPUTS[2][:3] + [50, 51]] if turn else OUTPUTS  # a divergence no tie explains
        store.write_unit_json("dfl", key, [request("dfl", key, i, 5.0, ids, **where) for i, ids in enumerate(outputs)]
                         + [spec("dfl", key)])
    store.write_unit_json("sbase", "gsm8k", [request("sbase", "gsm8k", i, 10.0, ids) for i, ids in enumerate(OUTPUTS)]
                     + samples("sbase", 1))
    store.write_unit_json("sdfl", "gsm8k", [request("sdfl", "gsm8k", i, 6.0, ids) for i, ids in enumerate(OUTPUTS)]
                     + [spec("sdfl", "gsm8k")] + samples("sdfl", 2))
    store.write_unit_json("seag", "gsm8k", [request("seag", "gsm8k", i, 7.0 * (3 if i == 2 else 1), ids)
                                            for i, ids in enumerate(OUTPUTS)])  # prompt 2 stalled
    other = [OUTPUTS[0], OUTPUTS[1][:1] + [77, 76, 75], OUTPUTS[2]]
    for c, (tb, td, sb, sd, out) in {1: (10.0, 5.0, 100, 180, OUTPUTS), 4: (12.0, 9.0, 300, 240, other)}.items():
        rate = 2.0 if c > 1 else None
        store.write_unit_json("B", f"humaneval@c{c}", level("B", c, tb, sb, OUTPUTS, rate))
        store.write_unit_json("D", f"humaneval@c{c}", level("D", c, td, sd, out, rate))
    return run_dir
