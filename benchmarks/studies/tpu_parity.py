"""tpu-inference's own DFlash draft against ours: draft logits and argmax, step by step, on the same inputs.

    python -m benchmarks study tpu-parity [--target DIR --draft DIR] [--dataset humaneval --prompts 8 --new 32]
                                          [--dtype float32|bfloat16] [--rope both|as-loaded|corrected] [--tol T]

Runs in a Python >= 3.12 venv that has tpu-inference (`make parity-tpu-inference`); the driver is
benchmarks/studies/tpu_inference_draft.py, the verdict verification/draft_parity.py. With --rope both (the default)
their draft runs as tpu-inference builds it and with its RoPE settings corrected, on the same steps; exit status 3
when the draft as tpu-inference builds it differs beyond --tol or in any argmax. The method and what it found
(tpu-inference 0.27.0's draft RoPE): docs/engine-findings.md.
"""
from __future__ import annotations

import argparse
import sys
from importlib.util import find_spec
from pathlib import Path

from benchmarks.core.cells import MAX_SEED
from benchmarks.core.exit_codes import Exit
from benchmarks.core.numbers import Bounded
from verification.draft_parity import attribution, lines, verdict

INPUT_ARGS = ("target", "draft")  # checked to exist before anything loads (benchmarks/cli/__init__.py)


# It prints and writes no file (the declarations of benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--target", type=Path, default=Path("models/tiny/target"))
    ap.add_argument("--draft", type=Path, default=Path("models/tiny/dflash"))
    ap.add_argument("--dataset", default="humaneval", help="a registered dataset with an offline source")
    ap.add_argument("--prompts", type=Bounded(int, 1, 10_000), default=8)
    ap.add_argument("--new", type=Bounded(int, 1, 100_000), default=32, help="tokens to decode per prompt")
    ap.add_argument("--seed", type=Bounded(int, 0, MAX_SEED), default=0)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="float32: both drafts in float32 (tpu-inference's bfloat16 parameters upcast, its bfloat16 "
                         "cast of the context feature skipped) to expose implementation differences; bfloat16: "
                         "tpu-inference as its proposer runs it, against our engine in bfloat16")
    ap.add_argument("--rope", choices=("as-loaded", "corrected", "both"), default="both",
                    help="as-loaded: the draft as tpu-inference builds it; corrected: with its rope_theta/rope_scaling "
                         "set from the checkpoint first; both (default): each, on the same steps")
    ap.add_argument("--tol", type=Bounded(float, 0, 1e6), default=None,
                    help="max |Δlogit| (default 1e-3 in float32: rounding alone reached 1.4e-4 on the tiny pair; 0.25 "
                         "in bfloat16, where rounding alone reached 0.38 and 2%% argmax flips: read it as figures)")
    ap.add_argument("--quiet", action="store_true", help="no per-step table")


def main(args: argparse.Namespace) -> int:
    for p in (args.target, args.draft):
        if not (p / "config.json").exists():
            print(f"parity-tpu-inference: error: {p} has no config.json; pass --target/--draft checkpoint folders",
                  file=sys.stderr)
            return Exit.BAD_INPUT
    if find_spec("tpu_inference") is None or find_spec("vllm") is None:
        print(f"parity-tpu-inference: error: {sys.executable} has no tpu-inference/vllm; run it in the TPU venv "
              "(make parity-tpu-inference TPU_VENV=...)", file=sys.stderr)
        return Exit.BAD_INPUT
    from benchmarks.studies import tpu_inference_draft as drive  # lazy: imports jax, packaging, safetensors, scipy

    tol = args.tol if args.tol is not None else (1e-3 if args.dtype == "float32" else 0.25)
    ropes = ("as-loaded", "corrected") if args.rope == "both" else (args.rope,)
    results = drive.run(args.target, args.draft, args.dataset, args.prompts, args.new, args.seed, args.dtype, ropes,
                        lambda line: print(line, flush=True))
    verdicts = {}
    for rope, diffs in results.items():
        print(f"== tpu-inference's draft, RoPE {rope}, against ours ({args.dtype}) ==")
        for line in lines(diffs, tol, per_step=not args.quiet):
            print(line)
        verdicts[rope] = verdict(diffs, tol)
    note = attribution(verdicts)
    if note:
        print(note)
    # The exit status answers for the draft as tpu-inference builds it (the first variant run).
    return Exit.OK if next(iter(verdicts.values())).ok else Exit.VIOLATION
