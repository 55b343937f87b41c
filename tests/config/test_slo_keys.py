"""The capacity search's keys: parsed together, defaults where a search is set and None where it is not, and one
clear error per bad value (naming the file, the key and the fix), from `validate` (exit 2) as from a run."""
import pytest
import yaml

from benchmarks.cli import main as cli_main
from benchmarks.config.matrix_expand import run_id_for
from benchmarks.config.matrix_parse import ConfigError, parse_matrix
from benchmarks.decide.capacity import space_of
from benchmarks.decide.slo import Slo, slos_of
from tests.machine import as_where_vllm_is

BASE = {"target": "Qwen/Qwen3-4B", "drafts": {"dflash": "z-lab/Qwen3-4B-DFlash-b16"}, "block_size": 16,
        "methods": ["baseline", "dflash"], "k": 15, "datasets": ["math500"], "engine": "vllm-serve", "num_prompts": 40}
SEARCH = {"slo": {"p90_tpot_ms": 20, "p90_ttft_ms": 500}, "slo_range": [1, 13]}  # rounds of 40: 3 waves at C = 13


def test_a_search_takes_its_defaults_and_no_fixed_level_unless_given():
    m = parse_matrix({**BASE, **SEARCH})
    assert (m.slo, m.slo_load, m.slo_range, m.slo_step, m.slo_requests, m.slo_search) == (
        [{"p90_tpot_ms": 20.0, "p90_ttft_ms": 500.0}], "concurrency", [1, 13], 1, 40, "bisect")
    assert m.concurrency == []  # fixed levels only where the matrix gives them
    assert parse_matrix({**BASE, **SEARCH, "concurrency": 1}).concurrency == [1]
    space = space_of(vars(m))
    assert space is not None and space.grid == tuple(range(1, 14)) and (space.requests, space.rounds) == (40, 1)
    assert slos_of(vars(m)) == [Slo.of({"p90_tpot_ms": 20.0, "p90_ttft_ms": 500.0})]
    rate = parse_matrix({**BASE, "slo": [{"p50_e2el_ms": 900}, {"p90_itl_ms": 50, "p90_e2el_ms": 1500}],
                         "slo_load": "request_rate",
                         "slo_range": [0.5, 4], "slo_step": 0.5, "slo_requests": 20, "slo_search": "sweep",
                         "num_prompts": 60})  # 3 looks at a load: p90 needs 46 requests; waves of 4 × 1.5 s at 4/s
    assert space_of(vars(rate)).grid == (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0) and len(rate.slo) == 2


def test_without_a_search_every_key_is_none_and_the_run_id_as_before():
    m = parse_matrix(BASE)
    assert (m.slo, m.slo_load, m.slo_range, m.slo_step, m.slo_requests, m.slo_search) == (None,) * 6
    assert m.concurrency == [1] and space_of(vars(m)) is None
    thresholds = parse_matrix({**BASE, **SEARCH, "slo": {"p90_tpot_ms": 30}})  # what changes a measurement only
    assert run_id_for(thresholds) == run_id_for(parse_matrix({**BASE, **SEARCH}))
    more = {**BASE, **SEARCH, "num_prompts": 78}  # two rounds of 39 (each look at 97.5 %: p90 needs 42)
    assert run_id_for(parse_matrix({**more, "slo_requests": 39})) != run_id_for(parse_matrix(more))


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
    ({"slo_range": [1, 500], "slo_step": 1}, "slo_requests", "40 requests a round are fewer than 3 waves at C = 14 to "
                                                             "C = 500"),
    ({"slo_range": [1, 20000], "slo_step": 1, "slo_requests": 40}, "slo_step", "at most 1024: raise the step"),
    ({"slo_range": [1, 1000000001], "slo_step": 1}, "slo_step", "is 1e+09 loads; at most 1024"),  # counted, not built
    ({"slo_load": "request_rate", "slo_range": [0.5, 4.0], "slo_step": 1e-9}, "slo_step", "at most 1024"),
    ({"request_rate": 2.0}, "request_rate", "a capacity search sets each load itself and would not use it"),
    ({"slo_load": "users"}, "slo_load", "expected one of concurrency, request_rate, got 'users'"),
    ({"slo_load": "request_rate", "slo_range": [0, 2]}, "slo_range", "requests per second > 0, got 0"),
    ({"slo_requests": 41}, "slo_requests", "41 requests per round, but num_prompts"),
    ({"slo_requests": 8}, "slo_requests", "8 requests a round are fewer than 3 waves at C = 3 to C = 13"),
    ({"slo_load": "request_rate", "slo_range": [0.5, 4.0], "slo_step": 0.5, "slo": {"p90_tpot_ms": 20}}, "slo",
     "p90 TPOT ≤ 20 ms bounds no request's whole latency, which sizes a wave at a request rate"),
    ({"slo_search": "binary"}, "slo_search", "expected bisect or sweep, got 'binary'"),
    ({"datasets": ["mt-bench"], "turns": 2}, "slo", "a capacity search sends first turns"),
])
def test_a_bad_search_key_names_itself_and_the_fix(patch, key, fragment):
    raw = {k: v for k, v in {**BASE, **SEARCH, **patch}.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        parse_matrix(raw, "m.yaml")
    assert str(err.value).startswith(f"m.yaml: '{key}': ") and fragment in str(err.value), str(err.value)


def test_validate_refuses_a_bad_search_in_one_line_with_exit_2(tmp_path, capsys, monkeypatch):
    as_where_vllm_is(monkeypatch)  # a vllm-serve matrix: its keys are checked alike where vLLM is absent
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**BASE, **SEARCH, "slo_requests": 8}))
    assert cli_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'slo_requests'" in err and "fewer than 3 waves at C = 3 to C = 13" in err


TINY_RATE_SLO = {"p90_tpot_ms": 40, "p90_ttft_ms": 800}  # a request takes at most 0.8 s + 31 × 40 ms = 2.04 s
WAVE = ("(a wave: the requests in flight at once, as many as the concurrency; with fewer than 3 a round cannot tell a "
        "slowdown its waves share from its requests' own noise)")


@pytest.mark.parametrize("patch, short, line", [
    ({"slo_range": [1, 13], "slo_step": 2, "slo_search": "sweep", "num_prompts": 84}, 38,
     f"38 requests a round are fewer than 3 waves at C = 13 {WAVE}: give slo_requests ≥ 39 (3 × 13), or end slo_range "
     f"at C = 11"),
    ({"slo_range": [4, 20], "num_prompts": 120}, 59,
     f"59 requests a round are fewer than 3 waves at C = 20 {WAVE}: give slo_requests ≥ 60 (3 × 20), or end slo_range "
     f"at C = 19"),
    ({"slo_range": [4, 20], "num_prompts": 60}, 50,
     f"50 requests a round are fewer than 3 waves at C = 17 to C = 20 {WAVE}: give slo_requests ≥ 60 (3 × 20), or end "
     f"slo_range at C = 16"),
    ({"slo_load": "request_rate", "slo_range": [0.5, 4.0], "slo_step": 0.5, "slo": TINY_RATE_SLO,
      "max_new_tokens": 32, "num_prompts": 60}, 23,
     "23 requests a round are fewer than 3 waves at 4 req/s (a wave: the requests in flight at once, the rate × a "
     "request's latency (Little's law), planned at the latency the SLO allows, 2.04 s (p90 TTFT ≤ 800 ms + 31 tokens "
     "at p90 TPOT ≤ 40 ms): 8 at 4 req/s; with fewer than 3 a round cannot tell a slowdown its waves share from its "
     "requests' own noise): give slo_requests ≥ 24 (3 × 8), or end slo_range at 3.5 req/s"),
])
def test_every_load_of_the_range_gets_rounds_of_three_waves_else_the_matrix_is_refused(patch, short, line):
    """slo_requests ≥ 3 × the wave at every load a search may probe: the concurrency on a grid of a sweep or a bisect
    range, the rate × a request's latency under the SLO at a request rate (3.5 req/s × 2.04 s: waves of 7, 21 fit);
    one under it is refused in one line that names the loads and the fix, and exactly 3 waves pass."""
    raw = {**BASE, **SEARCH, **patch}
    with pytest.raises(ConfigError) as err:
        parse_matrix({**raw, "slo_requests": short}, "m.yaml")
    assert str(err.value) == f"m.yaml: 'slo_requests': {line}"
    fix = int(line.split("give slo_requests ≥ ")[1].split()[0])
    assert parse_matrix({**raw, "slo_requests": fix}).slo_requests == fix


def test_the_fix_raises_num_prompts_where_the_rounds_need_more_than_it_holds():
    with pytest.raises(ConfigError) as err:
        parse_matrix({**BASE, **SEARCH, "slo_range": [1, 16]}, "m.yaml")  # slo_requests: num_prompts, 40
    assert str(err.value).endswith("give slo_requests ≥ 48 (3 × 16) and num_prompts ≥ 48, or end slo_range at C = 13")


@pytest.mark.parametrize("command", ["validate", "matrix"])
def test_rounds_of_fewer_than_three_waves_are_refused_before_any_work(tmp_path, capsys, command, monkeypatch):
    as_where_vllm_is(monkeypatch)
    path, run = tmp_path / "m.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump({**BASE, **SEARCH, "slo_range": [1, 16]}))
    assert cli_main([command, str(path)] + (["--run-dir", str(run)] if command == "matrix" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"error: {path}: 'slo_requests': 40 requests a round are fewer than 3 waves at C = 14 "
                                f"to C = 16 {WAVE}: give slo_requests ≥ 48 (3 × 16) and num_prompts ≥ 48, or end "
                                f"slo_range at C = 13"]
    assert not run.exists()
