"""vLLM cells interleaved, each in its own worker: both engines loaded at once, taking the prompts in turn, and the
speculative cell's greedy tokens identical to the baseline's."""
import dataclasses
import time

import pytest

from benchmarks.config.matrix_parse import load_matrix
from benchmarks.core import paths
from benchmarks.engines import worker
from benchmarks.records.store import RunStore
from tests.run_helpers import run_matrix

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.vllm]


def test_vllm_cells_interleave_in_workers_with_both_loaded(tmp_path, monkeypatch):
    m = load_matrix(paths.ROOT / "configs" / "matrices" / "tiny-acceptance.yaml")
    m = dataclasses.replace(m, methods=["baseline", "dflash"], k={"dflash": [15]}, num_prompts=2, warmup_prompts=0,
                            max_new_tokens=12, interleave=True)
    workers: list[worker.WorkerEngine] = []
    seen: list[tuple[str, list[bool]]] = []  # (cell, which workers' engines were loaded) at every generate
    real_init, real_generate = worker.WorkerEngine.__init__, worker.WorkerEngine.generate

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        workers.append(self)

    def generate(self, prompt_ids, params):
        # loaded: the worker is alive and its group holds vLLM's own processes (stopped while it waits its turn)
        seen.append((self.describe()["engine_args"].get("speculative_config", {}).get("method", "baseline"),
                     [w._proc.poll() is None and len(worker._group_members(w.pid)) > 1 for w in workers]))
        return real_generate(self, prompt_ids, params)

    monkeypatch.setattr(worker.WorkerEngine, "__init__", init)
    monkeypatch.setattr(worker.WorkerEngine, "generate", generate)
    run_dir, failed = run_matrix(m, tmp_path / "run", progress=False)
    assert failed == 0
    # prompt by prompt, each round both cells in turn, in the round's own order (groups.round_order)
    cells = [cell for cell, _ in seen]
    assert len(cells) == 4 and all(sorted(cells[i:i + 2]) == ["baseline", "dflash"] for i in (0, 2))
    assert len(workers) == 2 and all(loaded == [True, True] for _, loaded in seen)
    requests = [r for r in RunStore(run_dir).record_objects() if r["kind"] == "request"]
    by_prompt: dict[int, dict[str, list[int]]] = {}
    for r in requests:
        by_prompt.setdefault(r["prompt_index"], {})[r["method"]] = r["output_ids"]
    assert len(by_prompt) == 2
    for outs in by_prompt.values():
        assert len(outs["baseline"]) == 12 and outs["dflash"] == outs["baseline"]
    deadline = time.monotonic() + 10
    while any(worker._group_members(w.pid) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(worker._group_members(w.pid) for w in workers)  # every engine process is gone
