"""tpu-inference's own DFlash draft against ours: draft logits and argmax, step by step, on the same inputs.

    python -m benchmarks study tpu-parity [--target DIR --draft DIR] [--dataset humaneval --prompts 8 --new 32]
                                                [--dtype float32|bfloat16] [--rope both|as-loaded|corrected] [--tol T]

Runs in a Python >= 3.12 venv that has tpu-inference (`make parity-tpu-inference`); only the comparison below runs
without it. The driver (benchmarks/studies/tpu_inference_draft.py) decodes each prompt greedily with our JAX engine's target
and draft, and at every step feeds tpu-inference's draft model (built by its own model registry, config and weight
loader) the same context features (target taps), positions and block [anchor, MASK...], then compares the draft
logits of the block's B-1 proposal rows. tpu-inference's attention is a Pallas TPU kernel (ragged paged attention),
which cannot run on CPU: the driver routes it to the kernel module's own pure-JAX reference,
`ref_ragged_paged_attention`, and says so in its output.

With --rope both (the default) two copies of their draft run on the same steps: as tpu-inference builds it, and with
its RoPE settings corrected first; an attribution line says when only the corrected copy matches. Exit status 1 when
the draft as tpu-inference builds it differs beyond --tol or in any argmax.

Finding (tpu-inference 0.27.0, whose three DFlash files are byte-identical in 0.32.0; transformers 5.19.0; the tiny
pair, float32, 8 HumanEval prompts, 32 tokens, 104 steps): as tpu-inference builds it, its draft differs from ours by
up to 9.6e-2 in logits, and 10 of 1,560 proposal rows take another argmax (7 of 104 steps). The cause is RoPE, in
models/jax/dflash.py: DFlashModel copies `rope_theta` and `rope_scaling` from the target's HF config with getattr. Under
transformers 5 (5.14.1, tpu-inference 0.27.0's own pin, and 5.19.0) a Qwen3 config has no `rope_theta` attribute and
its `rope_scaling` is the `rope_parameters` dict {"rope_theta": 1e6, "rope_type": "default"}. θ then falls back to 1e6
(right for Qwen3, by chance), but the non-empty dict reaches `apply_rope`, which applies Llama-3 frequency scaling with
its defaults (factor 8, low 1, high 4, original length 8192) to 37 of the 64 frequency pairs (30 divided by 8, 7
smoothed) of the queries and of the context and block keys. The angle error grows with position (0.16 rad at 180,
0.9 at 1000), and so does the logit error (3.7e-2 at anchor positions 128-255, 9.6e-2 at 256-511). With rope_theta set
and rope_scaling None before the draft is built (`--rope corrected`), it matches ours: max |Δlogit| 1.4e-4, every argmax
equal; that remainder is float32 rounding (it computes the RoPE frequencies in float32, we in float64: 1 ulp, 2.7e-5
rad at position 460). Everything else agrees: config parsing, weight loading (head_dim 128 needs no padding),
embedding and LM head shared from the target, fc/hidden_norm, the paged context cache and the non-causal block. On a
TPU the mismatch lowers acceptance slightly; a checkpoint whose θ is not 1e6 would get a wrong θ as well.
"""
from __future__ import annotations

import argparse
import sys
from importlib.util import find_spec
from pathlib import Path

from verification.draft_parity import attribution, lines, verdict


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--target", type=Path, default=Path("models/tiny/target"))
    ap.add_argument("--draft", type=Path, default=Path("models/tiny/dflash"))
    ap.add_argument("--dataset", default="humaneval", help="a registered dataset with an offline source")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new", type=int, default=32, help="tokens to decode per prompt")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="float32: both drafts in float32 (tpu-inference's bfloat16 parameters upcast, its bfloat16 "
                         "cast of the context feature skipped) to expose implementation differences; bfloat16: "
                         "tpu-inference as its proposer runs it, against our engine in bfloat16")
    ap.add_argument("--rope", choices=("as-loaded", "corrected", "both"), default="both",
                    help="as-loaded: the draft as tpu-inference builds it; corrected: with its rope_theta/rope_scaling "
                         "set from the checkpoint first; both (default): each, on the same steps")
    ap.add_argument("--tol", type=float, default=None,
                    help="max |Δlogit| (default 1e-3 in float32: rounding alone reached 1.4e-4 on the tiny pair; 0.25 "
                         "in bfloat16, where rounding alone reached 0.38 and 2%% argmax flips: read it as figures)")
    ap.add_argument("--quiet", action="store_true", help="no per-step table")


def main(args: argparse.Namespace) -> int:
    for p in (args.target, args.draft):
        if not (p / "config.json").exists():
            print(f"parity-tpu-inference: error: {p} has no config.json; pass --target/--draft checkpoint folders",
                  file=sys.stderr)
            return 2
    if find_spec("tpu_inference") is None or find_spec("vllm") is None:
        print(f"parity-tpu-inference: error: {sys.executable} has no tpu-inference/vllm; run it in the TPU venv "
              "(make parity-tpu-inference TPU_VENV=...)", file=sys.stderr)
        return 2
    from benchmarks.studies import tpu_inference_draft as drive

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
    return 0 if next(iter(verdicts.values())).ok else 1
