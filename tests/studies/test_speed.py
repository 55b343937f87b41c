"""`study speed` runs each of its checks that needs no vLLM, at the smallest size, on the shipped tiny pair: each
prints its side-by-side ratio, and those that decode compare the greedy tokens of both sides."""
from __future__ import annotations

import re

import pytest

from benchmarks.cli import main
from benchmarks.core.paths import ROOT

TINY = ROOT / "models" / "tiny"
SMALL = ["--new", "8", "--prompts", "2", "--repeats", "1"]

pytestmark = [pytest.mark.jax, pytest.mark.slow, pytest.mark.heavy]  # heavy: ~60 s of compiles; CI and ALL=1


@pytest.mark.parametrize("argv, expected", [
    (["ar-vs-hf", "--target", TINY / "target", *SMALL], r"JAX is [\d.]+x faster \| identical greedy tokens 2/2"),
    (["dflash-vs-ar", "--target", TINY / "target", "--draft", TINY / "dflash", "--k", "3", *SMALL],
     r"a DFlash step costs [\d.]+ AR steps, so 2x over AR needs tau >= [\d.]+ at K=3"),
    (["span", "--target", TINY / "target", "--k", "3", "--context", "32", "--cache-len", "1024"],  # spans of 256
     r"reading 256 rows [\d.]+ ms \| reading all 1024 rows [\d.]+ ms \| span is [\d.]+x"),
    (["batch", "--target", TINY / "target", "--draft", TINY / "dflash", "--k", "3", "--batch", "2", "--new", "8",
      "--repeats", "1"], r"B=2 [\d.]+ tokens/s \| batch is [\d.]+x \| identical tokens 2/2"),
    (["dispatch", "--leaves", "12,62"], r"12 leaves [\d.]+ µs, 62 leaves [\d.]+ µs"),
    (["layers", "--shape", "qwen3-tiny", "--depth", "2"], r"a buffer per weight [\d.]+ ms \(1.00x\), stacked"),
    (["compile", "--shapes", "qwen3-tiny", "--depths", "1,2"], r"qwen3-tiny at 2 layers: prefill [\d.]+ s"),
], ids=lambda v: v[0] if isinstance(v, list) else "")
def test_each_check_prints_its_ratio(argv, expected, capsys):
    assert main(["study", "speed", *map(str, argv)]) == 0
    out = capsys.readouterr().out
    assert re.search(expected, out), out
