"""The untimed tie pass of the lossless check (benchmarks/run/tie_pass.py) with a scripted engine: divergent greedy
prompts are scored by the baseline's engine (reloaded after its family, or still loaded in an interleaved group),
never during timed requests; the records are a unit of their own that resume keeps and a re-measured unit redoes;
only violations make the run's exit status 3."""
import json

import pytest

from benchmarks.analysis.summary import summarize_run
from benchmarks.cli.run import exit_status
from benchmarks.config.matrix_parse import parse_matrix
from benchmarks.core.engine_io import RequestRecord, TokenScores
from benchmarks.records.store import RunStore
from benchmarks.run import engine_start
from tests.run_helpers import run_matrix
from verification.lossless import divergent_rows

DIVERGE_AT = 2


class TieEngine:
    """Baseline: tokens (sum of the prompt + i) % 97. dflash: the same, but every other request (its own count,
    warm-ups included) takes token+1 from DIVERGE_AT on. token_scores: the two tokens `margin` apart at |logit| 5.2,
    in bfloat16."""

    loads: list[str] = []
    events: list[tuple[str, str]] = []  # (label, "generate" | "token_scores") in order
    scored: list[tuple[list[int], list[int], list[int]]] = []
    margin = 0.01
    fail_scores = False

    def load(self, cell):
        self.cell, self.n = cell, 0
        TieEngine.loads.append(cell.label)

    def generate(self, prompt_ids, params):
        TieEngine.events.append((self.cell.label, "generate"))
        self.n += 1
        out = [(sum(prompt_ids) + i) % 97 for i in range(params.max_new_tokens)]
        if self.cell.method == "dflash" and self.n % 2:
            out[DIVERGE_AT:] = [(t + 1) % 97 for t in out[DIVERGE_AT:]]
        return RequestRecord(out, ttft_s=0.05, last_token_s=0.05 + 0.01 * (len(out) - 1))

    def token_scores(self, prompt_ids, prefix_ids, token_ids, top_n):
        TieEngine.events.append((self.cell.label, "token_scores"))
        if TieEngine.fail_scores:
            raise RuntimeError("no logits today")
        TieEngine.scored.append((list(prompt_ids), list(prefix_ids), list(token_ids)))
        return TokenScores("bfloat16", [token_ids[0]], [5.2], [5.2, 5.2 - TieEngine.margin])

    def spec_counters(self):
        return None

    def describe(self):
        return {"dtype": "bfloat16"}

    def close(self):
        pass


@pytest.fixture(autouse=True)
def scripted(monkeypatch):
    TieEngine.loads, TieEngine.events, TieEngine.scored = [], [], []
    TieEngine.margin, TieEngine.fail_scores = 0.01, False
    monkeypatch.setattr(engine_start, "create_engine", lambda name: TieEngine())
    monkeypatch.setattr(engine_start, "in_worker", lambda matrix, engine: False)


@pytest.fixture
def matrix(random_pair, tmp_path):
    p = tmp_path / "prompts.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"question number {i}"}) + "\n" for i in range(10)))
    return parse_matrix({
        "name": "ties", "target": str(random_pair["target"]), "drafts": {"dflash": str(random_pair["dflash"])},
        "methods": ["baseline", "dflash"], "k": [3], "num_prompts": 4, "warmup_prompts": 1, "max_new_tokens": 6,
        "drift_prompts": 0, "datasets": [{"name": "local", "path": str(p)}, {"name": "other", "path": str(p)}],
    })


def rows(run_dir):
    store = RunStore(run_dir)
    return {(r.label, r.dataset): r for r in summarize_run(store).rows}


def test_one_after_another_the_baseline_is_reloaded_to_score_each_divergence(matrix, tmp_path):
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 0 and TieEngine.loads == ["baseline", "dflash-k3", "baseline"]
    # the reloaded baseline only scores: no timed request runs on it
    assert TieEngine.events[-4:] == [("baseline", "token_scores")] * 4 and len(TieEngine.events) == 2 * 2 * 5 + 4
    store = RunStore(run_dir)
    reqs = {(r["label"], r["dataset"], r["prompt_sha256"]): r for r in store.record_objects() if r["kind"] == "request"}
    for ds in ("local", "other"):
        d = rows(run_dir)[("dflash-k3", ds)]
        # dflash's measured requests 1 and 3 (its 2nd and 4th calls) are identical, 0 and 2 diverge
        assert (d.n_identical, d.n_ties, d.n_violations) == (2, 2, 0)
        assert d.first_divergence_min == DIVERGE_AT and d.tie_margin_max == pytest.approx(0.01)
        checks = store.unit(d.cell_id, f"{ds}@ties")
        assert len(checks) == 2 and {c.kind for c in checks} == {"tie_check"}
        for c in checks:
            base = reqs[("baseline", ds, c.prompt_sha256)]["output_ids"]
            spec = reqs[("dflash-k3", ds, c.prompt_sha256)]["output_ids"]
            assert (c.divergence, c.baseline_token, c.spec_token) == (DIVERGE_AT, base[2], spec[2])
    # each call teacher-forced the common prefix after the measured prompt, for the two tokens
    assert all(len(prefix) == DIVERGE_AT and tokens[1] == (tokens[0] + 1) % 97 for _, prefix, tokens in
               TieEngine.scored)
    assert not divergent_rows(list(rows(run_dir).values()))
    assert exit_status(failed, bool(divergent_rows(list(rows(run_dir).values()))), False) == 0

    # resume: nothing to measure, nothing to score
    TieEngine.loads, TieEngine.events = [], []
    run_matrix(matrix, tmp_path / "run", progress=False)
    assert TieEngine.loads == [] and TieEngine.events == []

    # dflash measured again on one dataset: its tie unit is retired and redone, the other dataset's kept
    dflash_id = rows(run_dir)[("dflash-k3", "local")].cell_id
    (run_dir / "units" / f"{dflash_id}__local.jsonl").unlink()
    run_matrix(matrix, tmp_path / "run", progress=False)
    assert TieEngine.loads == ["dflash-k3", "baseline"]
    assert TieEngine.events.count(("baseline", "token_scores")) == 2  # local's two divergences only
    assert list((run_dir / "units" / "superseded").glob(f"{dflash_id}__local@ties.jsonl"))
    assert rows(run_dir)[("dflash-k3", "local")].n_ties == 2


def test_interleaved_the_loaded_baseline_scores_after_the_dataset(matrix, tmp_path, monkeypatch):
    monkeypatch.setenv("PLATFORM", "cpu")  # a TPU machine refuses to interleave cells in workers
    matrix.interleave = True
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 0 and TieEngine.loads == ["baseline", "dflash-k3"]  # no reload
    labels = [e for e in TieEngine.events]
    # local's prompts on both cells in turn, then local's two scores, then the other dataset
    assert labels[10:12] == [("baseline", "token_scores")] * 2 and labels[12] == ("baseline", "generate")
    assert rows(run_dir)[("dflash-k3", "other")].n_ties == 2


def test_a_margin_beyond_the_tolerance_is_a_violation_and_exits_3(matrix, tmp_path):
    TieEngine.margin = 1.0
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    d = rows(run_dir)[("dflash-k3", "local")]
    assert (d.n_ties, d.n_violations, d.first_violation) == (0, 2, DIVERGE_AT)
    assert d.violation_reason == "margin 1 > tolerance 0.125"
    assert exit_status(failed, bool(divergent_rows(list(rows(run_dir).values()))), False) == 3


def test_a_tie_check_that_fails_leaves_violations_and_is_retried(matrix, tmp_path):
    TieEngine.fail_scores = True
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 2  # one tie unit per dataset
    d = rows(run_dir)[("dflash-k3", "local")]
    assert d.n_violations == 2 and d.violation_reason == "no tie check"
    assert "tie check: RuntimeError: no logits today" in d.error
    TieEngine.fail_scores, TieEngine.loads = False, []
    run_dir, failed = run_matrix(matrix, tmp_path / "run", progress=False)
    assert failed == 0 and TieEngine.loads == ["baseline"] and rows(run_dir)[("dflash-k3", "local")].n_ties == 2
