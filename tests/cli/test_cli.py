"""The command line: bad arguments exit 2 with one line, exit statuses as documented, resume / --fresh, the
`latest` link it reports, and run folders that stay out of the user's results/runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks import cli
from benchmarks.cli.run import exit_status
from benchmarks.core import paths
from benchmarks.core.engine_io import RequestRecord
from benchmarks.core.paths import ROOT
from benchmarks.run import engine_start
from tests.machine import absent_default_lines, as_where_vllm_is, python_path


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("args, fragment", [
    (["--k", "abc"], "argument --k: 'abc': expected one or more whole numbers separated by commas, each from 0 to "
                     "1024"),
    (["--k", "0"], "'k': expected an int >= 1, got 0"),
    (["--k", "16"], "K=16 exceeds block_size-1=15"),
    (["--k", ","], "argument --k: ',': expected one or more whole numbers"),
    (["--n", "0"], "argument --n: 0: expected an int from 1 to 1000000"),
    (["--n", "two"], "argument --n: 'two': expected an int from 1 to 1000000"),
    (["--temperature", "-0.5"], "argument --temperature: -0.5: expected a number from 0 to 100"),
    (["--temperature", "0.001"], "'temperature': 0.001 is above 0 but below 0.01"),
    (["--max-new-tokens", "0"], "argument --max-new-tokens: 0: expected an int from 1 to 10000000"),
    (["--seed", "-1"], "argument --seed: -1: expected an int from 0 to 2147483647"),
    (["--methods", "medusa"], "unknown method 'medusa'"),
    (["--methods", ","], "'methods': empty"),
    (["--engine", "sglang"], "invalid choice: 'sglang'"),
    (["--preset", "nope"], "preset 'nope' not found"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_bench_arguments_exit_2_with_one_line(args, fragment, capsys):
    preset = [] if "--preset" in args else ["--preset", "tiny"]
    rc, out, err = run_cli(["bench", "--dataset", "humaneval", *preset, *args], capsys)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and fragment in err
    assert out.splitlines() in ([], absent_default_lines("bench"))  # where vLLM is absent, bench says it runs JAX


def test_bad_command_lines_elsewhere_exit_2_with_one_line(tmp_path, capsys):
    for argv, fragment in ([[], "required: cmd"], [["bench"], "--dataset"],
                           [["bench", "--dataset", "nope", "--preset", "tiny"], "unknown dataset 'nope'"],
                           [["validate", str(tmp_path / "absent.yaml")], "no such matrix file"],
                           [["report", str(tmp_path)], "not a run folder"]):
        rc, _, err = run_cli(argv, capsys)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and fragment in err, (argv, err)


def test_k_abc_from_the_shell_exits_2_with_one_line():
    """The README's promise, as a user types it: no traceback, one line, status 2."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "bench", "--dataset", "humaneval", "--k", "abc"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: python -m benchmarks bench: argument --k: 'abc': expected one or more whole numbers separated by "
        "commas, each from 0 to 1024 (see --help)"]


@pytest.mark.parametrize("engine, options, fragment", [
    ("jax", {"enforce_eager": True}, "'enforce_eager' is not an option of the jax engine"),
    ("vllm", {"breakdown": True}, "'breakdown' is not an option of the vllm engine"),
    (["vllm", "jax"], {"jax": {"enforce_eager": True}}, "'engine_options.jax': 'enforce_eager' is not an option"),
])
def test_validate_rejects_an_option_the_matrix_engines_do_not_take(engine, options, fragment, tmp_path, capsys,
                                                                   monkeypatch):
    as_where_vllm_is(monkeypatch)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"preset": "tiny", "engine": engine, "engine_options": options,
                                    "datasets": ["humaneval"]}))
    rc, _, err = run_cli(["validate", str(path)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and fragment in err


def test_validate_accepts_each_engine_its_own_options(tmp_path, capsys, monkeypatch):
    as_where_vllm_is(monkeypatch)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"preset": "tiny", "engine": ["vllm", "jax"], "datasets": ["humaneval"],
                                    "engine_options": {"max_model_len": 512, "jax": {"breakdown": True},
                                                       "vllm": {"enforce_eager": True}}}))
    rc, out, _ = run_cli(["validate", str(path)], capsys)
    assert rc == 0 and "ok" in out


def test_validate_checks_vllm_options_where_vllm_does_not_import(tmp_path):
    """A poisoned vllm package shadows the installed one in the child, so `import vllm` fails there (vLLM is still
    installed: where it is absent, `validate` refuses a vLLM matrix, tests/cli/test_matrix_without_vllm.py):
    validation still refuses an unknown vLLM option (names are data) and says which release's arguments it checked
    against."""
    poison = tmp_path / "poison"
    (poison / "vllm").mkdir(parents=True)
    (poison / "vllm" / "__init__.py").write_text("raise ImportError('vllm is poisoned for this test')\n")
    env = {**os.environ, "PYTHONPATH": python_path(poison, ROOT)}
    probe = subprocess.run([sys.executable, "-c", "import vllm"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "vllm" in probe.stderr, "the poison did not stop `import vllm`"
    from benchmarks.engines.vllm.vllm_options import vllm_release_checked

    release, _ = vllm_release_checked()
    for options, code in (({"enforce_eagre": True}, 2), ({"enforce_eager": True}, 0)):
        path = tmp_path / f"m{code}.yaml"
        path.write_text(yaml.safe_dump({"preset": "tiny", "engine": "vllm", "datasets": ["humaneval"],
                                        "engine_options": {"vllm": options}}))
        proc = subprocess.run([sys.executable, "-m", "benchmarks", "validate", str(path)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == code, proc.stderr
        if code:
            [line] = proc.stderr.strip().splitlines()
            assert "'enforce_eagre' is not an option of the vllm engine" in line and "enforce_eager" in line
        else:
            assert f"checked against vLLM {release}'s engine arguments" in proc.stdout


@pytest.mark.parametrize("failed, divergent, allow, status", [
    (0, False, False, 0), (2, False, False, 1), (0, True, False, 3), (2, True, False, 3), (0, True, True, 0),
    (2, True, True, 1)])
def test_exit_status_the_more_serious_code_wins(failed, divergent, allow, status):
    assert exit_status(failed, divergent, allow) == status


class Scripted:
    """baseline: tokens from the prompt; dflash: its last token changed (a divergence), and it raises at its
    call number `fail_at_call` when set."""

    name = "scripted"
    generated = 0
    fail_at_call: int | None = None

    def load(self, cell):
        self.cell, self.calls = cell, 0

    def generate(self, prompt_ids, params):
        Scripted.generated += 1
        self.calls += 1
        out = [(sum(prompt_ids) + i) % 97 for i in range(params.max_new_tokens)]
        if self.cell.method == "dflash":
            if self.calls == self.fail_at_call:
                raise RuntimeError("draft went away")
            out[-1] += 1
        return RequestRecord(out, ttft_s=0.05, last_token_s=0.05 + 0.01 * (len(out) - 1))

    def spec_counters(self):
        return None

    def describe(self):
        return {}

    def close(self):
        pass


def write_matrix(path: Path, target: Path, draft: Path, datasets: list[dict[str, str]], **extra) -> Path:
    path.write_text(yaml.safe_dump({
        "name": f"cli-{os.getpid()}", "target": str(target), "methods": ["baseline", "dflash"],
        "drafts": {"dflash": str(draft)}, "k": [3], "num_prompts": 3, "warmup_prompts": 1, "max_new_tokens": 6,
        "datasets": datasets, **extra}))
    return path


@pytest.fixture
def prompts(tmp_path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"question number {i}"}) + "\n" for i in range(6)))
    return path


@pytest.fixture
def matrix_file(random_pair, prompts, tmp_path, monkeypatch) -> Path:
    as_where_vllm_is(monkeypatch)  # vllm cells, run by the scripted engine, on a machine without vLLM too
    Scripted.generated = 0
    monkeypatch.setattr(Scripted, "fail_at_call", None)
    monkeypatch.setattr(engine_start, "create_engine", lambda name: Scripted())
    return write_matrix(tmp_path / "cli.yaml", random_pair["target"], random_pair["dflash"],
                        [{"name": "good", "path": str(prompts)}])


def test_a_failed_unit_and_a_divergence_are_both_reported_and_exit_3(matrix_file, random_pair, prompts, tmp_path,
                                                                    capsys, monkeypatch):
    # dflash diverges on 'good' (its first call), then raises on 'bad' (its second): no warm-up, one prompt each
    write_matrix(matrix_file, random_pair["target"], random_pair["dflash"],
                 [{"name": "good", "path": str(prompts)}, {"name": "bad", "path": str(prompts)}],
                 num_prompts=1, warmup_prompts=0)
    monkeypatch.setattr(Scripted, "fail_at_call", 2)
    rc, _, err = run_cli(["matrix", str(matrix_file), "--run-dir", str(tmp_path / "run")], capsys)
    assert "1 (cell, dataset) unit(s) failed" in err
    assert "LOSSLESS VIOLATION:" in err and "dflash-k3 on good" in err
    assert "speculative outputs differed from AR" in err
    assert rc == 3
    rc, _, err = run_cli(["matrix", str(matrix_file), "--run-dir", str(tmp_path / "run2"), "--allow-divergence"],
                         capsys)
    assert rc == 1 and "1 (cell, dataset) unit(s) failed" in err and "accepted by --allow-divergence" in err


def test_rerun_says_it_resumed_and_fresh_measures_again_in_a_new_folder(matrix_file, capsys):
    rc, out, err = run_cli(["matrix", str(matrix_file)], capsys)
    assert rc == 3 and "resuming" not in err  # dflash changes a token: a divergence, exit 3
    first = Path(out.split("run folder: ")[1].split("\n")[0])
    assert first.parent == paths.RUNS_DIR and (paths.RUNS_DIR / "latest").resolve() == first.resolve()
    measured = Scripted.generated
    assert measured == 2 * (3 + 1) + (3 + 1)  # 2 cells, then the baseline's drift recheck of 3 prompts

    rc, out, err = run_cli(["matrix", str(matrix_file)], capsys)
    assert f"resuming {first}: 2 of 2 (cell, dataset) units already done" in err and "FRESH=1 (--fresh)" in err
    assert Scripted.generated == measured  # nothing measured again

    rc, out, err = run_cli(["matrix", str(matrix_file), "--fresh"], capsys)
    fresh = Path(out.split("run folder: ")[1].split("\n")[0])
    assert fresh != first and fresh.name.startswith(first.name + "-") and "resuming" not in err
    assert Scripted.generated == 2 * measured
    assert (paths.RUNS_DIR / "latest").resolve() == fresh.resolve()
    assert len(list((fresh / "units").glob("*.jsonl"))) == len(list((first / "units").glob("*.jsonl"))) == 3

    rc, _, err = run_cli(["matrix", str(matrix_file), "--fresh", "--run-dir", str(first)], capsys)
    assert rc == 2 and "already holds 2 measured unit(s)" in err


def test_run_dir_reports_the_latest_link_it_really_set_in_the_runs_directory_only(matrix_file, tmp_path, capsys):
    """`latest` lives in the runs directory the harness owns: nothing is written beside a --run-dir."""
    run_dir = tmp_path / "elsewhere" / "myrun"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "latest").write_text("a file of the user's")
    _, out, _ = run_cli(["matrix", str(matrix_file), "--run-dir", str(run_dir)], capsys)
    assert f"({paths.RUNS_DIR / 'latest'} points here)" in out
    assert (paths.RUNS_DIR / "latest").resolve() == run_dir.resolve()
    assert (tmp_path / "elsewhere" / "latest").read_text() == "a file of the user's"


def test_the_suite_writes_runs_only_to_a_temporary_folder():
    """Run folders made without --run-dir go under DFLASH_RUNS_DIR, which the suite points at a temporary folder;
    conftest also fails the session if results/runs/latest moved."""
    assert paths.RUNS_DIR == Path(os.environ["DFLASH_RUNS_DIR"])
    assert not paths.RUNS_DIR.resolve().is_relative_to(ROOT.resolve())


def test_a_due_check_that_cannot_run_is_reported_and_exits_4_unless_allowed(matrix_file, random_pair, prompts,
                                                                            tmp_path, capsys):
    # greedy DFlash without its baseline: identity cannot be checked
    write_matrix(matrix_file, random_pair["target"], random_pair["dflash"], [{"name": "good", "path": str(prompts)}],
                 methods=["dflash"])
    rc, _, err = run_cli(["matrix", str(matrix_file), "--run-dir", str(tmp_path / "run")], capsys)
    assert rc == 4, err
    assert ("NOT CHECKED: greedy identity of vllm dflash-k3 on good: not checked: the run has no baseline cell on "
            "engine vllm at T=0") in err
    assert "1 due check(s) could not run" in err and "--allow-unchecked accepts this" in err
    summary = (tmp_path / "run" / "summary.csv").read_text().splitlines()
    assert "not_checked" in summary[0].split(",") and "the run has no baseline cell" in summary[1]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "No greedy row was checked: of 1 greedy rows, 1 not checked" in report and "All greedy" not in report
    assert "- NOT CHECKED: greedy identity of vllm dflash-k3 on good" in report
    rc, _, err = run_cli(["matrix", str(matrix_file), "--run-dir", str(tmp_path / "run"), "--allow-unchecked"],
                         capsys)
    assert rc == 0 and "accepted by --allow-unchecked" in err


def test_a_sampled_run_draws_its_samples_and_the_lossless_sentence_counts_no_greedy_row(
        matrix_file, random_pair, prompts, tmp_path, capsys, monkeypatch):
    class FirstTokenOff(Scripted):
        """dflash's first token differs from the baseline's: a marginal the distribution check tests."""

        def generate(self, prompt_ids, params):
            rec = super().generate(prompt_ids, params)
            if self.cell.method == "dflash":
                rec.output_ids[0] += 1
            return rec

    monkeypatch.setattr(engine_start, "create_engine", lambda name: FirstTokenOff())
    write_matrix(matrix_file, random_pair["target"], random_pair["dflash"], [{"name": "good", "path": str(prompts)}],
                 temperature=0.6, drift_prompts=0)
    rc, _, err = run_cli(["matrix", str(matrix_file), "--run-dir", str(tmp_path / "run")], capsys)
    # the samples were drawn and the check ran (and failed); nothing is "not checked"
    assert rc == 3 and "DISTRIBUTION VIOLATION: vllm dflash-k3 at T=0.6 on good" in err and "NOT CHECKED" not in err
    report = (tmp_path / "run" / "report.md").read_text()
    assert "No greedy row was checked: the run has no greedy speculative cell." in report


def test_model_folders_and_output_files_are_checked_before_any_work(tmp_path, capsys):
    """A model folder that is not there, or not a model, and an output file whose place holds a folder, end in one
    line naming the argument as the command line writes it, before anything loads (vllm-seeded-cpu and tiny check
    would otherwise start vLLM first)."""
    rc, _, err = run_cli(["study", "vllm-seeded-cpu", str(tmp_path / "nowhere")], capsys)
    assert rc == 2 and err.startswith(f"error: target {tmp_path / 'nowhere'} does not exist")
    (tmp_path / "file.txt").write_text("not a model\n")
    rc, _, err = run_cli(["study", "vllm-seeded-cpu", str(tmp_path / "file.txt")], capsys)
    assert rc == 2 and "not a model folder (no config.json)" in err
    rc, _, err = run_cli(["tiny", "check", "--json", str(tmp_path)], capsys)
    assert rc == 2 and err.strip() == (f"error: --json {tmp_path} is a folder, not a file; give a file that can be "
                                       f"written")


def test_the_runs_folder_is_checked_only_by_the_commands_that_make_runs_there(tmp_path, monkeypatch):
    """DFLASH_RUNS_DIR with a file in its place stops a command that writes a run folder (an output run_dir), and
    no other: `check lossless`, `cost-model` and `figures` on a run named explicitly never write there."""
    import argparse

    (tmp_path / "runs").write_text("a file in the way\n")
    monkeypatch.setenv("DFLASH_RUNS_DIR", str(tmp_path / "runs"))
    args = argparse.Namespace(run_dir=None, out=tmp_path / "out", json=tmp_path / "x.json")
    assert cli.output_problems(args, ("out",), ("json",)) == []
    (problem,) = cli.output_problems(args, ("run_dir",))
    assert problem.startswith(f"DFLASH_RUNS_DIR {tmp_path / 'runs'} is a file")


def test_an_output_file_names_what_stands_in_its_way(tmp_path, monkeypatch):
    from benchmarks.core.guarded import output_file_problem

    assert output_file_problem(tmp_path / "new" / "deeper" / "x.json") is None  # folders it can make
    assert output_file_problem(tmp_path) == "is a folder, not a file"
    (tmp_path / "plain").write_text("x\n")
    assert output_file_problem(tmp_path / "plain" / "x.json") == (f"cannot be written: its folder {tmp_path / 'plain'} "
                                                                  f"is a file")
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # the suite runs as root, which ignores permissions
    assert output_file_problem(tmp_path / "plain") == "cannot be written (read-only to this user)"
