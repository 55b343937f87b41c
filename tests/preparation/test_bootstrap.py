"""Set-up without the hardware: Python selection, the TPU release check, resolution of the TPU/GPU sets, and uv
given pip's configuration."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks.core.paths import ROOT
from preparation.uv_pip import parse_config_list, strategy, uv_options
from tests.machine import python_path

FIND = ROOT / "preparation" / "find_python.sh"
RELEASE = ROOT / "preparation" / "tpu_release.sh"
BASH = shutil.which("bash")
TOOLS = ("sort", "sed", "awk", "head", "git", "dirname", "cat", "chmod")  # what the scripts and fakes call


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _python(path: Path, version: str, venv: bool = True) -> Path:
    """A stand-in interpreter: answers the version probe as Python ``version`` would (or fails without venv)."""
    return _script(path, f'echo "{version} $0"' if venv else "exit 1")


class Box:
    """An isolated PATH, HOME, pyenv root and uv: nothing of the real machine's Pythons is visible."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        for tool in TOOLS:
            (self.bin / tool).symlink_to(shutil.which(tool))
        self.pyenv = tmp / "pyenv"
        self.env = {
            "PATH": str(self.bin), "HOME": str(tmp / "home"), "PYENV_ROOT": str(self.pyenv),
            "XDG_DATA_HOME": str(tmp / "share"), "XDG_CACHE_HOME": str(tmp / "cache"),
        }

    def shims(self, *names: str) -> None:
        """pyenv-style shims that answer 127, as they do for a version that is not selected."""
        for name in names:
            _script(self.bin / name, 'echo "pyenv: $0: command not found" >&2; exit 127')

    def failing_uv(self) -> None:
        _script(self.bin / "uv", "exit 1")

    def find(self, platform: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([BASH, str(FIND), platform], env={**self.env, **env}, capture_output=True,
                              text=True, timeout=60)


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def test_shims_only_and_uv_failing_gives_one_message_with_working_commands(box):
    box.shims("python3", "python3.11", "python3.12", "python3.13", "python")
    box.failing_uv()
    _python(box.pyenv / "versions" / "3.11.7" / "bin" / "python3", "3.11")  # wrong version for TPU
    r = box.find("tpu")
    assert r.returncode == 1 and r.stdout == ""
    err = r.stderr.strip().splitlines()[-1]
    for fix in ("uv python install 3.12", "pyenv install 3.12", "PYTHON=/path/to/python3.12"):
        assert fix in err
    assert "3.11" not in err and "3.13" not in err  # never a version the TPU wheels cannot use


def test_pyenv_versions_folder_is_searched_past_the_shims(box):
    box.shims("python3", "python3.12")
    box.failing_uv()
    want = _python(box.pyenv / "versions" / "3.12.1" / "bin" / "python3", "3.12")
    r = box.find("tpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(want)


def test_interpreter_without_venv_module_is_skipped(box):
    box.failing_uv()
    _python(box.bin / "python3.12", "3.12", venv=False)
    want = _python(box.pyenv / "versions" / "3.12.4" / "bin" / "python3", "3.12")
    assert box.find("tpu").stdout.strip() == str(want)


def test_cpu_prefers_311_and_gpu_prefers_312(box):
    box.failing_uv()
    p311 = _python(box.bin / "python3.11", "3.11")
    p312 = _python(box.bin / "python3.12", "3.12")
    assert box.find("cpu").stdout.strip() == str(p311)
    assert box.find("gpu").stdout.strip() == str(p312)
    assert box.find("tpu").stdout.strip() == str(p312)


def test_uv_managed_python_is_found_without_uv(box):
    box.shims("python3")
    want = _python(box.tmp / "share" / "uv" / "python" / "cpython-3.12.9-linux-x86_64-gnu" / "bin" / "python3",
                   "3.12")
    r = box.find("tpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(want)


def test_uv_installs_python_when_none_is_found(box):
    box.shims("python3")
    got = box.tmp / "uv-python" / "python3.12"
    _script(box.bin / "uv", f'''case "$1 $2" in
  "python install") [ "$3" = 3.12 ] && printf '#!/bin/sh\\necho "3.12 $0"\\n' > {got} && chmod +x {got} ;;
  "python find") [ -x {got} ] && echo {got} ;;
  *) exit 1 ;;
esac''')
    got.parent.mkdir()
    r = box.find("tpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(got)


def test_python_override_of_the_wrong_version_exits_2(box):
    p313 = _python(box.bin / "python3.13", "3.13")
    r = box.find("tpu", PYTHON=str(p313))
    assert r.returncode == 2
    assert "3.13" in r.stderr and "needs 3.12" in r.stderr


# The TPU release check, on a copy of the scripts with a fake submodule.

def _release_tree(tmp: Path, tag: str | None, pin: str = "0.27.0") -> Path:
    root = tmp / "repo"
    (root / "preparation").mkdir(parents=True)
    for name in ("tpu_release.sh", "tpu_inference_releases.tsv"):
        shutil.copy(ROOT / "preparation" / name, root / "preparation" / name)
    (root / "requirements-tpu.txt").write_text(f"vllm-tpu=={pin}\ntpu-inference=={pin}\n")
    if tag is not None:
        sub = root / "tpu-inference"
        sub.mkdir()
        (sub / "setup.py").write_text("")
        git = ["git", "-C", str(sub), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "x"], check=True)
        if tag:
            subprocess.run([*git, "tag", tag], check=True)
    return root


def _release(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([BASH, str(root / "preparation" / "tpu_release.sh")], capture_output=True, text=True,
                          timeout=60)


def test_release_without_submodule_uses_the_pinned_wheels(tmp_path):
    assert _release(_release_tree(tmp_path, None)).stdout.split() == ["0.27.0", "wheels"]


def test_release_from_the_submodule_tag(tmp_path):
    r = _release(_release_tree(tmp_path, "v0.27.0"))
    assert r.returncode == 0, r.stderr
    version, commit = r.stdout.split()
    assert version == "0.27.0" and len(commit) == 40


def test_release_disagreeing_with_the_pin_names_both_versions(tmp_path):
    r = _release(_release_tree(tmp_path, "v0.26.0"))
    assert r.returncode == 1 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1
    assert "0.26.0" in r.stderr and "vllm-tpu==0.27.0" in r.stderr


def test_release_of_an_untagged_commit_stops(tmp_path):
    r = _release(_release_tree(tmp_path, ""))
    assert r.returncode == 1 and "no release" in r.stderr


def test_release_table_row_of_the_pinned_submodule_matches_the_pin():
    gitlink = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-s", "tpu-inference"], capture_output=True,
                             text=True, check=True).stdout.split()[1]
    rows = [line.split("\t") for line in (ROOT / "preparation" / "tpu_inference_releases.tsv").read_text()
            .splitlines() if line and not line.startswith(("#", "tag\t"))]
    pins = (ROOT / "requirements-tpu.txt").read_text()
    assert [r[2] for r in rows if r[1] == gitlink] == ["0.27.0"]
    assert "vllm-tpu==0.27.0" in pins and "tpu-inference==0.27.0" in pins


# Resolution of the accelerator sets for their Python and platform, without installing (needs the package index).

def _uv() -> str:
    try:
        from uv import find_uv_bin
    except ImportError:
        pytest.skip("uv is not installed (the package index has none, so set-up used pip): these checks need uv")
    return find_uv_bin()


def _compile(requirements: Path, *extra: str) -> subprocess.CompletedProcess:
    # manylinux_2_35: the glibc of a TPU VM's Ubuntu 22.04 image (libtpu needs >= 2.31); `make locks` runs the same.
    cmd = [_uv(), "pip", "compile", "--python-version", "3.12", "--python-platform", "x86_64-manylinux_2_35",
           "--no-header", "--no-annotate", "--quiet", *extra, str(requirements)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})


def _pins(text: str) -> dict[str, str]:
    pairs = (line.split("==") for line in text.splitlines() if "==" in line and not line.startswith("#"))
    return {name.lower().replace("_", "-"): version.strip() for name, version in pairs}


@pytest.mark.slow
@pytest.mark.parametrize("platform, pins", [
    ("tpu", {"vllm-tpu": "0.27.0", "tpu-inference": "0.27.0"}),
    ("gpu", {"vllm": "0.32.0"}),
])
def test_accelerator_requirements_resolve_to_their_lock(platform, pins):
    """The set resolves for its Python and platform, constrained to the committed lock, to exactly the lock."""
    lock = ROOT / "preparation" / "locks" / f"{platform}.txt"
    r = _compile(ROOT / f"requirements-{platform}.txt", "--constraint", str(lock))
    assert r.returncode == 0, r.stderr
    got, want = _pins(r.stdout), _pins(lock.read_text())
    assert got == want, f"{lock.name} is stale: run `make locks` ({sorted(set(got.items()) ^ set(want.items()))[:10]})"
    assert {name: got.get(name) for name in pins} == pins


@pytest.mark.slow
def test_resolution_fails_for_pins_that_cannot_go_together(tmp_path):
    bad = tmp_path / "requirements-tpu.txt"
    bad.write_text("vllm-tpu==0.27.0\ntpu-inference==0.26.0\n")
    r = _compile(bad)
    assert r.returncode != 0 and "tpu-inference" in r.stderr


# The engine import check that set-up runs.

def _check_engine(tmp: Path, platform: str, vllm_body: str) -> subprocess.CompletedProcess:
    """check_engine.py with a stand-in ``vllm`` module first on the path."""
    (tmp / "vllm.py").write_text(vllm_body)
    env = {**os.environ, "PYTHONPATH": python_path(tmp), "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, str(ROOT / "preparation" / "check_engine.py"), platform], env=env,
                          capture_output=True, text=True, timeout=120)


def test_engine_check_fails_naming_vllm_when_it_does_not_import(tmp_path):
    r = _check_engine(tmp_path, "cpu", "raise ImportError('no engine here')")
    assert r.returncode == 1
    assert "cannot import vllm: ImportError: no engine here" in r.stderr


def test_engine_check_on_tpu_needs_the_tpu_inference_modules(tmp_path):
    r = _check_engine(tmp_path, "tpu", "__version__ = '0'")
    assert r.returncode == 1
    assert "cannot import tpu_inference." in r.stderr


def test_engine_check_passes_when_everything_imports(tmp_path):
    r = _check_engine(tmp_path, "cpu", "__version__ = 'stand-in'")
    assert r.returncode == 0, r.stderr
    assert "vllm stand-in" in r.stdout


# uv gets pip's configuration (preparation/uv_pip.py): the sources and constraints bootstrap's installs resolve against.

UV_PIP = ROOT / "preparation" / "uv_pip.py"


def test_pip_configuration_becomes_uv_options_with_pips_precedence():
    config = parse_config_list(
        "global.extra-index-url='file:///a/simple file:///b/simple'\n"
        "global.find-links='/global/wheels'\n"
        "install.find-links='/install/wheels'\n"
        "global.constraint='/etc/c.txt'\n"
        "global.index-url='https://global.example/simple'\n"
        ":env:.index-url='https://env.example/simple'\n"
        ":env:.no-index='0'\n"
        "download.pre='1'\n"  # another command's section: not install's
        "global.default-timeout='180'\n")
    args, env = uv_options(config)
    assert args == ["--index-url", "https://env.example/simple",
                    "--extra-index-url", "file:///a/simple", "--extra-index-url", "file:///b/simple",
                    "--find-links", "/install/wheels", "--constraint", "/etc/c.txt"]
    assert env == ({"UV_HTTP_TIMEOUT": "180"} if "UV_HTTP_TIMEOUT" not in os.environ else {})


def test_no_pip_configuration_adds_nothing():
    assert uv_options({}) == ([], {})
    assert uv_options(parse_config_list(":env:.disable-pip-version-check='1'\n")) == ([], {})


def test_uv_picks_versions_over_all_indexes_as_pip_does_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("UV_INDEX_STRATEGY", raising=False)
    assert strategy(["-r", "requirements.txt"]) == ["--index-strategy", "unsafe-best-match"]
    assert strategy(["--index-strategy=first-index"]) == []
    monkeypatch.setenv("UV_INDEX_STRATEGY", "first-index")
    assert strategy([]) == []


def _tiny_wheel(folder: Path, version: str) -> None:
    name = f"tinypkg-{version}.dist-info"
    with zipfile.ZipFile(folder / f"tinypkg-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{name}/METADATA", f"Metadata-Version: 2.1\nName: tinypkg\nVersion: {version}\n")
        z.writestr(f"{name}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{name}/RECORD", "")


def test_uv_resolves_from_the_find_links_and_constraint_pip_is_given(tmp_path):
    """PIP_* variables (no pip.conf) reach uv: a local wheel folder and a constraint file, with no index at all."""
    _uv()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "2.0"):
        _tiny_wheel(wheels, version)
    (tmp_path / "c.txt").write_text("tinypkg<2\n")
    (tmp_path / "req.txt").write_text("tinypkg\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS=str(wheels), PIP_CONSTRAINT=str(tmp_path / "c.txt"),
               PIP_NO_INDEX="1", UV_CACHE_DIR=str(tmp_path / "cache"), NO_COLOR="1")
    show = subprocess.run([sys.executable, str(UV_PIP), "--show"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert f"--find-links {wheels}" in show.stdout and "--no-index" in show.stdout, show.stdout + show.stderr
    r = subprocess.run([sys.executable, str(UV_PIP), "compile", "--no-header", "--no-annotate", "--offline",
                        str(tmp_path / "req.txt")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "tinypkg==1.0" in r.stdout.split()
    env.pop("PIP_CONSTRAINT")
    r = subprocess.run([sys.executable, str(UV_PIP), "compile", "--no-header", "--no-annotate", "--offline",
                        str(tmp_path / "req.txt")], env=env, capture_output=True, text=True, timeout=120)
    assert "tinypkg==2.0" in r.stdout.split(), r.stderr


def test_bootstrap_and_find_python_install_the_uv_pinned_in_requirements():
    pin = re.search(r"^uv==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    assert re.search(rf"^UV_VERSION={re.escape(pin)}\b", FIND.read_text(), re.M), "find_python.sh's UV_VERSION"
    sed = subprocess.run(["sed", "-n", r"s/^uv==\([^[:space:]#]*\).*/\1/p", str(ROOT / "requirements.txt")],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert sed == pin  # the expression bootstrap.sh reads the pin with
    assert r"s/^uv==\([^[:space:]#]*\).*/\1/p" in (ROOT / "preparation" / "bootstrap.sh").read_text()
