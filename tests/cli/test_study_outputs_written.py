"""`tiny build` and the studies that write files, each run into a temporary folder on the tiny shapes: every file
it writes lies in its declared output folder and is one of its OUTPUTS (an OUTPUT_FILE_ARGS file is its own
declaration), nothing is written beside them, a study's scratch folder is gone when it ends, and a file of the
user's in the output folder is left as it was. The helpers are tests/cli/test_outputs_declared.py's. Where a
study's compiles would take many seconds and what it writes does not depend on them, its weights and timer are
stood in for (kflat), or it takes the path that writes without measuring (device run, device-grid: a shape or
points that do not fit --memory-gb).

Left out, each for its cost (their declarations and refusals before any work are checked by
test_outputs_declared.py, tests/studies/test_study_outputs.py and tests/test_ways_in.py):
- study interleave-bias (--keep): two `matrix` runs per --runs, each in a process of its own, on vllm-cpu (minutes);
- study first-table (--out): builds a fresh clone's venv (GBs, minutes);
- study vllm-start, study vllm-preload (--out) and tiny check (--json): start vLLM engines (a minute or more each);
- tiny train (--out): trains the pair (its smoke test takes about 44 s at a tenth of the scale);
- the measured paths of study device run (kflat.csv; profile.tar.gz with --profile: about 10 s a part on 2 CPU
  cores) and of study device-grid (trees.csv with --budgets, matmul.csv, profile.tar.gz: about 8 s a point,
  compiles included).
The studies that declare no outputs but crossover-power (speed, parity, engine-ties, tpu-parity, vllm-sampled-spec,
vllm-seeded-cpu) drive engines; crossover-power, cheap, is run below and must write nothing."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.cli import main
from benchmarks.core.paths import ROOT
from tests.cli.test_outputs_declared import MODULES, snapshot, undeclared, written

MINE = "notes.txt"  # a user's file in the output folder: never touched


def run_into(tmp_path: Path, argv: list[str], out: Path, capsys: pytest.CaptureFixture[str],
             codes: tuple[int, ...] = (0,)) -> list[str]:
    """Run `argv` with `out` holding a file of the user's; the files it wrote under `out` (relative), after checking
    that it exited with one of `codes`, wrote nothing else under `tmp_path`, and left no folder of its own behind."""
    out.mkdir(parents=True, exist_ok=True)
    (out / MINE).write_text("mine\n")
    before, before_out = snapshot(tmp_path), snapshot(out)
    folders = {p for p in tmp_path.rglob("*") if p.is_dir()}
    code = main(argv)
    assert code in codes, (code, capsys.readouterr().err)
    elsewhere = [f for f in written(tmp_path, before) if not (tmp_path / f).is_relative_to(out)]
    assert not elsewhere, f"{' '.join(argv[:3])} wrote outside its output folder: {elsewhere}"
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_dir() and p not in folders
                  and not any(f.is_file() for f in p.rglob("*")))
    assert not left, f"empty folders left behind (a scratch folder not removed?): {left}"
    assert (out / MINE).read_text() == "mine\n"
    return written(out, before_out)


def test_tiny_build_writes_only_what_it_declares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Into a folder of the user's (--force): target/, dflash/ and eagle3/, each file declared."""
    module, _ = MODULES["tiny build"]
    out = tmp_path / "tiny"
    new = run_into(tmp_path, ["tiny", "build", str(out), "--force"], out, capsys)
    assert {"target/config.json", "dflash/model.safetensors", "eagle3/config.json"} <= set(new), new
    assert not undeclared(new, module.OUTPUTS), undeclared(new, module.OUTPUTS)


@pytest.mark.jax
def test_kflat_writes_only_what_it_declares(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Its weights and its timer stood in for (their compiles take 15 s here, and what it writes does not depend on
    them): kflat.csv, kflat.png and kflat.json, each declared."""
    from benchmarks.engines.jax import model
    from benchmarks.studies import kflat

    monkeypatch.setattr(model, "init_random_params", lambda *args, **kwargs: None)
    monkeypatch.setattr(kflat, "time_forwards", lambda params, cfg, ks, *rest, **kw: {k: [1.0 + k] for k in ks})
    module, _ = MODULES["study kflat"]
    out = tmp_path / "kflat"
    new = run_into(tmp_path, ["study", "kflat", "--random-weights", "--ks", "0,1", "--contexts", "16", "--repeats",
                              "1", "--warmup", "0", "--out", str(out)], out, capsys)
    assert set(new) == set(module.OUTPUTS), new  # every one of its outputs, each declared


@pytest.mark.jax
def test_chip_compile_on_the_cpu_writes_only_what_it_declares(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """One point compiled for this machine's CPU: chip-compile.json and chip-compile.csv."""
    module, _ = MODULES["study chip-compile"]
    out = tmp_path / "chip"
    new = run_into(tmp_path, ["study", "chip-compile", "--chip", "cpu", "--shape", "qwen3-tiny", "--batch", "1",
                              "--context", "64", "--ks", "0", "--dtype", "float32", "--out", str(out)], out, capsys)
    assert set(new) == set(module.OUTPUTS), new


@pytest.mark.jax
def test_device_grid_whose_points_do_not_fit_writes_only_what_it_declares(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every point skipped as not fitting --memory-gb (no stream, no matmul rates; its weights, unused then, stood in
    for): grid.json and grid.csv, and the trace folder it makes inside --out is gone (run_into). Exit 1: nothing
    measured."""
    from benchmarks.engines.jax import draft, model
    from benchmarks.studies import device_grid

    monkeypatch.setattr(model, "init_random_params", lambda *args, **kwargs: None)
    monkeypatch.setattr(draft, "init_draft_params", lambda *args, **kwargs: None)
    monkeypatch.setattr(device_grid, "oracle", lambda target, drafter, cfg: (target, drafter))
    module, _ = MODULES["study device-grid"]
    out = tmp_path / "grid"
    new = run_into(tmp_path, ["study", "device-grid", "--shape", "qwen3-tiny", "--batch", "1", "--context", "4096",
                              "--ks", "0", "--memory-gb", "0.01", "--stream-gb", "0", "--matmul-gb", "0",
                              "--out", str(out)], out, capsys, codes=(1,))
    assert set(new) == {"grid.json", "grid.csv"} and not undeclared(new, module.OUTPUTS), new


def test_device_run_of_a_shape_that_does_not_fit_writes_only_what_it_declares(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module, _ = MODULES["study device"]
    out = tmp_path / "device"
    new = run_into(tmp_path, ["study", "device", "run", "--shape", "qwen3-tiny", "--parts", "ar", "--memory-gb",
                              "0.01", "--out", str(out)], out, capsys)
    assert new == ["device.json"] and not undeclared(new, module.OUTPUTS), new


def test_device_env_writes_only_its_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json, an OUTPUT_FILE_ARGS file: the one file written, in a folder of the user's."""
    module, _ = MODULES["study device"]
    assert "json" in module.OUTPUT_FILE_ARGS
    out = tmp_path / "env"
    new = run_into(tmp_path, ["study", "device", "env", "--platform", "cpu", "--json", str(out / "env.json")], out,
                   capsys)
    assert new == ["env.json"], new


def test_crossover_power_declares_nothing_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    module, _ = MODULES["study crossover-power"]
    assert not (module.OUTPUT_ARGS or module.OUTPUT_FILE_ARGS or module.OUTPUTS)
    monkeypatch.chdir(tmp_path)  # a file written relative to the working folder would land here
    out = tmp_path / "cwd"
    assert run_into(tmp_path, ["study", "crossover-power", str(ROOT / "configs" / "matrices" / "tiny-batch.yaml"),
                               "--runs", "50"], out, capsys) == []
    assert sorted(os.listdir(tmp_path)) == ["cwd"]
