"""An explicit RAY_ADDRESS where nothing listens is refused in one line naming it and the fix, within the connect
timeout, before ray.init (which would wait without end); a listening address and auto pass (loopback only)."""
from __future__ import annotations

import socket
import time

import pytest

from benchmarks.config.matrix_parse import ConfigError
from benchmarks.run import ray_executor
from tests.machine import loopback

pytestmark = loopback  # each test opens or connects to a TCP port of the loopback


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("form", ["127.0.0.1:{}", "ray://127.0.0.1:{}", "localhost:{}"])
def test_an_address_where_nothing_listens_is_refused_naming_it(form):
    address = form.format(free_port())
    began = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        ray_executor.check_reachable(address)
    assert time.monotonic() - began < ray_executor.REACH_TIMEOUT_S + 1
    (line,) = refused.value.problems
    assert line.startswith(f"RAY_ADDRESS={address}: nothing accepts a connection at ") and "ray start --head" in line


def test_connect_refuses_before_ray_starts(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{free_port()}")
    monkeypatch.setattr(ray_executor.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_executor.ray, "init", lambda **kw: pytest.fail("ray.init was reached"))
    with pytest.raises(ConfigError, match="nothing accepts a connection"):
        ray_executor.connect()


def test_a_listening_address_and_auto_pass():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        ray_executor.check_reachable(f"127.0.0.1:{server.getsockname()[1]}")
    ray_executor.check_reachable("auto")
    ray_executor.check_reachable("local")
