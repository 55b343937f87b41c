"""The CPU figures behind floors and predictions: measured with every core this process may use (a multi-threaded
engine cannot beat them honestly), once per machine, then read from the machine's cache file."""
from __future__ import annotations

import json
import threading

from benchmarks.hardware import detect, measure


def test_work_on_threads_covers_every_element_in_one_chunk_per_thread():
    seen: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def work(lo, hi):
        with lock:
            seen.append((threading.get_ident(), lo, hi))

    measure.on_threads(3, work, 1001)
    assert len({ident for ident, _, _ in seen}) == 3
    chunks = sorted((lo, hi) for _, lo, hi in seen)
    assert chunks[0][0] == 0 and chunks[-1][1] == 1001 and all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    assert sorted(hi - lo for lo, hi in chunks) == [333, 334, 334]


def test_cpu_bandwidth_is_the_fastest_read_stream_on_every_usable_core(monkeypatch):
    monkeypatch.delenv(detect.ENV_BANDWIDTH, raising=False)
    monkeypatch.setattr(measure, "read_bytes_per_s", lambda: 1e10)
    bw, source = detect.bandwidth("cpu", "some CPU")
    assert bw == 1e10
    assert source == f"measured: fastest read stream on {measure.cpu_threads()} threads, cached per machine"


def test_a_figure_is_measured_once_per_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "cache_file", lambda: tmp_path / "machine.json")
    calls = []
    assert measure.cached("copy", lambda: calls.append(1) or 2.5) == 2.5
    assert measure.cached("copy", lambda: calls.append(1) or 9.0) == 2.5
    assert measure.cached("read", lambda: 4.0) == 4.0
    assert calls == [1] and json.loads((tmp_path / "machine.json").read_text()) == {"copy": 2.5, "read": 4.0}


def test_a_bandwidth_measured_on_a_busy_machine_is_measured_again_when_it_is_quieter(tmp_path, monkeypatch):
    """A busy machine reads slower: its bandwidth would set a floor that honest times fall below."""
    monkeypatch.setattr(measure, "cache_file", lambda: tmp_path / "machine.json")
    load = [5.0]
    monkeypatch.setattr(measure, "load_average", lambda: load[0])
    assert measure.cached("read", lambda: 20.0, best=True) == 20.0
    load[0] = 4.5  # hardly quieter: the stored figure stands
    assert measure.cached("read", lambda: 30.0, best=True) == 20.0
    load[0] = 0.5
    assert measure.cached("read", lambda: 30.0, best=True) == 30.0
    load[0] = 0.2  # measured again from a load of 0.5 only when 1 lower: not now, and a lower figure never wins
    assert measure.cached("read", lambda: 10.0, best=True) == 30.0
    figures = json.loads((tmp_path / "machine.json").read_text())
    assert figures == {"read": 30.0, "read/load": 0.5}


def test_matmul_table_measures_each_weight_shape_once_for_all_its_row_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "cache_file", lambda: tmp_path / "machine.json")
    calls = []

    def fake(rows, n_in, n_out, dtype, layout, resident):
        calls.append((tuple(rows), n_in, n_out, layout, resident))
        return {r: r * 1e-3 for r in rows}

    monkeypatch.setattr(measure, "measure_matmul_seconds", fake)
    shapes = [(1, 8, 16), (4, 8, 16), (1, 16, 8)]
    assert measure.matmul_table(shapes, "float32", "io") == {(1, 8, 16): 1e-3, (4, 8, 16): 4e-3, (1, 16, 8): 1e-3}
    assert measure.matmul_table(shapes + [(2, 8, 16)], "float32", "io")[(2, 8, 16)] == 2e-3
    assert calls == [((1, 4), 8, 16, "io", False), ((1,), 16, 8, "io", False), ((2,), 8, 16, "io", False)]


def test_matmul_table_never_prices_more_rows_of_a_weight_below_fewer(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "cache_file", lambda: tmp_path / "machine.json")
    noisy = {1: 3e-3, 2: 1e-3, 4: 2e-3, 8: 5e-3}  # rows 2 and 4 timed in a quiet spell
    monkeypatch.setattr(measure, "measure_matmul_seconds", lambda rows, *_: {r: noisy[r] for r in rows})
    table = measure.matmul_table([(r, 8, 16) for r in (8, 4, 2, 1)] + [(2, 16, 8)], "float32", "io")
    assert [table[(r, 8, 16)] for r in (1, 2, 4, 8)] == [3e-3, 3e-3, 3e-3, 5e-3]
    assert table[(2, 16, 8)] == 1e-3  # another weight shape: its own figures
