"""A llama.cpp request's verify steps, read from its own stream: with `timings_per_token` every token event carries
the request's tokens so far (`tokens_predicted`) and its drafted and accepted totals (`timings.draft_n`,
`draft_n_accepted`), which a verify step raises before it emits its tokens. So each step's drafts, accepted drafts
and first token are known, and they are counted within the output as on every engine (metrics.accepted_within,
drafted_within): llama-server drafts for positions past an EOS it cannot foresee, counts an EOS that is a block's
last draft as accepted, and takes the step with one token left without drafting (docs/engine-findings.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from benchmarks.core.engine_io import SpecCounters
from benchmarks.core.metrics import accepted_within, drafted_within

Mark = tuple[int, int, int]  # a token event's (tokens so far, drafted so far, accepted so far)


class Timings(TypedDict, total=False):
    """A /completion event's `timings`, the fields read (the server sends more, all kept in a record's extra)."""

    predicted_ms: float
    predicted_n: int
    predicted_per_token_ms: float
    draft_n: int
    draft_n_accepted: int


class CompletionEvent(TypedDict, total=False):
    """A /completion event (streamed, or the whole reply), the fields read: its tokens and totals; on the last,
    `stop` and why; `error` when the server failed the request."""

    tokens: list[int]
    tokens_predicted: int
    timings: Timings
    stop: bool
    stop_type: str
    error: dict[str, str | int]


@dataclass(frozen=True)
class StreamSteps:
    """A request's verify steps: per step counted within its output (`accepted`, `drafted`), and per step that
    drafted as the server counted it (`reported`, `reported_drafted`: what its /metrics adds up)."""

    accepted: list[int]
    drafted: list[int]
    reported: list[int]
    reported_drafted: list[int]

    def counters(self, k: int) -> SpecCounters:
        """The steps within the output, as counters."""
        return SpecCounters.from_accept_lengths(self.accepted, k, self.drafted)

    def server_counters(self, k: int) -> SpecCounters:
        """The steps as llama-server's /metrics counts them."""
        return SpecCounters.from_accept_lengths(self.reported, k, self.reported_drafted)


def mark(event: CompletionEvent, ids_so_far: int) -> Mark:
    """A token event's mark (its totals; 0 where the server has drafted nothing yet and leaves them out)."""
    timings = event.get("timings") or {}
    return (int(event.get("tokens_predicted", ids_so_far)), int(timings.get("draft_n", 0)),
            int(timings.get("draft_n_accepted", 0)))


def stream_steps(marks: list[Mark], final: CompletionEvent, limit: int) -> StreamSteps:
    """The verify steps of a request from its token events' marks and its final event, `limit` its max_new_tokens.

    A step that drafted starts at the token whose totals first show its drafts. A token no such step committed comes
    from a plain step: the one with a single token left (llama-server drafts nothing there) counts as a verify step
    that drafted and accepted 0, as the engines that draft there count it; another (an n-gram lookup that found
    nothing) is no verify step, as on vLLM. Raises when the steps' totals are not the final event's."""
    timings = final.get("timings") or {}
    n_out = int(timings.get("predicted_n", final.get("tokens_predicted", len(marks))))
    accepted, drafted, verify = [], [], []
    seen, end = (0, 0), 1  # the totals so far; the tokens the steps so far committed (the first from prefill)
    for n, d, a in marks:
        if (d, a) != seen:
            drafted.append(d - seen[0])
            accepted.append(a - seen[1])
            verify.append(True)
            end = n + a - seen[1]
            seen = (d, a)
        elif n > end:
            drafted.append(0)
            accepted.append(0)
            verify.append(n == limit)
            end = n
    if seen != (int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0))):
        raise RuntimeError(f"llama.cpp server: a request's token events add up to {seen[0]} drafted and {seen[1]} "
                           f"accepted, its final timings to {timings.get('draft_n', 0)} and "
                           f"{timings.get('draft_n_accepted', 0)} (are per-token timings on?)")
    within, drafts = accepted_within(accepted, n_out), drafted_within(accepted, drafted, n_out)
    steps = [i for i in range(len(within)) if verify[i]]
    did = [i for i in range(len(accepted)) if drafted[i]]
    return StreamSteps([within[i] for i in steps], [drafts[i] for i in steps], [accepted[i] for i in did],
                       [drafted[i] for i in did])
