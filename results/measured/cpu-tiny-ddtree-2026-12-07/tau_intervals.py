"""τ with its 95 % interval over prompts for a run's dflash and ddtree cells, per dataset, and the paired ratio of
the tree's τ to the chain's. Greedy and lossless, both cells commit the same tokens on a prompt, so the ratio of their
τ is the ratio of their verify steps, paired over prompts.

    python results/measured/cpu-tiny-ddtree-2026-12-07/tau_intervals.py RUN_DIR
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.analysis.k_schedule_compute import tau_curve
from benchmarks.analysis.tree_curve import tree_curve
from benchmarks.core import metrics
from benchmarks.records.records import RequestLine, parse_lines


def main(run: Path) -> None:
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if line.strip()]
    lines = [x for x in parse_lines(records, str(run)) if type(x) is RequestLine]
    print("| dataset | dflash K | τ [95 % CI] | ddtree budget | τ [95 % CI] | τ(tree) / τ(chain) [95 % CI] | "
          "the tree at 16 / 32 (one-run estimate) |")
    print("|---|---|---|---|---|---|---|")
    for dataset in sorted({x.workload for x in lines}):
        chain = {x.prompt_sha256: x for x in lines if x.workload == dataset and x.method == "dflash"}
        tree = {x.prompt_sha256: x for x in lines if x.workload == dataset and x.method == "ddtree"}
        k, budget = max(x.k for x in chain.values()), 64
        paired = sorted(set(chain) & set(tree))
        assert all(chain[p].output_ids == tree[p].output_ids for p in paired), "greedy outputs differ"
        c, t = tau_curve(list(chain.values()), k).at(k), tree_curve(list(tree.values()), budget)
        ratio = metrics.ratio_bootstrap_t([float(len(chain[p].accept_lengths or [])) for p in paired],
                                          [float(len(tree[p].accept_lengths or [])) for p in paired])
        smaller = " / ".join(f"{t.at(b).value:.2f}" for b in (16, 32))
        print(f"| {dataset} | {k} | {c.value:.2f} [{c.low:.2f}, {c.high:.2f}] | {budget} | {t.at(budget).value:.2f} "
              f"[{t.at(budget).low:.2f}, {t.at(budget).high:.2f}] | {ratio.value:.3f} [{ratio.low:.3f}, "
              f"{ratio.high:.3f}] ({len(paired)} prompts) | {smaller} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
