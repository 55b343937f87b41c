"""Workloads through a run with a scripted engine: context lengths as units that every cell sees with identical
ids, units measured on other ids measured again, cells sent other ids never paired, MT-Bench's second turn after one
cached set of first answers, and local rows in three forms."""
import dataclasses
import json

import pytest

from benchmarks.analysis.summary import summarize_run
from benchmarks.config.matrix_parse import parse_matrix
from benchmarks.core.engine_io import LoadResult, RequestRecord, SpecCounters
from benchmarks.data.datasets import sent_text, tokens
from benchmarks.records.store import RunStore
from benchmarks.report.report_write import write_reports
from benchmarks.run import engine_start
from benchmarks.run.context import RunContext, StageOutput
from benchmarks.run.execute import execute
from benchmarks.run.plan import build_plan
from benchmarks.run.serving import level_records
from benchmarks.run.turns import answers_path
from tests.machine import mt_bench
from tests.run_helpers import run_matrix


class Recorder:
    """Outputs depend on the prompt only (so DFlash equals AR); every call is recorded as (label, ids)."""

    calls: list[tuple[str, list[int]]] = []
    loads: list[str] = []
    fail_load: str | None = None

    def load(self, cell):
        if cell.label == Recorder.fail_load:
            raise RuntimeError(f"{cell.label} cannot start")
        self.cell, self.lengths = cell, []
        Recorder.loads.append(cell.label)

    def generate(self, prompt_ids, params):
        Recorder.calls.append((self.cell.label, list(prompt_ids)))
        out = [(sum(prompt_ids) + i) % 97 + 3 for i in range(params.max_new_tokens)]
        if self.cell.method != "baseline":
            self.lengths += [2, 1]
        tpot = 0.010 if self.cell.method == "baseline" else 0.005
        return RequestRecord(out, ttft_s=0.02, last_token_s=0.02 + tpot * (len(out) - 1))

    def spec_counters(self):
        return None if self.cell.method == "baseline" else SpecCounters.from_accept_lengths(self.lengths, self.cell.k)

    def describe(self):
        return {}

    def close(self):
        pass


@pytest.fixture(autouse=True)
def recorder(monkeypatch):
    Recorder.calls, Recorder.loads, Recorder.fail_load = [], [], None
    monkeypatch.setattr(engine_start, "create_engine", lambda name: Recorder())
    monkeypatch.setattr(engine_start, "in_worker", lambda matrix, engine: False)


def matrix(random_pair, **keys):
    return parse_matrix({"name": "workloads", "target": str(random_pair["target"]),
                         "drafts": {"dflash": str(random_pair["dflash"])}, "methods": ["baseline", "dflash"],
                         "k": [3], "num_prompts": 2, "warmup_prompts": 1, "max_new_tokens": 6, "drift_prompts": 0,
                         **keys})


def sent(label: str) -> list[list[int]]:
    return [ids for who, ids in Recorder.calls if who == label]


def test_context_lengths_are_units_every_cell_sees_alike(random_pair, tmp_path):
    m = matrix(random_pair, datasets=["humaneval"], context_tokens=[0, 700])
    run_dir, failed = run_matrix(m, tmp_path / "run")
    assert failed == 0
    assert sent("baseline") == sent("dflash-k3") and len(sent("baseline")) == 2 * 3  # 2 lengths × (2 + 1 warm-up)
    store = RunStore(run_dir)
    assert {p.name for p in store.units_dir.glob("*.jsonl")} >= {
        f"{c}__humaneval@ctx{n}.jsonl" for c in store.manifest()["cells"] for n in (0, 700)}
    requests = [r for r in store.record_objects() if r["kind"] == "request"]
    assert {(r["dataset"], r["context_tokens"]) for r in requests} == {("humaneval@ctx0", 0), ("humaneval@ctx700", 700)}
    assert all(r["n_prompt_tokens"] >= 700 for r in requests if r["context_tokens"] == 700)
    built = store.manifest()["prompts"]["workloads"]["humaneval@ctx700"]
    assert all(p["shot_rows"] and p["tokens"] >= 700 and 0 < p["context_tokens"] < p["tokens"] for p in built)
    report = write_reports(run_dir).summary
    assert not report.verdicts.unchecked and not report.verdicts.violated  # every workload's unit is checked
    rows = {(r.label, r.dataset): r for r in report.rows}
    spec = rows[("dflash-k3", "humaneval@ctx700")]
    assert spec.context_tokens == 700 and spec.speedup == pytest.approx(2.0) and spec.identical_frac == 1.0
    assert spec.prompts_sha256 == rows[("baseline", "humaneval@ctx700")].prompts_sha256
    assert spec.prompts_sha256 != rows[("baseline", "humaneval@ctx0")].prompts_sha256
    text = (run_dir / "report.md").read_text()
    assert "## Workloads" in text and "### Against context length" in text
    assert "humaneval@ctx700: all 2 cells were sent the same 2 prompts" in text
    assert "chat template: enable_thinking=False (the target's template ignores enable_thinking)" in text
    assert (run_dir / "figures" / "tau_speedup_vs_context.png").is_file()


def test_a_unit_measured_on_other_context_ids_is_measured_again(random_pair, tmp_path):
    m = matrix(random_pair, datasets=["humaneval"], context_tokens=[0, 700])
    run_dir, _ = run_matrix(m, tmp_path / "run")
    store = RunStore(run_dir)
    base = next(c for c, cell in store.manifest()["cells"].items() if cell["method"] == "baseline")
    records = store.unit(base, "humaneval@ctx700")  # as if its context had been built otherwise
    store.write_unit(base, "humaneval@ctx700", [dataclasses.replace(r, prompt_sha256="0" * 64)
                                                if r.kind == "request" else r for r in records])
    plan = build_plan(m, run_dir)
    assert plan.redo == [(base, "humaneval@ctx700")] and (base, "humaneval@ctx700") not in plan.done
    assert "to run again (measured on other prompt ids)" in plan.describe()
    Recorder.calls = []
    assert execute(plan).failed == 0
    assert len(sent("baseline")) == 3 and not sent("dflash-k3")  # only that unit: its prompts and warm-up
    rows = {(r.label, r.dataset): r for r in summarize_run(store).rows}
    assert rows[("dflash-k3", "humaneval@ctx700")].identical_frac == 1.0


def test_a_cell_sent_other_context_ids_than_its_baseline_fails_the_check(random_pair, tmp_path):
    m = matrix(random_pair, datasets=["humaneval"], context_tokens=[700])
    run_dir, _ = run_matrix(m, tmp_path / "run")
    store = RunStore(run_dir)
    spec = next(c for c, cell in store.manifest()["cells"].items() if cell["method"] != "baseline")
    records = store.unit(spec, "humaneval@ctx700")
    store.write_unit(spec, "humaneval@ctx700", [dataclasses.replace(r, prompt_sha256=r.prompt_sha256[::-1])
                                                if r.kind == "request" else r for r in records])
    report = write_reports(run_dir).summary
    [row] = [r for r in report.rows if r.cell_id == spec]
    assert row.identical_frac is None and row.speedup is None
    assert row.not_checked == "no baseline request was sent the same prompt (prompt hashes differ)"
    assert [r.dataset for r in report.verdicts.unchecked] == ["humaneval@ctx700"] and not report.verdicts.violated
    assert "humaneval@ctx700: **cells were sent different prompts**" in (run_dir / "report.md").read_text()


@mt_bench
def test_second_turn_after_one_set_of_cached_first_answers(random_pair, tmp_path):
    m = matrix(random_pair, datasets=["mt-bench"], turns=[1, 2])
    plan = build_plan(m, tmp_path / "run")
    assert [w.key for w in plan.awaiting_answers()] == ["mt-bench@turn2"]
    assert "mt-bench@turn2: second turn, after the first answers that vllm baseline generates" in plan.describe()
    assert execute(plan).failed == 0
    # the generator loaded once more for the answers; every cell then sent the same turn-2 ids
    assert Recorder.loads == ["baseline", "baseline", "dflash-k3"]
    answers = json.loads(answers_path(tmp_path / "run", "mt-bench").read_text())
    assert len(answers["answers"]) == 3 and answers["generator"]["label"] == "baseline"
    store = RunStore(tmp_path / "run")
    requests = [r for r in store.record_objects() if r["kind"] == "request"]
    by_cell = {}
    for r in requests:
        by_cell.setdefault((r["label"], r["dataset"]), set()).add(r["prompt_sha256"])
    assert by_cell[("baseline", "mt-bench@turn2")] == by_cell[("dflash-k3", "mt-bench@turn2")]
    assert by_cell[("baseline", "mt-bench")] != by_cell[("baseline", "mt-bench@turn2")]
    assert {r["turn"] for r in requests if r["dataset"] == "mt-bench@turn2"} == {2}
    turn2 = store.manifest()["prompts"]["workloads"]["mt-bench@turn2"]
    assert all(p["form"] == "second turn" and p["first_answer_tokens"] == 6 for p in turn2)
    report = write_reports(tmp_path / "run").summary
    assert "### By turn" in (tmp_path / "run" / "report.md").read_text()
    assert {r.turn for r in report.rows} == {1, 2}
    assert not report.verdicts.violated and not report.verdicts.unchecked
    # resumed: the cached answers resolve the second turn in the plan, nothing is generated again
    again = build_plan(m, tmp_path / "run")
    assert not again.awaiting_answers() and len(again.done) == len(again.units)


@mt_bench
def test_a_second_turn_waits_on_a_stage_of_the_plan_whose_output_its_units_read(random_pair, tmp_path):
    plan = build_plan(matrix(random_pair, datasets=["mt-bench"], turns=[1, 2]), tmp_path / "run")
    [stage] = plan.stages
    assert stage.name == "first answers of mt-bench" and stage.generator.label == "baseline"
    assert stage.workload.key == "mt-bench@turn2" and [u.workload_key for u in stage.units] == ["mt-bench@turn2"] * 2
    assert [p.ids for p in stage.first] == [p.ids for p in plan.prompts["mt-bench"][0] + plan.prompts["mt-bench"][1]]
    assert "mt-bench@turn2" not in plan.prompts
    assert ("stages before the units:\n- first answers of mt-bench: vllm baseline answers 3 first turns (greedy, "
            "untimed; cached in") in plan.describe()
    assert "they make the prompts of mt-bench@turn2, whose 2 unit(s) wait on them (2 to run)" in plan.describe()
    ctx = RunContext(plan, RunStore(plan.run_dir), lambda cell: Recorder())
    base = stage.generator
    assert [u.workload_key for u in ctx.pending(base)] == ["mt-bench"] and "mt-bench@turn2" not in ctx.prompts
    turn2 = (plan.prompts["mt-bench"][0], [])
    ctx.staged["mt-bench@turn2"] = StageOutput(turn2, {"max_prompt_tokens": 1, "rows": []})
    assert ctx.prompts["mt-bench@turn2"] == turn2 and ctx.skipped["mt-bench@turn2"]["max_prompt_tokens"] == 1
    assert [u.workload_key for u in ctx.pending(base)] == ["mt-bench", "mt-bench@turn2"]
    assert [w.key for w in ctx.workloads()] == ["mt-bench", "mt-bench@turn2"]
    ctx.staged["mt-bench@turn2"] = None  # the stage failed: its units leave the run
    assert [u.workload_key for u in ctx.pending(base)] == ["mt-bench"] and [w.key for w in ctx.workloads()] == [
        "mt-bench"]


@mt_bench
def test_a_second_turn_measured_on_other_first_answers_is_measured_again_after_its_stage(random_pair, tmp_path):
    m = matrix(random_pair, datasets=["mt-bench"], turns=[1, 2])
    run_dir, _ = run_matrix(m, tmp_path / "run")
    store = RunStore(run_dir)
    base = next(c for c, cell in store.manifest()["cells"].items() if cell["method"] == "baseline")
    store.write_unit(base, "mt-bench@turn2", [dataclasses.replace(r, prompt_sha256="0" * 64)
                                              if r.kind == "request" else r
                                              for r in store.unit(base, "mt-bench@turn2")])
    answers_path(run_dir, "mt-bench").unlink()  # as if the answers had come from another generator
    plan = build_plan(m, run_dir)
    assert len(plan.done) == len(plan.units) and "(0 to run)" in plan.describe()  # its ids are known after the stage
    Recorder.calls, Recorder.loads = [], []
    assert execute(plan).failed == 0
    assert Recorder.loads == ["baseline", "baseline"] and len(sent("baseline")) == 3 + 3 and not sent("dflash-k3")
    rows = {(r.label, r.dataset): r for r in summarize_run(store).rows}
    assert rows[("dflash-k3", "mt-bench@turn2")].identical_frac == 1.0


@mt_bench
def test_first_answers_that_fail_fail_the_second_turn_only(random_pair, tmp_path):
    m = matrix(random_pair, datasets=["mt-bench"], turns=[1, 2], methods=["baseline", "dflash"])
    plan = build_plan(m, tmp_path / "run")
    Recorder.fail_load = "baseline"
    assert execute(plan).failed >= 2  # both cells' turn-2 units (and the baseline's own units)
    store = RunStore(tmp_path / "run")
    errors = [r for r in store.record_objects() if r["kind"] == "error" and r["dataset"] == "mt-bench@turn2"]
    assert {r["label"] for r in errors} == {"baseline", "dflash-k3"}
    assert all(r["error"].startswith("first answers of the second turn: RuntimeError") for r in errors)


def test_local_rows_in_three_forms_run(random_pair, tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in [
        {"prompt": "a plain question"}, {"prompt_ids": [11, 12, 13, 14, 15]},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a chat"}]}]))
    m = matrix(random_pair, datasets=[{"name": "mine", "path": str(f)}], num_prompts=3, warmup_prompts=0)
    _, failed = run_matrix(m, tmp_path / "run")
    assert failed == 0 and [11, 12, 13, 14, 15] in sent("baseline") and sent("baseline") == sent("dflash-k3")
    forms = [p["form"] for p in RunStore(tmp_path / "run").manifest()["prompts"]["workloads"]["mine"]]
    assert sorted(forms) == ["messages", "prompt", "prompt_ids"]


def test_a_served_context_workload_is_sent_its_templated_text_and_keyed_per_level(random_pair, tmp_path):
    m = matrix(random_pair, datasets=["humaneval"], context_tokens=[700], engine="vllm-serve", concurrency=[1, 2])
    plan = build_plan(m, tmp_path / "run")
    assert {u.store_key for u in plan.units} == {"humaneval@ctx700@c1", "humaneval@ctx700@c2"}
    p = plan.prompts["humaneval@ctx700"][0][0]
    assert sent_text(p, plan.tokenizer) == p.rendered and tokens(p.rendered, plan.tokenizer) == p.ids
    result = LoadResult.from_vllm({
        "errors": [""], "ttfts": [0.1], "latencies": [0.5], "output_lens": [5], "input_lens": [len(p.ids)],
        "generated_texts": ["x"], "itls": [[0.1] * 4], "start_times": [0.0], "duration": 1.0, "completed": 1,
        "failed": 0, "total_output_tokens": 5})
    [request, _] = [r.to_json() for r in level_records(plan.cells[0], [p], result, plan.tokenizer, 1, None, None)]
    assert request["dataset"] == "humaneval@ctx700" and request["context_tokens"] == 700


def test_thinking_is_recorded_and_a_draft_trained_without_it_is_named(random_pair, tmp_path):
    draft = tmp_path / "Qwen3-4B-DFlash-b16"  # a local folder of the released draft's name
    draft.symlink_to(random_pair["dflash"], target_is_directory=True)
    m = matrix(random_pair, datasets=["humaneval"], drafts={"dflash": str(draft)},
               chat_template={"enable_thinking": True})
    plan = build_plan(m, tmp_path / "run")
    text = plan.describe()
    assert "chat template: enable_thinking=True (the target's template ignores enable_thinking)" in text
    assert "warning: dflash draft z-lab/Qwen3-4B-DFlash-b16 was trained with thinking off" in text
    execute(plan)
    manifest = RunStore(tmp_path / "run").manifest()
    assert manifest["prompts"]["chat_template"] == {"enable_thinking": True}
    assert manifest["config"]["chat_template"] == {"enable_thinking": True}
    write_reports(tmp_path / "run")
    report = (tmp_path / "run" / "report.md").read_text()
    assert "- prompts: **warning**: dflash draft z-lab/Qwen3-4B-DFlash-b16" in report


def test_a_prompt_gets_the_same_context_whatever_the_run_measures_besides(random_pair, tmp_path):
    plans = [build_plan(matrix(random_pair, datasets=["humaneval"], context_tokens=[700], num_prompts=n),
                        tmp_path / f"run{n}") for n in (1, 3)]
    one, three = (p.prompts["humaneval@ctx700"][0] for p in plans)
    assert one == three[:1]
