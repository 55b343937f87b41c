"""The "Serving under load" section of report.md: per-level tables, crossover concurrency, token identity.

Pure: summary rows in, markdown out (rows of engines that serve carry a `concurrency`).
"""
from __future__ import annotations

from benchmarks.analysis.crossovers import SeriesCrossover
from benchmarks.core.markdown import fmt
from benchmarks.records.summary_row import SummaryRow
from benchmarks.report.batch_report import crossover_lines
from benchmarks.report.shown import DATASET, Shown, method_only, render, row_speedup, value, with_interval

EXPLAIN = """\
Each level sends the measured prompts to one server with at most C requests in flight (vLLM's `bench serve`, warm-up
excluded). Latencies are per request (TTFT from sending, TPOT after the first token, ITL between streamed chunks; a
speculative step streams several tokens in one chunk, so its ITL is per step, not per token). Requests in flight
together share the server's steps, so at C > 1 the unit of independence is the **wave**: C consecutive requests of
the send order. **thr. speedup** = aggregate output tok/s of the method / the AR baseline's at the same C, its 95 %
CI's width from the waves paired with AR's (jackknife); **TPOT speedup** = paired per-request TPOT_AR / TPOT_M
(geometric mean, Student-t 95 % CI over the waves), client-side; **server TPOT** = the mean of the server's own
per-request TPOT (engine clock, from its `/metrics` histogram: immune to the client's and the server frontend's
scheduling delays), and **server TPOT speedup** its ratio of means against AR at the same C. The **crossover** is
the smallest C whose throughput speedup is shown below 1 (one-sided at 2.5 %, Holm over the levels; a level without
an interval is inconclusive), the batch axis's rule. **identical**: at C = 1 the lossless check against AR at C = 1;
at C > 1 the measured fraction of prompts whose greedy tokens equal AR's at the same C. Batched kernels are not
batch-invariant (a request's logits depend on what shares its batch), so a fraction below 1 at C > 1 is a
measurement of that, not a lossless violation."""



def _percentiles(stem: str, digits: int = 2) -> Shown:
    names = tuple(f"{stem}_p{q}" for q in (50, 90, 99))
    return Shown(f"{stem.split('_')[0].upper()} p50/p90/p99 ms", names,
                 lambda r: "/".join(fmt(getattr(r, n), digits) for n in names))


def _throughput(r: SummaryRow) -> str:
    return with_interval(r.throughput_speedup, r.throughput_speedup_ci_low,
                         r.throughput_speedup_ci_high, r.throughput_ci_note)


SERVE_TABLE: tuple[Shown, ...] = (
    DATASET, value("method", "label"), value("C", "concurrency"), value("n", "n_prompts"),
    value("τ", "tau"), value("α", "acceptance_rate", 3), _percentiles("tpot_ms"), _percentiles("ttft_ms", 1),
    _percentiles("itl_ms"), value("server TPOT ms", "server_tpot_ms_mean"),
    value("out tok/s", "agg_output_tok_per_s", 1), value("req/s", "requests_per_s"),
    method_only(Shown("TPOT speedup [95% CI]", ("speedup", "speedup_ci_low", "speedup_ci_high", "speedup_ci_note"),
                      row_speedup)),
    method_only(value("server TPOT speedup", "server_tpot_speedup")),
    method_only(Shown("thr. speedup [95% CI]", ("throughput_speedup", "throughput_speedup_ci_low",
                                                "throughput_speedup_ci_high", "throughput_ci_note"), _throughput)),
    Shown("identical", ("identical_frac", "identical_frac_batched"), lambda r: fmt(
        r.identical_frac if r.concurrency == 1 else r.identical_frac_batched, 3)),
)
# Registered serving columns the section states in its lines rather than its table.
SERVE_LINES = ("request_rate", "n_burst")


def serve_rows(rows: list[SummaryRow]) -> list[SummaryRow]:
    return [r for r in rows if r.concurrency is not None]


def serve_markdown(rows: list[SummaryRow], found: list[SeriesCrossover]) -> str | None:
    """The section's body; None when the run has no serving rows."""
    served = serve_rows(rows)
    if not served:
        return None
    lines = render(SERVE_TABLE, sorted(served, key=lambda r: (r.dataset, r.method != "baseline", r.label,
                                                                r.concurrency))).split("\n")
    bursts = [f"{r.label} on {r.dataset} at C = {r.concurrency}: {r.n_burst} of {r.n_prompts}"
              for r in served if r.n_burst]
    if bursts:
        lines += ["", "**Requests without decode timing** (their stream reached the client in one burst, so TPOT, "
                      "ITL and the TPOT speedup leave them out; throughput keeps them): " + "; ".join(bursts) + "."]
    rate = {r.request_rate for r in served if r.request_rate is not None}
    arrivals = (f"Poisson arrivals at {', '.join(f'{x:g}' for x in sorted(rate))} requests/s under the cap"
                if rate else "every request sent at once, at most C in flight")
    return "\n".join([EXPLAIN, "", f"Load: {arrivals}.", "", *lines, "",
                      "Crossover concurrency (the smallest C whose throughput speedup is shown below 1):",
                      *crossover_lines(found)])
