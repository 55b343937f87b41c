"""Issue 33's hostile-input cases (tests/cli/hostile_cases.py) through the CLI: each ends in a clear error naming
its fix, or runs; none gives a traceback, hangs, passes silently, misleads or fails only after its run folder exists.
Engine-free: a scripted engine stands in for JAX and vLLM."""
import subprocess
import sys

import pytest

from benchmarks.cli.run import retry_advice
from benchmarks.core.paths import ROOT
from benchmarks.engines import catalog
from benchmarks.records.records import rerun_may_help
from tests.cli.hostile_cases import CASES, GOOD, matrix_text, run_case, scripted_engine
from tests.typed_runs import summary_row


@pytest.fixture(autouse=True)
def engines(monkeypatch):
    monkeypatch.setattr(catalog, "ENGINES", dict(catalog.ENGINES))  # cases add rows; the copy is dropped after
    scripted_engine()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.family}: {c.name}" for c in CASES])
def test_each_case_is_a_clear_error_or_runs(case, tmp_path, monkeypatch):
    kind, outcomes = run_case(case, tmp_path)
    assert kind in GOOD, (kind, [(o.rc, o.err[-2000:], o.error[-2000:]) for o in outcomes])
    assert kind == ("ok" if case.fragment is None else "clear error")


@pytest.mark.parametrize("error, helps", [
    ("WorkerError: engine worker (vllm) generate timed out after 2 s; its process tree was killed", True),
    ("WorkerError: engine worker (vllm) is gone: killed by signal SIGKILL", True),
    ("RuntimeError: CUDA out of memory", True),
    ("OSError: [Errno 28] No space left on device", True),
    ("ValueError: K=20 must be in 1..block_size-1 = 15", False),
    ("WorkerError: ValueError: scripted failure at call 1", False),
    ("ConfigError: unknown builtin model", False),
    ("FileNotFoundError: [Errno 2] No such file or directory: 'draft/config.json'", False),
])
def test_rerun_is_offered_only_where_it_may_help(error, helps):
    assert rerun_may_help(error) is helps


def test_retry_advice_names_the_units_a_rerun_will_not_fix():
    rows = [summary_row(label="dflash-k20", dataset="humaneval", error="ValueError: K=20 must be in 1..15"),
            summary_row(label="baseline", dataset="humaneval", error="WorkerError: engine worker (vllm) is gone")]
    assert retry_advice(rows[1:]) == "Rerun the same command to retry them."
    assert retry_advice(rows) == ("dflash-k20 on humaneval failed on their input or set-up and would fail the same "
                                  "way on a rerun: fix the cause report.md gives, then rerun; the others may pass "
                                  "on a rerun of the same command.")
    assert retry_advice(rows[:1]).endswith("fix the cause report.md gives, then rerun.")


def test_output_into_a_closed_pipe_ends_the_printing_not_the_run(tmp_path):
    """`matrix ... | head -1`: the run goes on after its reader left, measures every unit and writes its report."""
    path = tmp_path / "m.yaml"
    path.write_text(matrix_text(tmp_path))
    run = tmp_path / "run"
    script = ("import sys; from tests.cli.hostile_cases import scripted_engine; scripted_engine(); "
              "from benchmarks.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", script, "matrix", str(path), "--run-dir", str(run)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc.stdout.readline()  # `head -1`: one line, then the pipe closes
    proc.stdout.close()
    assert proc.wait(timeout=300) == 0
    assert (run / "report.md").is_file() and (run / "summary.csv").is_file()
    records = (run / "records.jsonl").read_text()
    assert "BrokenPipeError" not in records and '"kind": "error"' not in records
