"""`executor: ray`: the run's groups of cells (one cell each, or the interleaved group) on a Ray cluster.

Each cell is a Ray actor hosting its engine (benchmarks/engines/ray_worker.py), placed by the matrix's `resources`
(default per platform). Groups run concurrently, a driver thread each; Ray queues the actors until resources free
up. The driver stays the only writer of the run folder: its store writes one unit at a time, and prints a line per
unit with the node that measured it and the units done per node. Imported only when the executor is ray.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import ray
from ray._private import ray_constants
from tqdm import tqdm

from benchmarks.config.matrix_parse import ConfigError
from benchmarks.config.placement_keys import DEFAULT_RESOURCES
from benchmarks.core.cells import Cell
from benchmarks.core.paths import ROOT
from benchmarks.engines import implementation
from benchmarks.engines.ray_worker import RayEngine
from benchmarks.hardware.provenance import detect_platform
from benchmarks.records.records import ErrorLine, Line
from benchmarks.records.store import ProvenanceRecord, RunStore
from benchmarks.run.context import RunContext
from benchmarks.run.groups import run_group

# Ray's switch for single-node mode: every Ray process binds the loopback address only.
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
REACH_TIMEOUT_S = 5.0  # how long a cluster at RAY_ADDRESS may take to accept a connection before the run is refused


def check_reachable(address: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """ConfigError naming `address` (RAY_ADDRESS: host:port, ray://host:port, [v6]:port) when nothing accepts a TCP
    connection there within `timeout_s` (ray.init would wait on it without end); auto and local are not addresses."""
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"RAY_ADDRESS={address}: nothing accepts a connection at {host}:{port} within "
                          f"{timeout_s:g} s ({why}); start the cluster there with `ray start --head` (its address is "
                          f"what that prints), or unset RAY_ADDRESS to start a Ray on this machine") from None


def connect() -> bool:
    """Join the cluster at RAY_ADDRESS, else start a Ray on this machine bound to 127.0.0.1, without a dashboard.
    Returns whether this call connected (False when Ray was initialised already); actors import the harness from
    this checkout's path, which must be the same on every node."""
    if ray.is_initialized():
        return False
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                                               if p)}}
    if os.environ.get("RAY_ADDRESS"):
        check_reachable(os.environ["RAY_ADDRESS"])
        try:
            ray.init(address=os.environ["RAY_ADDRESS"], runtime_env=runtime_env)
        except ConnectionError as exc:
            raise ConfigError(f"RAY_ADDRESS={os.environ['RAY_ADDRESS']}: {exc}; start the cluster with `ray start "
                              f"--head` there, and with token authentication on, set RAY_AUTH_MODE=token and "
                              f"RAY_AUTH_TOKEN here too (README: More than one machine)") from None
        return True
    saved = os.environ.get(LOCAL_ONLY_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOCAL_ONLY_ENV], ray_constants.ENABLE_RAY_CLUSTER = "0", False  # the Ray processes inherit it
    try:
        ray.init(address="local", include_dashboard=False, runtime_env=runtime_env)
    finally:
        if saved[0] is None:
            os.environ.pop(LOCAL_ONLY_ENV)
        else:
            os.environ[LOCAL_ONLY_ENV] = saved[0]
        ray_constants.ENABLE_RAY_CLUSTER = saved[1]
    return True


def check_feasible(resources: dict[str, float]) -> None:
    """Fail with one line unless some live node has every resource a cell asks for (Ray would queue it forever)."""
    nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
    if any(all(r.get(k, 0) >= v for k, v in resources.items()) for r in nodes):
        return
    offers = "; ".join(", ".join(f"{k}: {v:g}" for k, v in sorted(r.items())
                                 if not k.startswith("node:") and "memory" not in k) for r in nodes)
    raise ConfigError(f"resources {resources}: no node of the Ray cluster has that much (its nodes offer: "
                      f"{offers or 'nothing'}); set 'resources:' in the matrix to what one cell needs")


class SharedStore(RunStore):
    """The run's store written by several driver threads: one write at a time, and a progress line per unit."""

    def __init__(self, run_dir: Path, node_of: Callable[[str], str], total: int, progress: bool,
                 point_latest_on_write: bool):
        super().__init__(run_dir, point_latest_on_write)
        self._lock = threading.Lock()
        self._node_of, self._total, self._progress = node_of, total, progress
        self.done: Counter[str] = Counter()  # units written, by node IP

    def write_unit(self, cell_id: str, dataset: str, records: Sequence[Line],
                   provenance_id: str | None = None) -> None:
        with self._lock:
            super().write_unit(cell_id, dataset, records, provenance_id)
            node = self._node_of(cell_id)
            self.done[node] += 1
            if self._progress:
                status = "FAILED" if any(isinstance(r, ErrorLine) for r in records) else "done"
                per_node = ", ".join(f"{n}: {c}" for n, c in sorted(self.done.items()))
                label = records[0].label if records else cell_id
                tqdm.write(f"[{label}] {dataset} {status} on {node}; {sum(self.done.values())}/{self._total} "
                           f"units, per node: {per_node}")

    def write_provenance(self, provenance: ProvenanceRecord) -> str:
        with self._lock:
            return super().write_provenance(provenance)


def run_groups(ctx: RunContext, groups: list[list[Cell]]) -> int:
    """Run every group concurrently on the cluster; return the number of failed units."""

    owned = connect()
    pool = ThreadPoolExecutor(max_workers=max(1, len(groups)), thread_name_prefix="group")
    try:
        resources = ctx.plan.matrix.resources or DEFAULT_RESOURCES.get(detect_platform(), DEFAULT_RESOURCES["cpu"])
        check_feasible(resources)
        engines: dict[str, RayEngine] = {}

        def make_engine(cell: Cell) -> RayEngine:
            m = ctx.plan.matrix
            engines[cell.cell_id] = RayEngine(implementation(cell.engine), resources, m.request_timeout_s,
                                              m.load_timeout_s)
            return engines[cell.cell_id]

        def node_of(cell_id: str) -> str:
            engine = engines.get(cell_id)
            return (engine.node.get("node_ip") if engine else None) or "no node"

        total = sum(len(ctx.pending(c)) for g in groups for c in g)
        store = SharedStore(ctx.store.run_dir, node_of, total, ctx.plan.progress, ctx.store.point_latest_on_write)
        tqdm.write(f"executor ray: {len(groups)} group(s), {total} unit(s) to run, {resources} per cell, on "
                   f"{len([n for n in ray.nodes() if n['Alive']])} node(s)")
        shared = dataclasses.replace(ctx, plan=dataclasses.replace(ctx.plan, progress=False), store=store,
                                     make_engine=make_engine)
        return sum(pool.map(lambda group: run_group(shared, group), groups))
    finally:
        if owned:
            ray.shutdown()  # stops a local Ray, or leaves the cluster (its actors of this run die with the driver)
        pool.shutdown(wait=True, cancel_futures=True)
