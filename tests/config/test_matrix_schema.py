"""The matrix keys are declared once: the Matrix, the parsers, docs/matrices.md, `make bench` and `bench` follow the
declarations; the run id hashes what is measured, not where the file lies or how it is worded."""
import argparse
import dataclasses
import re

import yaml

from benchmarks.cli import bench
from benchmarks.cli.run import add_run_args
from benchmarks.config import matrix_parse
from benchmarks.config.matrix_expand import IDENTITY_VERSION, identity, legacy_run_id, run_id_for
from benchmarks.config.matrix_parse import load_matrix, parse_matrix
from benchmarks.config.matrix_schema import KEY, KEYS, PARSE_ORDER, Matrix, key_table
from benchmarks.core.paths import ROOT

SMOKE = "configs/matrices/smoke.yaml"
# A value for each `bench` option that sets a matrix key (--executor is the run's), and what the key then holds.
BENCH_VALUES = {"--dataset": ("humaneval", ["humaneval"]), "--preset": ("tiny", "tiny"), "--engine": ("jax", "jax"),
                "--methods": ("baseline,dflash", ["baseline", "dflash"]), "--k": ("3,7", [3, 7]),
                "--n": ("2", 2), "--max-new-tokens": ("32", 32), "--temperature": ("0.5", 0.5), "--seed": ("7", 7)}


def test_every_declared_key_fills_its_matrix_field_and_has_one_parser():
    fields = {f.name for f in dataclasses.fields(Matrix)}
    assert fields == {k.attr for k in KEYS if k.attr} | {"source", "raw"}
    parsed = [key for keys, _ in matrix_parse.PARSERS for key in keys]
    assert sorted(parsed) == sorted(k.name for k in KEYS if k.attr)


def test_each_key_that_fills_a_field_has_one_parser_and_a_place_in_the_parse_order():
    for k in KEYS:
        own, other = k.parse is not None, k.parsed_with is not None
        assert own != other if k.attr else not (own or other), k.name  # a key that fills no field has no parser
        assert k.parsed_with is None or KEY[k.parsed_with].parse is not None, k.name
    assert sorted(PARSE_ORDER) == sorted(k.name for k in KEYS if k.parse)


def test_docs_key_table_is_the_generated_one():
    doc = (ROOT / "docs" / "matrices.md").read_text()
    block = re.search(r"<!-- keys: [^\n]*-->\n(.*?)<!-- /keys -->", doc, re.S)
    assert block, "docs/matrices.md lost its generated key table"
    assert block.group(1) == key_table(), ("regenerate the table of docs/matrices.md with "
                                           "benchmarks.config.matrix_schema.key_table()")
    documented = re.findall(r"^\| `([a-z_]+)` \|", block.group(1), re.M)
    assert documented == [k.name for k in KEYS]


def test_make_bench_variables_and_bench_options_are_the_declared_ones():
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    lines = [line for line in makefile.splitlines() if re.match(r"(BENCH_ARGS|EXECUTOR_ARG) =", line)]
    assert len(lines) == 2
    pairs = set(re.findall(r'(--[a-z-]+) "\$\$([A-Z_]+)"', " ".join(lines)))
    assert pairs == {(k.bench, k.make) for k in KEYS if k.make}

    def options(add) -> set[str]:
        ap = argparse.ArgumentParser()
        add(ap)
        return {o for a in ap._actions for o in a.option_strings if o.startswith("--")} - {"--help"}

    own = options(bench.add_cli_args) - options(add_run_args)
    assert own | {"--executor"} == {k.bench for k in KEYS if k.bench}


def test_each_bench_option_sets_its_key(monkeypatch):
    monkeypatch.setenv("PLATFORM", "cpu")
    option_of = {k.bench: k.name for k in KEYS if k.bench and k.bench != "--executor"}
    assert set(BENCH_VALUES) == set(option_of)
    ap = argparse.ArgumentParser()
    bench.add_cli_args(ap)
    matrix = bench.bench_matrix(ap.parse_args([word for option, (text, _) in BENCH_VALUES.items()
                                               for word in (option, text)]))
    assert {option_of[o]: matrix.raw[option_of[o]] for o in BENCH_VALUES} == {
        option_of[o]: value for o, (_, value) in BENCH_VALUES.items()}


def test_run_id_leaves_out_path_wording_and_placement(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    relative, absolute = load_matrix(SMOKE), load_matrix(ROOT / SMOKE)
    assert relative.source != absolute.source and run_id_for(relative) == run_id_for(absolute)
    raw = yaml.safe_load((ROOT / SMOKE).read_text())
    elsewhere = tmp_path / "smoke.yaml"
    elsewhere.write_text(yaml.safe_dump({**raw, "description": "worded otherwise"}))
    assert run_id_for(load_matrix(elsewhere)) == run_id_for(relative)
    placed = parse_matrix({**raw, "workers": True, "request_timeout_s": 5, "resources": {"CPU": 2}}, "x.yaml")
    assert run_id_for(placed) == run_id_for(relative)
    assert re.fullmatch(r"smoke-[0-9a-f]{8}", run_id_for(relative))
    for change in ({"seed": 1}, {"num_prompts": 2}, {"chat_template": {"enable_thinking": True}}):
        assert run_id_for(parse_matrix({**raw, **change}, "x.yaml")) != run_id_for(relative), change
    assert identity(dataclasses.asdict(relative))["identity_version"] == IDENTITY_VERSION


def test_a_key_added_since_leaves_the_legacy_run_id_as_it_was_while_unset(monkeypatch):
    monkeypatch.chdir(ROOT)
    smoke = load_matrix(SMOKE)
    wider = dataclasses.make_dataclass("Wider", [("added_since", float | None, dataclasses.field(default=None))],
                                       bases=(Matrix,))
    fields = {f.name: getattr(smoke, f.name) for f in dataclasses.fields(Matrix)}
    assert legacy_run_id(wider(**fields)) == legacy_run_id(smoke)
    assert legacy_run_id(wider(**fields, added_since=0.9)) != legacy_run_id(smoke)


def test_a_local_prompt_file_counts_by_where_it_is_not_how_it_is_named(tmp_path, monkeypatch):
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi"}\n')
    raw = {"target": "Qwen/Qwen3-4B", "methods": ["baseline"], "datasets": [{"name": "mine", "path": "p.jsonl"}]}
    monkeypatch.chdir(tmp_path.parent)
    by_relative = parse_matrix(raw, "m.yaml", tmp_path.relative_to(tmp_path.parent))
    by_absolute = parse_matrix(raw, "m.yaml", tmp_path)
    assert by_relative.datasets != by_absolute.datasets and run_id_for(by_relative) == run_id_for(by_absolute)
