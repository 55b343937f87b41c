"""executor: ray on a local Ray (127.0.0.1 only): the same records as a local run, an actor killed mid-cell fails
its unit with the cause and a rerun measures only the missing units, a hung request hits its time limit."""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks.analysis.environments import cell_order
from benchmarks.cli import main as cli_main
from benchmarks.config import matrix_expand as matrix_mod
from benchmarks.config.matrix_expand import expand
from benchmarks.config.matrix_parse import ConfigError, load_matrix, parse_matrix
from benchmarks.core.engine_io import SamplingParams
from benchmarks.engines.host import WorkerError
from benchmarks.engines.ray_worker import RayEngine
from benchmarks.records.store import RunStore
from benchmarks.run import ray_executor
from tests.machine import needs_loopback
from tests.run_helpers import host_everywhere, run_matrix

psutil = pytest.importorskip("psutil", reason="psutil is not installed")
ray = pytest.importorskip("ray", reason="ray is not installed")


def host(monkeypatch, engine: str) -> None:
    """Every cell's actor hosts `engine`, a class of tests/ray_scripted.py."""
    host_everywhere(monkeypatch, f"tests.ray_scripted:{engine}")


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module, started as the executor starts it; shut down at the end."""
    needs_loopback()  # Ray's processes talk over TCP on 127.0.0.1
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_ADDRESS", raising=False)
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


def _ray_processes() -> list[psutil.Process]:
    """This process (the driver) and every process the local Ray started under it."""
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def _loopback(ip: str) -> bool:
    """127.0.0.0/8 or ::1, also written as an IPv4-mapped IPv6 address (::ffff:127.0.0.1)."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    return (getattr(addr, "ipv4_mapped", None) or addr).is_loopback


def test_local_ray_binds_the_loopback_address_only(local_ray):
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert [n["NodeManagerAddress"] for n in nodes] == ["127.0.0.1"]
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    # What listens, not what is advertised: every TCP socket in LISTEN and every bound UDP socket of the Ray
    # processes (GCS, raylet, workers, the driver's core worker) is on a loopback address.
    procs = _ray_processes()
    names = {p.name() for p in procs}
    assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), names
    listening = []
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        listening += [(p.name(), c.laddr) for c in conns if c.laddr and (
            c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr))]
    assert len(listening) >= 3, listening  # GCS, raylet and the object manager at least
    exposed = [(name, addr) for name, addr in listening if not _loopback(addr.ip)]
    assert exposed == [], f"Ray sockets listening beyond the loopback address: {exposed}"


def test_an_actor_no_node_can_place_fails_at_the_load_limit_naming_its_resources(local_ray, random_pair,
                                                                                 prompts_file):
    cell = expand(scripted_matrix(random_pair, prompts_file))[0]
    engine = RayEngine("tests.ray_scripted:ScriptedEngine", {"CPU": 512}, 30.0, 3.0)
    t0 = time.perf_counter()
    with pytest.raises(WorkerError) as err:
        engine.load(cell)
    assert time.perf_counter() - t0 < 30
    assert "placed an actor needing {'CPU': 512}" in str(err.value) and "within 3 s (load_timeout_s)" in str(err.value)
    engine.close()


def test_killed_actor_fails_its_unit_with_the_cause_and_a_rerun_measures_only_the_missing(
        local_ray, random_pair, prompts_file, tmp_path, monkeypatch, capsys):
    host(monkeypatch, "KilledEngine")
    matrix = scripted_matrix(random_pair, prompts_file)
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=True)
    store = RunStore(run_dir)
    cells = {c["method"]: cid for cid, c in store.manifest()["cells"].items()}
    # The dflash actor died in dataset a: that unit fails with Ray's cause; b (same actor) fails naming it too.
    assert failed == 2
    errors = {r["dataset"]: r["error"] for r in store.record_objects() if r["kind"] == "error"}
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
    host(monkeypatch, "ScriptedEngine")
    run_dir, failed = run_matrix(matrix, run_dir, progress=False)
    assert failed == 0
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in kept} == kept  # the baseline was not measured again
    assert all(store.is_done(cid, d) for cid in cells.values() for d in ("a", "b"))
    spec = [r for r in store.record_objects() if r["kind"] == "spec"]
    assert [r["num_accepted_tokens"] for r in spec] == [2 * 2 * 3] * 2  # 3 prompts × 2 steps × 2 accepted


def test_hung_request_fails_its_unit_at_the_time_limit(local_ray, random_pair, prompts_file, tmp_path, monkeypatch):
    host(monkeypatch, "HungEngine")
    t0 = time.perf_counter()
    run_dir, failed = run_matrix(scripted_matrix(random_pair, prompts_file, request_timeout_s=2),
                                        tmp_path / "run", progress=False)
    assert time.perf_counter() - t0 < 60
    errors = {r["dataset"]: r["error"] for r in RunStore(run_dir).record_objects() if r["kind"] == "error"}
    assert failed == 2 and "no answer within 2 s" in errors["a"] and "earlier failure" in errors["b"]


def test_ray_engine_forwards_sample_many_only_when_the_hosted_engine_has_it_and_close_kills_the_actor(
        local_ray, random_pair, prompts_file):
    cell = expand(scripted_matrix(random_pair, prompts_file))[1]
    plain, sampling = (RayEngine(f"tests.ray_scripted:{name}", {"CPU": 0.5}, 30.0, 60.0)
                       for name in ("ScriptedEngine", "SamplingEngine"))
    for engine in (plain, sampling):
        engine.load(cell)
    try:
        assert not hasattr(plain, "sample_many") and plain.samples_seeded
        params = SamplingParams(0.6, 3, 0)
        assert sampling.sample_many([1, 2], params, [5, 6]) == [[5] * 3, [6] * 3] and not sampling.samples_seeded
        assert sampling.generate([1, 2], params).output_ids == [3, 4, 5]
    finally:
        actor = sampling._actor
        plain.close()
        sampling.close()
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.node.remote(), timeout=30)


def test_resources_are_validated_and_an_infeasible_request_stops_with_one_line(local_ray, random_pair, prompts_file,
                                                                               tmp_path, capsys):
    for bad in ({}, {"TPU": 0}, {"GPU": "one"}, [4]):
        with pytest.raises(ConfigError, match="'resources'"):
            scripted_matrix(random_pair, prompts_file, resources=bad)
    with pytest.raises(ConfigError, match="'executor'"):
        scripted_matrix(random_pair, prompts_file, executor="slurm")
    # --executor ray turns a local matrix into a Ray run; no node has 4 TPUs, so it stops before any engine starts.
    config = tmp_path / "m.yaml"
    raw = {k: v for k, v in scripted_matrix(random_pair, prompts_file).raw.items() if k != "executor"}
    config.write_text(json.dumps({**raw, "resources": {"TPU": 4}}))
    assert load_matrix(config).executor == "local"
    code = cli_main(["matrix", str(config), "--executor", "ray", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "no node of the Ray cluster has that much" in err[-1] and "CPU: 2" in err[-1]
    assert not list((tmp_path / "run" / "units").glob("*"))


def test_placement_keys_leave_the_run_id_alone(random_pair, prompts_file):
    matrix = scripted_matrix(random_pair, prompts_file)
    local = dataclasses.replace(matrix, executor="local", resources=None, request_timeout_s=5.0)
    assert matrix_mod.run_id_for(matrix) != matrix_mod.run_id_for(dataclasses.replace(matrix, seed=1))
    raw = {k: v for k, v in matrix.raw.items() if k not in ("executor", "resources")}
    assert matrix_mod.run_id_for(dataclasses.replace(local, raw=raw)) == matrix_mod.run_id_for(
        dataclasses.replace(matrix, raw=raw))
    assert "Ray actors" in cell_order(matrix) and "Ray" not in cell_order(local)


def _measured(run_dir: Path) -> dict[tuple[str, str], list]:
    """What a run measured, by (cell, dataset): each request's tokens and accepted lengths, and the spec counters."""
    out: dict[tuple[str, str], list] = {}
    for r in RunStore(run_dir).record_objects():
        assert r["kind"] != "error", r["error"]
        key = (r["cell_id"], r["dataset"])
        if r["kind"] == "request":
            out.setdefault(key, []).append((r["prompt_index"], r["output_ids"], r["accept_lengths"]))
        elif r["kind"] == "spec":
            out.setdefault(key, []).append(("spec", r["num_drafts"], r["num_accepted_tokens"], r["accepted_per_pos"]))
    return out


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.vllm
@pytest.mark.jax
def test_ray_run_of_jax_and_vllm_cells_records_what_a_local_run_records(local_ray, tmp_path):
    matrix = parse_matrix({"name": "ray-tiny", "preset": "tiny", "engine": ["vllm", "jax"], "methods": ["dflash"],
                           "k": 7, "datasets": ["humaneval"], "num_prompts": 2, "warmup_prompts": 0,
                           "max_new_tokens": 16, "resources": {"CPU": 1}})
    from transformers import AutoTokenizer  # noqa: F401 -- resolved once here: two threads racing for transformers'
    # lazy import can find it half-initialised (ImportError: cannot import name 'AutoTokenizer')
    with ThreadPoolExecutor(1) as pool:  # both runs at once, to save time: greedy tokens do not depend on timing
        on_ray = pool.submit(run_matrix, dataclasses.replace(matrix, executor="ray"), tmp_path / "ray",
                             progress=False)
        local_dir, failed = run_matrix(matrix, tmp_path / "local", progress=False)
        ray_dir, ray_failed = on_ray.result()
    assert failed == ray_failed == 0
    local, remote = _measured(local_dir), _measured(ray_dir)
    assert len(local) == 2 and remote == local
    assert all(n_acc > 0 for v in local.values() for *_, n_acc, _ in [v[-1]])  # the trained draft is accepted
    engines = {p["engine"]: p["describe"].get("ray_node", {}).get("node_ip")
               for p in RunStore(ray_dir).provenances().values()}
    assert engines == {"vllm": "127.0.0.1", "jax": "127.0.0.1"}
