"""Request records built by hand for the analysis of speculative steps: accept lengths with what else a step records
(`draft_lengths`, a tree's `tree_paths` and `tree_rows`)."""
from __future__ import annotations

from typing import Any

from benchmarks.records.records import RequestLine


def request(index: int, accepted: list[int], extra: dict[str, Any] | None = None, method: str = "dflash",
            k: int = 4, label: str = "dflash-k4", batch_index: int | None = None) -> RequestLine:
    """Prompt `index`'s record: steps that accepted `accepted`, its output their committed tokens plus the first."""
    n_out = 1 + sum(a + 1 for a in accepted)
    return RequestLine(cell_id="c", label=label, workload="humaneval", engine="jax", method=method, k=k,
                       prompt_index=index, prompt_sha256=f"sha{index}", n_prompt_tokens=8, n_out=n_out,
                       ttft_ms=10.0, tpot_ms=1.0, decode_s=1e-3 * (n_out - 1), output_ids=[1] * n_out,
                       accept_lengths=accepted, extra=extra, batch_index=batch_index)
