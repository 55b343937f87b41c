"""study chip-compile: on this machine's CPU, the copy detector on programs that do and do not copy, the engine's loops
(batch 1 and a static batch, plain decoding, DFlash and a draft tree) compiled with their
memory and no cache copied, a point past the chip's memory named and not compiled, and a TPU without libtpu refused
with the command that installs it; through `make chip-compile` (heavy), the same loops compiled by the v5e's own
compiler, none copying a cache."""
import argparse
import json
import subprocess

import jax
import jax.numpy as jnp
import pytest

from benchmarks.core.exit_codes import BadInput, Exit
from benchmarks.core.paths import ROOT
from benchmarks.studies import chip_compile

pytestmark = pytest.mark.jax


def args(tmp_path, **over):
    values = dict(chip="cpu", shape="qwen3-tiny", batch=(1, 2), context=(64,), ks=(0, 3), dtype="float32",
                  attention="xla", out=tmp_path / "out")
    return argparse.Namespace(**(values | over))


def test_copies_of_a_cache_shaped_array_are_counted():
    cache = jax.ShapeDtypeStruct((4, 8, 128), jnp.float32)
    kept_and_updated = jax.jit(lambda c: (c, c.at[0].set(1.0))).lower(cache).compile().as_text()
    in_place = jax.jit(lambda c: c.at[0].set(1.0), donate_argnums=0).lower(cache).compile().as_text()
    assert chip_compile.cache_copies(kept_and_updated, {(4, 8, 128)}) >= 1
    assert chip_compile.cache_copies(in_place, {(4, 8, 128)}) == 0
    assert chip_compile.cache_copies(kept_and_updated, {(4, 8, 64)}) == 0  # another shape is not a cache's


def test_the_engines_loops_compile_with_their_memory_and_no_cache_copied(tmp_path, capsys):
    assert chip_compile.main(args(tmp_path, budgets=(8,))) == Exit.OK
    got = json.loads((tmp_path / "out" / "chip-compile.json").read_text())
    assert got["chip"] == "cpu" and got["dtype"] == "float32"
    points = got["points"]
    # the draft trees after the chains, at the draft's depth limit
    assert [(p["batch"], p["k"], p.get("budget")) for p in points] == [(1, 0, None), (2, 0, None), (1, 3, None),
                                                                      (2, 3, None), (1, 15, 8), (2, 15, 8)]
    for p in points:
        assert p["status"] == "ok" and p["cache_copies"] == 0 and p["compile_s"] > 0
        assert p["argument_bytes"] > p["cache_bytes"] > 0 and p["temp_bytes"] >= 0
    assert points[1]["cache_bytes"] == 2 * points[0]["cache_bytes"]  # every request's cache
    assert (tmp_path / "out" / "chip-compile.csv").read_text().count("\n") == 7
    out = capsys.readouterr().out
    assert "6 points, 0 copy a cache, 0 failed, 0 skipped" in out and "B=2   context=64    tree 8 |" in out


def test_a_point_past_the_chips_memory_is_named_and_not_compiled(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(chip_compile, "target_device", lambda chip: jax.devices("cpu")[0])
    compiled = []
    monkeypatch.setattr(chip_compile, "measure", lambda *a: compiled.append(a) or {})
    code = chip_compile.main(args(tmp_path, chip="v5e", shape="qwen3-4b", batch=(64,), context=(8192,), ks=(0,),
                                  dtype="bfloat16"))
    assert code == Exit.OK and not compiled
    (point,) = json.loads((tmp_path / "out" / "chip-compile.json").read_text())["points"]
    assert point["status"] == "skipped" and point["note"].startswith("does not fit: 78.73 GB of caches and work space")
    assert "that 8.04 GB of weights leave of 16 GiB of HBM" in point["note"] and "1 skipped" in capsys.readouterr().out


def test_a_tpu_without_libtpu_is_refused_with_the_command_that_installs_it(tmp_path, monkeypatch):
    from jax.experimental import topologies

    def no_libtpu(**_):
        raise RuntimeError("Unable to initialize backend 'tpu'")

    monkeypatch.setattr(topologies, "get_topology_desc", no_libtpu)
    with pytest.raises(BadInput, match="needs libtpu's compiler: `make chip-compile` runs this in a venv of its own"):
        chip_compile.main(args(tmp_path, chip="v5e"))


@pytest.mark.heavy
def test_the_engines_loops_compiled_for_the_v5e_copy_no_cache(tmp_path):
    """libtpu's compiler at the chip's releases, in make chip-compile's venv (built on first use: ~1.3 GB, minutes),
    at the tiny shape (seconds a point): a cache copied into another layout at every call, the fault a slot-major
    write-behind window once made, shows there as at Qwen3-4B's shape (docs/engine-findings.md)."""
    out = tmp_path / "compiled"
    points = f"--shape qwen3-tiny --dtype float32 --batch 1,4,16 --context 256 --ks 0,7 --out {out}"
    proc = subprocess.run(["make", "-s", "--no-print-directory", "chip-compile", f"CHIP_ARGS={points}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads((out / "chip-compile.json").read_text())
    assert got["device_kind"] == "TPU v5 lite" and got["jax"] == "0.10.2"
    assert [(p["batch"], p["k"]) for p in got["points"]] == [(1, 0), (4, 0), (16, 0), (1, 7), (4, 7), (16, 7)]
    assert all(p["status"] == "ok" and p["cache_copies"] == 0 and p["temp_bytes"] > 0 for p in got["points"])
