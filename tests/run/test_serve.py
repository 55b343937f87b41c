"""Serving mode without a server: the concurrency axis's validation, the conversion of the load generator's output
into records, the prompt-id check, the per-level summary, report and figures, the distribution verdict a served cell
shares across its levels and the checks it could not run (hand-made records), and the server's CPU memory sizing."""
import dataclasses
import math

import pandas as pd
import pytest
import yaml

from benchmarks.cli import main as cli_main
from benchmarks.config.matrix_expand import expand
from benchmarks.config.matrix_parse import ConfigError, parse_matrix
from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import LoadResult, SpecCounters
from benchmarks.core.unit_keys import level_key
from benchmarks.data.datasets import Prompt
from benchmarks.engines.vllm.vllm_serve import (
    SERVER_TPOT_HISTOGRAM,
    histogram_sum_count,
    parse_spec_metrics,
    server_flags,
)
from benchmarks.figures.serve_figures import serve_figures
from benchmarks.report.serve_report import serve_markdown
from benchmarks.run.serving import check_prompt_ids, level_records
from tests.machine import as_where_vllm_is, needs
from tests.typed_runs import summary_json
from verification.lossless import verdict_lines

BASE = {"target": "Qwen/Qwen3-4B", "drafts": {"dflash": "z-lab/Qwen3-4B-DFlash-b16"}, "block_size": 16,
        "methods": ["baseline", "dflash"], "k": 15, "datasets": ["math500"], "engine": "vllm-serve"}


def test_concurrency_axis_parses_int_or_list_with_default_one():
    assert parse_matrix(BASE).concurrency == [1]
    assert parse_matrix({**BASE, "concurrency": 4}).concurrency == [4]
    m = parse_matrix({**BASE, "concurrency": [1, 4, 16], "request_rate": 2})
    assert m.concurrency == [1, 4, 16] and m.request_rate == 2.0


@pytest.mark.parametrize("patch, fragment", [
    ({"concurrency": 0}, "expected an int >= 1, got 0"),
    ({"concurrency": [1, 4, 4]}, "lists a level twice"),
    ({"concurrency": []}, "empty"),
    ({"concurrency": "many"}, "expected an int >= 1"),
    ({"request_rate": 0}, "finite float > 0"),
    ({"engine": "vllm", "concurrency": [1, 4]}, "cannot serve a load; use engine vllm-serve"),
    ({"engine": ["vllm", "vllm-serve"], "request_rate": 1.5}, "engine vllm runs one prompt at a time"),
    ({"executor": "ray"}, "drop the ray executor"),
    ({"interleave": True}, "drop 'interleave'"),
])
def test_bad_load_axis_names_key_and_fix(patch, fragment):
    with pytest.raises(ConfigError) as err:
        parse_matrix({**BASE, **patch}, "m.yaml")
    assert fragment in str(err.value) and str(err.value).startswith("m.yaml: '")


def test_bad_concurrency_is_a_one_line_error_with_exit_2(tmp_path, capsys, monkeypatch):
    as_where_vllm_is(monkeypatch)  # a vllm-serve matrix: its keys are checked alike where vLLM is absent
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**BASE, "concurrency": [4, 0]}))
    assert cli_main(["matrix", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'concurrency'" in err and "got 0" in err


def test_ray_executor_from_the_command_line_refuses_a_serving_matrix(tmp_path, capsys, monkeypatch):
    as_where_vllm_is(monkeypatch)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert cli_main(["matrix", str(path), "--executor", "ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--executor" in err and "serving engine" in err


def test_serving_engine_takes_the_served_engines_options_its_own_winning():
    m = parse_matrix({**BASE, "engine_options": {"dtype": "float32", "vllm": {"enforce_eager": True,
                                                                             "max_model_len": 512},
                                                 "vllm-serve": {"max_model_len": 1024}}})
    [cell, _] = expand(m)
    assert cell.engine_options == {"dtype": "float32", "enforce_eager": True, "max_model_len": 1024}


def test_engine_arguments_become_server_flags():
    flags = server_flags({"model": "m", "dtype": "float32", "enforce_eager": True, "enable_prefix_caching": False,
                          "disable_log_stats": False, "per_request_spec_decode_metrics": "detailed",
                          "speculative_config": {"method": "dflash", "num_speculative_tokens": 15}})
    assert flags == ["--dtype", "float32", "--enforce-eager", "--no-enable-prefix-caching", "--speculative-config",
                     '{"method": "dflash", "num_speculative_tokens": 15}']


def test_server_tpot_histogram_sum_and_count_over_labels():
    text = "\n".join([
        'vllm:request_time_per_output_token_seconds_bucket{engine="0",le="0.01"} 3.0',
        'vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.5',
        'vllm:request_time_per_output_token_seconds_count{engine="0",model_name="m"} 4.0',
        'vllm:request_time_per_output_token_seconds_sum{engine="1",model_name="m"} 0.25',
        'vllm:request_time_per_output_token_seconds_count{engine="1",model_name="m"} 1.0',
        'vllm:request_time_per_output_token_seconds_created{engine="0",model_name="m"} 1.7e9',
    ])
    assert histogram_sum_count(text, SERVER_TPOT_HISTOGRAM) == (0.75, 5.0)
    assert histogram_sum_count("", SERVER_TPOT_HISTOGRAM) is None
    assert math.isnan(metrics.histogram_mean(0.0, 0.0)) and metrics.histogram_mean(0.75, 5.0) == 0.15


def test_spec_counters_from_prometheus_text_sum_labels_and_skip_created():
    text = "\n".join([
        "# HELP vllm:spec_decode_num_drafts_total drafts",
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0',
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 2.0',
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 36.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 4.0',
        'vllm:num_requests_running{engine="0"} 0.0',
    ])
    assert parse_spec_metrics(text) == SpecCounters(12, 36, 20, [9, 7, 4])
    assert parse_spec_metrics('vllm:num_requests_running{engine="0"} 0.0') is None


CELL = Cell(engine="vllm-serve", target="t", method="dflash", draft="d", k=3, temperature=0.0, max_new_tokens=8,
            seed=0)


class WordTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [len(w) for w in text.split()]}


def _prompts(n):
    return [Prompt("humaneval", i, f"q{i}", list(range(5 + i)), f"sha{i}") for i in range(n)]


def _result(prompts, **over):
    n = len(prompts)
    res = {"errors": [""] * n, "ttfts": [0.1] * n, "latencies": [0.8] * n, "output_lens": [8] * n,
           "input_lens": [len(p.ids) for p in prompts], "itls": [[0.1] * 7] * n, "start_times": [0.0] * n,
           "generated_texts": ["a bb ccc"] * n, "duration": 2.0, "completed": n, "failed": 0,
           "total_output_tokens": 8 * n}
    return LoadResult.from_vllm({**res, **over})


def test_level_result_becomes_request_spec_and_load_records():
    prompts = _prompts(2)
    recs = level_records(CELL, prompts, _result(prompts), WordTokenizer(), 4, None, SpecCounters(5, 15, 6, [4, 2, 0]),
                         (0.03, 2.0))
    reqs = [r.to_json() for r in recs if r.kind == "request"]
    assert [r["prompt_sha256"] for r in reqs] == ["sha0", "sha1"]
    assert reqs[0]["tpot_ms"] == pytest.approx(metrics.tpot_ms(0.1, 0.8, 8)) and reqs[0]["ttft_ms"] == 100.0
    assert reqs[0]["output_ids"] == [1, 2, 3] and reqs[0]["concurrency"] == 4 and reqs[0]["itl_ms"][0] == 100.0
    spec, load = (r.to_json() for r in recs[2:])
    assert (spec["kind"], load["kind"]) == ("spec", "load") and spec["num_drafts"] == 5
    assert (load["server_tpot_sum_s"], load["server_tpot_count"]) == (0.03, 2.0)
    assert level_key("humaneval", 4, None) == "humaneval@c4" and level_key("x", 1, 2.5) == "x@c1@r2.5"


def test_a_served_vllm_level_counts_tau_from_metrics_and_the_report_says_it_counts_past_each_output(tmp_path):
    """vLLM's load generator keeps no per-request acceptance: the level's τ is the server's /metrics diff, its
    records carry no accept lengths (no τ prompt mean), the server's description names the loss, and report.md's
    caveat says that τ counts past max_new_tokens and EOS; a served baseline has no such caveat."""
    from benchmarks.analysis.caveats import caveat_lines
    from benchmarks.engines.vllm.vllm_serve import VllmServer
    from tests.typed_runs import manifest

    prompts = _prompts(2)
    recs = level_records(CELL, prompts, _result(prompts), WordTokenizer(), 1, None, SpecCounters(5, 15, 6, [4, 2, 0]))
    lengths = [r.accept_lengths for r in recs if r.kind == "request"]
    assert lengths == [None, None] and math.isnan(metrics.tau_prompt_mean(lengths))
    assert recs[2].counters() == SpecCounters(5, 15, 6, [4, 2, 0])

    def served(method: str) -> list[str]:
        cell = Cell(engine="vllm-serve", target="org/target", method=method,
                    draft="org/draft" if method == "dflash" else None, k=3 if method == "dflash" else 0,
                    temperature=0.0, max_new_tokens=8, seed=0)
        described = VllmServer(cell, tmp_path / "log").describe()
        provenance = {"p": {"engine": "vllm-serve", "method": method, "cell_id": "c", "describe": described,
                            "environment": {"platform": "cpu", "packages": {"vllm": "0.32.0"}}, "models": {}}}
        return [line for line in caveat_lines([], manifest({}), provenance) if "past max_new_tokens" in line]

    needs("vllm")  # the server's description reads vLLM's memory settings
    [line] = served("dflash")
    assert "server gives its load generator" in line and "past EOS" in line and "no τ prompt mean" in line
    assert not served("baseline")


@pytest.mark.parametrize("over, fragment", [
    ({"errors": ["", "boom"]}, "1 of 2 requests failed; first: prompt 1: boom"),
    ({"input_lens": [5, 99]}, "counted by the server as 99 tokens, not the harness's 6"),
])
def test_level_with_a_failed_or_retokenised_prompt_fails(over, fragment):
    prompts = _prompts(2)
    with pytest.raises(RuntimeError, match=fragment):
        level_records(CELL, prompts, _result(prompts, **over), WordTokenizer(), 1, None, None)


def test_prompt_ids_are_compared_token_for_token_not_by_count():
    prompts = _prompts(2)  # ids [0..4] and [0..5]
    check_prompt_ids(prompts, [list(range(5)), list(range(6))])
    same_length = [list(range(5)), [0, 1, 2, 9, 4, 5]]
    with pytest.raises(RuntimeError, match=r"prompt 1 reached the server as other token ids .*first difference at "
                                           r"token 3; 6 vs 6 tokens"):
        check_prompt_ids(prompts, same_length)
    with pytest.raises(RuntimeError, match=r"first difference at token 5; 5 vs 6 tokens"):
        check_prompt_ids(prompts, [list(range(5)), list(range(5))])


def _level(cell_id, label, method, c, tpot, tok_s, outputs):
    recs = [{"kind": "request", "cell_id": cell_id, "label": label, "engine": "vllm-serve", "method": method,
             "k": 3, "dataset": "humaneval", "concurrency": c, "prompt_index": i, "prompt_sha256": f"s{i}",
             "n_out": 9, "ttft_ms": 10.0 * (i + 1), "tpot_ms": tpot * (1 + 0.1 * i), "decode_s": 1.0,
             "itl_ms": [tpot, 2 * tpot], "output_ids": out, "accept_lengths": None} for i, out in enumerate(outputs)]
    recs.append({"kind": "load", "cell_id": cell_id, "dataset": "humaneval", "concurrency": c, "request_rate": None,
                 "duration_s": 2.0, "completed": len(outputs), "failed": 0, "total_output_tokens": 2 * tok_s,
                 "server_tpot_sum_s": tpot / 1000 * len(outputs), "server_tpot_count": len(outputs)})
    if method != "baseline":
        recs.append({"kind": "spec", "cell_id": cell_id, "dataset": "humaneval", "concurrency": c,
                     "num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 15,
                     "accepted_per_pos": [8, 5, 2]})
    return recs


def _serve_run():
    cell = {"engine": "vllm-serve", "target": "t", "temperature": 0.0, "max_new_tokens": 8, "seed": 0,
            "engine_options": {}}
    manifest = {"run_id": "r", "cells": {"B": {**cell, "method": "baseline", "draft": None, "k": 0},
                                         "D": {**cell, "method": "dflash", "draft": "d", "k": 3}}}
    return summary_json(_serve_records(), manifest).rows, manifest


def _serve_records() -> list[dict]:
    same, other = [[1, 2], [3, 4]], [[1, 2], [3, 5]]
    return (_level("B", "baseline", "baseline", 1, 10.0, 100, same)
            + _level("D", "dflash-k3", "dflash", 1, 5.0, 180, same)
            + _level("B", "baseline", "baseline", 4, 12.0, 300, same)
            + _level("D", "dflash-k3", "dflash", 4, 9.0, 240, other))


def test_summary_has_a_row_per_level_paired_with_the_baseline_at_the_same_concurrency():
    rows, _ = _serve_run()
    by = {(r.label, r.concurrency): r for r in rows}
    assert set(by) == {("baseline", 1), ("dflash-k3", 1), ("baseline", 4), ("dflash-k3", 4)}
    d1, d4 = by[("dflash-k3", 1)], by[("dflash-k3", 4)]
    assert d1.speedup == pytest.approx(2.0) and d4.speedup == pytest.approx(12.0 / 9.0)
    assert d1.throughput_speedup == pytest.approx(1.8) and d4.throughput_speedup == pytest.approx(0.8)
    assert d1.agg_output_tok_per_s == pytest.approx(180.0) and d1.requests_per_s == pytest.approx(1.0)
    assert d1.server_tpot_ms_mean == pytest.approx(5.0) and d4.server_tpot_speedup == pytest.approx(12 / 9)
    assert d1.tau == pytest.approx(2.5) and d4.ttft_ms_p90 == pytest.approx(metrics.percentile([10, 20], 90))
    assert d1.itl_ms_p50 == pytest.approx(metrics.percentile([5.0, 10.0, 5.0, 10.0], 50))
    # token identity: the usual check at C = 1; a measured fraction at C = 4, not a lossless violation
    assert d1.identical_frac == 1.0 and d1.identical_frac_batched is None
    assert d4.identical_frac is None and d4.identical_frac_batched == 0.5
    assert not [line for line in verdict_lines(rows) if "dflash" in line]


def test_divergence_at_concurrency_one_is_still_a_lossless_violation():
    rows, manifest = _serve_run()
    records = (_level("B", "baseline", "baseline", 1, 10.0, 100, [[1, 2], [3, 4]])
               + _level("D", "dflash-k3", "dflash", 1, 5.0, 180, [[1, 2], [3, 9]]))
    assert any(line.startswith("LOSSLESS VIOLATION") for line in verdict_lines(summary_json(records, manifest).rows))


def _waves(ratio: float, n: int = 6) -> metrics.Speedup:
    """A level's throughput speedup over n paired waves, the method's spans 1/ratio of AR's with a little noise."""
    base = [1.0 + 0.02 * (i % 3) for i in range(n)]
    return metrics.ratio_of_sums([64.0] * n, [b / ratio * (1 + 0.01 * (i % 2)) for i, b in enumerate(base)],
                                 [64.0] * n, base)


def test_crossover_is_decided_from_intervals_and_a_level_without_one_is_inconclusive():
    found = metrics.crossover([(1, _waves(1.8)), (4, _waves(1.1)), (16, _waves(0.9)), (64, _waves(0.7))])
    assert found.level == 16 and found.tested == [1, 4, 16, 64] and found.inconclusive == []
    assert found.adjusted[16] < metrics.FAMILY_ALPHA <= found.adjusted[4]
    unsure = metrics.crossover([(1, _waves(1.2)), (4, metrics.NO_SPEEDUP), (8, _waves(0.7, n=1))])
    assert unsure.level is None and unsure.tested == [1] and unsure.inconclusive == [4, 8]
    rows, manifest = _serve_run()  # 2 prompts: C = 4 is one wave; C = 1's two waves have the same ratio (no spread)
    [c] = summary_json(_serve_records(), manifest).serve_crossovers
    assert (c.engine, c.label, c.result.level, c.result.inconclusive) == ("vllm-serve", "dflash-k3", None, [1, 4])
    text = serve_markdown(rows, [c])
    assert "C = 1, 4 inconclusive" in text and "not a lossless violation" in text
    assert serve_markdown([dataclasses.replace(r, concurrency=None) for r in rows], []) is None


def test_serving_figures_are_drawn_per_level():
    rows, _ = _serve_run()
    figures = serve_figures(pd.DataFrame(rows))
    assert all(fig is not None for fig in figures.values()) and len(figures) == 3
    failed = pd.DataFrame([r if r.method == "baseline" else dataclasses.replace(
        r, speedup=None, throughput_speedup=None, n_prompts=0) for r in rows])
    assert serve_figures(failed)["serve_speedup_vs_concurrency"] is None  # a method whose units all failed
    batch = pd.DataFrame([dataclasses.replace(r, concurrency=None) for r in rows])
    assert all(fig is None for fig in serve_figures(batch).values())


def test_a_stream_delivered_in_one_burst_has_no_tpot_and_is_counted():
    prompts = _prompts(2)
    res = _result(prompts, itls=[[0.1] * 7, [0.0001] * 6 + [0.002]], latencies=[0.8, 0.1026])
    recs = level_records(CELL, prompts, res, WordTokenizer(), 1, None, None)
    steady, burst = recs[0].to_json(), recs[1].to_json()
    assert steady["tpot_ms"] == pytest.approx(100.0) and "delivery_burst" not in steady["extra"]
    assert burst["tpot_ms"] is None and burst["extra"]["delivery_burst"]
    assert burst["extra"]["client_tpot_ms"] == pytest.approx(metrics.tpot_ms(0.1, 0.1026, 8))
    manifest = {"run_id": "r", "cells": {CELL.cell_id: {"engine": "vllm-serve", "target": "t", "method": "dflash",
                                                       "draft": "d", "k": 3, "temperature": 0.0,
                                                       "max_new_tokens": 8, "seed": 0, "engine_options": {}}}}
    [row] = summary_json(recs, manifest).rows
    assert row.n_burst == 1 and row.tpot_ms_p50 == pytest.approx(100.0) and row.itl_ms_p50 == 100.0
    assert "1 of 2" in serve_markdown([row], [])


def test_a_request_without_tpot_leaves_the_paired_speedup():
    rows, manifest = _serve_run()
    records = (_level("B", "baseline", "baseline", 1, 10.0, 100, [[1], [2], [3]])
               + _level("D", "dflash-k3", "dflash", 1, 5.0, 180, [[1], [2], [3]]))
    records[1]["tpot_ms"] = None  # the baseline's second request came in one burst
    [row] = [r for r in summary_json(records, manifest).rows if r.method == "dflash"]
    assert row.n_pairs == 2 and row.speedup == pytest.approx(2.0)


def _sampled_serve_run(samples: dict[str, int] | None):
    """Baseline and DFlash served at T = 0.6 at C = 1 and 4; `samples` gives each cell's sampling seed (its samples
    sit in its C = 1 unit, as the run stores them), None for no samples at all."""
    import numpy as np

    cell = {"engine": "vllm-serve", "target": "t", "temperature": 0.6, "max_new_tokens": 8, "seed": 0,
            "engine_options": {}}
    manifest = {"run_id": "r", "config": {"concurrency": [1, 4]},
                "cells": {"B": {**cell, "method": "baseline", "draft": None, "k": 0},
                          "D": {**cell, "method": "dflash", "draft": "d", "k": 3}}}
    outputs = [[1, 2], [3, 4]]
    records = [r for c in (1, 4) for r in (_level("B", "baseline", "baseline", c, 10.0, 100, outputs)
                                            + _level("D", "dflash-k3", "dflash", c, 5.0, 180, outputs))]
    for cid, seed in (samples or {}).items():
        rng = np.random.default_rng(seed)
        probs = [0.5, 0.3, 0.2] if seed < 100 else [0.2, 0.3, 0.5]  # seeds >= 100 draw from another distribution
        for i in range(2):
            records.append({"kind": "samples", "cell_id": cid, "dataset": "humaneval", "concurrency": 1,
                            "prompt_index": i, "prompt_sha256": f"s{i}", "temperature": 0.6, "seeds": None,
                            "samples": rng.choice(3, size=(200, 6), p=probs).tolist(), "loglik": None})
    return summary_json(records, manifest).rows


def test_a_served_cell_at_t_above_zero_has_one_distribution_verdict_shared_by_its_levels():
    rows = _sampled_serve_run({"B": 1, "D": 2})
    dflash = [r for r in rows if r.method == "dflash"]
    assert [r.concurrency for r in dflash] == [1, 4]
    assert [r.dist_verdict for r in dflash] == ["pass", "pass"] and dflash[0].dist_n_base == 200
    assert all(r.not_checked is None for r in rows) and verdict_lines(rows) == []
    failing = _sampled_serve_run({"B": 1, "D": 102})
    assert [r.dist_verdict for r in failing if r.method == "dflash"] == ["FAIL", "FAIL"]
    [line] = verdict_lines(failing)  # one line per cell, not one per level
    assert line.startswith("DISTRIBUTION VIOLATION: vllm-serve dflash-k3 at T=0.6 on humaneval")


def test_a_served_cell_at_t_above_zero_without_samples_is_not_checked_and_exits_4():
    from benchmarks.cli.run import exit_status
    from verification.lossless import unchecked_rows

    rows = _sampled_serve_run(None)
    dflash = [r for r in rows if r.method == "dflash"]
    assert [r.dist_verdict for r in dflash] == ["unchecked", "unchecked"]
    assert dflash[0].not_checked == "the cell drew no distribution samples"
    [line] = verdict_lines(rows)
    assert line == ("NOT CHECKED: the T=0.6 distribution check of vllm-serve dflash-k3 on humaneval: not checked: "
                    "the cell drew no distribution samples")
    assert exit_status(0, False, False, bool(unchecked_rows(rows)), False) == 4
    assert exit_status(0, False, False, bool(unchecked_rows(rows)), True) == 0
    only_baseline = _sampled_serve_run({"D": 2})
    assert "its baseline drew no distribution samples" in only_baseline[-1].not_checked


def test_greedy_identity_of_a_serving_matrix_without_concurrency_one_is_not_checked_once():
    records = (_level("B", "baseline", "baseline", 4, 10.0, 100, [[1], [2]])
               + _level("D", "dflash-k3", "dflash", 4, 5.0, 180, [[1], [2]])
               + _level("B", "baseline", "baseline", 16, 10.0, 100, [[1], [2]])
               + _level("D", "dflash-k3", "dflash", 16, 5.0, 180, [[1], [2]]))
    _, manifest = _serve_run()
    rows = {(r.label, r.concurrency): r for r in summary_json(records, manifest).rows}
    assert "no concurrency-1 level" in rows[("dflash-k3", 4)].not_checked
    assert rows[("dflash-k3", 16)].not_checked is None and rows[("baseline", 4)].not_checked is None


@pytest.mark.vllm
def test_cpu_memory_comes_from_what_the_run_needs_or_the_cells_own_options(tmp_path, monkeypatch):
    import json

    from benchmarks.engines.vllm import vllm_memory

    big = tmp_path / "big"  # a Qwen3-4B-shaped config: 2 x 36 layers x 8 KV heads x 128 x 2 bytes per token
    big.mkdir()
    (big / "config.json").write_text(json.dumps({"num_hidden_layers": 36, "num_attention_heads": 32,
                                                 "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 2560,
                                                 "dtype": "bfloat16", "max_position_embeddings": 40960}))
    cell = Cell(engine="vllm-serve", target=str(big), method="baseline", draft=None, k=0, temperature=0.0,
                max_new_tokens=8, seed=0)
    # 147456 B/token x 40960 tokens x 4 requests x 1.25 headroom = 28.1 GiB -> 29; max_model_len 4096: 2.8 -> 3
    assert vllm_memory.kv_cache_gib(cell, 4) == 29
    assert vllm_memory.kv_cache_gib(dataclasses.replace(cell, engine_options={"max_model_len": 4096}), 4) == 3
    assert vllm_memory.kv_cache_gib(dataclasses.replace(cell, engine_options={"max_model_len": 512}), 1) == 1
    monkeypatch.setattr(vllm_memory, "_EXPORTED_KVCACHE", None)
    assert vllm_memory.cpu_memory_environment(cell, 4) == {"VLLM_CPU_KVCACHE_SPACE": "29"}
    own = dataclasses.replace(cell, engine_options={"kv_cache_memory_bytes": 2 << 30})
    assert vllm_memory.cpu_memory_environment(own, 4) == {"VLLM_CPU_KVCACHE_SPACE": None}  # unset: it would win
    monkeypatch.setattr(vllm_memory, "_EXPORTED_KVCACHE", "7")
    assert vllm_memory.cpu_memory_environment(cell, 4) == {"VLLM_CPU_KVCACHE_SPACE": "7"}
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "OTHER": "x"}
    vllm_memory.apply_environment({"VLLM_CPU_KVCACHE_SPACE": None, "NEW": "2"}, env)
    assert env == {"OTHER": "x", "NEW": "2"}
