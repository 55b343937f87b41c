"""The distribution check's statistics (pure, no engine): calibrated under equality on a synthetic sampler whose
distribution is known exactly (per cell and per run), its stated power the power of the tests it runs, the
sequence-level test chosen by power, wired into summary rows (one Holm family per run), the report and the exit
verdicts; the sampling stage's independent, self-scored arms; and the two τ statistics. About 30 s."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from benchmarks.core import metrics
from benchmarks.core.cells import cell_label
from tests.typed_runs import summary_json
from verification import distribution as dist
from verification.lossless import distribution_failures, verdict_lines

PROBS = np.array(dist.REFERENCE)


class Chain:
    """A synthetic autoregressive sampler whose distribution is known exactly: a bigram chain over VOCAB tokens
    (token 0 is EOS), one start row per prompt, sampled at `temperature` from fixed logits; `loglik` is the raw
    (temperature 1) log-likelihood of each sample, as the engines' score_many give it."""

    VOCAB = 40

    def __init__(self, temperature: float, seed: int = 7) -> None:
        logits = np.random.default_rng(seed).normal(0.0, 2.0, (self.VOCAB + dist.PROMPTS, self.VOCAB))
        logits[:, 0] -= 2.0  # EOS: rare, so most samples run to LENGTH
        self.raw = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        scaled = logits / temperature
        self.cdf = np.cumsum(np.exp(scaled - np.logaddexp.reduce(scaled, axis=1, keepdims=True)), axis=1)

    def arm(self, rng: np.random.Generator, n: int = dist.SAMPLES) -> list[dist.Samples]:
        """One arm as the runner stores it: per prompt, n samples of up to LENGTH tokens with their logliks."""
        out = []
        for prompt in range(dist.PROMPTS):
            state = np.full(n, self.VOCAB + prompt)
            tokens = np.zeros((n, dist.LENGTH), np.int64)
            alive = np.ones(n, bool)
            lengths = np.zeros(n, np.int64)
            loglik = np.zeros(n)
            for t in range(dist.LENGTH):
                u = rng.random(n)
                nxt = np.minimum((self.cdf[state] < u[:, None]).sum(axis=1), self.VOCAB - 1)
                loglik += np.where(alive, self.raw[state, nxt], 0.0)
                tokens[:, t] = nxt
                lengths += alive
                alive &= nxt != 0
                state = nxt
            samples = [row[:k].tolist() for row, k in zip(tokens, lengths)]
            out.append(dist.Samples(f"p{prompt}", samples, loglik.tolist(), dist.SCORING, dist.LENGTH))
        return out


CHAINS = (Chain(0.6), Chain(1.0))  # the shipped temperatures


def binomial_bound(rate: float, reps: int) -> float:
    """The nominal rate plus two binomial standard errors at `reps` repetitions."""
    return rate + 2 * math.sqrt(rate * (1 - rate) / reps)


def test_false_positive_rate_per_cell_is_at_most_nominal_on_a_known_sampler():
    rng, reps = np.random.default_rng(0), 1000
    fails = 0
    for r in range(reps):
        chain = CHAINS[r % 2]
        fails += not dist.check(chain.arm(rng), chain.arm(rng)).passed
    assert fails / reps <= binomial_bound(dist.ALPHA, reps), f"{fails} of {reps} AR-vs-AR checks failed"


def test_false_positive_rate_per_run_is_at_most_nominal():
    """A run shaped like tiny-sampled: two temperatures, four speculative rows per temperature sharing a baseline,
    all correct; one Holm family over the run's tests (run_family)."""
    rng, reps = np.random.default_rng(1), 200
    fails = 0
    for _ in range(reps):
        checks = []
        for chain in CHAINS:
            base = chain.arm(rng)
            checks += [dist.check(base, chain.arm(rng)) for _ in range(4)]
        run = dist.run_family(checks)
        assert {c.family for c in run} == {8 * dist.PROMPTS * (dist.POSITIONS + 2)}
        fails += any(not c.passed for c in run)
    assert fails / reps <= binomial_bound(dist.ALPHA, reps), f"{fails} of {reps} correct runs showed a FAIL"


def _shifted(rng: np.random.Generator, moved: bool, shift: float) -> list[dist.Samples]:
    """An arm whose first position's marginal is PROBS (or PROBS with MOVED moved) and whose other tokens and
    log-likelihood (normal, shifted by `shift`) carry no difference."""
    p, q = dist.reference_pair()
    out = []
    for i in range(dist.PROMPTS):
        first = rng.choice(len(p), dist.SAMPLES, p=q if moved and i == 0 else p)
        rest = rng.choice(len(p), (dist.SAMPLES, dist.LENGTH - 1), p=p)
        samples = np.column_stack([first, rest]).tolist()
        out.append(dist.Samples(str(i), samples, list(rng.normal(shift if i == 0 else 0.0, 1.0, dist.SAMPLES)),
                                dist.SCORING, dist.LENGTH))
    return out


def test_stated_power_is_the_power_of_the_check_that_runs():
    """power() against a reduced simulation through check() itself, one false test among the cell's 16."""
    pw = dist.power(dist.SAMPLES, dist.SAMPLES, dist.PROMPTS * (dist.POSITIONS + 2))
    rng, reps = np.random.default_rng(2), 120
    marginal = [dist.check(_shifted(rng, False, 0.0), _shifted(rng, True, 0.0)) for _ in range(reps)]
    sequence = [dist.check(_shifted(rng, False, 0.0), _shifted(rng, False, dist.SHIFT_SD)) for _ in range(reps)]
    for res, stated in ((marginal, pw.marginal), (sequence, pw.sequence)):
        found = sum(not r.passed for r in res) / reps
        assert abs(found - stated) <= 3 * math.sqrt(stated * (1 - stated) / reps) + 0.02, (found, stated)
    assert pw == dist.power(dist.SAMPLES, dist.SAMPLES, dist.PROMPTS * (dist.POSITIONS + 2))  # seeded, cached
    assert dist.power(200, 200, 128).sequence < pw.sequence  # a larger family costs power
    assert pw.w == pytest.approx(0.309, abs=1e-3)


def test_the_mean_test_is_more_powerful_than_kolmogorov_smirnov_at_the_shipped_sizes():
    """The reason the sequence-level statistics go through Welch's test: at 200 vs 200 and α/16 it finds a 0.47 SD
    shift far more often than the KS test the check ran before (simulated in full: 89 % against 67 %)."""
    rng, reps, level = np.random.default_rng(3), 400, dist.ALPHA / 16
    x, y = rng.standard_normal((reps, 200)), rng.standard_normal((reps, 200)) + 0.47
    welch = np.mean(dist.mean_test(x, y) <= level)
    ks = np.mean([stats.ks_2samp(a, b).pvalue <= level for a, b in zip(x, y)])
    assert welch >= ks + 0.12, (welch, ks)


def test_mean_test_is_welch_and_handles_constant_arms():
    rng = np.random.default_rng(4)
    a, b = rng.normal(0, 1, 50), rng.normal(0.3, 2, 70)
    assert dist.mean_test(a, b) == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue)
    assert dist.mean_test([2.0] * 5, [2.0] * 5) == 1.0 and dist.mean_test([2.0] * 5, [3.0] * 5) == 0.0
    assert math.isnan(dist.mean_test([1.0], [1.0, 2.0]))
    # a constant rounding offset between two scoring engines moves the mean by the offset only
    assert dist.mean_test(a, a + 1e-5) > 0.99


def test_g_test_is_williams_corrected_log_likelihood_ratio_test_of_the_pooled_table():
    rng = np.random.default_rng(5)
    for _ in range(20):
        a, b = rng.choice(len(PROBS), 200, p=PROBS), rng.choice(len(PROBS), 150, p=np.roll(PROBS, 1))
        table = dist.pooled_table(a, b)
        g = stats.chi2_contingency(table, correction=False, lambda_="log-likelihood").statistic
        n, c = table.sum(), table.shape[1]
        q = 1 + (n * (1 / table.sum(axis=1)).sum() - 1) * (n * (1 / table.sum(axis=0)).sum() - 1) / (6 * n * (c - 1))
        assert dist.g_test(a, b) == pytest.approx(stats.chi2.sf(g / q, c - 1), rel=1e-9)


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
    assert dist.distinct([[5, 6, 5], [7]]).tolist() == [2, 1]


def test_holm_within_a_cell_and_over_a_run():
    adj = dist.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": math.nan})
    assert adj == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})
    assert dist.holm({"a": 0.01}, family=10) == pytest.approx({"a": 0.1})
    one = dist.Check({}, 0.0, True, 200, 200, 2, 2, raw={"x": 0.001, "y": 0.5})
    two = dist.Check({}, 0.0, True, 200, 200, 2, 2, raw={"x": 0.004, "y": 0.9})
    a, b = dist.run_family([one, two])
    assert a.family == b.family == 4 and a.p_values == pytest.approx({"x": 0.004, "y": 1.0})
    assert b.p_values == pytest.approx({"x": 0.012, "y": 1.0}) and not a.passed and b.passed


def test_sequence_tests_need_comparable_arms():
    rng = np.random.default_rng(6)
    base, meth = _shifted(rng, False, 0.0), _shifted(rng, False, 0.0)
    full = dist.check(base, meth)
    assert full.n_tests == dist.PROMPTS * (dist.POSITIONS + 2) and full.length == dist.LENGTH
    other_scoring = [dataclasses.replace(m, scoring="temperature") for m in meth]
    assert not any(k.endswith("loglik") for k in dist.check(base, other_scoring).raw)
    other_length = [dataclasses.replace(m, length=6) for m in meth]
    raw = dist.check(base, other_length).raw
    assert not any(k.endswith(("loglik", "distinct")) for k in raw) and len(raw) == dist.PROMPTS * dist.POSITIONS


def test_tau_prompt_mean_weighs_prompts_equally():
    long_low, short_high = [0] * 9 + [1], [3, 3]  # τ 1.1 over 10 steps, τ 4.0 over 2 steps
    assert metrics.tau_prompt_mean([long_low, short_high, None, []]) == pytest.approx((1.1 + 4.0) / 2)
    pooled = 1 + sum(long_low + short_high) / len(long_low + short_high)
    assert pooled == pytest.approx(1 + 7 / 12)
    assert math.isnan(metrics.tau_prompt_mean([None]))


def _records(meth_probs: np.ndarray, methods: tuple[str, ...] = ("dflash",)) -> tuple[list[dict], dict]:
    rng = np.random.default_rng(4)
    ids = [("b", "baseline")] + [(f"m{i}", m) for i, m in enumerate(methods)]
    cells = {cid: {"engine": "jax", "target": "t", "draft": None if m == "baseline" else "d", "method": m,
                   "k": 0 if m == "baseline" else 3, "temperature": 0.6, "max_new_tokens": 8, "seed": 0,
                   "engine_options": {}} for cid, m in ids}
    records = []
    for cid, m in ids:
        probs = PROBS if cid in ("b", "m1") else meth_probs
        label = cell_label(m, cells[cid]["k"])
        records.append({"kind": "request", "cell_id": cid, "label": label, "dataset": "d", "prompt_index": 0,
                        "prompt_sha256": "x", "n_out": 8, "ttft_ms": 1.0, "tpot_ms": 1.0, "decode_s": 0.01,
                        "output_ids": [1] * 8, "accept_lengths": None if m == "baseline" else [1, 0, 2]})
        samples = rng.choice(len(probs), (dist.SAMPLES, dist.LENGTH), p=probs).tolist()
        records.append({"kind": "samples", "cell_id": cid, "label": label, "dataset": "d", "prompt_index": 0,
                        "prompt_sha256": "x", "samples": samples, "loglik": list(rng.normal(0, 1, dist.SAMPLES)),
                        "length": dist.LENGTH, "scoring": dist.SCORING})
    return records, {"run_id": "r", "cells": cells}


def test_summary_report_and_verdicts_carry_the_check():
    good = summary_json(*_records(PROBS)).rows
    row = next(r for r in good if r.method == "dflash")
    assert row.dist_verdict == "pass" and row.dist_n_base == dist.SAMPLES
    assert row.dist_n_tests == row.dist_family == dist.POSITIONS + 2 and row.dist_length == dist.LENGTH
    pw = dist.power(dist.SAMPLES, dist.SAMPLES, dist.POSITIONS + 2)
    assert (row.dist_power_marginal, row.dist_power_sequence, row.dist_shift_detected) == (
        pw.marginal, pw.sequence, pw.shift_detected)
    assert row.tau_prompt_mean == pytest.approx(2.0)
    assert not distribution_failures(good)
    bad = summary_json(*_records(np.roll(PROBS, 1))).rows
    row = next(r for r in bad if r.method == "dflash")
    assert row.dist_verdict == "FAIL" and row.dist_p_min < dist.ALPHA
    assert distribution_failures(bad) == [row]
    assert any(line.startswith("DISTRIBUTION VIOLATION") for line in verdict_lines(bad))
    text = dist.report_markdown(bad)
    assert "| FAIL |" in text and f"| {pw.marginal:.0%} | {pw.sequence:.0%} | {pw.shift_detected:.2f} SD |" in text
    assert f"{dist.SAMPLES} | {dist.SAMPLES} | {dist.LENGTH} | {dist.POSITIONS + 2} / {dist.POSITIONS + 2} |" in text


def test_summary_holds_one_holm_family_per_run():
    rows = summary_json(*_records(np.roll(PROBS, 1), methods=("dflash", "eagle3"))).rows
    bad, good = (next(r for r in rows if r.method == m) for m in ("dflash", "eagle3"))
    family = 2 * (dist.POSITIONS + 2)
    assert bad.dist_family == good.dist_family == family
    assert bad.dist_verdict == "FAIL" and good.dist_verdict == "pass"
    pw = dist.power(dist.SAMPLES, dist.SAMPLES, family)
    assert good.dist_power_sequence == pw.sequence and f"all {family} tests of the run's 2 checked cells" in \
        dist.report_markdown(rows)


def test_sampling_stage_draws_independent_arms_scored_by_their_own_engine():
    from benchmarks.core.cells import Cell
    from benchmarks.core.engine_io import RequestRecord
    from benchmarks.data.datasets import Prompt
    from benchmarks.run.sampling import collect

    class Echo:  # returns its seed as the only token: shows which seed drew which sample; scores by length
        def generate(self, ids, params):
            assert params.max_new_tokens == dist.LENGTH
            return RequestRecord([params.seed], 0.0, 0.0)

        def score_many(self, ids, continuations):
            return [float(len(c)) for c in continuations]

    common = dict(engine="jax", target="t", k=3, temperature=0.6, max_new_tokens=64, seed=0)
    base, spec = Cell(method="baseline", draft=None, **common), Cell(method="dflash", draft="d", **common)
    prompts = [Prompt("d", i, "x", [1, 2, i], f"sha{i}") for i in range(dist.PROMPTS + 1)]
    a, b = collect(Echo(), base, "d", prompts), collect(Echo(), spec, "d", prompts)
    assert [r.prompt_sha256 for r in a] == [f"sha{i}" for i in range(dist.PROMPTS)]
    seeds_a = {s for r in a for s in r.seeds}
    seeds_b = {s for r in b for s in r.seeds}
    assert len(seeds_a) == len(seeds_b) == dist.PROMPTS * dist.SAMPLES and not seeds_a & seeds_b
    assert all(r.samples == [[s] for s in r.seeds] and r.loglik == [1.0] * dist.SAMPLES
               and r.scoring == dist.SCORING and r.length == dist.LENGTH for r in a)
    unscored = collect(type("Plain", (), {"generate": Echo.generate})(), base, "d", prompts)
    assert all(r.loglik is None and r.scoring is None for r in unscored)
    assert collect(Echo(), Cell(method="dflash", draft="d", **{**common, "temperature": 0.0}), "d", prompts) == []


def test_vllm_arms_get_distinct_engine_seeds():
    from benchmarks.core.cells import SPEC_METHODS, Cell
    from benchmarks.engines.vllm.vllm_engine import engine_seed

    common = dict(engine="vllm", target="t", k=3, temperature=0.6, max_new_tokens=64)
    for seed in (0, 7):
        arms = [Cell(method="baseline", draft=None, seed=seed, **common)]
        arms += [Cell(method=m, draft="d" if m != "ngram" else None, seed=seed, **common) for m in SPEC_METHODS]
        assert len({engine_seed(c) for c in arms}) == len(arms)
        assert engine_seed(arms[0]) == seed
