"""Matrix validation: every bad input stops with one message naming the file, the key and what is allowed."""
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from benchmarks.config.matrix_expand import expand, identity, legacy_run_id, run_id_for
from benchmarks.config.matrix_parse import ConfigError, load_matrix, parse_matrix
from benchmarks.core.paths import ROOT
from tests.machine import as_where_vllm_is

BASE = {"target": "Qwen/Qwen3-4B", "drafts": {"dflash": "z-lab/Qwen3-4B-DFlash-b16"}, "block_size": 16,
        "methods": ["baseline", "dflash"], "k": 15, "datasets": ["math500"]}


def write(tmp_path, data) -> Path:
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.mark.parametrize("patch, key, fragment", [
    ({"bogus": 1}, "bogus", "unknown key"),
    ({"datasets": ["nope"]}, "datasets", "unknown dataset 'nope'"),
    ({"methods": ["baseline", "medusa"]}, "methods", "unknown method 'medusa'"),
    ({"k": 16}, "k", "exceeds block_size-1=15"),
    ({"k": "three"}, "k", "expected an int"),
    ({"max_new_tokens": "many"}, "max_new_tokens", "expected an int"),
    ({"num_prompts": 0}, "num_prompts", "expected an int >= 1"),
    ({"temperature": -1}, "temperature", "expected a float >= 0"),
    ({"temperature": 1.0e-320}, "temperature", "below 0.01, where sampling is greedy but for near ties"),
    ({"temperature": [0, 0.005]}, "temperature", "give 0 for greedy decoding, or a temperature >= 0.01"),
    ({"seed": 2**32}, "seed", "above 2147483647 (2^31 - 1)"),
    ({"seed": -1}, "seed", "expected an int >= 0"),
    ({"engine": "sglang"}, "engine", "unknown engine 'sglang'"),
    ({"methods": ["baseline", "eagle3"]}, "drafts", "method 'eagle3' needs a draft model"),
    ({"target": None}, "target", "missing"),
    ({"k": {"dflash": 4, "medusa": 2}}, "k", "unknown method 'medusa'"),
    ({"engine_options": [1]}, "engine_options", "expected a mapping"),
    ({"datasets": [{"name": "x", "url": "y"}]}, "datasets", "must be a name or a mapping"),
    ({"interleave": "yes"}, "interleave", "expected true or false"),
    ({"drift_prompts": -1}, "drift_prompts", "expected an int >= 0"),
    ({"drift_prompts": "few"}, "drift_prompts", "expected an int >= 0"),
    ({"methods": []}, "methods", "empty"),
    ({"k": []}, "k", "no K given for dflash"),
    ({"engine": "jax", "engine_options": {"enforce_eager": True}}, "engine_options",
     "'enforce_eager' is not an option of the jax engine"),
    ({"engine": "jax", "engine_options": {"jax": {"draft_query": "k+1"}}}, "engine_options.jax",
     "did you mean draft_queries?"),
    ({"workers": 1}, "workers", "expected true or false"),
    ({"engine_options": {"vllm": {"preload": "no"}}}, "engine_options.vllm",
     "preload: 'no' is not a value the vllm engine takes; allowed: True, False"),
    ({"engine": "jax", "engine_options": {"preload": False}}, "engine_options",
     "'preload' is not an option of the jax engine"),
    ({"request_timeout_s": 0}, "request_timeout_s", "expected a number of seconds > 0"),
    ({"load_timeout_s": "long"}, "load_timeout_s", "expected a number of seconds > 0"),
    ({"name": "../../../tmp/x"}, "name", "'../../../tmp/x' becomes a file or folder name; use letters, digits"),
    ({"name": "a/b"}, "name", "becomes a file or folder name"),
    ({"preset": "../presets/tiny"}, "preset", "becomes a file or folder name"),
    ({"datasets": [{"name": "../up", "path": "p.jsonl"}]}, "datasets", "'../up' becomes a file or folder name"),
    ({"datasets": ["math500", {"name": "math500", "path": "p.jsonl"}]}, "datasets", "lists math500 more than once"),
    ({"datasets": [{"name": "mine", "path": "a.jsonl"}, {"name": "mine", "path": "b.jsonl"}]}, "datasets",
     "lists mine more than once"),
    ({"temperature": [0.0, 0.6, 0]}, "temperature", "lists 0.0 more than once"),
    ({"k": [3, 7, 3]}, "k", "lists 3 more than once for dflash"),
    ({"methods": ["baseline", "dflash", "eagle3"], "drafts": {"dflash": "d", "eagle3": "e"},
      "k": {"dflash": [3], "eagle3": [2, 2]}}, "k", "lists 2 more than once for eagle3"),
    ({"engine": ["vllm", "vllm"]}, "engine", "lists vllm more than once"),
    ({"block_size": 0}, "block_size", "expected an int >= 2, got 0"),
])
def test_validation_errors_name_file_key_and_allowed(tmp_path, patch, key, fragment):
    path = write(tmp_path, {**BASE, **patch})
    with pytest.raises(ConfigError) as err:
        load_matrix(path)
    msg = str(err.value)
    assert str(path) in msg and f"'{key}'" in msg and fragment in msg


def test_unknown_key_lists_allowed_keys(tmp_path):
    with pytest.raises(ConfigError, match="did you mean max_new_tokens\\? allowed: [^\n]*max_new_tokens") as err:
        load_matrix(write(tmp_path, {**BASE, "max_tokens": 5}))
    assert "\n" not in str(err.value)  # one line


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="no such matrix file"):
        load_matrix(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("methods: [baseline\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_matrix(bad)


def test_unknown_preset():
    with pytest.raises(ConfigError, match="preset 'nope' not found"):
        parse_matrix({**BASE, "preset": "nope"})


def test_local_dataset_entry_is_allowed():
    m = parse_matrix({**BASE, "datasets": [{"name": "mine", "path": "p.jsonl"}]})
    assert m.datasets[0].path == "p.jsonl"


def test_expansion_puts_baseline_first_and_hashes_cells():
    m = parse_matrix({**BASE, "methods": ["dflash", "baseline"], "k": [4, 15], "temperature": [0.0, 1.0]})
    cells = expand(m)
    assert [c.label for c in cells] == ["baseline", "dflash-k4", "dflash-k15"] * 2
    assert len({c.cell_id for c in cells}) == 6
    assert expand(m)[1].cell_id == cells[1].cell_id  # content hash: stable across expansions


def test_per_method_k():
    m = parse_matrix({**BASE, "methods": ["baseline", "dflash", "eagle3"], "drafts": {"dflash": "a", "eagle3": "b"},
                      "k": {"dflash": 10, "eagle3": [2, 3]}})
    assert [c.label for c in expand(m)] == ["baseline", "dflash-k10", "eagle3-k2", "eagle3-k3"]


def test_k_as_a_schedule_gives_each_batch_size_its_k():
    from benchmarks.decide.k_schedules import Schedule
    from benchmarks.engines.vllm.vllm_engine import engine_args

    m = parse_matrix({**BASE, "engine": ["jax", "vllm"], "k": {"dflash": {1: 7, 4: 3, 16: 0}},
                      "batch_size": [1, 2, 4, 16], "num_prompts": 16})
    assert isinstance(m.k["dflash"], Schedule) and m.k["dflash"].ks() == [3, 7]
    cells = expand(m)
    jax = [(c.label, c.batch_size) for c in cells if c.engine == "jax"]
    assert jax == [("baseline", 1), ("dflash-k7", 1), ("baseline", 2), ("dflash-k7", 2), ("baseline", 4),
                   ("dflash-k3", 4), ("baseline", 16)]  # K = 0 at B = 16: the baseline is the schedule's cell
    assert all(not c.whole_schedule and c.scheduled for c in cells if c.engine == "jax" and c.method == "dflash")
    b4 = next(c for c in cells if c.engine == "vllm" and c.batch_size == 4 and c.method == "dflash")
    assert b4.k == 3 and b4.whole_schedule == ((1, 3, 7), (4, 4, 3)) and not b4.engine_options
    spec = engine_args(dataclasses.replace(b4, draft=None, method="ngram"), {"per_request_spec_decode_metrics": True}
                       )["speculative_config"]
    assert spec["num_speculative_tokens"] == 7  # vLLM caps the schedule's K at it
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 3, 7], [4, 4, 3]]
    from benchmarks.config.pairing import baseline_cell_id
    by_id = {c.cell_id: c for c in cells}
    base = by_id[baseline_cell_id(b4, by_id)]  # the schedule is a speculative setting: the B = 4 baseline pairs
    assert (base.engine, base.method, base.batch_size) == ("vllm", "baseline", 4)
    plain_first = expand(parse_matrix({**BASE, "engine": "jax", "k": {1: 0, 2: 5}, "batch_size": [1, 2]}))
    assert [(c.label, c.batch_size) for c in plain_first] == [("baseline", 1), ("dflash-k5", 1), ("baseline", 2),
                                                             ("dflash-k5", 2)]  # B = 1's reference for the verdict
    same = parse_matrix({**BASE, "k": [[1, 3, 7], [4, 15, 3], [16, 64, 0]], "batch_size": [1, 4]})
    assert same.k["dflash"] == m.k["dflash"]
    assert run_id_for(same) != run_id_for(parse_matrix({**BASE, "k": [7, 3], "batch_size": [1, 4]}))


def test_a_batch_size_past_the_written_ranges_is_said_to_run_the_last_k():
    """vLLM's ranges written up to B = 2 and batch sizes 4 and 8: both run the last range's K, as vLLM carries it
    upwards; validate says so (the plan's cells say K = 7 at B = 4 and 8)."""
    from benchmarks.config.matrix_expand import matrix_warnings

    for k in ([[1, 1, 15], [2, 2, 7]], {"dflash": [[1, 1, 15], [2, 2, 7]]}):
        m = parse_matrix({**BASE, "k": k, "batch_size": [1, 2, 4, 8], "num_prompts": 32})
        assert [(c.label, c.batch_size) for c in expand(m) if c.method == "dflash"] == [
            ("dflash-k15", 1), ("dflash-k7", 2), ("dflash-k7", 4), ("dflash-k7", 8)]
        assert matrix_warnings(m) == ["k: the ranges of dflash end at B = 2, so batch_size 4, 8 run the last range's "
                                      "K = 7 (as vLLM carries it upwards); add a range to run another K there"]
    written = parse_matrix({**BASE, "k": [[1, 1, 15], [2, 8, 7]], "batch_size": [1, 2, 4, 8], "num_prompts": 32})
    assert matrix_warnings(written) == []
    assert matrix_warnings(parse_matrix({**BASE, "k": {1: 15, 2: 7}, "batch_size": [1, 8], "num_prompts": 32})) == []


@pytest.mark.parametrize("k, fragment", [
    ({"dflash": {2: 7}}, "the schedule of dflash: the schedule must start at batch size 1"),
    ({1: 16}, "exceeds block_size-1=15"),
    ([[1, 3, 7], [5, 8, 3]], "ranges must be contiguous"),
    ({"dflash": {1: 0, 2: 0, 4: 0}}, "gives K = 0 at every batch size, so dflash would run no cell"),
])
def test_k_schedule_refused_with_the_fix(k, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_matrix({**BASE, "k": k, "batch_size": [1, 4]})


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "matrices").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_matrices_validate(path):
    assert expand(load_matrix(path))


def test_published_matrices_match_published_conditions():
    full = load_matrix(ROOT / "configs/matrices/full.yaml")
    assert len(full.datasets) == 9 and full.k == {"dflash": [15]} and full.max_new_tokens == 256
    assert full.temperatures == [0.0] and full.drafts["dflash"] == "z-lab/Qwen3-4B-DFlash-b16"
    llama = load_matrix(ROOT / "configs/matrices/llama-eagle3.yaml")
    assert llama.k == {"dflash": [10], "eagle3": [2]}


def test_engine_options_shared_and_per_engine():
    m = parse_matrix({**BASE, "engine": ["vllm", "jax"], "methods": ["baseline"],
                      "engine_options": {"max_model_len": 512, "vllm": {"enforce_eager": True},
                                         "jax": {"breakdown": True}}})
    opts = {c.engine: c.engine_options for c in expand(m)}
    assert opts == {"vllm": {"max_model_len": 512, "enforce_eager": True},
                    "jax": {"max_model_len": 512, "breakdown": True}}
    with pytest.raises(ConfigError, match="'jax' must be a mapping"):
        parse_matrix({**BASE, "engine_options": {"jax": 3}})


def test_vllm_takes_the_harnesss_preload_option():
    [base, _] = expand(parse_matrix({**BASE, "engine_options": {"vllm": {"preload": False}}}))
    assert base.engine_options == {"preload": False}


def test_preset_engine_options_merge_per_engine():
    m = parse_matrix({"preset": "tiny", "datasets": ["humaneval"],
                      "engine_options": {"vllm": {"max_num_seqs": 1}}})
    assert m.engine_options["vllm"] == {"enforce_eager": True, "max_num_seqs": 1}
    assert m.engine_options["max_model_len"] == 1024


@pytest.mark.parametrize("engine, platform, interleave", [
    ("jax", "cpu", True), ("vllm", "cpu", True), (None, "cpu", True), ("jax", "tpu", True), ("vllm", "tpu", False),
    (None, "gpu", False)])
def test_bench_interleaves_cells_where_the_engine_allows(engine, platform, interleave, monkeypatch):
    from argparse import Namespace

    from benchmarks.cli.bench import bench_matrix

    monkeypatch.setenv("PLATFORM", platform)
    args = Namespace(dataset="humaneval", preset="tiny", engine=engine, methods=None, k=None, num_prompts=None,
                     max_new_tokens=None, temperature=None, seed=None)
    assert bench_matrix(args).interleave is interleave


@pytest.mark.parametrize("engines, platform, options, fragment", [
    (["vllm", "vllm"], "cpu", {}, None),
    (["jax", "jax"], "tpu", {}, None),
    (["vllm"], "tpu", {}, None),  # a single cell has nothing to share the chip with
    (["vllm", "vllm"], "tpu", {}, "a TPU is owned by one process"),
    (["jax", "vllm"], "tpu", {}, "a TPU is owned by one process"),
    (["vllm", "vllm"], "gpu", {}, "gpu_memory_utilization=0.9 (the vLLM default)"),
    (["vllm", "vllm", "vllm"], "gpu", {"vllm": {"gpu_memory_utilization": 0.4}}, "gpu_memory_utilization: 0.33"),
    (["vllm", "vllm", "vllm"], "gpu", {"vllm": {"gpu_memory_utilization": 0.3}}, None),
])
def test_interleave_refused_only_where_cells_cannot_share_the_device(engines, platform, options, fragment):
    from benchmarks.config.placement import interleave_problem

    m = parse_matrix({**BASE, "interleave": True, "engine_options": options}, source="m.yaml")
    problem = interleave_problem(m, engines, platform)
    if fragment is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith("m.yaml: 'interleave'") and fragment in problem
    assert interleave_problem(parse_matrix({**BASE, "engine_options": options}), engines, platform) is None


def test_safe_names_pass_and_a_matrix_named_up_the_tree_fails_validate_with_one_line(tmp_path, capsys):
    from benchmarks.cli import main

    assert parse_matrix({**BASE, "name": "Qwen3-4B_v2.run"}).name == "Qwen3-4B_v2.run"
    assert parse_matrix({**BASE, "name": 2026}).name == "2026"
    path = write(tmp_path, {**BASE, "name": "../x"})
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "'name': '../x' becomes a file or folder name" in err


def test_validate_refuses_an_interleave_this_machine_cannot_run(tmp_path, monkeypatch, capsys):
    from benchmarks.cli import main

    tiny = ROOT / "models" / "tiny"  # on disk: validate checks hub ids and datasets against the offline state
    path = write(tmp_path, {**BASE, "target": str(tiny / "target"), "drafts": {"dflash": str(tiny / "dflash")},
                            "datasets": ["humaneval"], "interleave": True})
    as_where_vllm_is(monkeypatch)  # vllm, the default engine: the interleave a TPU refuses
    monkeypatch.setenv("PLATFORM", "cpu")
    assert main(["validate", str(path)]) == 0
    monkeypatch.setenv("PLATFORM", "tpu")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "a TPU is owned by one process" in err and "(on this tpu machine)" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("patch, fragment", [
    ({"context_tokens": -1}, "'context_tokens': expected an int >= 0"),
    ({"context_tokens": []}, "'context_tokens': empty"),
    ({"context_tokens": [512, 512]}, "lists 512 more than once"),
    ({"context_tokens": 4000, "max_new_tokens": 256, "engine_options": {"max_model_len": 4096}},
     "4000 context tokens + max_new_tokens 256 exceed max_model_len 4096 of engine vllm; the largest context that "
     "fits is 3840 tokens"),
    ({"engine": "jax", "context_tokens": 2000, "max_new_tokens": 64},  # the JAX engine's default max_model_len, 2048
     "max_model_len 2048 of engine jax; the largest context that fits is 1984 tokens"),
    ({"context_tokens": 512, "datasets": [{"name": "mine", "path": "p.jsonl"}]},
     "dataset 'mine' has no reference answers to build many-shot context from"),
    ({"turns": 3}, "'turns': expected 1, 2 or a list of them"),
    ({"turns": [2]}, "dataset 'math500' has no second turn (two-turn datasets: mt-bench)"),
    ({"turns": [1, 2], "datasets": ["mt-bench"], "methods": ["dflash"]}, "add 'baseline' to 'methods'"),
    ({"turns": [2], "datasets": ["mt-bench"], "context_tokens": 512}, "turn 2 and 'context_tokens' do not combine"),
    ({"chat_template": True}, "'chat_template': expected a mapping of keyword arguments"),
    ({"chat_template": {"add_generation_prompt": False}}, "add_generation_prompt: set by the harness"),
])
def test_workload_keys_are_validated(patch, fragment):
    with pytest.raises(ConfigError) as err:
        parse_matrix({**BASE, **patch}, "m.yaml")
    assert fragment in str(err.value)


def test_workload_keys_parse_and_enter_the_run_id():
    m = parse_matrix({**BASE, "context_tokens": [4096, 1024], "chat_template": {"enable_thinking": True},
                      "engine_options": {"max_model_len": 8192}})
    assert m.context_tokens == [1024, 4096] and m.chat_template == {"enable_thinking": True} and m.turns is None
    two = parse_matrix({**BASE, "datasets": ["mt-bench"], "turns": [2, 1]})
    assert two.turns == [1, 2]
    plain = parse_matrix(BASE)
    assert plain.context_tokens is plain.turns is plain.chat_template is None
    # a matrix without workload keys (or batch sizes) keeps the run id it had before they existed (the former
    # formula's, which names the run folders written then)
    placement = ("executor", "resources", "workers", "request_timeout_s", "load_timeout_s")
    workload = ("context_tokens", "turns", "chat_template", "batch_size", "slo", "slo_load", "slo_range", "slo_step",
                "slo_requests", "slo_search", "tree_budget")  # and the keys added since, unset
    fields = {k: v for k, v in dataclasses.asdict(plain).items() if k not in placement + workload}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:8]
    assert legacy_run_id(plain) == f"{plain.name}-{digest}"
    assert not {"context_tokens", "turns", "chat_template"} & set(identity(dataclasses.asdict(plain)))
    thinking = parse_matrix({**BASE, "chat_template": {"enable_thinking": True}})
    assert len({run_id_for(x) for x in (plain, m, thinking)}) == 3


@pytest.mark.parametrize("written_out", [
    {"chat_template": {"enable_thinking": False}}, {"context_tokens": 0}, {"context_tokens": [0]}, {"turns": 1},
    {"turns": [1]}, {"chat_template": {"enable_thinking": False}, "context_tokens": 0, "turns": 1},
])
def test_a_default_written_out_leaves_the_run_id_as_it_was(written_out):
    plain = parse_matrix(BASE)
    given = parse_matrix({**BASE, **written_out})
    assert run_id_for(given) == run_id_for(plain)
    assert given.chat_template is given.context_tokens is given.turns is None


def test_a_template_argument_beside_the_default_keeps_only_its_own():
    m = parse_matrix({**BASE, "chat_template": {"enable_thinking": False, "reasoning": "low"}})
    assert m.chat_template == {"reasoning": "low"}
    assert run_id_for(m) != run_id_for(parse_matrix(BASE))
    # 0 is not false: a template told enable_thinking=0 is given what was written
    assert parse_matrix({**BASE, "chat_template": {"enable_thinking": 0}}).chat_template == {"enable_thinking": 0}


NGRAM = {**BASE, "methods": ["baseline", "ngram"], "k": {"ngram": 3}, "drafts": {}}


@pytest.mark.parametrize("engine, options, fragment", [
    *[("llama.cpp", {"llama.cpp": {"ngram_n": v}}, f"ngram_n: {v!r} is not a value the llama.cpp engine takes; "
       "expected an int from 1 to 2047 (below max_model_len 2048") for v in (0, -3, 2.5, 100000, True, "5")],
    ("llama.cpp", {"llama.cpp": {"ngram_n": 600, "max_model_len": 512}}, "an int from 1 to 511"),
    ("llama.cpp-serve", {"llama.cpp": {"threads": -1}}, "threads: -1 is not a value the llama.cpp-serve engine takes; "
     "expected an int >= 0"),
    ("vllm", {"vllm": {"prompt_lookup_min": 0}}, "prompt_lookup_min: 0 is not a value the vllm engine takes"),
    ("vllm", {"vllm": {"prompt_lookup_max": 2.5}}, "expected an int >= 1"),
    ("vllm", {"vllm": {"prompt_lookup_min": 4, "prompt_lookup_max": 2}}, "prompt_lookup_max 2 is below "
     "prompt_lookup_min 4"),
    ("vllm", {"vllm": {"max_model_len": 1024, "prompt_lookup_max": 5000}}, "an int from 1 to 1023"),
])
def test_engine_options_out_of_their_declared_range_are_refused(engine, options, fragment):
    with pytest.raises(ConfigError) as err:
        parse_matrix({**NGRAM, "engine": engine, "engine_options": options, "max_new_tokens": 16}, "m.yaml")
    assert fragment in str(err.value)


def test_engine_options_within_their_range_pass():
    m = parse_matrix({**NGRAM, "engine": "llama.cpp", "engine_options": {"llama.cpp": {"ngram_n": 4, "threads": 0}}})
    assert m.engine_options == {"llama.cpp": {"ngram_n": 4, "threads": 0}}
    v = parse_matrix({**NGRAM, "engine_options": {"vllm": {"prompt_lookup_min": 2, "prompt_lookup_max": 5}}})
    assert v.engine_options["vllm"]["prompt_lookup_max"] == 5


@pytest.mark.parametrize("raw, fragment", [
    ("slo_step: 1e-9", "'slo_step': expected a finite number of requests per second > 0, got the text '1e-9' (quoted, "
                       "or a number YAML reads as text; write 1.0e-9)"),
    ("temperature: 7E-1", "'temperature': expected a float >= 0, got the text '7E-1' (quoted, or a number YAML reads "
                          "as text; write 7.0e-1)"),
    ('num_prompts: "8"', "'num_prompts': expected an int >= 1, got the text '8' (quoted, or a number YAML reads as "
                         "text)"),
])
def test_a_number_yaml_reads_as_text_is_named_with_the_spelling_it_reads(raw, fragment, tmp_path):
    """PyYAML reads YAML 1.1, where 1e-9 (no '.' before the exponent) is text: the refusal says so and how to write
    it, rather than showing a number that looks right."""
    from benchmarks.config.matrix_parse import load_matrix

    path = tmp_path / "m.yaml"
    step = "" if raw.startswith("slo_step") else "slo_step: 0.5\n"
    path.write_text("name: m\npreset: tiny\nengine: vllm-serve\ndatasets: [humaneval]\nslo: {p90_tpot_ms: 50}\n"
                    "slo_load: request_rate\nslo_range: [0.5, 4.0]\n" + step + raw + "\n")
    with pytest.raises(ConfigError) as refused:
        load_matrix(path)
    assert fragment in str(refused.value)
