"""Workloads on a real engine (JAX, random tiny pair): at each context length and at MT-Bench's second turn every
cell is sent the same ids, and greedy DFlash stays identical to AR."""
import pytest

from benchmarks.config.matrix_parse import parse_matrix
from benchmarks.records.store import RunStore
from benchmarks.report.report_write import write_reports
from tests.machine import mt_bench
from tests.run_helpers import run_matrix

pytestmark = [pytest.mark.slow, pytest.mark.jax]


@pytest.mark.parametrize("keys", [{"datasets": ["humaneval"], "context_tokens": [400]},
                                  pytest.param({"datasets": ["mt-bench"], "turns": [1, 2]}, marks=mt_bench)],
                         ids=["context", "turns"])
def test_workloads_are_lossless_and_alike_across_cells(random_pair, tmp_path, keys):
    m = parse_matrix({"name": "jax-workloads", "engine": "jax", "target": str(random_pair["target"]),
                      "drafts": {"dflash": str(random_pair["dflash"])}, "methods": ["baseline", "dflash"], "k": [4],
                      "num_prompts": 2, "warmup_prompts": 1, "max_new_tokens": 12, "interleave": True,
                      "engine_options": {"max_model_len": 1024}, **keys})
    run_dir, failed = run_matrix(m, tmp_path / "run")
    assert failed == 0
    report = write_reports(run_dir).summary
    spec = [r for r in report.rows if r.method == "dflash"]
    assert len(spec) == len(keys.get("context_tokens") or keys.get("turns"))
    assert all(r.identical_frac == 1.0 and r.n_pairs == 2 for r in spec)
    assert not report.verdicts.violated and not report.verdicts.unchecked
    requests = [r for r in RunStore(run_dir).record_objects() if r["kind"] == "request"]
    for key in {r["dataset"] for r in requests}:
        sent = {r["label"]: sorted(q["prompt_sha256"] for q in requests if q["dataset"] == key and
                                   q["label"] == r["label"]) for r in requests if r["dataset"] == key}
        assert len(sent) == 2 and len(set(map(tuple, sent.values()))) == 1, key
    assert {r.get("context_tokens") for r in requests} <= {None, 400}
