"""A matrix with batch_size on the JAX engine (random tiny pair): a B = 4 unit decodes its prompts in static batches
through the run path, and every request's greedy tokens equal those of the batch-1 unit, AR and DFlash alike."""
import pytest

from benchmarks.config.matrix_parse import parse_matrix
from benchmarks.records.store import RunStore
from benchmarks.report.report_write import write_reports
from tests.run_helpers import run_matrix

pytestmark = [pytest.mark.slow, pytest.mark.jax]


def test_a_batch_of_4_gives_the_batch_1_tokens_through_the_run_path(random_pair, tmp_path):
    m = parse_matrix({"name": "jax-batch", "engine": "jax", "target": str(random_pair["target"]),
                      "drafts": {"dflash": str(random_pair["dflash"])}, "methods": ["baseline", "dflash"], "k": [4],
                      "datasets": ["humaneval"], "num_prompts": 5, "warmup_prompts": 1, "max_new_tokens": 10,
                      "batch_size": [1, 4], "engine_options": {"max_model_len": 1024}})
    run_dir, failed = run_matrix(m, tmp_path / "run")
    assert failed == 0
    requests = [r for r in RunStore(run_dir).record_objects() if r["kind"] == "request"]
    by_label = {}
    for r in requests:
        by_label.setdefault((r["label"], r.get("batch_index") is not None), {})[r["prompt_sha256"]] = r
    for label in ("baseline", "dflash-k4"):
        alone, batched = by_label[(label, False)], by_label[(label, True)]
        assert set(alone) == set(batched) and len(alone) == 5
        assert all(batched[sha]["output_ids"] == alone[sha]["output_ids"] for sha in alone), label
        assert sorted(r["batch_index"] for r in batched.values()) == [0, 0, 0, 0, 1]  # 4 prompts, then the fifth
        assert {r["extra"]["batch_size"] for r in batched.values()} == {4, 1}
    rows = {(r.label, r.batch_size): r for r in write_reports(run_dir).summary.rows}
    assert rows[("dflash-k4", 4)].n_batch_pairs == 2 and rows[("dflash-k4", 4)].identical_frac_batched == 1.0
    assert rows[("dflash-k4", 1)].identical_frac == 1.0
    assert rows[("baseline", 4)].wasted_row_steps is not None
    assert "## Batch" in (run_dir / "report.md").read_text()
