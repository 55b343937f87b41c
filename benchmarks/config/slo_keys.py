"""The parser of the capacity search's keys, parsed together: `slo` (one latency target or a list of them) and the
load it searches over (`slo_load`, `slo_range`, `slo_step`), the requests of a probe's round (`slo_requests`) and the
search's mode (`slo_search`). What they mean: docs/serving.md ("Capacity at a latency target")."""
from __future__ import annotations

from typing import Any

from benchmarks.config.matrix_checks import Parsing, as_list, check_distinct, check_int, fail, got
from benchmarks.core.numbers import is_finite
from benchmarks.decide.capacity import AXES, MAX_LOADS, MODES, grid_of, rounds_of
from benchmarks.decide.slo import METRICS, PERCENTILES, THRESHOLD_NAME, Slo, fewest_requests, look_confidence
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


def slo(p: Parsing) -> tuple[list[dict[str, float]] | None, str | None, list[float] | None, float | None,
                             int | None, str | None]:
    """The capacity search, as (slo, slo_load, slo_range, slo_step, slo_requests, slo_search): every value None
    without an SLO (a search key without one is an error), on serving engines only, with rounds of at least one
    prompt each and enough measured prompts at one load to show every threshold met."""
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
    if axis == "concurrency" and requests < high:
        raise fail(source, "slo_requests", f"a round of {requests} requests never holds {high:g} in flight: give at "
                                           f"least {high:g} (several times that, so that a round is more than one "
                                           f"wave), or lower the top of slo_range")
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
