"""The parser of the capacity search's keys, parsed together: `slo` (one latency target or a list of them) and the
load it searches over (`slo_load`, `slo_range`, `slo_step`), the requests of a probe's round (`slo_requests`) and the
search's mode (`slo_search`). What they mean: docs/serving.md ("Capacity at a latency target")."""
from __future__ import annotations

from typing import Any

from benchmarks.config.matrix_checks import Parsing, as_list, check_distinct, check_int, fail, got
from benchmarks.core.numbers import is_finite
from benchmarks.decide.capacity import AXES, MAX_LOADS, MODES, grid_of, rounds_of, wave_size
from benchmarks.decide.slo import (
    METRICS,
    MIN_WAVES,
    PERCENTILES,
    THRESHOLD_NAME,
    Slo,
    Threshold,
    fewest_requests,
    look_confidence,
)
from benchmarks.engines import catalog

SEARCH_KEYS = ("slo_load", "slo_range", "slo_step", "slo_requests", "slo_search")
EXAMPLE = "{p99_tpot_ms: 20, p99_ttft_ms: 500}"


def _threshold(source: str, name: Any, limit: Any) -> tuple[str, float]:
    """One threshold of an SLO mapping: a name p<percentile>_<metric>_ms and a limit in ms > 0."""
    m = THRESHOLD_NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None or int(m.group(1)) not in PERCENTILES or m.group(2) not in METRICS:
        raise fail(source, "slo", f"{name!r} is not a threshold; give p<percentile>_<metric>_ms: <milliseconds>, "
                                  f"percentile {', '.join(map(str, PERCENTILES))}, metric {', '.join(METRICS)}; e.g. "
                                  f"{EXAMPLE}")
    if isinstance(limit, bool) or not is_finite(limit) or not limit > 0:
        raise fail(source, "slo", f"{name}: expected a finite number of milliseconds > 0, got {got(limit)}")
    return name, float(limit)


def _slos(source: str, value: Any) -> list[dict[str, float]]:
    """The SLOs as given: a mapping of thresholds, or a non-empty list of them, each met all at once."""
    given = as_list(value)
    if not given or not all(isinstance(m, dict) and m for m in given):
        raise fail(source, "slo", f"expected a mapping of thresholds such as {EXAMPLE}, or a list of them; got "
                                  f"{value!r}")
    slos = [dict(_threshold(source, k, v) for k, v in m.items()) for m in given]
    check_distinct(source, "slo", slos)
    return slos


def _loads(p: Parsing, axis: str) -> tuple[list[float], float]:
    """The searched range [low, high] and its step, each a load of the axis (concurrency: ints >= 1)."""
    source, given, step = p.source, p.get("slo_range"), p.get("slo_step")
    if given is None:
        raise fail(source, "slo_range", f"a capacity search needs the loads it searches: give [low, high] of "
                                        f"{axis}, e.g. [1, 32]")
    if not isinstance(given, list) or len(given) != 2:
        raise fail(source, "slo_range", f"expected [low, high], two loads of {axis}, got {given!r}")
    low: float
    high: float
    if axis == "concurrency":
        low, high = (check_int(source, "slo_range", v, 1) for v in given)
        step = check_int(source, "slo_step", step, 1)
    else:
        for key, v in [("slo_range", x) for x in given] + [("slo_step", step)]:
            if isinstance(v, bool) or not is_finite(v) or not v > 0:
                raise fail(source, key, f"expected a finite number of requests per second > 0, got {got(v)}")
        low, high = (float(v) for v in given)
    if low > high:
        raise fail(source, "slo_range", f"[{low:g}, {high:g}]: the low end is above the high end; give [low, high]")
    count = round((high - low) / step) + 1  # counted before the grid is built: a tiny step would fill the memory
    if count > MAX_LOADS:
        raise fail(source, "slo_step", f"[{low:g}, {high:g}] in steps of {step:g} is {count:g} loads; at most "
                                       f"{MAX_LOADS}: raise the step")
    try:
        grid_of(low, high, step, axis)
    except ValueError as exc:
        raise fail(source, "slo_range", f"{exc}: end the range on the grid of slo_step {step:g}, or change the "
                                        f"step") from None
    return [low, high], step


def _latency_s(slo: Slo, max_new_tokens: int) -> tuple[float, str] | None:
    """The longest a request takes where `slo` is met, as the plan reads it, in seconds and in words: the smallest
    E2E latency limit, or the smallest TTFT limit plus max_new_tokens - 1 steps at the smallest TPOT or ITL limit
    (the request's longest gap bounds its mean one), whichever is less; None where `slo` bounds neither."""
    def least(*metrics: str) -> Threshold | None:
        return min((t for t in slo.thresholds if t.metric in metrics), key=lambda t: t.limit_ms, default=None)
    bounds = []
    e2el, ttft, step = least("e2el"), least("ttft"), least("tpot", "itl")
    if e2el is not None:
        bounds.append((e2el.limit_ms / 1e3, e2el.text()))
    if ttft is not None and step is not None:
        bounds.append(((ttft.limit_ms + (max_new_tokens - 1) * step.limit_ms) / 1e3,
                       f"{ttft.text()} + {max_new_tokens - 1} tokens at {step.text()}"))
    return min(bounds, default=None)


def _check_waves(p: Parsing, slos: list[dict[str, float]], axis: str, grid: tuple[float, ...], requests: int) -> None:
    """Every load of the range gets rounds of at least MIN_WAVES waves (`capacity.wave_size`): with fewer, a round
    cannot tell a slowdown its waves share from its requests' own noise. At a request rate a wave is the rate times
    a request's latency, read at the most the SLO allows (`_latency_s`; the largest over a list of SLOs, whose
    searches share their probes)."""
    source, latency, how = p.source, 0.0, ""
    if axis == "request_rate":
        bounds = []
        for mapping in slos:
            bound = _latency_s(Slo.of(mapping), p.parsed["max_new_tokens"])
            if bound is None:
                raise fail(source, "slo", f"{Slo.of(mapping).text()} bounds no request's whole latency, which sizes "
                                          f"a wave at a request rate (the rate × a request's latency: the requests "
                                          f"in flight at once), so a round cannot be planned to hold {MIN_WAVES} "
                                          f"waves; add a p<percentile>_e2el_ms threshold, or a TTFT and a TPOT (or "
                                          f"ITL) one, or search over concurrency")
            bounds.append(bound)
        latency, how = max(bounds)
    short = [load for load in grid if requests < MIN_WAVES * wave_size(load, axis, latency)]
    if not short:
        return
    def text(load: float) -> str:
        return f"C = {load:g}" if axis == "concurrency" else f"{load:g} req/s"
    top = grid[-1]
    size = wave_size(top, axis, latency)
    need = MIN_WAVES * size
    fits = [load for load in grid if load < short[0]]
    where = text(top) if len(short) == 1 else f"{text(short[0])} to {text(top)}"
    wave = ("the requests in flight at once, as many as the concurrency" if axis == "concurrency" else
            f"the requests in flight at once, the rate × a request's latency (Little's law), planned at the latency "
            f"the SLO allows, {latency:.3g} s ({how}): {size} at {text(top)}")
    prompts = f" and num_prompts ≥ {need}" if need > p.parsed["num_prompts"] else ""
    end = f", or end slo_range at {text(fits[-1])}" if fits else ""
    raise fail(source, "slo_requests", f"{requests} requests a round are fewer than {MIN_WAVES} waves at {where} (a "
                                       f"wave: {wave}; with fewer than {MIN_WAVES} a round cannot tell a slowdown "
                                       f"its waves share from its requests' own noise): give slo_requests ≥ {need} "
                                       f"({MIN_WAVES} × {size}){prompts}{end}")


def slo(p: Parsing) -> tuple[list[dict[str, float]] | None, str | None, list[float] | None, float | None,
                             int | None, str | None]:
    """The capacity search, as (slo, slo_load, slo_range, slo_step, slo_requests, slo_search): every value None
    without an SLO (a search key without one is an error), on serving engines only, with rounds of at least three
    waves at every load (`_check_waves`) and enough measured prompts at one load to show every threshold met."""
    source, value = p.source, p.get("slo")
    if value is None:
        given = [k for k in SEARCH_KEYS if k in p.merged]
        if given:
            raise fail(source, given[0], f"sets a capacity search, which needs 'slo' (the thresholds it meets, "
                                         f"e.g. {EXAMPLE}); give slo or drop {given[0]}")
        return None, None, None, None, None, None
    slos = _slos(source, value)
    batch = [e for e in p.parsed["engine"] if e not in catalog.serving()]
    if batch:
        raise fail(source, "slo", f"engine {', '.join(batch)} runs one prompt at a time; a capacity search drives a "
                                  f"server under load: use engine {' or '.join(catalog.serving())}")
    if 2 in (p.parsed["turns"] or []):
        raise fail(source, "slo", "a capacity search sends first turns; measure turn 2 in a matrix of its own")
    axis = p.get("slo_load")
    if axis not in AXES:
        raise fail(source, "slo_load", f"expected one of {', '.join(AXES)}, got {axis!r}")
    (low, high), step = _loads(p, axis)
    num_prompts = p.parsed["num_prompts"]
    requests = p.get("slo_requests")
    requests = check_int(source, "slo_requests", num_prompts if requests is None else requests, 1)
    if requests > num_prompts:
        raise fail(source, "slo_requests", f"{requests} requests per round, but num_prompts (the measured prompts "
                                           f"the rounds are drawn from) is {num_prompts}: raise num_prompts or lower "
                                           f"slo_requests")
    _check_waves(p, slos, axis, grid_of(low, high, step, axis), requests)
    looks = rounds_of(num_prompts, requests)
    for mapping in slos:
        threshold, need = fewest_requests(Slo.of(mapping), looks)
        if need > num_prompts:
            spent = f" (each of a load's {looks} looks reads at 1 - 5 %/{looks})" if looks > 1 else ""
            level = f"{100 * look_confidence(looks):.3g} %"
            raise fail(source, "slo", f"{threshold.name} can never be shown met: a {level} order-statistic upper "
                                      f"bound{spent} of the {threshold.percentile}th percentile "
                                      f"needs at least {need} requests at one load, and num_prompts (the most one "
                                      f"load gets) is {num_prompts}; raise num_prompts to {need}, or judge a lower "
                                      f"percentile")
    search = p.get("slo_search")
    if search not in MODES:
        raise fail(source, "slo_search", f"expected {' or '.join(MODES)}, got {search!r}")
    return slos, axis, [low, high], step, requests, search
