"""Matrix files as YAML: merge keys are YAML's own, a key given twice and aliases that expand beyond a bound are
refused with one line naming the file, and a large file without aliases still loads."""
import time

import pytest

from benchmarks.config.matrix_checks import ConfigError
from benchmarks.config.yaml_files import MAX_ALIAS_NODES, read_yaml

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


def load(tmp_path, text: str):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return read_yaml(path)


def test_merge_keys_are_read_and_their_keys_may_be_overridden(tmp_path):
    data = load(tmp_path, "base: &b {dtype: float32, max_model_len: 512}\nengine_options:\n  <<: *b\n"
                          "  max_model_len: 1024\n")
    assert data["engine_options"] == {"dtype": "float32", "max_model_len": 1024}


def test_a_key_given_twice_is_still_refused_beside_a_merge(tmp_path):
    with pytest.raises(ConfigError, match="key 'k' given twice"):
        load(tmp_path, "b: &b {x: 1}\nm:\n  <<: *b\n  k: 1\n  k: 2\n")


def test_a_billion_laughs_is_refused_before_anything_expands_it(tmp_path):
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=f"expand to .* more nodes \\(at most {MAX_ALIAS_NODES:,}\\)"):
        load(tmp_path, LAUGHS)
    assert time.perf_counter() - t0 < 5


def test_an_alias_inside_the_node_it_names_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="refers to a node that contains it"):
        load(tmp_path, "a: &a [1, *a]\n")


def test_a_few_aliases_and_a_large_file_without_any_load(tmp_path):
    n = MAX_ALIAS_NODES + 1  # more nodes than the aliases' bound: a bound on all nodes would refuse the file
    rows = "".join(f"  - row {i}\n" for i in range(n))
    data = load(tmp_path, "o: &o {x: 1}\np: *o\nq: *o\nrows:\n" + rows)
    assert data["p"] == data["q"] == {"x": 1} and len(data["rows"]) == n
