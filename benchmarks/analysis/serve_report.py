"""The "Serving under load" section of report.md: per-level tables, crossover concurrency, token identity.

Pure: summary rows in, markdown out (rows of engines that serve carry a `concurrency`).
"""
from __future__ import annotations

import math
from typing import Any

from benchmarks.analysis.shown import DATASET, Shown, method_only, render, value
from benchmarks.core import metrics
from benchmarks.core.markdown import fmt

EXPLAIN = """\
Each level sends the measured prompts to one server with at most C requests in flight (vLLM's `bench serve`,
warm-up excluded). Latencies are per request (TTFT from sending, TPOT after the first token, ITL between streamed
chunks; a speculative step streams several tokens in one chunk, so its ITL is per step, not per token).
**thr. speedup** = aggregate output tok/s of the method / the AR baseline's at the same C; **TPOT speedup** = paired
per-request TPOT_AR / TPOT_M (geometric mean, Student-t 95 % CI), client-side; **server TPOT** = the mean of the
server's own per-request TPOT (engine clock, from its `/metrics` histogram: immune to the client's and the server
frontend's scheduling delays), and **server TPOT speedup** its ratio of means against AR at the same C. The
**crossover** is the smallest measured C whose throughput speedup falls below 1.0. **identical**: at C = 1 the
lossless check against AR at C = 1; at C > 1 the measured fraction of prompts whose greedy tokens equal AR's at the
same C. Batched kernels are not batch-invariant (a request's logits depend on what shares its batch), so a fraction
below 1 at C > 1 is a measurement of that, not a lossless violation."""



def _percentiles(stem: str, digits: int = 2) -> Shown:
    names = tuple(f"{stem}_p{q}" for q in (50, 90, 99))
    return Shown(f"{stem.split('_')[0].upper()} p50/p90/p99 ms", names,
                 lambda r: "/".join(fmt(r[n], digits) for n in names))


def _tpot_speedup(r: dict[str, Any]) -> str:
    ci = (f" [{fmt(r['speedup_ci_low'])}, {fmt(r['speedup_ci_high'])}]"
          if r.get("speedup_ci_low") is not None else "")
    return fmt(r["speedup"]) + ci


SERVE_TABLE: tuple[Shown, ...] = (
    DATASET, value("method", "label"), value("C", "concurrency"), value("n", "n_prompts"),
    value("τ", "tau"), value("α", "acceptance_rate", 3), _percentiles("tpot_ms"), _percentiles("ttft_ms", 1),
    _percentiles("itl_ms"), value("server TPOT ms", "server_tpot_ms_mean"),
    value("out tok/s", "agg_output_tok_per_s", 1), value("req/s", "requests_per_s"),
    method_only(Shown("TPOT speedup [95% CI]", ("speedup", "speedup_ci_low", "speedup_ci_high"), _tpot_speedup)),
    method_only(value("server TPOT speedup", "server_tpot_speedup")),
    method_only(value("thr. speedup", "throughput_speedup")),
    Shown("identical", ("identical_frac", "identical_frac_batched"), lambda r: fmt(
        r["identical_frac"] if int(r["concurrency"]) == 1 else r.get("identical_frac_batched"), 3)),
)
# Registered serving columns the section states in its lines rather than its table.
SERVE_LINES = ("request_rate", "n_burst")


def serve_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("concurrency") is not None]


def crossovers(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, int | None, int, int]]:
    """(engine, dataset, method label, crossover concurrency or None, lowest and highest level measured) per
    speculative series of serving rows."""
    series: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for r in serve_rows(rows):
        if r["method"] != "baseline":
            s = r.get("throughput_speedup")
            series.setdefault((r["engine"], r["dataset"], r["label"]), []).append(
                (int(r["concurrency"]), math.nan if s is None else float(s)))
    return [(e, d, label, metrics.crossover(levels), min(c for c, _ in levels), max(c for c, _ in levels))
            for (e, d, label), levels in sorted(series.items())]


def serve_markdown(rows: list[dict[str, Any]]) -> str | None:
    """The section's body; None when the run has no serving rows."""
    served = serve_rows(rows)
    if not served:
        return None
    lines = render(SERVE_TABLE, sorted(served, key=lambda r: (r["dataset"], r["method"] != "baseline", r["label"],
                                                                r["concurrency"]))).split("\n")
    bursts = [f"{r['label']} on {r['dataset']} at C = {r['concurrency']}: {r['n_burst']} of {r['n_prompts']}"
              for r in served if r.get("n_burst")]
    if bursts:
        lines += ["", "**Requests without decode timing** (their stream reached the client in one burst, so TPOT, "
                      "ITL and the TPOT speedup leave them out; throughput keeps them): " + "; ".join(bursts) + "."]
    cross = []
    for engine, dataset, label, c, low, top in crossovers(rows):
        where = f"- {engine} {label} on {dataset}: "
        if c is None:
            cross.append(where + f"crossover not reached (throughput speedup ≥ 1.0 at every level up to concurrency "
                                 f"{top})")
        elif c == low:
            cross.append(where + f"throughput speedup below 1.0 already at concurrency {c}, the lowest level measured "
                                 f"(no gain to lose under load)")
        else:
            cross.append(where + f"throughput speedup falls below 1.0 at concurrency {c}")
    rate = {r["request_rate"] for r in served if r.get("request_rate") is not None}
    arrivals = (f"Poisson arrivals at {', '.join(f'{x:g}' for x in sorted(rate))} requests/s under the cap"
                if rate else "every request sent at once, at most C in flight")
    return "\n".join([EXPLAIN, "", f"Load: {arrivals}.", "", *lines, "", "Crossover concurrency:", *cross])
