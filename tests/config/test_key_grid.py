"""Every declared matrix key, given values past its domain (the wrong kind, empty, huge, not a number), is either
read as a value it takes or refused with one line that names it: drawn from `KEYS`, so a new key is covered by
being declared."""
import math

import pytest
import yaml

from benchmarks.cli import clipped
from benchmarks.config.matrix_checks import ConfigError
from benchmarks.config.matrix_parse import parse_matrix
from benchmarks.config.matrix_schema import KEYS
from benchmarks.core.paths import ROOT

# A matrix of each mode every key belongs to: plain runs (batched, on the JAX engine) and a vLLM capacity search.
BASES = {
    "batch": yaml.safe_load((ROOT / "configs/matrices/tiny-kgrid.yaml").read_text()),
    "slo": yaml.safe_load((ROOT / "configs/matrices/tiny-slo.yaml").read_text()),
}
HOSTILE = {
    "null": None, "true": True, "negative": -1, "zero": 0, "huge int": 10 ** 12, "huge float": 1e308,
    "nan": math.nan, "inf": math.inf, "word": "x", "empty list": [], "empty map": {}, "nested list": [[1]],
    "nested map": {"a": {"b": 1}}, "long text": "k" * 5000,
}


def outcome(base: str, key: str, value: object) -> str:
    """'read' or the refusal as the command line prints it (`clipped`); anything other than a ConfigError fails the
    test where it is raised."""
    raw = {**BASES[base], key: value}
    try:
        parse_matrix(raw, source="grid.yaml", base_dir=ROOT / "configs/matrices")
    except ConfigError as err:
        return clipped(str(err))
    return "read"


@pytest.mark.parametrize("base", sorted(BASES))
@pytest.mark.parametrize("key", [k.name for k in KEYS])
def test_a_hostile_value_of_each_declared_key_is_read_or_refused_in_one_line_naming_it(base, key):
    refused = {}
    for kind, value in HOSTILE.items():
        got = outcome(base, key, value)
        if got != "read":
            refused[kind] = got
    for kind, text in refused.items():
        assert "\n" not in text, f"{key} = {kind}: more than one line:\n{text}"
        assert f"'{key}'" in text or key in text, f"{key} = {kind}: the refusal does not name the key: {text}"
        assert len(text) < 1000, f"{key} = {kind}: the refusal echoes the value whole ({len(text)} characters)"
    # what no key takes: a number that is not one, a map nested in a map (but where a key takes free-form text or
    # a mapping that is passed on: a chat template's keyword arguments may be maps)
    for kind in ("nan", "inf", "nested map"):
        if key in ("name", "description", "engine_options", "slo", "resources", "preset", "chat_template"):
            continue
        assert kind in refused, f"{key} = {kind} ({HOSTILE[kind]!r}) was read in a {base} matrix"


@pytest.mark.parametrize("key, value, fragment", [
    ("request_timeout_s", 1e308, "at most 604800"),  # a wait that long overflowed the worker's poll
    ("load_timeout_s", 10 ** 12, "at most 604800"),
    ("drift_prompts", 10 ** 12, "num_prompts = 32"),  # was cut to num_prompts in silence
    ("drafts", {"dflash": ["models/tiny/dflash"]}, "expected an HF id or a local folder"),
    ("drafts", {"medusa": "x"}, "not a method that takes a draft"),
])
def test_what_the_grid_found_is_refused_before_anything_runs(key, value, fragment):
    assert fragment in outcome("batch", key, value)


def test_drift_prompts_left_unset_is_cut_to_the_measured_prompts_without_a_word():
    raw = {**BASES["batch"], "num_prompts": 2, "batch_size": [1, 2]}
    assert parse_matrix(raw, source="grid.yaml", base_dir=ROOT / "configs/matrices").drift_prompts == 8
