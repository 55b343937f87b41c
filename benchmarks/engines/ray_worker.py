"""An engine worker on a Ray cluster: `RayEngine` keeps the `Engine` protocol and forwards every call to a Ray actor
that hosts the cell's engine (`EngineHost`), placed by the resources the cell asks for.

Every call waits with a time limit (the matrix's `request_timeout_s`, and its `load_timeout_s` for loading,
which includes waiting for placement, model download and compilation: an actor that no node places within it fails
its cell, naming the resources asked for). An engine that raises, an actor or node that dies, and a call that
runs out of time all come back as `WorkerError` with the cause; after a death or a time-out the actor is gone, and
every later call fails at once with the same cause. `close()` kills the actor.
"""
from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Mapping
from typing import Any, TypedDict

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters
from benchmarks.engines.host import EngineHost, WorkerError
from benchmarks.hardware.provenance import Environment


class RayNode(TypedDict, total=False):
    """Where an actor runs (`RayHost.node`; empty until it is placed)."""

    node_ip: str | None
    node_id: str
    hostname: str
    pid: int


class ActorOptions(TypedDict, total=False):
    """The resources of `actor.options(...)`: CPUs, GPUs, and any other resource by name."""

    num_cpus: float
    num_gpus: float
    resources: dict[str, float]


class RayHost(EngineHost):
    """EngineHost as a Ray actor, which can also say where it runs."""

    def node(self) -> RayNode:
        """Where the actor runs: node IP and id, host name, pid."""
        ctx = ray.get_runtime_context()
        ip = next((n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == ctx.get_node_id()), None)
        return {"node_ip": ip, "node_id": ctx.get_node_id(), "hostname": socket.gethostname(), "pid": os.getpid()}

    def environment(self) -> Environment:
        """The provenance environment of the actor's machine (git SHA, packages, hardware)."""
        from benchmarks.hardware import provenance  # lazy: imports numpy, scipy

        return provenance.environment()


def ray_options(resources: dict[str, float]) -> ActorOptions:
    """`actor.options(...)` for a resource mapping: Ray takes CPU and GPU as num_cpus/num_gpus, the rest by name."""
    rest = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    return {"num_cpus": resources.get("CPU", 0), "num_gpus": resources.get("GPU", 0),
            **({"resources": rest} if rest else {})}


class RayEngine:
    """The `Engine` protocol over one Ray actor. `engine_spec` is what the actor hosts: a registry name or a
    `module:Class` spec (see EngineHost). It has each of the OPTIONAL_METHODS the hosted engine has."""

    def __init__(self, engine_spec: str, resources: dict[str, float], request_timeout_s: float,
                 load_timeout_s: float):
        self.name = engine_spec
        self._spec, self._resources, self._timeout = engine_spec, resources, request_timeout_s
        self._load_timeout = load_timeout_s
        self._actor: Any = None
        self._gone: str | None = None  # why the actor is no longer usable
        self.node: RayNode = {}
        # The node's own environment when it is not the driver's machine; the run records it as the provenance.
        self.environment: Environment | None = None

    def _get(self, ref: Any, timeout: float, timed_out: str | None = None) -> Any:
        """The call's result within `timeout` s; `timed_out` is what a time-out means (default: no answer)."""
        where = f" on node {self.node.get('node_ip')}" if self.node else ""
        try:
            return ray.get(ref, timeout=timeout)
        except RayTaskError as exc:  # the engine raised: EngineHost already wrapped it with its own traceback
            cause = exc.cause
            if isinstance(cause, WorkerError):
                raise WorkerError(str(cause), cause.remote_traceback) from None
            raise WorkerError(f"{type(cause).__name__}: {cause}", str(exc)) from None
        except GetTimeoutError:
            self._kill(timed_out or f"no answer within {timeout:g} s (request_timeout_s){where}; the actor was killed")
            raise WorkerError(self._gone or "") from None
        except RayActorError as exc:
            self._kill(f"Ray actor died{where}: {type(exc).__name__}: {exc}")
            raise WorkerError(self._gone or "", str(exc)) from None

    def _call(self, method: str, *args: Any, timeout: float | None = None, timed_out: str | None = None) -> Any:
        """One actor call, within `timeout` seconds (default: the request time limit)."""
        if self._gone:
            raise WorkerError(f"worker unusable after an earlier failure: {self._gone}")
        return self._get(getattr(self._actor, method).remote(*args), timeout or self._timeout, timed_out)

    def _kill(self, why: str) -> None:
        self._gone = self._gone or why
        if self._actor is not None:
            ray.kill(self._actor, no_restart=True)

    def load(self, cell: Cell) -> None:
        """Place the actor (Ray queues it until a node has the resources free) and load the cell's engine, both
        within load_timeout_s."""
        deadline = time.monotonic() + self._load_timeout
        self._actor = ray.remote(RayHost).options(max_restarts=0, **ray_options(self._resources)).remote(self._spec)
        self.node = self._get(self._actor.node.remote(), self._load_timeout, timed_out=(
            f"no node of the Ray cluster placed an actor needing {self._resources} within {self._load_timeout:g} s "
            f"(load_timeout_s): the cluster lacks those resources or other cells hold them; lower 'resources' or "
            f"raise 'load_timeout_s'"))
        if self.node["node_id"] != ray.get_runtime_context().get_node_id():
            self.environment = self._call("environment")
        left = max(1.0, deadline - time.monotonic())
        self._call("load", cell, timeout=left, timed_out=f"the engine did not load within {self._load_timeout:g} s "
                                                         f"(load_timeout_s) on node {self.node.get('node_ip')}")
        caps = self._call("capabilities")
        self.samples_seeded = caps["samples_seeded"]
        for method in caps["optional"]:  # callers look for the method itself
            setattr(self, method, functools.partial(self._call, "optional", method))

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord:
        return self._call("generate", prompt_ids, params)

    def spec_counters(self) -> SpecCounters | None:
        return self._call("spec_counters")

    def describe(self) -> Mapping[str, object]:
        return {**self._call("describe"), "ray_node": self.node}

    def close(self) -> None:
        if self._actor is None:
            return
        try:
            if not self._gone:
                self._call("close")
        except WorkerError:
            pass  # the actor is killed below either way
        finally:
            self._kill("closed")
            self._actor = None
