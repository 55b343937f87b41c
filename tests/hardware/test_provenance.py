"""Provenance you can trust: hardware told apart, the floor for hub models, cell ids that follow the weights, one
provenance per measurement, and the caveats that depend on versions and configs."""
import json
import math
import os
import shutil
from pathlib import Path

import pytest

from benchmarks.analysis.caveats import caveat_lines
from benchmarks.config.matrix_parse import parse_matrix
from benchmarks.core.engine_io import RequestRecord, SpecCounters
from benchmarks.core.paths import ROOT
from benchmarks.hardware import detect, provenance
from benchmarks.records.store import RunStore
from benchmarks.report.floors_report import floor_lines
from benchmarks.report.report_write import write_reports
from benchmarks.run import engine_start
from tests.run_helpers import run_matrix
from tests.typed_runs import manifest as typed_manifest
from tests.typed_runs import summary_row

TINY = ROOT / "models" / "tiny"


class DescribedEngine:
    """AR TPOT 10 ms, dflash 4 ms with 2 of K drafts accepted per step; describes itself like a real engine."""

    name = "scripted"
    loads: list[str] = []

    def load(self, cell):
        self.cell, self.lengths = cell, []
        DescribedEngine.loads.append(cell.label)

    def generate(self, prompt_ids, params):
        out = [(sum(prompt_ids) + i) % 97 for i in range(params.max_new_tokens)]
        if self.cell.method != "baseline":
            self.lengths += [2] * 4
        tpot = 0.010 if self.cell.method == "baseline" else 0.004
        return RequestRecord(out, ttft_s=0.05, last_token_s=0.05 + tpot * (len(out) - 1))

    def generate_batch(self, prompts, params):
        return [self.generate(p, params) for p in prompts]

    def spec_counters(self):
        return None if self.cell.method == "baseline" else SpecCounters.from_accept_lengths(self.lengths, self.cell.k)

    def describe(self):
        return {"engine": "scripted", "resolved": {"dtype": "float32", "enforce_eager": True},
                "draft_queries": self.cell.k + 1 if self.cell.method == "dflash" else None}

    def close(self):
        pass


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    DescribedEngine.loads = []
    monkeypatch.setattr(engine_start, "create_engine", lambda name: DescribedEngine())
    monkeypatch.setattr(provenance, "HASH_CACHE", tmp_path / "hash-cache.json")
    monkeypatch.setenv(detect.ENV_BANDWIDTH, "1")  # a known bandwidth: no 256 MiB copy, a deterministic floor


@pytest.fixture
def prompts(tmp_path):
    p = tmp_path / "prompts.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"question number {i}"}) + "\n" for i in range(6)))
    return p


def make_matrix(target, draft, prompts, **extra):
    return parse_matrix({"name": "prov", "target": str(target), "drafts": {"dflash": str(draft)},
                         "methods": ["baseline", "dflash"], "k": [3], "num_prompts": 2, "warmup_prompts": 1,
                         "max_new_tokens": 6, "datasets": [{"name": "local", "path": str(prompts)}], **extra})


def cell_ids(run_dir):
    return {r["cell_id"] for r in RunStore(run_dir).record_objects()}


# --- hardware ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device, accelerator, generation", [
    ("TPU v5 lite", None, "v5e"), ("TPU v5litepod-8", None, "v5e"), ("TPU unknown type", "v5litepod-8", "v5e"),
    ("TPU v5", None, "v5p"), ("TPU v5p-8", None, "v5p"), ("TPU v6 lite", None, "v6e"), ("TPU v6e-8", None, "v6e"),
    ("TPU v4", None, "v4"), ("TPU v4-8", None, "v4"), ("TPU7x", None, "v7"),
])
def test_tpu_generations_have_their_own_bandwidth(monkeypatch, device, accelerator, generation):
    monkeypatch.delenv(detect.ENV_BANDWIDTH)
    if accelerator:
        monkeypatch.setenv("TPU_ACCELERATOR_TYPE", accelerator)
    else:
        monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
    bw, source = detect.bandwidth("tpu", device)
    assert bw == detect.TPU_GBS[generation] * 1e9 and generation in source


def test_v5e_is_not_given_v5p_bandwidth(monkeypatch):
    monkeypatch.delenv(detect.ENV_BANDWIDTH)
    monkeypatch.setenv("PLATFORM", "tpu")
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    hw = provenance.describe_hardware()
    assert hw["tpu_generation"] == "v5e" and hw["bandwidth_gbps"] == detect.TPU_GBS["v5e"]
    assert detect.TPU_GBS["v5e"] < detect.TPU_GBS["v5p"] / 3  # the 3.4× error this table must not make
    assert detect.bandwidth("tpu", "TPU v6e-8")[0] != detect.bandwidth("tpu", "TPU v5p-8")[0]


def test_unknown_chip_says_so_and_names_the_variable(monkeypatch):
    monkeypatch.delenv(detect.ENV_BANDWIDTH)
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
    for platform, device in (("tpu", "TPU v99 mystery"), ("gpu", "Acme Tensor 9000")):
        bw, source = detect.bandwidth(platform, device)
        assert bw is None and "unknown device" in source and detect.ENV_BANDWIDTH in source
    assert detect.bandwidth("gpu", "NVIDIA H100 PCIe")[0] != detect.bandwidth("gpu", "NVIDIA H100 80GB HBM3")[0]


# --- the floor for a hub id ----------------------------------------------------------------------------------------

def hub_cache(root: Path, repo: str, source: Path, revision: str = "0" * 40) -> Path:
    """The huggingface_hub cache layout around a model folder: refs/main → snapshots/<revision>/."""
    folder = root / f"models--{repo.replace('/', '--')}"
    shutil.copytree(source, folder / "snapshots" / revision)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(revision)
    return folder / "snapshots" / revision


def test_hub_id_in_the_local_cache_gets_a_computed_floor(tmp_path, monkeypatch, prompts):
    from huggingface_hub import constants
    from safetensors import safe_open

    cache = tmp_path / "hf" / "hub"
    snapshot = hub_cache(cache, "tiny-org/tiny-target", TINY / "target")
    hub_cache(cache, "tiny-org/tiny-dflash", TINY / "dflash")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # read at import; the variables are for children
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    m = make_matrix("tiny-org/tiny-target", "tiny-org/tiny-dflash", prompts, engine_options={"dtype": "float32"})

    run_dir, failed = run_matrix(m, tmp_path / "run", progress=False)
    assert failed == 0
    write_reports(run_dir)
    with safe_open(str(snapshot / "model.safetensors"), "np") as f:
        params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    floor_ms = params * 4 / 1e9 * 1e3  # float32 bytes at the 1 GB/s of DFLASH_BANDWIDTH_GBS
    report = (run_dir / "report.md").read_text()
    assert "Floor not computed" not in report
    assert f"AR TPOT floor {floor_ms:.3f} ms" in report
    assert f"{params / 1e6:.1f} M parameters from safetensors headers (1 file) × 4 bytes (float32)" in report
    model = RunStore(run_dir).manifest()["models"]["tiny-org/tiny-target"]
    assert model["found"].startswith("Hugging Face cache") and model["path"] == str(snapshot)


def test_weight_size_falls_back_to_the_index_then_the_config(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    cfg = json.loads((TINY / "target" / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(cfg))
    sized = provenance.weight_size(TINY / "target", cfg)
    by_config = provenance.weight_size(folder, cfg)
    assert "config parameter count" in by_config["weight_bytes_source"]
    assert by_config["parameters"] == sized["parameters"]  # the config count agrees with the safetensors headers
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 1234}, "weight_map": {"w": "model-00001-of-00002.safetensors"}}))
    indexed = provenance.weight_size(folder, cfg)
    assert indexed["weight_bytes"] == 1234 and "index total_size" in indexed["weight_bytes_source"]


# --- cell ids follow the weights -----------------------------------------------------------------------------------

def change_a_weight_byte(folder: Path) -> None:
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # the last byte belongs to a tensor, not to the header
    path.write_bytes(bytes(data))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_changed_weights_are_measured_again_and_unchanged_ones_resume(tmp_path, prompts):
    target, draft = tmp_path / "target", tmp_path / "dflash"
    shutil.copytree(TINY / "target", target)
    shutil.copytree(TINY / "dflash", draft)
    m = make_matrix(target, draft, prompts)
    run_dir, _ = run_matrix(m, tmp_path / "run", progress=False)
    first = cell_ids(run_dir)
    # the baseline is loaded again after dflash for its drift recheck
    assert DescribedEngine.loads == ["baseline", "dflash-k3", "baseline"] and len(first) == 2

    DescribedEngine.loads = []
    run_matrix(m, tmp_path / "run", progress=False)
    assert DescribedEngine.loads == [] and cell_ids(run_dir) == first  # same files: resumed, nothing measured

    change_a_weight_byte(draft)  # a new draft: only the speculative cell changes (and the recheck that follows it)
    run_matrix(m, tmp_path / "run", progress=False)
    second = cell_ids(run_dir)
    assert DescribedEngine.loads == ["dflash-k3", "baseline"] and len(second & first) == 1

    DescribedEngine.loads = []
    change_a_weight_byte(target)  # a new target: every cell changes
    run_matrix(m, tmp_path / "run", progress=False)
    third = cell_ids(run_dir)
    assert DescribedEngine.loads == ["baseline", "dflash-k3", "baseline"] and not third & (first | second)
    # the replaced units, kept aside: both dflash units, the first baseline and both of its rechecks (none overwritten)
    assert len(list((run_dir / "units" / "superseded").glob("*.jsonl"))) == 5
    assert set(RunStore(run_dir).manifest()["cells"]) == third
    write_reports(run_dir)
    assert "| local | vllm | dflash-k3 | 0 | 2 |" in (run_dir / "report.md").read_text()


def test_a_runs_files_name_the_repositorys_models_by_their_path_from_its_root(tmp_path, prompts):
    m = make_matrix("models/tiny/target", "models/tiny/dflash", prompts)
    run_dir, failed = run_matrix(m, tmp_path / "run", progress=False)
    assert failed == 0
    models = RunStore(run_dir).manifest()["models"]
    assert {ref: (fp["ref"], fp["path"]) for ref, fp in models.items()} == {
        "models/tiny/target": ("models/tiny/target", "models/tiny/target"),
        "models/tiny/dflash": ("models/tiny/dflash", "models/tiny/dflash")}
    written = [p for p in run_dir.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl")]
    assert written and not [p.name for p in written if str(ROOT) in p.read_text()]
    elsewhere = tmp_path / "elsewhere"  # a folder outside the repository keeps its absolute path
    shutil.copytree(TINY / "target", elsewhere)
    assert provenance.model_fingerprint(str(elsewhere))["path"] == str(elsewhere.resolve())


def test_file_hashes_are_cached_by_path_size_and_mtime(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(TINY / "dflash", folder)
    first = provenance.content_sha256(folder)
    cached = json.loads(provenance.HASH_CACHE.read_text())
    poisoned = {k: ("f" * 64 if "model.safetensors" in k else v) for k, v in cached.items()}
    provenance.HASH_CACHE.write_text(json.dumps(poisoned))
    assert provenance.content_sha256(folder) != first  # unchanged (path, size, mtime): the cache was used
    change_a_weight_byte(folder)
    changed = provenance.content_sha256(folder)
    assert changed not in (first, provenance.content_sha256(TINY / "dflash"))


# --- one provenance per measurement --------------------------------------------------------------------------------

def test_describe_is_saved_per_unit_and_its_settings_head_the_report(tmp_path, prompts):
    run_dir, _ = run_matrix(make_matrix(TINY / "target", TINY / "dflash", prompts), tmp_path / "run",
                                   progress=False)
    store = RunStore(run_dir)
    records = store.record_objects()
    assert all(r.get("provenance_id") for r in records)
    provs = store.provenances()
    for r in records:
        p = provs[r["provenance_id"]]
        assert p["cell_id"] == r["cell_id"] and p["describe"]["engine"] == "scripted"
        assert p["environment"]["git_sha"] == provenance.git_sha() and p["models"]["target"]["content_sha256"]
    write_reports(run_dir)
    report = (run_dir / "report.md").read_text()
    header = report.split("## Provenance")[0]
    assert "| vllm | dflash-k3 | float32 | 4 | True |" in header
    assert "| vllm | baseline | float32 | – | True |" in header
    assert "All 3 units were measured in one environment" in report and "MIXED" not in report  # with the recheck


def test_a_run_resumed_in_another_environment_says_which_units_came_from_where(tmp_path, prompts, monkeypatch):
    m = make_matrix(TINY / "target", TINY / "dflash", prompts)
    run_dir, _ = run_matrix(m, tmp_path / "run", progress=False)
    store = RunStore(run_dir)
    dflash_unit = next(p for p in store.units_dir.glob("*.jsonl") if "dflash" in p.read_text())
    dflash_unit.unlink()  # as if the run had been interrupted before the dflash cell
    monkeypatch.setattr(provenance, "git_sha", lambda: "feedface")
    run_matrix(m, tmp_path / "run", progress=False)
    write_reports(run_dir)
    report = (run_dir / "report.md").read_text()
    assert "MIXED PROVENANCE" in report and "differ in git_sha" in report
    lines = report.splitlines()
    # dflash measured again, and the baseline's recheck after it; the baseline itself is from the first run
    assert any("git_sha feedface" in line and "dflash-k3 on local" in line and "baseline recheck on local" in line
               and "baseline on local" not in line for line in lines)
    assert any("baseline on local" in line and "feedface" not in line for line in lines if line.startswith("- git"))
    assert "the latest invocation's; the units differ" in lines[1]


def test_code_sha256_follows_the_harness_sources_and_nothing_else(tmp_path):
    for name in ("benchmarks/a.py", "benchmarks/sub/b.py", "verification/c.py", "docs/d.py", "benchmarks/e.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"# {name}\n")
    first = provenance.code_sha256(tmp_path)
    (tmp_path / "docs/d.py").write_text("changed")
    (tmp_path / "benchmarks/e.txt").write_text("changed")
    assert provenance.code_sha256(tmp_path) == first  # neither is the harness's Python code
    (tmp_path / "benchmarks/sub/b.py").write_text("# changed\n")
    assert provenance.code_sha256(tmp_path) != first
    (tmp_path / "benchmarks/sub/b.py").rename(tmp_path / "benchmarks/b.py")
    (tmp_path / "benchmarks/b.py").write_text("# benchmarks/sub/b.py\n")
    assert provenance.code_sha256(tmp_path) != first  # a file moved is other code


def test_a_run_resumed_on_other_code_under_the_same_git_sha_says_so(tmp_path, prompts, monkeypatch):
    """A working tree copied without its git metadata, or with an older commit's, records the same git sha for
    other code: the code's own hash tells the units apart."""
    monkeypatch.setattr(provenance, "git_sha", lambda: "abc-dirty")
    m = make_matrix(TINY / "target", TINY / "dflash", prompts)
    run_dir, _ = run_matrix(m, tmp_path / "run", progress=False)
    write_reports(run_dir)
    one = [line for line in (run_dir / "report.md").read_text().splitlines() if "one environment" in line]
    assert one == [f"All 3 units were measured in one environment: git abc-dirty (code {provenance.code_sha256()}), "
                   f"{provenance.detect_platform()} · {provenance.describe_hardware()['device']}."]
    next(p for p in RunStore(run_dir).units_dir.glob("*.jsonl") if "dflash" in p.read_text()).unlink()
    monkeypatch.setattr(provenance, "code_sha256", lambda: "0123456789ab")
    run_matrix(m, tmp_path / "run", progress=False)
    write_reports(run_dir)
    report = (run_dir / "report.md").read_text()
    assert "MIXED PROVENANCE" in report and "differ in code_sha256" in report and "differ in git_sha" not in report


def test_units_of_a_resumed_run_are_named_with_their_batch_size(tmp_path, prompts, monkeypatch):
    m = make_matrix(TINY / "target", TINY / "dflash", prompts, batch_size=[1, 2])
    run_dir, _ = run_matrix(m, tmp_path / "run", progress=False)
    cells = RunStore(run_dir).run_manifest().cells
    batched = {cid for cid, c in cells.items() if c.batch_size == 2 and c.method == "dflash"}
    for unit in RunStore(run_dir).units_dir.glob("*.jsonl"):
        if unit.name.split("__")[0] in batched:
            unit.unlink()  # as if the run had stopped before the B = 2 DFlash cell
    monkeypatch.setattr(provenance, "git_sha", lambda: "feedface")
    run_matrix(m, tmp_path / "run", progress=False)
    write_reports(run_dir)
    listed = [line for line in (run_dir / "report.md").read_text().splitlines() if line.startswith("- git")]
    new = next(line for line in listed if "feedface" in line)
    assert "dflash-k3 @B=2 on local" in new and "dflash-k3 on local" not in new
    assert any("dflash-k3 on local" in line for line in listed if "feedface" not in line)


# --- caveats -------------------------------------------------------------------------------------------------------

def tpu_provenance(tpu_inference="0.32.0", transformers="5.19.0", draft_config=None, platform="tpu",
                   method="dflash"):
    cfg = draft_config if draft_config is not None else json.loads((TINY / "dflash" / "config.json").read_text())
    return {"p": {"engine": "vllm", "method": method, "cell_id": "c",
                  "environment": {"platform": platform,
                                  "packages": {"tpu-inference": tpu_inference, "transformers": transformers}},
                  "models": {"target": {}, **({"draft": {"config": cfg}} if method == "dflash" else {})}}}


def rope(lines):
    return [line for line in lines if "rope_theta" in line]


def test_rope_caveat_only_for_affected_tpu_inference_and_draft_config():
    assert rope(caveat_lines([], typed_manifest({}), tpu_provenance()))
    assert rope(caveat_lines([], typed_manifest({}), tpu_provenance(tpu_inference="0.27.0")))
    assert not rope(caveat_lines([], typed_manifest({}), tpu_provenance(tpu_inference="0.26.0")))
    assert not rope(caveat_lines([], typed_manifest({}), tpu_provenance(tpu_inference="0.33.0")))
    assert not rope(caveat_lines([], typed_manifest({}), tpu_provenance(platform="cpu")))
    assert not rope(caveat_lines([], typed_manifest({}), tpu_provenance(method="baseline")))
    theta_only = {"rope_theta": 10000.0}
    assert not rope(caveat_lines([], typed_manifest({}), tpu_provenance(transformers="4.57.1",
                                                                        draft_config=theta_only)))
    assert rope(caveat_lines([], typed_manifest({}), tpu_provenance(transformers="5.0.0", draft_config=theta_only)))
    assert "instead of the checkpoint's 10000" in rope(caveat_lines([], typed_manifest({}), tpu_provenance(
        draft_config=theta_only)))[0]
    params_only = {"rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}}
    assert rope(caveat_lines([], typed_manifest({}), tpu_provenance(transformers="4.57.1", draft_config=params_only)))
    assert not rope(caveat_lines([], typed_manifest({}), tpu_provenance(draft_config={})))


def test_rope_caveat_from_the_manifest_of_a_run_without_provenance_records():
    rows = [summary_row(engine="vllm", method="dflash", draft="d", temperature=0.0)]
    manifest = {"platform": "tpu", "packages": {"tpu-inference": "0.32.0", "transformers": "5.19.0"},
                "models": {"d": {"config": {"rope_theta": 1e6}}}}
    assert rope(caveat_lines(rows, typed_manifest(manifest)))
    assert not rope(caveat_lines(rows, typed_manifest(
        manifest | {"packages": {"tpu-inference": "0.33.0", "transformers": "5.19.0"}})))


def test_rope_caveat_reaches_report_md_of_a_tpu_run(tmp_path, prompts):
    m = make_matrix(TINY / "target", TINY / "dflash", prompts)
    run_dir, _ = run_matrix(m, tmp_path / "run", progress=False)
    write_reports(run_dir)
    assert not rope((run_dir / "report.md").read_text().splitlines())  # a CPU run
    for path in (run_dir / "provenance").glob("*.json"):  # the same units, as measured on an affected TPU set-up
        p = json.loads(path.read_text())
        p["environment"]["platform"] = "tpu"
        p["environment"]["packages"] |= {"tpu-inference": "0.32.0", "transformers": "5.19.0"}
        p["engine"] = "vllm"
        path.write_text(json.dumps(p))
    write_reports(run_dir)
    assert rope((run_dir / "report.md").read_text().splitlines())


def test_jax_timing_errors_reach_the_report(tmp_path):
    store = RunStore(tmp_path)
    cell = {"engine": "jax", "target": "t", "method": "baseline", "draft": None, "k": 0, "temperature": 0.0,
            "max_new_tokens": 4, "seed": 0, "engine_options": {}}
    store.write_manifest({"run_id": "r", "config": {"target": "t", "max_new_tokens": 4, "num_prompts": 2,
                                                    "warmup_prompts": 0}, "cells": {"c": cell}, "platform": "tpu",
                          "hardware": {"device": "TPU v5", "bandwidth_gbps": None}, "models": {}})
    recs = []
    for i, step_s in enumerate((1.31e-3, 3.1e-3)):
        error = detect.timing_error(step_s, 2.9e-3)
        recs.append({"kind": "request", "cell_id": "c", "label": "baseline", "engine": "jax", "method": "baseline",
                     "k": 0, "dataset": "math500", "prompt_index": i, "prompt_sha256": f"s{i}", "n_prompt_tokens": 3,
                     "n_out": 4, "ttft_ms": 1.0, "tpot_ms": step_s * 1e3, "decode_s": 3 * step_s,
                     "output_ids": [1, 2, 3, 4], "accept_lengths": None,
                     "extra": {"step_s": step_s, "step_floor_s": 2.9e-3, **({"timing_error": error} if error else {})}})
    store.write_unit_json("c", "math500", recs)
    write_reports(tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "jax baseline on math500: 1 of 2 requests step faster than the per-step floor (1.310 ms < 2.900 ms)" \
        in report and "TIMING ERROR" in report


def test_a_tpu_the_host_cannot_name_takes_the_device_kind_the_engine_saw(monkeypatch):
    monkeypatch.delenv(detect.ENV_BANDWIDTH)
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
    manifest = typed_manifest({"platform": "tpu", "config": {"target": "t"}, "models": {"t": {"weight_bytes": 8.0e9}},
                               "hardware": {"device": "TPU unknown type", "bandwidth_gbps": None}})
    assert "not computed" in floor_lines([], manifest)[0]
    seen = {"p": {"describe": {"engine": "jax", "device": "TPU v5 lite"}}}
    line = floor_lines([], manifest, seen)[0]
    assert f"{detect.TPU_GBS['v5e']:.0f} GB/s" in line and "v5e" in line


def test_tau_past_the_limit_is_said_only_where_vllm_lacked_per_request_metrics():
    def past(missing, method="dflash"):
        p = tpu_provenance(tpu_inference="0.26.0", method=method)
        p["p"]["describe"] = {"missing": {name: "lost" for name in missing}}
        return [line for line in caveat_lines([], typed_manifest({}), p) if "past max_new_tokens" in line]

    assert past(["per_request_spec_decode_metrics"])
    assert not past([]) and not past(["frontend_ttft"])
    assert not past(["per_request_spec_decode_metrics"], method="baseline")


def test_a_vllm_run_without_the_preloads_of_vllms_cpu_docs_says_so():
    def said(preload, engine="vllm"):
        p = tpu_provenance(platform="cpu", tpu_inference="0.26.0")
        p["p"]["engine"] = engine
        p["p"]["describe"] = {"preload": preload}
        return [line for line in caveat_lines([], typed_manifest({}), p) if "LD_PRELOAD" in line]

    full = {"enabled": True, "libraries": {"tcmalloc": {}, "iomp": {}}, "missing": {}}
    lacking = {**full, "missing": {"tcmalloc": "lib/preload/libtcmalloc_minimal.so.4 does not exist"}}
    assert not said(full) and not said(None)  # a run that recorded nothing (before the preloads) is not judged
    [line] = said(lacking)
    assert "without tcmalloc" in line and "does not exist" in line
    assert said({"enabled": False, "missing": {"iomp": "turned off", "tcmalloc": "turned off"}}, engine="vllm-serve")
    assert not said(lacking, engine="jax")


def test_a_tpu_name_says_how_many_chips_this_process_sees(tmp_path, monkeypatch):
    """A sandbox of a v5litepod-4 host that shows one chip is named so, not as four chips."""
    assert detect.visible_tpu_chips(tmp_path) is None
    (tmp_path / "vfio").mkdir()
    for name in ("0", "vfio"):
        (tmp_path / "vfio" / name).touch()
    assert detect.visible_tpu_chips(tmp_path) == 1
    for n in range(4):
        (tmp_path / f"accel{n}").touch()
    assert detect.visible_tpu_chips(tmp_path) == 4
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    monkeypatch.setattr(detect, "visible_tpu_chips", lambda: 1)
    assert detect.device_name_without_jax("tpu") == "TPU v5litepod-4, 1 chip visible"
    assert detect.tpu_generation(detect.device_name_without_jax("tpu"), None) == "v5e"
