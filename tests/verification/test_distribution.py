"""The distribution check's statistics (pure, no engine): calibrated under equality, powerful under a difference,
wired into summary rows, the report and the exit verdicts; and the two τ statistics."""
from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.analysis.summary import summarize
from benchmarks.core import metrics
from verification import distribution as dist
from verification.lossless import distribution_failures, verdict_lines


def draw(rng: np.random.Generator, probs: np.ndarray, n: int, length: int = dist.POSITIONS) -> list[list[int]]:
    return rng.choice(len(probs), size=(n, length), p=probs).tolist()


def arm(rng, probs, n=dist.SAMPLES, shift=0.0, prompts=dist.PROMPTS):
    return [{"prompt_sha256": str(i), "samples": draw(rng, probs, n), "loglik": list(rng.normal(shift, 1.0, n))}
            for i in range(prompts)]


PROBS = np.array([0.25, 0.25, 0.15, 0.1, 0.1, 0.05, 0.04, 0.03, 0.02, 0.005, 0.005])


def test_false_positive_rate_is_at_most_nominal():
    rng = np.random.default_rng(0)
    fails = sum(not dist.check(arm(rng, PROBS), arm(rng, PROBS)).passed for _ in range(200))
    assert fails / 200 <= 2 * dist.ALPHA  # Holm is conservative: expect about alpha or less


def test_a_shift_of_the_detectable_size_is_found():
    rng = np.random.default_rng(1)
    moved = PROBS.copy()
    moved[0] -= 0.2
    moved[1] += 0.2  # 20 % of the mass between two 25 % tokens: w ~ 0.31
    res = [dist.check(arm(rng, PROBS), arm(rng, moved)) for _ in range(30)]
    w = math.sqrt(0.25 * sum((a - b) ** 2 / ((a + b) / 2) for a, b in zip(PROBS, moved)))
    assert w >= res[0].detectable_w
    assert sum(not r.passed for r in res) >= 27


def test_a_loglik_shift_alone_is_found():
    rng = np.random.default_rng(2)
    res = [dist.check(arm(rng, PROBS), arm(rng, PROBS, shift=0.8)) for _ in range(20)]
    assert all(not r.passed for r in res)
    assert all(min(v for k, v in r.p_values.items() if k.endswith("loglik")) < dist.ALPHA for r in res)


def test_pooling_keeps_counts_and_expected_counts():
    rng = np.random.default_rng(3)
    a = rng.choice(50, size=200, p=np.ones(50) / 50)
    b = rng.choice(50, size=200, p=np.ones(50) / 50)
    table = dist.pooled_table(a, b)
    assert table.sum() == 400 and table.sum(axis=1).tolist() == [200, 200]
    assert (table.sum(axis=0) * 0.5 >= dist.MIN_EXPECTED).all()
    assert dist.g_test(np.zeros(10, int), np.zeros(10, int)) == 1.0


def test_ended_samples_are_a_category():
    x = dist.padded([[5, 6], [5]], 3)
    assert x.tolist() == [[5, 6, dist.ENDED], [5, dist.ENDED, dist.ENDED]]


def test_holm():
    adj = dist.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": math.nan})
    assert adj == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})


def test_tau_prompt_mean_weighs_prompts_equally():
    long_low, short_high = [0] * 9 + [1], [3, 3]  # τ 1.1 over 10 steps, τ 4.0 over 2 steps
    assert metrics.tau_prompt_mean([long_low, short_high, None, []]) == pytest.approx((1.1 + 4.0) / 2)
    pooled = 1 + sum(long_low + short_high) / len(long_low + short_high)
    assert pooled == pytest.approx(1 + 7 / 12)
    assert math.isnan(metrics.tau_prompt_mean([None]))


def _records(meth_probs: np.ndarray) -> tuple[list[dict], dict]:
    rng = np.random.default_rng(4)
    cells = {cid: {"engine": "jax", "target": "t", "draft": None if m == "baseline" else "d", "method": m,
                   "k": 0 if m == "baseline" else 3, "temperature": 0.6, "max_new_tokens": 8, "seed": 0,
                   "engine_options": {}} for cid, m in (("b", "baseline"), ("m", "dflash"))}
    records = []
    for cid, probs in (("b", PROBS), ("m", meth_probs)):
        label = "baseline" if cid == "b" else "dflash-k3"
        records.append({"kind": "request", "cell_id": cid, "label": label, "dataset": "d", "prompt_index": 0,
                        "prompt_sha256": "x", "n_out": 8, "ttft_ms": 1.0, "tpot_ms": 1.0, "decode_s": 0.01,
                        "output_ids": [1] * 8, "accept_lengths": None if cid == "b" else [1, 0, 2]})
        for s in arm(rng, probs, prompts=1):
            records.append({"kind": "samples", "cell_id": cid, "label": label, "dataset": "d", "prompt_index": 0,
                            **s, "prompt_sha256": "x"})
    return records, {"run_id": "r", "cells": cells}


def test_summary_report_and_verdicts_carry_the_check():
    good = summarize(*_records(PROBS))
    row = next(r for r in good if r["method"] == "dflash")
    assert row["dist_verdict"] == "pass" and row["dist_n_base"] == dist.SAMPLES
    assert row["dist_n_tests"] == dist.POSITIONS + 2
    assert row["tau_prompt_mean"] == pytest.approx(2.0)
    assert not distribution_failures(good)
    bad = summarize(*_records(np.roll(PROBS, 1)))
    row = next(r for r in bad if r["method"] == "dflash")
    assert row["dist_verdict"] == "FAIL" and row["dist_p_min"] < dist.ALPHA
    assert distribution_failures(bad) == [row]
    assert any(line.startswith("DISTRIBUTION VIOLATION") for line in verdict_lines(bad))
    assert "| FAIL |" in dist.report_markdown(bad)


def test_sampling_stage_draws_independent_arms_with_distinct_seeds():
    from benchmarks.core.datasets import Prompt
    from benchmarks.core.records import Cell, RequestRecord
    from benchmarks.run.sampling import collect

    class Echo:  # returns its seed as the only token: shows which seed drew which sample
        def generate(self, ids, params):
            assert params.max_new_tokens == dist.POSITIONS
            return RequestRecord([params.seed], 0.0, 0.0)

    common = dict(engine="jax", target="t", k=3, temperature=0.6, max_new_tokens=64, seed=0)
    base, spec = Cell(method="baseline", draft=None, **common), Cell(method="dflash", draft="d", **common)
    prompts = [Prompt("d", i, "x", [1, 2, i], f"sha{i}") for i in range(dist.PROMPTS + 1)]
    score = lambda ids, samples, t: [float(len(s)) for s in samples]  # noqa: E731
    a, b = collect(Echo(), base, "d", prompts, score), collect(Echo(), spec, "d", prompts, score)
    assert [r["prompt_sha256"] for r in a] == [f"sha{i}" for i in range(dist.PROMPTS)]
    seeds_a = {s for r in a for s in r["seeds"]}
    seeds_b = {s for r in b for s in r["seeds"]}
    assert len(seeds_a) == len(seeds_b) == dist.PROMPTS * dist.SAMPLES and not seeds_a & seeds_b
    assert all(r["samples"] == [[s] for s in r["seeds"]] and r["loglik"] == [1.0] * dist.SAMPLES for r in a)
    assert collect(Echo(), Cell(method="dflash", draft="d", **{**common, "temperature": 0.0}), "d", prompts,
                   score) == []
