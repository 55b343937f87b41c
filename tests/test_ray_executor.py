"""executor: ray on a local Ray (127.0.0.1 only): the same records as a local run, an actor killed mid-cell fails
its unit with the cause and a rerun measures only the missing units, a hung request hits its time limit."""
from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
import ray

from benchmarks import ray_executor, runner
from benchmarks.config import ConfigError, parse_matrix
from benchmarks.records import RequestRecord, SpecCounters
from benchmarks.store import RunStore


KILLED_AT = 2  # the dflash actor goes at its second measured request of the first dataset


class ScriptedEngine:
    """Hosted in a Ray actor (imported there as tests.test_ray_executor). Tokens follow the prompt; dflash accepts 2
    drafts per verify step."""

    name = "scripted"

    def load(self, cell):
        self.cell, self.lengths, self.calls = cell, [], 0

    def generate(self, prompt_ids, params):
        self.calls += 1
        if self.cell.method == "dflash" and self.calls == KILLED_AT:
            self.fault()
        out = [(sum(prompt_ids) + i) % 97 for i in range(params.max_new_tokens)]
        if self.cell.method != "baseline":
            self.lengths += [2] * 2
        return RequestRecord(out, ttft_s=0.01, last_token_s=0.01 + 0.001 * (len(out) - 1))

    def fault(self):
        pass

    def spec_counters(self):
        return None if self.cell.method == "baseline" else SpecCounters.from_accept_lengths(self.lengths, self.cell.k)

    def describe(self):
        return {"scripted": True}

    def close(self):
        pass


class KilledEngine(ScriptedEngine):
    def fault(self):
        ray.kill(ray.get_runtime_context().current_actor)


class HungEngine(ScriptedEngine):
    def fault(self):
        time.sleep(120)


def host(monkeypatch, engine: type) -> None:
    """Every cell's actor hosts `engine`."""
    monkeypatch.setattr(ray_executor, "engine_spec", lambda cell: f"tests.test_ray_executor:{engine.__name__}")


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module, started as the executor starts it; shut down at the end."""
    os.environ.pop("RAY_ADDRESS", None)
    assert ray_executor.connect()
    yield
    ray.shutdown()


@pytest.fixture
def prompts_file(tmp_path):
    p = tmp_path / "prompts.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"question number {i}"}) + "\n" for i in range(6)))
    return p


def scripted_matrix(random_pair, prompts_file, **extra):
    return parse_matrix({
        "name": "ray-scripted", "target": str(random_pair["target"]), "drafts": {"dflash": str(random_pair["dflash"])},
        "methods": ["baseline", "dflash"], "k": [3], "num_prompts": 3, "warmup_prompts": 0, "max_new_tokens": 6,
        "datasets": [{"name": "a", "path": str(prompts_file)}, {"name": "b", "path": str(prompts_file)}],
        "executor": "ray", "resources": {"CPU": 0.5}, **extra,
    })


def test_local_ray_binds_the_loopback_address_only(local_ray):
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert [n["NodeManagerAddress"] for n in nodes] == ["127.0.0.1"]
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")


def test_killed_actor_fails_its_unit_with_the_cause_and_a_rerun_measures_only_the_missing(
        local_ray, random_pair, prompts_file, tmp_path, monkeypatch, capsys):
    host(monkeypatch, KilledEngine)
    matrix = scripted_matrix(random_pair, prompts_file)
    run_dir, failed = runner.run_matrix(matrix, tmp_path / "run", progress=True)
    store = RunStore(run_dir)
    cells = {c["method"]: cid for cid, c in store.manifest()["cells"].items()}
    # The dflash actor died in dataset a: that unit fails with Ray's cause; b (same actor) fails naming it too.
    assert failed == 2
    errors = {r["dataset"]: r["error"] for r in store.records() if r["kind"] == "error"}
    assert set(errors) == {"a", "b"}
    assert "ActorDiedError" in errors["a"] and "ray.kill" in errors["a"] and "127.0.0.1" in errors["a"]
    assert "earlier failure" in errors["b"] and "ray.kill" in errors["b"]
    assert all(store.is_done(cells["baseline"], d) for d in ("a", "b"))
    captured = capsys.readouterr()
    assert "a done on 127.0.0.1" in captured.out + captured.err  # progress names the node of every unit
    assert "per node: 127.0.0.1: 4" in captured.out + captured.err
    baseline = next(p for p in store.provenances().values() if p["cell_id"] == cells["baseline"])
    assert baseline["describe"]["ray_node"]["node_ip"] == "127.0.0.1" and baseline["describe"]["scripted"]

    kept = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (run_dir / "units").glob(f"{cells['baseline']}__*")}
    assert len(kept) == 2
    host(monkeypatch, ScriptedEngine)
    run_dir, failed = runner.run_matrix(matrix, run_dir, progress=False)
    assert failed == 0
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in kept} == kept  # the baseline was not measured again
    assert all(store.is_done(cid, d) for cid in cells.values() for d in ("a", "b"))
    spec = [r for r in store.records() if r["kind"] == "spec"]
    assert [r["num_accepted_tokens"] for r in spec] == [2 * 2 * 3] * 2  # 3 prompts × 2 steps × 2 accepted


def test_hung_request_fails_its_unit_at_the_time_limit(local_ray, random_pair, prompts_file, tmp_path, monkeypatch):
    host(monkeypatch, HungEngine)
    t0 = time.perf_counter()
    run_dir, failed = runner.run_matrix(scripted_matrix(random_pair, prompts_file, request_timeout_s=3),
                                        tmp_path / "run", progress=False)
    assert time.perf_counter() - t0 < 60
    errors = {r["dataset"]: r["error"] for r in RunStore(run_dir).records() if r["kind"] == "error"}
    assert failed == 2 and "no answer within 3 s" in errors["a"] and "earlier failure" in errors["b"]


def test_resources_are_validated_and_an_infeasible_request_stops_with_one_line(local_ray, random_pair, prompts_file,
                                                                               tmp_path, monkeypatch):
    for bad in ({}, {"TPU": 0}, {"GPU": "one"}, [4]):
        with pytest.raises(ConfigError, match="'resources'"):
            scripted_matrix(random_pair, prompts_file, resources=bad)
    with pytest.raises(ConfigError, match="'executor'"):
        scripted_matrix(random_pair, prompts_file, executor="slurm")
    host(monkeypatch, ScriptedEngine)
    with pytest.raises(ConfigError, match=r"no node of the Ray cluster has that much .*CPU: 2"):
        runner.run_matrix(scripted_matrix(random_pair, prompts_file, resources={"TPU": 4}), tmp_path / "run",
                          progress=False)


def test_placement_keys_leave_the_run_id_alone(random_pair, prompts_file):
    matrix = scripted_matrix(random_pair, prompts_file)
    local = dataclasses.replace(matrix, executor="local", resources=None, request_timeout_s=5.0)
    assert runner.run_id_for(matrix) != runner.run_id_for(dataclasses.replace(matrix, seed=1))
    raw = {k: v for k, v in matrix.raw.items() if k not in ("executor", "resources")}
    assert runner.run_id_for(dataclasses.replace(local, raw=raw)) == runner.run_id_for(
        dataclasses.replace(matrix, raw=raw))
