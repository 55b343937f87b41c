"""`study engine-ties` without an engine: the first divergences between engines' AR outputs, and their verdicts from
a scorer's log-probabilities under the tie rule."""
from __future__ import annotations

import dataclasses

import pytest

from benchmarks.core.engine_io import TokenScores
from benchmarks.studies.engine_ties import divergences, table, verdict


def test_each_pair_of_engines_gives_its_first_divergence_per_shared_prompt():
    outputs = {"jax": {"p": [1, 2, 3], "q": [4, 5]}, "llama.cpp": {"p": [1, 2, 9], "q": [4, 5]},
               "vllm": {"p": [1, 2, 3], "r": [7]}}
    found = divergences(outputs)
    assert [(d["engines"], d["prompt"], d["index"], d["tokens"], d["prefix"]) for d in found] == [
        (("jax", "llama.cpp"), "p", 2, (3, 9), [1, 2]), (("llama.cpp", "vllm"), "p", 2, (9, 3), [1, 2])]


def test_the_tie_rule_decides_from_the_scorers_margin():
    near = TokenScores("bfloat16", [3, 9], [-0.70, -0.71], [-0.70, -0.71])
    far = dataclasses.replace(near, dtype="float32")
    assert verdict(near, (3, 9)).tie and verdict(near, (3, 9)).margin == pytest.approx(0.01)
    v = verdict(far, (3, 9))
    assert not v.tie and v.reason == "float32: exact identity required"
    assert verdict(dataclasses.replace(near, token_logits=[-0.7, None]), (3, 9)).reason.startswith("a token outside")
    assert verdict(None, (3, None)).reason == "one output ended earlier"
    d = {"engines": ("jax", "llama.cpp"), "prompt": "p" * 20, "index": 2, "tokens": (3, 9)}
    assert "| humaneval | jax vs llama.cpp | pppppppppppp | 2 | 3 vs 9 | 0.01 |" in table([("humaneval", d,
                                                                                          verdict(near, (3, 9)))])
