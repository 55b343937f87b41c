"""The capacity search's keys: parsed together, defaults where a search is set and None where it is not, and one
clear error per bad value (naming the file, the key and the fix), from `validate` (exit 2) as from a run."""
import pytest
import yaml

from benchmarks.cli import main as cli_main
from benchmarks.config.matrix_expand import run_id_for
from benchmarks.config.matrix_parse import ConfigError, parse_matrix
from benchmarks.decide.capacity import space_of
from benchmarks.decide.slo import Slo, slos_of

BASE = {"target": "Qwen/Qwen3-4B", "drafts": {"dflash": "z-lab/Qwen3-4B-DFlash-b16"}, "block_size": 16,
        "methods": ["baseline", "dflash"], "k": 15, "datasets": ["math500"], "engine": "vllm-serve", "num_prompts": 40}
SEARCH = {"slo": {"p90_tpot_ms": 20, "p90_ttft_ms": 500}, "slo_range": [1, 16]}


def test_a_search_takes_its_defaults_and_no_fixed_level_unless_given():
    m = parse_matrix({**BASE, **SEARCH})
    assert (m.slo, m.slo_load, m.slo_range, m.slo_step, m.slo_requests, m.slo_search) == (
        [{"p90_tpot_ms": 20.0, "p90_ttft_ms": 500.0}], "concurrency", [1, 16], 1, 40, "bisect")
    assert m.concurrency == []  # fixed levels only where the matrix gives them
    assert parse_matrix({**BASE, **SEARCH, "concurrency": 1}).concurrency == [1]
    space = space_of(vars(m))
    assert space is not None and space.grid == tuple(range(1, 17)) and (space.requests, space.rounds) == (40, 1)
    assert slos_of(vars(m)) == [Slo.of({"p90_tpot_ms": 20.0, "p90_ttft_ms": 500.0})]
    rate = parse_matrix({**BASE, "slo": [{"p50_e2el_ms": 900}, {"p90_itl_ms": 50}], "slo_load": "request_rate",
                         "slo_range": [0.5, 4], "slo_step": 0.5, "slo_requests": 20, "slo_search": "sweep",
                         "num_prompts": 60})  # 3 looks at a load: p90 needs 46 requests
    assert space_of(vars(rate)).grid == (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0) and len(rate.slo) == 2


def test_without_a_search_every_key_is_none_and_the_run_id_as_before():
    m = parse_matrix(BASE)
    assert (m.slo, m.slo_load, m.slo_range, m.slo_step, m.slo_requests, m.slo_search) == (None,) * 6
    assert m.concurrency == [1] and space_of(vars(m)) is None
    thresholds = parse_matrix({**BASE, **SEARCH, "slo": {"p90_tpot_ms": 30}})  # what changes a measurement only
    assert run_id_for(thresholds) == run_id_for(parse_matrix({**BASE, **SEARCH}))
    more = {**BASE, **SEARCH, "num_prompts": 48}  # two rounds of 24 (each look at 97.5 %: p90 needs 42)
    assert run_id_for(parse_matrix({**more, "slo_requests": 24})) != run_id_for(parse_matrix(more))


@pytest.mark.parametrize("patch, key, fragment", [
    ({"slo": None, "slo_range": [1, 8]}, "slo_range", "needs 'slo' (the thresholds it meets"),
    ({"slo": {"p90_tpt_ms": 20}}, "slo", "'p90_tpt_ms' is not a threshold; give p<percentile>_<metric>_ms"),
    ({"slo": {"p80_tpot_ms": 20}}, "slo", "percentile 50, 90, 95, 99"),
    ({"slo": {"p90_tpot_ms": 0}}, "slo", "p90_tpot_ms: expected a finite number of milliseconds > 0, got 0"),
    ({"slo": {"p90_tpot_ms": True}}, "slo", "expected a finite number of milliseconds"),
    ({"slo": {}}, "slo", "expected a mapping of thresholds such as {p99_tpot_ms: 20, p99_ttft_ms: 500}"),
    ({"slo": [{"p90_tpot_ms": 20}, {"p90_tpot_ms": 20}]}, "slo", "more than once"),
    ({"slo": {"p99_tpot_ms": 20}}, "slo", "p99_tpot_ms can never be shown met: a 95 % order-statistic upper bound "
                                         "of the 99th percentile needs at least 368 requests at one load, and "
                                         "num_prompts (the most one load gets) is 40; raise num_prompts to 368"),
    ({"engine": "vllm"}, "slo", "engine vllm runs one prompt at a time; a capacity search drives a server under "
                                "load: use engine vllm-serve or llama.cpp-serve"),
    ({"slo_range": None}, "slo_range", "give [low, high] of concurrency, e.g. [1, 32]"),
    ({"slo_range": [16, 1]}, "slo_range", "the low end is above the high end"),
    ({"slo_range": [0, 8]}, "slo_range", "expected an int >= 1, got 0"),
    ({"slo_range": [1, 16], "slo_step": 4}, "slo_range", "16 is not a whole number of steps of 4 from 1"),
    ({"slo_range": [1, 500], "slo_step": 1}, "slo_requests", "never holds 500 in flight"),
    ({"slo_range": [1, 20000], "slo_step": 1, "slo_requests": 40}, "slo_step", "at most 1024: raise the step"),
    ({"slo_range": [1, 1000000001], "slo_step": 1}, "slo_step", "is 1e+09 loads; at most 1024"),  # counted, not built
    ({"slo_load": "request_rate", "slo_range": [0.5, 4.0], "slo_step": 1e-9}, "slo_step", "at most 1024"),
    ({"request_rate": 2.0}, "request_rate", "a capacity search sets each load itself and would not use it"),
    ({"slo_load": "users"}, "slo_load", "expected one of concurrency, request_rate, got 'users'"),
    ({"slo_load": "request_rate", "slo_range": [0, 2]}, "slo_range", "requests per second > 0, got 0"),
    ({"slo_requests": 41}, "slo_requests", "41 requests per round, but num_prompts"),
    ({"slo_requests": 8}, "slo_requests", "a round of 8 requests never holds 16 in flight"),
    ({"slo_search": "binary"}, "slo_search", "expected bisect or sweep, got 'binary'"),
    ({"datasets": ["mt-bench"], "turns": 2}, "slo", "a capacity search sends first turns"),
])
def test_a_bad_search_key_names_itself_and_the_fix(patch, key, fragment):
    raw = {k: v for k, v in {**BASE, **SEARCH, **patch}.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        parse_matrix(raw, "m.yaml")
    assert str(err.value).startswith(f"m.yaml: '{key}': ") and fragment in str(err.value), str(err.value)


def test_validate_refuses_a_bad_search_in_one_line_with_exit_2(tmp_path, capsys):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**BASE, **SEARCH, "slo_requests": 8}))
    assert cli_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'slo_requests'" in err and "never holds 16 in flight" in err
