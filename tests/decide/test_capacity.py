"""The capacity search on scripted latencies (no engine, no store): it finds a planted capacity in few probes and
agrees with a sweep of every load; an uncertain load is resolved with more requests, or left as a range; a response
that is not monotone in load is found and reported; a search resumed over its stored probes walks the same path and
measures nothing again; judging a threshold by its order-statistic interval."""
import math

import pytest

from benchmarks.decide.capacity import (
    BISECT,
    SWEEP,
    Capacity,
    Round,
    Space,
    capacity_from,
    grid_of,
    replay,
)
from benchmarks.decide.slo import FAILS, MEETS, UNCERTAIN, RequestLatency, Slo, goodput, judge, look_confidence

SLO = Slo.of({"p90_tpot_ms": 20.0, "p90_ttft_ms": 500.0})


def request(tpot: float, ttft: float = 5.0) -> RequestLatency:
    return RequestLatency(ttft=ttft, tpot=tpot, itl=tpot, e2el=ttft + 10 * tpot, n_out=11)


def spread(center: float, n: int, width: float = 0.05) -> list[float]:
    """n values evenly spread over center × [1 - width, 1 + width]."""
    return [center * (1 - width + 2 * width * i / (n - 1)) for i in range(n)]


def rising(capacity: int, n: int):
    """TPOT that crosses 20 ms between `capacity` and `capacity` + 1: 20 ms × exp((load − capacity − ½) / 10),
    ±2 %."""
    return lambda load, rnd: spread(20.0 * math.exp((load - capacity - 0.5) / 10), n, width=0.02)


def drive(space: Space, tpots, slo: Slo = SLO, stored=None):
    """Run a search to its end, measuring each probe it asks for with the scripted `tpots(load, round)`; the path
    and the probes measured, in order."""
    stored = {} if stored is None else stored
    measured = []
    while (path := replay(space, slo, stored)).pending is not None:
        step = path.pending
        measured.append((step.load, step.round))
        reqs = tuple(request(t) for t in tpots(step.load, step.round))
        stored.setdefault(step.load, []).append(Round(step.load, step.round, reqs, 1.0, 11 * len(reqs)))
    return path, measured


def space(low=1, high=64, requests=40, rounds=1, mode=BISECT) -> Space:
    return Space("concurrency", grid_of(low, high, 1, "concurrency"), requests, rounds, mode)


@pytest.mark.parametrize("planted", [1, 2, 7, 31, 32, 63])
def test_the_search_finds_the_planted_capacity_in_few_probes(planted):
    path, measured = drive(space(), rising(planted, 40))
    assert path.capacity == Capacity(planted, planted, False, ())
    assert path.capacity.exact and path.capacity.text(space()) == str(planted)
    assert len(measured) <= 2 + math.ceil(math.log2(64)) and len(set(measured)) == len(measured)
    assert path.stopped == f"C = {planted} meets and C = {planted + 1} fails"
    assert not path.non_monotone


def test_a_sweep_of_every_load_finds_the_same_capacity():
    search, measured = drive(space(), rising(23, 40))
    sweep, swept = drive(space(mode=SWEEP), rising(23, 40))
    assert search.capacity == sweep.capacity == Capacity(23, 23, False, ())
    assert len(swept) == 64 and len(measured) == 8
    assert sweep.stopped == "every load of the range probed"


def test_capacity_below_or_above_the_range():
    below, measured = drive(space(low=4, high=64), rising(2, 40))
    assert below.capacity.text(space(low=4)) == "< 4 (below the range)" and measured == [(4, 0)]
    assert below.stopped == "the low end (C = 4) fails: the capacity is below the range"
    above, measured = drive(space(high=16), rising(40, 40))
    assert above.capacity.text(space(high=16)) == "≥ 16 (the top of the range)" and above.capacity.open_above
    assert measured == [(1, 0), (16, 0)]


def heavy_tail(load, rnd):
    """36 requests per round: at load 7, 35 near 18 ms and one at 35 ms (2.8 %: its p90 is 18 ms, but the upper
    end of a 36-request interval is the slowest request); elsewhere well clear of 20 ms."""
    if load == 7:
        return spread(18.0, 35) + [35.0]
    return spread(14.0 if load < 7 else 26.0, 36)


def test_an_uncertain_load_is_resolved_with_another_round():
    """Each of a load's 3 looks reads at 1 - 5 %/3 (98.3 %): 36 requests bound no p90 (46 do), so a load that
    meets takes a second round; at load 7 the 72 requests hold two slow ones, the upper end, and a third decides."""
    path, measured = drive(space(high=16, requests=36, rounds=3), heavy_tail)
    assert measured == [(1, 0), (1, 1), (16, 0), (8, 0), (4, 0), (4, 1), (6, 0), (6, 1), (7, 0), (7, 1), (7, 2)]
    assert path.capacity == Capacity(7, 7, False, ())
    [seven] = [p for p in path.probes if p.step.load == 7 and p.step.round == 2]
    assert seven.step.why == "uncertain after 72 requests: 36 more" and seven.reading.verdict == MEETS
    assert len(seven.reading.requests) == 108
    assert look_confidence(3) == pytest.approx(1 - 0.05 / 3) and look_confidence(1) == 0.95


def test_a_load_left_uncertain_is_reported_as_a_range():
    def at_threshold(load, rnd):  # load 7's p90 is 20 ms: no number of requests decides it
        return spread(16.1 if load == 7 else 10.0 if load < 7 else 26.0, 36, width=0.3)

    path, measured = drive(space(high=16, requests=36, rounds=2), at_threshold)
    assert measured.count((7, 0)) == measured.count((7, 1)) == 1 and (7, 2) not in measured  # requests spent
    assert path.capacity == Capacity(6, 7, False, (7,))
    assert path.capacity.text(space()) == "6–7"
    assert path.stopped == "C = 6 meets and C = 8 fails; C = 7 uncertain with every request spent"


def test_a_non_monotone_response_is_detected_and_reported():
    def dip(load, rnd):  # latency rises to a peak at 8, then falls (say the server sheds requests past it)
        return spread(3.5 * load if load <= 8 else 40.0 - 1.0 * load, 40)

    path, measured = drive(space(high=16), dip)
    assert measured[:3] == [(1, 0), (16, 0), (8, 0)]  # both ends, then the middle: 8 is slower than 16
    [note] = path.non_monotone
    assert note.startswith("p90_tpot_ms at C = 16 [") and "ms lies below its value at C = 8 [" in note
    assert path.capacity == Capacity(5, 5, False, ())  # what the bracket shows; the report names the doubt
    sweep, _ = drive(space(high=24, mode=SWEEP), dip)
    assert "C = 21 meets although C = 6 fails" in sweep.non_monotone  # 40 - 21 = 19 ms: a second range meets
    assert sweep.capacity == Capacity(5, 5, False, ())  # every load up to it meets: the range above C = 6 is doubt


def test_a_resumed_search_walks_the_same_path_and_measures_nothing_again():
    whole, measured = drive(space(high=16, requests=36, rounds=3), heavy_tail)
    stored: dict = {}
    first, before = drive(space(high=16, requests=36, rounds=3), heavy_tail, stored=stored)
    assert before == measured  # the same path from nothing
    cut = {load: rounds[:1] for load, rounds in list(stored.items())[:3]}  # "killed" after three loads' first rounds
    resumed, after = drive(space(high=16, requests=36, rounds=3), heavy_tail, stored=cut)
    assert not set(after) & {(load, 0) for load in list(stored)[:3]}  # nothing stored is measured again
    assert [p.step for p in resumed.probes] == [p.step for p in whole.probes] and resumed.capacity == whole.capacity


def test_more_probes_never_move_a_stored_reading():
    """The first rounds that decide a load stand: a round added later for another SLO does not change it."""
    sp = space(high=16, requests=36, rounds=3)
    path, _ = drive(sp, heavy_tail)
    more = {load: list(r.rounds) for load, r in path.readings.items()}
    more[7] = more[7] + [Round(7, 2, tuple(request(40.0) for _ in range(36)), 1.0, 396)]
    assert replay(sp, SLO, more).capacity == path.capacity


def test_capacity_as_a_threshold_moves_reads_every_stored_probe():
    sweep, _ = drive(space(high=16, mode=SWEEP), rising(9, 40))
    stored = {load: list(r.rounds) for load, r in sweep.readings.items()}
    assert capacity_from(space(high=16), SLO, stored) == Capacity(9, 9, False, ())
    looser = capacity_from(space(high=16), SLO.with_limit(0, 25.0), stored)
    assert looser.low == 11  # TPOT at 11 ≈ 23.2 ms × 1.05
    tight = capacity_from(space(high=16), SLO.with_limit(0, 1.0), stored)
    assert tight.text(space()) == "< 1 (below the range)"


def test_a_request_rate_grid_and_its_text():
    sp = Space("request_rate", grid_of(0.5, 4.0, 0.5, "request_rate"), 20, 1)
    assert sp.grid == (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0) and sp.text(2.5) == "2.5 req/s"
    with pytest.raises(ValueError, match="not a whole number of steps"):
        grid_of(1, 10, 4, "concurrency")


def test_a_percentile_is_judged_by_its_order_statistic_interval():
    t = SLO.thresholds[0]
    assert judge(SLO, [request(x) for x in spread(15.0, 40)]).verdict == MEETS
    assert judge(SLO, [request(x) for x in spread(25.0, 40)]).verdict == FAILS
    few = judge(SLO, [request(x) for x in spread(15.0, 35)])  # p90's upper end needs 36 requests
    assert few.verdict == UNCERTAIN and math.isinf(few.judged[0].high) and few.judged[0].threshold == t
    slow_start = [request(10.0, ttft=900.0)] * 40  # TTFT fails, TPOT meets: the SLO fails
    assert judge(SLO, slow_start).verdict == FAILS
    g = goodput(SLO, [request(10.0)] * 3 + [request(30.0)], 2.0)
    assert (g.good, g.requests_per_s, g.tok_per_s) == (3, 1.5, 16.5)
