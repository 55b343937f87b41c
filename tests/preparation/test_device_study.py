"""The device check's JAX study (benchmarks/studies/device.py) on the tiny shape: the oracle pair accepts every draft
through the engine's own decode loop, the split of a step adds up, every time has a prediction and every compiled
graph its seconds, a part that the budget cannot hold is dropped and named, and the interpreter probe refuses a JAX
whose backend is not the platform's."""
import argparse
import json
import sys

import numpy as np
import pytest

from benchmarks.cli import main
from benchmarks.engines.jax.decode import accepts_within
from benchmarks.studies import device
from benchmarks.studies.device_summary import device_lines

pytestmark = pytest.mark.jax


def study(tmp_path, parts, budget_s):
    args = argparse.Namespace(budget_s=budget_s, out=tmp_path / "device-qwen3-tiny", profile=False,
                              shape="qwen3-tiny")
    s = device.Study(args)
    return s, s.run(parts)


def test_oracle_dflash_step_accepts_every_draft(tmp_path):
    s, code = study(tmp_path, ["dflash"], 600)
    assert code == 0
    df = json.loads((tmp_path / "device-qwen3-tiny" / "device.json").read_text())["dflash"]
    sizes = s.sizes  # a CPU's, or an accelerator's where JAX's backend is a chip
    k = sizes.k
    # every draft accepted (target and draft both always emit the oracle token), the last step cut at the limit
    assert df["tau"] == 1 + np.mean(accepts_within(sizes.new_tokens, k))
    assert df["steps"] == sum(-(-(sizes.new_tokens - 1) // (k + 1)) for _ in range(df["requests"]))
    assert df["draft_layers"] == len(device.draft_config(s.cfg).target_layer_ids)
    sp = df["split"]
    assert sp["dispatch_ms"] > 0 and sp["fixed_ms"] > 0 and sp["device_ms"] > 0 and sp["counted_ms"] > 0
    assert sp["steps"] > 1
    assert sp["host_ms"] == pytest.approx(sp["loop_ms"] - sp["device_ms"])
    assert df["round_trips"] == [1] * df["requests"]  # the host waits once per request, not once per step
    assert df["predicted_ms"] > 0 and df["step_bytes"] > 0 and df["step_flops"] > 0
    assert df["compile_s"] > 0 and {name.split()[0] for name in df["compiles"]} == {"prefill", "steps"}
    if sizes is device.CPU_SIZES:  # one prefill bucket and one cache span at a CPU's sizes
        assert set(df["compiles"]) == {"prefill 32", "steps 128"}
    assert "cost_ar_steps" not in df  # no AR part ran to price the step in


def test_a_part_beyond_the_budget_is_dropped_and_named(tmp_path):
    s, code = study(tmp_path, ["ar", "verify"], 0)
    assert code == 0
    result = json.loads((tmp_path / "device-qwen3-tiny" / "device.json").read_text())
    assert result["parts_done"] == ["ar"]  # the first part always runs
    assert len(result["dropped"]) == 1 and result["dropped"][0].startswith("verify: dropped, needs ~")
    ar = result["ar"]
    # every timed request (the first is a warm-up) decodes new_tokens - 1 steps after its prefill's token
    assert ar["requests"] == s.sizes.requests - 1 and ar["steps"] == ar["requests"] * (s.sizes.new_tokens - 1)
    # the tiny shape fits a CPU's cache: no DRAM floor there
    assert ar["tpot_ms"] > 0 and (not ar["floor_applies"] or s.hw.platform != "cpu")
    assert ar["predicted_ms"] > 0 and ar["compiles"]


def test_env_refuses_a_backend_that_is_not_the_platforms(tmp_path, capsys):
    import jax

    backend = jax.default_backend()
    other = "tpu" if backend == "gpu" else "gpu"
    assert main(["study", "device", "env", "--platform", other, "--json", str(tmp_path / "env.json")]) == 1
    assert f"MISSING jax's backend is {backend}, not {other}" in capsys.readouterr().out
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["python"] == sys.executable and len(env["problems"]) == 1


def wheel(folder, dist, module, version="0.1"):
    """A pure-Python wheel of one module that says its own name."""
    import zipfile

    name = f"{dist.replace('-', '_')}-{version}"
    path = folder / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{module}/__init__.py", f"NAME = {module!r}\n")
        z.writestr(f"{name}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{name}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n")
        z.writestr(f"{name}.dist-info/RECORD", "")
    return path


def test_env_installs_what_it_lacks_from_a_file_index_after_the_machines_packages(tmp_path, monkeypatch, capsys):
    project = tmp_path / "simple" / "dflash-probe-dist"
    project.mkdir(parents=True)
    whl = wheel(project, "dflash-probe-dist", "dflash_probe_mod")
    (project / "index.html").write_text(f'<a href="{whl.name}">{whl.name}</a>')
    monkeypatch.setitem(device.REQUIRED, "dflash_probe_mod", "dflash-probe-dist")
    site = tmp_path / "index-site"
    monkeypatch.setattr(sys, "path", list(sys.path))  # the probe appends its site; leave the session's path alone
    import jax

    args = argparse.Namespace(platform=jax.default_backend(), wheels_site=str(tmp_path / "wheels"),
                              index_site=str(site), index_url=f"file://{tmp_path / 'simple'}",
                              json=tmp_path / "env.json")
    assert device.env_main(args) == 0
    out = capsys.readouterr().out
    assert "installing dflash-probe-dist from file://" in out and "dflash-probe-dist 0.1 (from the index)" in out
    assert (site / "dflash_probe_mod" / "__init__.py").exists() and sys.path[-1] == str(site)  # last on the path
    assert json.loads((tmp_path / "env.json").read_text())["installed_from_index"] == ["dflash-probe-dist"]


def test_jax_itself_is_never_installed_from_an_index():
    assert device.installable([], ["pandas", "tokenizers"]) == ["pandas", "tokenizers"]
    assert device.installable(["jax: ModuleNotFoundError"], ["jax", "pandas"]) == []
    assert device.installable(["jax's backend is cpu, not tpu: the tpu plugin is missing or broken"], ["pandas"]) == []


def test_a_shape_that_does_not_fit_is_named_with_its_bytes_and_skipped(tmp_path, capsys):
    import jax

    out = tmp_path / "device-llama3-tiny"
    code = main(["study", "device", "run", "--shape", "llama3-tiny", "--parts", "ar,verify", "--out", str(out),
                 "--memory-gb", "0.01"])
    assert code == 0
    result = json.loads((out / "device.json").read_text())
    dtype = "float32" if jax.default_backend() == "cpu" else "bfloat16"  # the study's: an accelerator's bf16
    assert result["skipped"].startswith("does not fit: ") and f"GB of {dtype} weights" in result["skipped"]
    assert "against the device's 0.01 GB" in result["skipped"] and "--memory-gb" in result["skipped"]
    assert "llama3-tiny skipped: does not fit" in capsys.readouterr().out
    lines, bad = device_lines(out)
    assert lines == [f"device-llama3-tiny: llama3-tiny skipped, {result['skipped']}"] and not bad
