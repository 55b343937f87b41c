"""A run executed (benchmarks/run/execute.py), its store and summary, with a scripted in-process engine: warm-up
exclusion, counter diffs, pairing, errors that do not stop the run, and resume."""
import dataclasses
import json
import os
from pathlib import Path

import pytest

from benchmarks.analysis.summary import summarize_run
from benchmarks.config import matrix_expand as matrix_mod
from benchmarks.config import model_refs
from benchmarks.config.matrix_parse import parse_matrix
from benchmarks.core.engine_io import RequestRecord, SpecCounters
from benchmarks.records.store import RunStore
from benchmarks.report.report_write import write_reports
from benchmarks.run import engine_start, recheck
from benchmarks.run.groups import round_order
from tests.run_helpers import run_matrix


class ScriptedEngine:
    """Baseline: TPOT 10 ms (times `reload_slowdown` when loaded again, as the drift recheck does). dflash: same
    tokens, TPOT 4 ms, every step accepts 2 of K drafts."""

    name = "scripted"
    loads: list[str] = []
    fail_on: set[str] = set()
    calls: list[tuple[str, int]] = []  # (label, sum of the prompt ids) of every generate, in order
    fail_at_call: int | None = None  # the dflash engine raises at this call of its own (warm-ups count)
    reload_slowdown = 1.0  # a host that slows down while the speculative cells run
    reload_noise: list[float] = []  # a loaded-again cell's i-th request (warm-ups count) also takes noise[i % len]
    method_noise: list[float] = []  # the speculative cell's i-th request (warm-ups count) likewise
    fail_reload = False  # a cell loaded a second time (the baseline's recheck) fails to start

    def load(self, cell):
        if cell.method in self.fail_on or (self.fail_reload and cell.label in ScriptedEngine.loads):
            raise RuntimeError(f"cannot start {cell.method}")
        self.cell = cell
        self.slowdown = self.reload_slowdown if cell.label in ScriptedEngine.loads else 1.0
        self.noise = self.reload_noise if cell.label in ScriptedEngine.loads else []
        self.generated = 0
        self.lengths: list[int] = []
        ScriptedEngine.loads.append(cell.label)

    def generate(self, prompt_ids, params):
        ScriptedEngine.calls.append((self.cell.label, sum(prompt_ids)))
        own = sum(label == self.cell.label for label, _ in ScriptedEngine.calls)
        if self.cell.method == "dflash" and own == self.fail_at_call:
            raise RuntimeError("draft went away")
        out = [(sum(prompt_ids) + i) % 97 for i in range(params.max_new_tokens)]
        tpot = 0.010 * self.slowdown if self.cell.method == "baseline" else 0.004
        noise = self.noise or (self.method_noise if self.cell.method != "baseline" else [])
        if noise:
            tpot *= noise[self.generated % len(noise)]
        self.generated += 1
        if self.cell.method != "baseline":
            self.lengths += [2] * 4
        return RequestRecord(out, ttft_s=0.05, last_token_s=0.05 + tpot * (len(out) - 1))

    def spec_counters(self):
        if self.cell.method == "baseline":
            return None
        return SpecCounters.from_accept_lengths(self.lengths, self.cell.k)

    def describe(self):
        return {}

    def close(self):
        pass


@pytest.fixture
def prompts_file(tmp_path):
    p = tmp_path / "prompts.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"question number {i}"}) + "\n" for i in range(10)))
    return p


@pytest.fixture
def matrix(random_pair, prompts_file):
    return parse_matrix({
        "name": "scripted", "target": str(random_pair["target"]), "drafts": {"dflash": str(random_pair["dflash"])},
        "methods": ["baseline", "dflash"], "k": [3], "num_prompts": 3, "warmup_prompts": 2, "max_new_tokens": 8,
        "datasets": [{"name": "local", "path": str(prompts_file)}, {"name": "other", "path": str(prompts_file)}],
    })


NOISE = [1.0, 1.0, 1.03, 0.97, 1.01]  # dflash's timing noise: 2 warm-ups, then the 3 measured prompts


@pytest.fixture(autouse=True)
def scripted(monkeypatch):
    ScriptedEngine.loads = []
    ScriptedEngine.fail_on = set()
    ScriptedEngine.calls = []
    ScriptedEngine.fail_at_call = None
    ScriptedEngine.reload_slowdown = 1.0
    ScriptedEngine.reload_noise = []
    ScriptedEngine.method_noise = []
    ScriptedEngine.fail_reload = False
    monkeypatch.setattr(engine_start, "create_engine", lambda name: ScriptedEngine())
    monkeypatch.setattr(engine_start, "in_worker", lambda matrix, engine: False)  # in-process here (see test_worker.py)


def test_run_records_summary_and_pairing(matrix, tmp_path):
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 0
    summary = summarize_run(RunStore(run_dir))
    assert len(summary.records.requests) == 2 * 2 * 3  # cells × datasets × measured prompts (warm-up excluded)
    # 3 measured prompts × 4 steps each; the 2 warm-up prompts' 8 steps were diffed away
    assert {r.num_drafts for r in summary.records.specs} == {12}
    rows = {(r.label, r.dataset): r for r in summary.rows}
    d = rows[("dflash-k3", "local")]
    assert d.tau == pytest.approx(3.0) and d.acceptance_rate == pytest.approx(2 / 3)
    assert json.loads(d.per_position) == [1.0, 1.0, 0.0]
    assert d.speedup == pytest.approx(2.5) and d.speedup_mean_ratio == pytest.approx(2.5)
    assert d.identical_frac == 1.0 and d.first_divergence_min is None
    assert d.tpot_ms_mean == pytest.approx(4.0) and d.ttft_ms_mean == pytest.approx(50.0)
    assert rows[("baseline", "local")].tpot_ms_p90 == pytest.approx(10.0)
    manifest = RunStore(run_dir).manifest()
    assert set(manifest["cells"]) == {r.cell_id for r in summary.records.requests}
    assert manifest["models"][matrix.target]["config_sha256"]
    shas = {r.prompt_sha256 for r in summary.records.requests if r.workload == "local"}
    assert len(shas) == 3  # baseline and dflash saw the same three prompts


def test_failed_cell_is_recorded_and_others_go_on_then_resume_retries_only_it(matrix, tmp_path):
    ScriptedEngine.fail_on = {"dflash"}
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 2
    errors = [r for r in RunStore(run_dir).record_objects() if r["kind"] == "error"]
    assert {e["dataset"] for e in errors} == {"local", "other"} and "cannot start dflash" in errors[0]["error"]
    assert ScriptedEngine.loads == ["baseline"]

    ScriptedEngine.fail_on = set()
    ScriptedEngine.loads = []
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    # the finished baseline was skipped; it is loaded again only for its drift recheck, now that dflash ran
    assert failed == 0 and ScriptedEngine.loads == ["dflash-k3", "baseline"]
    records = RunStore(run_dir).record_objects()
    assert not [r for r in records if r["kind"] == "error"]
    keys = [(r["cell_id"], r["dataset"], r["prompt_index"]) for r in records if r["kind"] == "request"]
    assert len(keys) == len(set(keys)) == 12


def test_interleaved_cells_take_the_prompts_in_turn_and_record_the_same(matrix, tmp_path, monkeypatch):
    monkeypatch.setenv("PLATFORM", "cpu")  # a TPU machine refuses to interleave cells in workers
    plain_dir, _ = run_matrix(matrix, tmp_path / "plain", progress=False)
    sequential = list(ScriptedEngine.calls)
    ScriptedEngine.calls = []
    matrix.interleave = True
    run_dir, failed = run_matrix(matrix, tmp_path / "interleaved", progress=False)
    assert failed == 0
    assert len(ScriptedEngine.calls) == 2 * 2 * (3 + 2)  # cells × datasets × (measured + warm-up); no recheck
    assert not [r for r in RunStore(run_dir).record_objects() if r["kind"] == "recheck"]
    # one after another: one cell's datasets, then the next's, then the baseline's recheck of 3 prompts per dataset
    assert len(sequential) == 2 * 2 * (3 + 2) + 2 * (3 + 2)
    assert [label for label, _ in sequential[:10]] == ["baseline"] * 10
    assert [label for label, _ in sequential[10:20]] == ["dflash-k3"] * 10
    # interleaved: each cell's warm-ups, then every measured prompt on both cells in turn, in each round's own order
    labels = [label for label, _ in ScriptedEngine.calls]
    assert labels[:4] == ["baseline"] * 2 + ["dflash-k3"] * 2
    rounds = [labels[i:i + 2] for i in range(4, 10, 2)]
    assert all(sorted(r) == ["baseline", "dflash-k3"] for r in rounds)
    ids = {"baseline": "b", "dflash-k3": "d"}
    assert [[ids[x] for x in r] for r in rounds] == [["b", "d"] if round_order(["b", "d"], "local", j)[0] == "b"
                                                     else ["d", "b"] for j in range(3)]
    assert ScriptedEngine.calls[4][1] == ScriptedEngine.calls[5][1] != ScriptedEngine.calls[6][1]

    def requests(path):
        return sorted((r["cell_id"], r["dataset"], r["prompt_index"], tuple(r["output_ids"]), r["tpot_ms"])
                      for r in RunStore(path).record_objects() if r["kind"] == "request")

    assert requests(run_dir) == requests(plain_dir) and len(requests(run_dir)) == 12
    spec = [r for r in RunStore(run_dir).record_objects() if r["kind"] == "spec"]
    assert {r["num_drafts"] for r in spec} == {12}  # each engine's counters cover its own measured prompts only
    write_reports(run_dir)
    write_reports(plain_dir)
    assert "cells interleaved, prompt by prompt" in (run_dir / "report.md").read_text()
    assert "cells one after another" in (plain_dir / "report.md").read_text()


def _rows(run_dir):
    store = RunStore(run_dir)
    return {(r.label, r.dataset): r for r in summarize_run(store).rows}


def test_drift_recheck_flags_a_baseline_that_slowed_down(matrix, tmp_path):
    """The host slows the baseline by half while dflash runs: the recheck after dflash measures it on
    drift_prompts prompts, the drift shows in summary and report, and none of it enters the baseline's figures."""
    matrix.drift_prompts = 2
    ScriptedEngine.reload_slowdown = 1.5
    ScriptedEngine.method_noise = NOISE
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 0 and ScriptedEngine.loads == ["baseline", "dflash-k3", "baseline"]
    records = RunStore(run_dir).record_objects()
    rechecks = [r for r in records if r["kind"] == "recheck"]
    base_id = next(r["cell_id"] for r in records if r["label"] == "baseline")
    measured = [r for r in records if r["kind"] == "request" and r["cell_id"] == base_id]
    assert [(r["cell_id"], r["dataset"], r["prompt_sha256"]) for r in rechecks] == [
        (base_id, r["dataset"], r["prompt_sha256"]) for ds in ("local", "other")
        for r in recheck.spread([m for m in measured if m["dataset"] == ds], 2)]  # in order
    assert (run_dir / "units" / f"{base_id}__local@recheck.jsonl").is_file()
    rows = _rows(run_dir)
    d, b = rows[("dflash-k3", "local")], rows[("baseline", "local")]
    assert d.baseline_tpot_before_ms == pytest.approx(10.0) and d.baseline_tpot_after_ms == pytest.approx(15.0)
    assert d.baseline_drift == pytest.approx(0.5) and d.drift_flag is True
    # the recheck stays out of the baseline's TPOT, its prompt count and the pairing
    assert b.tpot_ms_mean == pytest.approx(10.0) and b.n_prompts == 3 and b.baseline_drift is None
    assert d.speedup == pytest.approx(2.5, rel=0.01) and d.n_pairs == 3 and d.identical_frac == 1.0
    write_reports(run_dir)
    report = (run_dir / "report.md").read_text()
    assert f"{d.speedup:.2f} [{d.speedup_ci_low:.2f}, {d.speedup_ci_high:.2f}] DRIFT" in report
    assert "**2 speedup(s) flagged**" in report
    assert "| local | vllm | 0 | 2 | 10.00 | 15.00 | +50.0 % [+50.0, +50.0] | dflash-k3 |" in report
    csv = (run_dir / "summary.csv").read_text().splitlines()
    assert "baseline_drift,drift_flag,baseline_drift_ci_low,baseline_drift_ci_high,n_drift_pairs" in csv[0]


@pytest.mark.parametrize("slowdown, flagged", [(1.0, False), (1.5, True)])
def test_drift_is_judged_against_the_rechecks_own_noise(matrix, tmp_path, slowdown, flagged):
    """The reloaded baseline's prompts scatter by +25 %, -5 % and +10 % (geometric mean +9.3 %). With the host
    steady, that is noise: the drift's CI over the 3 prompts holds 0, so nothing is flagged, although the speedup's CI
    is far narrower (the old rule flagged any drift then). Slowed by 1.5 as well, the drift's CI lies above 0:
    flagged."""
    ScriptedEngine.reload_slowdown = slowdown
    ScriptedEngine.method_noise = NOISE
    ScriptedEngine.reload_noise = [1.0, 1.0, 1.25, 0.95, 1.10]  # 2 warm-ups, then the 3 measured prompts
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 0
    d = _rows(run_dir)[("dflash-k3", "local")]
    assert d.n_drift_pairs == 3 and d.speedup_ci_high / d.speedup_ci_low < 1.2
    assert d.baseline_drift == pytest.approx(slowdown * (1.25 * 0.95 * 1.10) ** (1 / 3) - 1)
    assert (d.baseline_drift_ci_low > 0) is flagged and d.baseline_drift_ci_high > 0
    assert d.drift_flag is flagged
    write_reports(run_dir)
    report = (run_dir / "report.md").read_text()
    assert ("**2 speedup(s) flagged**" in report) is flagged and ("No speedup is flagged." in report) is not flagged


def test_under_ray_the_report_says_drift_is_unchecked(matrix, tmp_path):
    """Ray runs no recheck (cells run concurrently, on any node): report.md says so instead of leaving it out."""
    from benchmarks.config.matrix_schema import matrix_of_manifest
    from benchmarks.report.drift_report import drift_lines

    run_dir, _ = run_matrix(matrix, tmp_path / "run", progress=False)
    store = RunStore(run_dir)
    config = store.manifest()["config"]
    assert config["executor"] == "local"  # the manifest records the executor the report reads
    rows = summarize_run(store).rows
    unchecked = [dataclasses.replace(r, baseline_drift=None, drift_flag=None) for r in rows]
    ray = matrix_of_manifest({**config, "executor": "ray"})
    [line] = drift_lines(unchecked, ray, frozenset(config))
    assert line.startswith("**Drift is unchecked**") and "ray_node" in line and "interleave: true" in line
    # started locally (rechecked), finished under Ray: the local rechecks show, under the same warning
    lines = drift_lines(rows, ray, frozenset(config))
    assert lines[0].startswith("**Drift is unchecked**") and "earlier invocation" in lines[0]
    assert any("| local | vllm | 0 | 3 |" in line for line in lines)


def test_steady_baseline_is_not_flagged_and_resume_keeps_or_redoes_the_recheck(matrix, tmp_path):
    ScriptedEngine.method_noise = NOISE
    run_dir, _ = run_matrix(matrix, tmp_path / "run", progress=False)
    d = _rows(run_dir)[("dflash-k3", "other")]
    assert d.baseline_drift == pytest.approx(0.0) and d.drift_flag is False
    write_reports(run_dir)
    assert "No speedup is flagged." in (run_dir / "report.md").read_text()

    def rechecks():
        return sorted((r["dataset"], r["prompt_index"]) for r in RunStore(run_dir).record_objects()
                      if r["kind"] == "recheck")

    done = rechecks()
    assert len(done) == 2 * 3
    ScriptedEngine.loads, ScriptedEngine.calls = [], []
    run_matrix(matrix, tmp_path / "run", progress=False)  # everything done: nothing runs again
    assert ScriptedEngine.loads == [] and rechecks() == done

    # dflash measured again on one dataset: that dataset's recheck no longer follows it, and is redone after it
    dflash_id = d.cell_id
    (run_dir / "units" / f"{dflash_id}__local.jsonl").unlink()
    run_matrix(matrix, tmp_path / "run", progress=False)
    assert ScriptedEngine.loads == ["dflash-k3", "baseline"] and rechecks() == done
    assert [label for label, _ in ScriptedEngine.calls] == ["dflash-k3"] * 5 + ["baseline"] * 5  # local only
    assert list((run_dir / "units" / "superseded").glob("*__local@recheck.jsonl"))


def test_a_recheck_that_fails_is_a_failed_unit_of_its_own_and_is_retried(matrix, tmp_path):
    ScriptedEngine.fail_reload = True
    ScriptedEngine.method_noise = NOISE
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    errors = [r for r in RunStore(run_dir).record_objects() if r["kind"] == "error"]
    assert failed == 2 and {(e["label"], e["dataset"]) for e in errors} == {("baseline recheck", "local"),
                                                                              ("baseline recheck", "other")}
    assert errors[0]["error"] == "drift recheck: RuntimeError: cannot start baseline"
    rows = _rows(run_dir)
    assert rows[("baseline", "local")].tpot_ms_mean == pytest.approx(10.0)  # the measurement itself stands
    assert rows[("dflash-k3", "local")].speedup == pytest.approx(2.5, rel=0.01)
    assert rows[("dflash-k3", "local")].baseline_drift is None
    ScriptedEngine.fail_reload, ScriptedEngine.loads = False, []
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 0 and ScriptedEngine.loads == ["baseline"]  # only the rechecks ran again
    assert _rows(run_dir)[("dflash-k3", "local")].drift_flag is False


def test_interleaved_cell_that_fails_leaves_the_rotation(matrix, tmp_path, monkeypatch):
    monkeypatch.setenv("PLATFORM", "cpu")  # a TPU machine refuses to interleave cells in workers
    matrix.interleave = True
    ScriptedEngine.fail_at_call = 4  # dflash: 2 warm-ups, a measured prompt, then it raises on the second
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    records = RunStore(run_dir).record_objects()
    errors = [r for r in records if r["kind"] == "error"]
    assert failed == 1 and [(e["label"], e["dataset"]) for e in errors] == [("dflash-k3", "local")]
    assert "draft went away" in errors[0]["error"]
    done = [(r["label"], r["dataset"]) for r in records if r["kind"] == "request"]
    assert done.count(("baseline", "local")) == 3 and done.count(("dflash-k3", "other")) == 3
    assert ("dflash-k3", "local") not in done  # a failed unit keeps no partial requests


def test_unit_files_are_whole_after_an_interrupted_write(matrix, tmp_path, monkeypatch):
    """A kill in the middle of writing the second unit (half its bytes on disk, not yet flushed) leaves the first unit
    whole and no second unit file; the rerun redoes only the second and ends without duplicates."""
    from benchmarks.records import store

    unit_writes = {"n": 0}
    real_fsync = os.fsync

    def killed_mid_write(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if Path(path).parent.name == "units":  # a unit file, under its temporary name (random, so not matched by name)
            unit_writes["n"] += 1
            if unit_writes["n"] == 2:
                os.ftruncate(fd, os.fstat(fd).st_size // 2)  # only half the bytes reached the disk
                raise KeyboardInterrupt  # stands for the kill
        real_fsync(fd)

    monkeypatch.setattr(store.os, "fsync", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        run_matrix(matrix, tmp_path / "run", progress=False)
    units = tmp_path / "run" / "units"
    assert len(list(units.glob("*.jsonl"))) == 1  # the interrupted unit left no file a rerun would take as done
    assert not list(units.glob(".*tmp"))
    whole = [r for p in units.glob("*.jsonl") for r in store.read_jsonl(p)]
    assert [r["label"] for r in whole] == ["baseline"] * 3  # the first unit (the baseline's), every line parseable
    monkeypatch.setattr(store.os, "fsync", real_fsync)
    ScriptedEngine.loads = []
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    keys = [(r["cell_id"], r["dataset"], r["prompt_index"]) for r in RunStore(run_dir).record_objects()
            if r["kind"] == "request"]
    assert failed == 0 and len(keys) == len(set(keys)) == 12


def test_run_id_is_stable_per_matrix_content(matrix):
    """Equal content gives the same id (so a rerun resumes), whichever object holds it; any change gives another."""
    import dataclasses

    again = parse_matrix(dict(matrix.raw))  # parsed anew from the same mapping: another object, equal content
    assert again is not matrix and matrix_mod.run_id_for(again) == matrix_mod.run_id_for(matrix)
    assert matrix_mod.run_id_for(matrix).startswith("scripted-")
    for change in ({"num_prompts": 4}, {"seed": 1}, {"temperatures": [0.5]}, {"target": matrix.target + "x"}):
        assert matrix_mod.run_id_for(dataclasses.replace(matrix, **change)) != matrix_mod.run_id_for(matrix), change


def test_model_references():
    from benchmarks.config.matrix_parse import ConfigError

    assert model_refs.materialize("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"  # a hub id is left to the engine
    with pytest.raises(ConfigError, match="model folder 'models/absent/target' not found"):
        model_refs.materialize("models/absent/target")
    with pytest.raises(ConfigError, match="unknown builtin model"):
        model_refs.materialize("builtin:nope/target")


def test_recheck_prompts_are_spread_over_the_measurement():
    """A host that slowed down halfway through the baseline must show in the recheck: its prompts span the run."""
    assert recheck.spread(list(range(16)), 3) == [0, 5, 10]
    assert recheck.spread(list(range(3)), 2) == [0, 1]
    assert recheck.spread(list(range(3)), 5) == [0, 1, 2]
