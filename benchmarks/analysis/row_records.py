"""One summary row's records (a cell on a dataset workload, at a serving level) and the figures its columns are
computed from, each computed once: the speedup pairing, the lossless and tie verdicts, the baseline drift, the
serving and workload figures, the distribution check. Pure: typed records in, values out."""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from benchmarks.analysis.cost_model_compute import Breakdown, breakdown
from benchmarks.analysis.strongest import Strongest
from benchmarks.core import metrics
from benchmarks.core.cells import Cell, has_batch_one
from benchmarks.core.exit_codes import BadInput
from benchmarks.records.manifest_read import Manifest
from benchmarks.records.records import ByKind, LoadLine, RequestLine, SamplesLine
from verification import distribution, ties

Key = tuple[str, str, "int | None"]  # (cell, workload, concurrency: None for batch-1 records)


def prompts_sha256(reqs: Sequence[RequestLine]) -> str | None:
    """A short hash of the set of prompts some requests were sent: equal for two cells sent the same prompt ids."""
    shas = sorted({r.prompt_sha256 for r in reqs})
    return hashlib.sha256("\n".join(shas).encode()).hexdigest()[:12] if shas else None


def paired(base: Sequence[RequestLine], meth: Sequence[RequestLine]) -> list[tuple[RequestLine, RequestLine]]:
    """Requests paired by the sha256 of the prompt actually sent (identical prompts only); BadInput when a prompt
    appears twice in one side (records of two runs merged: they cannot pair one to one)."""
    for side in (base, meth):
        seen: set[str] = set()
        for r in side:
            if r.prompt_sha256 in seen:
                raise BadInput(f"{r.label} on {r.workload}: prompt {r.prompt_sha256[:12]} appears twice, so "
                               f"its requests cannot pair with the baseline's; remove the unit file copied in from "
                               f"another run")
            seen.add(r.prompt_sha256)
    by_sha = {r.prompt_sha256: r for r in base}
    return [(by_sha[r.prompt_sha256], r) for r in meth if r.prompt_sha256 in by_sha]


def tpot(r: RequestLine) -> float:
    return math.nan if r.tpot_ms is None else r.tpot_ms  # a request without a TPOT leaves the pairing


def paired_tpot_speedup(base: Sequence[RequestLine], meth: Sequence[RequestLine]) -> metrics.Speedup | None:
    """The speedup of `meth` over `base` on the prompts both were sent; None when they share none."""
    pairs = paired(base, meth)
    return metrics.paired_speedup([tpot(b) for b, _ in pairs], [tpot(m) for _, m in pairs]) if pairs else None


def extra(r: RequestLine) -> dict[str, Any]:
    """A request's engine-specific figures (docs/outputs.md), empty where it has none."""
    return r.extra or {}


@dataclass(frozen=True)
class Batch:
    """One static batch of a row (a batch-1 request is a batch of one), or a serving level's wave: its prompts, the
    output tokens of its decode span and that span."""

    prompts: frozenset[str]  # the prompt hashes it decoded
    tokens: int  # output tokens inside the span: every token but those at its very start (the first tokens there)
    span_s: float  # the first token of any request to the last of any, on the batch's clock
    wasted_row_steps: int | None  # the engine's count of steps its rows rode along finished (JAX)

    @property
    def tok_per_s(self) -> float:
        return metrics.output_tok_per_s(self.tokens, self.span_s)


def _batch(group: list[RequestLine], first: list[float]) -> Batch:
    """A group of requests whose first tokens came at `first` (s, on the group's clock)."""
    last = [f + r.decode_s for f, r in zip(first, group)]
    start = min(first)
    tokens = sum(r.n_out for r in group) - sum(f == start for f in first)
    return Batch(frozenset(r.prompt_sha256 for r in group), tokens, max(last) - start,
                 extra(group[0]).get("wasted_row_steps"))


def batches_of(reqs: Sequence[RequestLine]) -> list[Batch]:
    """A row's requests grouped into the static batches they were decoded in (`batch_index`; each request alone
    without one), their times put on the batch's clock (vLLM's `queued_offset_s`)."""
    groups: dict[Any, list[RequestLine]] = {}
    for r in reqs:
        groups.setdefault(r.prompt_sha256 if r.batch_index is None else r.batch_index, []).append(r)
    return [_batch(g, [extra(r).get("queued_offset_s", 0.0) + r.ttft_ms / 1000.0 for r in g]) for g in groups.values()]


def waves_of(reqs: Sequence[RequestLine], concurrency: int) -> list[Batch]:
    """A serving level's requests in waves of `concurrency`, in the order they were sent (prompt order): the requests
    in flight together, on the level's clock (`start_s`)."""
    ordered = sorted(reqs, key=lambda r: r.prompt_index)
    groups = [ordered[i:i + concurrency] for i in range(0, len(ordered), concurrency)]
    return [_batch(g, [(r.start_s or 0.0) + r.ttft_ms / 1000.0 for r in g]) for g in groups]


def unit_name(level: int | None, batch: int | None) -> str:
    """What a row's independent units are: prompts at batch 1 and concurrency 1, batches at B > 1, waves at C > 1."""
    return "waves" if (level or 1) > 1 else "batches" if (batch or 1) > 1 else "prompts"


SINGULAR = {"prompts": "prompt", "batches": "batch", "waves": "wave"}


def no_interval(s: metrics.Speedup | None, units: str) -> str | None:
    """Why a speedup has no interval (None when it has one, or when there is no speedup)."""
    if s is None or s.has_interval or not s.n:
        return None
    if s.units < 2:
        return f"one {SINGULAR[units]}: no interval (it needs two or more {units})"
    return f"no spread between the {s.units} {units}: no interval"


def level_throughput(load: LoadLine | None) -> float:
    return metrics.aggregate_tok_per_s(load.total_output_tokens, load.duration_s) if load else math.nan


def level_server_tpot(load: LoadLine | None) -> float:
    if load is None or load.server_tpot_count is None or load.server_tpot_sum_s is None:
        return math.nan
    return 1000.0 * metrics.histogram_mean(load.server_tpot_sum_s, load.server_tpot_count)


@dataclass
class RowRecords:
    """The records of one summary row, its cell and manifest, and its baseline's records at the same level."""

    key: Key
    lines: ByKind
    cell: Cell
    manifest: Manifest
    base_id: str | None  # the cell itself for a baseline; None when the run has no baseline to compare with
    base: ByKind | None  # the baseline's records of this workload and level; None without a baseline
    samples: dict[tuple[str, str], list[SamplesLine]]  # every cell's distribution samples, by (cell, workload)
    levels: list[int | None]  # the serving levels this cell has on this workload
    adjusted: distribution.Check | None = None  # the check after the run's Holm family (summary.distribution_run)
    strongest: tuple[Strongest, list[RequestLine]] | None = field(default=None)  # the fastest baseline on this
    # workload and temperature among two or more engines, with its requests (analysis/strongest.py); None otherwise

    @property
    def cell_id(self) -> str:
        return self.key[0]

    @property
    def workload(self) -> str:
        return self.key[1]

    @property
    def level(self) -> int | None:
        return self.key[2]

    @property
    def speculative(self) -> bool:
        return self.cell.method != "baseline"

    @property
    def batch(self) -> int | None:
        """The static batch size of a batch engine's row (1 unless its cell batched); None on a serving row."""
        return self.cell.batch_size if self.level is None else None

    @property
    def alone(self) -> bool:
        """Whether each request ran alone: batch size 1 (or concurrency 1 on a serving row)."""
        return (self.level or 1) == 1 and (self.batch or 1) == 1

    @property
    def greedy_verdict(self) -> bool:
        """Greedy identity is a lossless verdict here: a speculative cell at T = 0, at concurrency 1 or batch 1."""
        return self.speculative and self.cell.temperature == 0 and self.alone

    @property
    def base_requests(self) -> list[RequestLine]:
        return self.base.requests if self.base else []

    @property
    def units(self) -> str:
        """What this row's independent units are (`unit_name`)."""
        return unit_name(self.level, self.batch)

    @cached_property
    def unit_of(self) -> dict[str, Any]:
        """Each request's unit of independence, by prompt hash: itself at batch 1 and concurrency 1, its static batch
        at B > 1 (requests of a batch share its steps), its wave at C > 1 (requests in flight together)."""
        if (self.level or 1) > 1:
            ordered = sorted(self.reqs, key=lambda r: r.prompt_index)
            return {r.prompt_sha256: i // (self.level or 1) for i, r in enumerate(ordered)}
        return {r.prompt_sha256: r.prompt_sha256 if r.batch_index is None else r.batch_index for r in self.reqs}

    @cached_property
    def batches(self) -> list[Batch]:
        return batches_of(self.reqs) if self.batch is not None else []

    @cached_property
    def batch_speedup(self) -> metrics.Speedup | None:
        """The wall-clock throughput against the baseline's at the same batch size: output tokens over decode time, in
        total, on the batches of the same prompts (`metrics.ratio_of_sums`, its interval over the batches)."""
        if self.base_id is None or not self.speculative or not self.batches:
            return None
        base = {b.prompts: b for b in batches_of(self.base_requests)}
        pairs = [(base[b.prompts], b) for b in self.batches if b.prompts in base]
        if not pairs:
            return None
        return metrics.ratio_of_sums([m.tokens for _, m in pairs], [m.span_s for _, m in pairs],
                                     [b.tokens for b, _ in pairs], [b.span_s for b, _ in pairs])

    @cached_property
    def level_speedup(self) -> metrics.Speedup | None:
        """A serving level's throughput speedup (its aggregate tok/s against AR's at the same concurrency), with an
        interval whose width comes from its waves paired with AR's (`metrics.ratio_of_sums`)."""
        base_load = self.base_load()
        if self.level is None or not self.speculative or self.load is None or base_load is None:
            return None
        point = metrics.throughput_speedup(level_throughput(base_load), level_throughput(self.load))
        if math.isnan(point):
            return None
        base = {w.prompts: w for w in waves_of(self.base_requests, self.level)}
        pairs = [(base[w.prompts], w) for w in waves_of(self.reqs, self.level) if w.prompts in base]
        return metrics.ratio_of_sums([m.tokens for _, m in pairs], [m.span_s for _, m in pairs],
                                     [b.tokens for b, _ in pairs], [b.span_s for b, _ in pairs], center=point)

    @cached_property
    def user_rates(self) -> tuple[list[float], bool]:
        """Each request's own decode rate (tok/s, `metrics.request_tok_per_s`), and whether they are estimated: a
        request of a static batch that the engine times only as a whole (the JAX engine) ends at the batch's first
        token plus its own steps times the batch's step time."""
        rates, estimated = [], False
        for r in self.reqs:
            e = extra(r)
            if e.get("batch_step_s") and e.get("decode_steps"):
                rates.append(metrics.request_tok_per_s(r.n_out, e["decode_steps"] * e["batch_step_s"]))
                estimated = True
            else:
                rates.append(metrics.request_tok_per_s(r.n_out, r.decode_s))
        return rates, estimated

    @cached_property
    def outliers(self) -> list[tuple[int, float]]:
        """The requests whose TPOT lies far from the row's (`metrics.outliers`): (prompt index, TPOT ms)."""
        return [(self.reqs[i].prompt_index, self.tpots[i]) for i in metrics.outliers(self.tpots)]

    @cached_property
    def tok_per_s_total(self) -> float | None:
        """Output tokens of every batch per second of their decode spans."""
        if not self.batches:
            return None
        return metrics.output_tok_per_s(sum(b.tokens for b in self.batches), sum(b.span_s for b in self.batches))

    @cached_property
    def wasted_row_steps(self) -> int | None:
        counted = [b.wasted_row_steps for b in self.batches if b.wasted_row_steps is not None]
        return sum(counted) if counted else None

    @cached_property
    def reqs(self) -> list[RequestLine]:
        return sorted(self.lines.requests, key=lambda r: r.prompt_index)

    @cached_property
    def tpots(self) -> list[float]:
        return [tpot(r) for r in self.reqs]

    @cached_property
    def acceptance(self) -> metrics.Acceptance | None:
        if not self.lines.specs:
            return None
        return metrics.acceptance(self.lines.specs[0].counters())

    @cached_property
    def pairs(self) -> list[tuple[RequestLine, RequestLine]]:
        """This row's requests paired with its baseline's on the same prompt."""
        if self.base_id is None or not self.reqs:
            return []
        return paired(self.base_requests, self.reqs)

    @cached_property
    def speedup(self) -> metrics.Speedup | None:
        """The paired TPOT speedup, its interval over the row's units of independence (`unit_of`)."""
        if not self.pairs:
            return None
        return metrics.paired_speedup([tpot(b) for b, _ in self.pairs], [tpot(m) for _, m in self.pairs],
                                      [self.unit_of[m.prompt_sha256] for _, m in self.pairs])

    @cached_property
    def headline(self) -> metrics.Speedup | None:
        """The speedup a user feels, the `speedup` of Results and summary.csv: at B > 1 the batches' wall-clock
        throughput against the baseline's (`batch_speedup`: a batch ends with its slowest request), elsewhere the
        paired TPOT speedup."""
        return self.batch_speedup if (self.batch or 1) > 1 and self.batch_speedup is not None else self.speedup

    @cached_property
    def over_strongest(self) -> metrics.Speedup | None:
        """The speedup over the strongest baseline of the run, paired on the prompts it was not chosen on (batch-1
        rows)."""
        if self.strongest is None or not self.reqs:
            return None
        best, reqs = self.strongest
        return paired_tpot_speedup([r for r in reqs if r.prompt_sha256 in best.compared_on],
                                   [r for r in self.reqs if r.prompt_sha256 in best.compared_on])

    @property
    def apart_from_strongest(self) -> bool:
        """Whether this cell ran apart from the strongest baseline: another engine, cells not interleaved (a change of
        the host's speed between them is not seen by the comparison)."""
        return (self.strongest is not None and not self.manifest.config.interleave
                and self.manifest.cells[self.strongest[0].cell_id].engine != self.cell.engine)

    @cached_property
    def lossless(self) -> metrics.Lossless | None:
        """Greedy identity against the baseline (a measurement at C > 1); None where it is not computed."""
        if not self.pairs or not self.speculative or self.cell.temperature != 0:
            return None
        return metrics.lossless([b.output_ids for b, _ in self.pairs], [m.output_ids for _, m in self.pairs])

    @cached_property
    def ties(self) -> dict[str, Any]:
        """The greedy verdict columns: prompts identical, numerical ties at their first divergence, and violations
        (verification/ties.py, from the row's tie-check records), the first violation and why, the widest tie."""
        if self.lossless is None or not self.greedy_verdict:
            return {}
        t = ties.row_ties([(m.prompt_sha256, b.output_ids, m.output_ids) for b, m in self.pairs],
                          self.lines.tie_checks)
        first = min(t.violations, key=lambda v: v[0], default=None)
        return {**t.columns(), "first_violation": first[0] if first else None,
                "violation_reason": first[1].reason if first else None}

    @cached_property
    def drift(self) -> metrics.Drift | None:
        """The baseline's TPOT on the recheck prompts before and after its speculative cells ran (records of kind
        "recheck"); None for a baseline row or without a recheck."""
        if self.base_id is None or not self.speculative or self.base is None:
            return None
        pairs = paired(self.base.requests, self.base.rechecks)
        if not pairs:
            return None
        return metrics.baseline_drift([b.tpot_ms for b, _ in pairs], [a.tpot_ms for _, a in pairs])

    @property
    def load(self) -> LoadLine | None:
        return self.lines.loads[0] if self.lines.loads else None

    @cached_property
    def burst(self) -> list[RequestLine]:
        """Served requests whose stream came in one burst: no decode timing (benchmarks/run/serving.py)."""
        return [r for r in self.reqs if extra(r).get("delivery_burst")]

    @cached_property
    def itls(self) -> list[float]:
        return [x for r in self.reqs if r not in self.burst for x in r.itl_ms or []]

    @cached_property
    def throughput(self) -> float:
        return level_throughput(self.load)

    @cached_property
    def server_tpot(self) -> float:
        return level_server_tpot(self.load)

    def base_load(self) -> LoadLine | None:
        return self.base.loads[0] if self.base and self.base.loads else None

    @cached_property
    def step_ms(self) -> float | None:
        """The mean decode step time, weighted by steps, over the requests that time their steps."""
        timed = [e for e in (extra(r) for r in self.reqs) if e.get("step_s") is not None and e.get("decode_steps")]
        if not timed:
            return None
        return 1000.0 * sum(e["step_s"] * e["decode_steps"] for e in timed) / sum(e["decode_steps"] for e in timed)

    @cached_property
    def breakdown(self) -> Breakdown | None:
        return breakdown(self.reqs)

    @cached_property
    def check(self) -> distribution.Check | None:
        """The distribution check of a speculative cell at T > 0 against its baseline's samples, before the run's
        Holm family; None when it could not run or is not due."""
        if not self.speculative or self.cell.temperature <= 0:
            return None
        base = self.samples.get((self.base_id, self.workload), []) if self.base_id else []
        return distribution.check(base, self.samples.get((self.cell_id, self.workload), []))

    @cached_property
    def dist(self) -> dict[str, Any]:
        """The distribution-check columns of a checked row: the verdict, the Holm-adjusted p-values, the sizes, and
        the power simulated at those sizes and the check's family."""
        res = self.adjusted
        if res is None:
            return {}
        pw = distribution.power(res.n_base, res.n_method, res.family)
        return {"dist_verdict": "pass" if res.passed else "FAIL", "dist_p_min": res.p_min,
                "dist_p_values": json.dumps({k: round(v, 6) for k, v in res.p_values.items()}),
                "dist_n_base": res.n_base, "dist_n_method": res.n_method, "dist_n_tests": res.n_tests,
                "dist_length": res.length, "dist_family": res.family, "dist_power_marginal": pw.marginal,
                "dist_power_sequence": pw.sequence, "dist_shift_detected": pw.shift_detected}

    @cached_property
    def batch_one(self) -> bool:
        """Whether the run has the batch-1 cell of this row's engine, method, K (or tree budget) and temperature,
        whose verdicts (greedy identity, the distribution check) stand for a static batch's row; for a scheduled
        K or budget, its batch-1 cell whatever it runs there."""
        return has_batch_one(self.cell, self.manifest.cells.values())

    def not_checked(self) -> str | None:
        """Why a speculative row's due check could not run (greedy identity at T = 0 at concurrency 1, the
        distribution check at T > 0), or None when it ran or is not due."""
        t = self.cell.temperature
        no_base = (f"the run has no baseline cell on engine {self.cell.engine} at T={t:g} to compare with (add "
                   f"'baseline' to 'methods')")
        if (self.batch or 1) > 1:  # a static batch is measured; the checks' verdicts are its batch-1 cell's
            check = "greedy identity" if t == 0 else "the distribution check"
            return None if self.batch_one else (f"{check} is a verdict at batch size 1 only, and the matrix has no "
                                                f"batch-1 cell of this method at T={t:g}: add 1 to 'batch_size'")
        if t == 0:
            if (self.level or 1) > 1:  # batched identity is a measurement; the verdict is the concurrency-1 level's
                if 1 in self.levels or self.level != min(lv or 0 for lv in self.levels):
                    return None
                return ("greedy identity is a verdict at concurrency 1 only (batching changes the numerics), and "
                        "the matrix has no concurrency-1 level: add 1 to 'concurrency'")
            if self.lossless is not None:
                return None
            if self.base_id is None:
                return no_base
            if not self.base_requests:
                return f"its baseline has no measured requests on {self.workload} (its unit failed or has not run)"
            return "no baseline request was sent the same prompt (prompt hashes differ)"
        if self.check is not None:
            return None
        if self.base_id is None:
            return no_base
        if not self.samples.get((self.cell_id, self.workload)):
            return "the cell drew no distribution samples" + (" (see Failed units)" if self.lines.errors else "")
        if not self.samples.get((self.base_id, self.workload)):
            return f"its baseline drew no distribution samples on {self.workload} (its unit failed or has not run)"
        return "no prompt was sampled by both the cell and its baseline"
