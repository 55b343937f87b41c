"""The CPU bandwidth behind the physical floor is measured with every core this process may use, so a
multi-threaded engine cannot beat it honestly."""
from __future__ import annotations

import threading

import numpy as np

from benchmarks.core import hardware


def test_parallel_copy_copies_every_element_in_one_chunk_per_thread(monkeypatch):
    seen: list[tuple[int, int]] = []
    real = np.copyto

    def copyto(dst, src):
        seen.append((threading.get_ident(), len(src)))
        real(dst, src)

    monkeypatch.setattr(hardware.np, "copyto", copyto)
    src = np.arange(1001, dtype=np.float32)
    dst = np.zeros_like(src)
    hardware.parallel_copy(dst, src, 3)
    assert np.array_equal(dst, src)
    assert len({ident for ident, _ in seen}) == 3 and sorted(n for _, n in seen) == [333, 334, 334]


def test_cpu_bandwidth_is_measured_on_every_usable_core(monkeypatch):
    monkeypatch.delenv(hardware.ENV_BANDWIDTH, raising=False)
    calls = []
    monkeypatch.setattr(hardware, "measure_copy_bytes_per_s", lambda threads: calls.append(threads) or 1e10)
    bw, source = hardware.bandwidth("cpu", "some CPU")
    assert calls == [hardware.cpu_threads()] and bw == 1e10
    assert source == f"measured: numpy copy of 256 MiB on {hardware.cpu_threads()} threads"
