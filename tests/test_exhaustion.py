"""Saturation and time to exhaustion (console/figures/capacity.py, headroom, slo): the saturation index
and the over-saturation slope test on hand-computed scrapes, the queue's and power's time to
their limits, a service's capacity over its replicas, the budget's time to spent, and the alerts
against the plan's horizons; on every surface."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from console.engines import Extract
from console.figures.capacity import (
    LoadPoint,
    _arrivals,
    gauge_reader,
    last_restart,
    pool_lag,
    queue_full_in,
    saturation,
    service_capacity,
    settled_from,
    time_to,
)
from console.frame import CapacityReport, Headroom

TTFT_BOUNDS = (0.5, 1.0, 2.0, float("inf"))
TPOT_BOUNDS = (0.02, 0.04, 0.08, float("inf"))


def _scrape(t: float, ttft: list[float], tpot: list[float]) -> Extract:
    key = (("engine", "0"),)
    return Extract(
        t=t,
        histograms={"ttft": {key: [*ttft, ttft[-1]]}, "tpot": {key: [*tpot, tpot[-1]]}},
        bounds={"ttft": {key: TTFT_BOUNDS}, "tpot": {key: TPOT_BOUNDS}},
    )


def test_the_saturation_index_is_the_worst_p90_over_its_slo():
    """Over the window 100 requests: TTFT p90 is the 90th observation, at the top of (0.5, 1.0]
    = 1.0 s; TPOT's lies 30 of 40 into (0.04, 0.08] = 0.07 s. Against 0.8 s and 0.05 s: 1.25
    and 1.4, so TPOT is the index. Scrapes before the window do not count."""
    old = _scrape(0.0, [500, 500, 500, 500], [500, 500, 500, 500])
    start = _scrape(40.0, [0, 0, 0, 0], [0, 0, 0, 0])
    end = _scrape(100.0, [50, 90, 100, 100], [10, 60, 100, 100])
    got = saturation([old, start, end], 60.0, [], {"ttft": 0.8, "tpot": 0.05})
    assert got["saturation"] == pytest.approx(1.4) and got["saturation_slo"] == "tpot"
    only = saturation([start, end], 60.0, [], {"ttft": 0.8, "tpot": None})
    assert only["saturation"] == pytest.approx(1.25) and only["saturation_slo"] == "ttft"
    assert saturation([end], 60.0, [], {"ttft": 0.8}) == {}  # one scrape: no window


def test_an_index_read_inside_a_wide_bucket_names_the_bucket():
    """TPOT's p90 interpolated 30 of 40 into (0.04, 0.08] against a 0.05 s SLO: 1.4, but the
    truth may be anywhere from 0.8 to 1.6 of it. The cell marks it '±' (unless '↑' says load
    rises), the detail names the bucket; a p90 in a bucket within 1.5x is not marked."""
    from console.units import saturation_cell, saturation_text

    start = _scrape(40.0, [0, 0, 0, 0], [0, 0, 0, 0])
    end = _scrape(100.0, [50, 90, 100, 100], [10, 60, 100, 100])
    got = saturation([start, end], 60.0, [], {"tpot": 0.05})
    assert got["saturation"] == pytest.approx(1.4)
    assert got["saturation_bucket"] == pytest.approx((0.8, 1.6))
    cap = CapacityReport(**got)
    assert saturation_cell(cap) == "1.40×±"
    assert saturation_text(cap) == "p90 TPOT at 1.40x its SLO (in its bucket, 0.80–1.60x)"
    assert saturation_cell(cap.model_copy(update={"saturating": True})) == "1.40×↑"
    fine = _scrape(100.0, [50, 90, 100, 100], [10, 60, 100, 100])
    key = (("engine", "0"),)
    narrow = (0.02, 0.04, 0.05, float("inf"))  # p90 30 of 40 into (0.04, 0.05]: 1.25x wide
    for scrape in (start, fine):
        scrape.bounds["tpot"] = {key: narrow}
    got = saturation([start, fine], 60.0, [], {"tpot": 0.05})
    assert got["saturation"] == pytest.approx(0.0475 / 0.05)
    assert got["saturation_bucket"] is None
    assert saturation_cell(CapacityReport(**got)) == "0.95×"


def _point(t: float, load: float, ttft_median: float) -> LoadPoint:
    # all ten requests of the stretch in (0, 2 x median]: the median interpolates to its middle
    ttft = ((2 * ttft_median, 10.0), (float("inf"), 10.0))
    return LoadPoint(t, load, 0.03, 10.0, 1000.0, 0.0, None, 10.0, ttft)


def test_a_few_requests_give_a_marked_index_that_raises_nothing():
    """Two scrapes 2 s apart (a check at its default --wait) holding 8 requests: the index is read
    (p90 of 8) and carries its count; the finding and alert want 20 requests, so it stays
    a figure; with 20 it is judged. Under 5 requests: no figure."""
    from console.figures.findings import saturation_kind
    from console.units import saturation_text
    from tests.frames import node_frame

    start = _scrape(100.0, [0, 0, 0, 0], [0, 0, 0, 0])
    few = saturation([start, _scrape(102.0, [0, 0, 0, 8], [0, 0, 0, 8])], 60.0, [], {"tpot": 0.05})
    assert few["saturation_requests"] == 8 and few["saturation"] > 1
    many = saturation(
        [start, _scrape(102.0, [0, 0, 0, 20], [0, 0, 0, 20])], 60.0, [], {"tpot": 0.05}
    )
    assert many["saturation_requests"] == 20
    none = saturation([start, _scrape(102.0, [0, 0, 0, 4], [0, 0, 0, 4])], 60.0, [], {"tpot": 0.05})
    assert "saturation" not in none
    assert none["saturation_note"] == "4 requests finished in the 2 s watched; a p90 needs 5"
    e = node_frame().engines[0]
    for got, judged in ((few, None), (many, "saturated")):
        cap = CapacityReport(**got)
        eng = e.model_copy(update={"capacity": cap, "requests_waiting": 3})
        assert saturation_kind(eng) == judged
    assert saturation_text(CapacityReport(**few)).endswith("its SLO ·8")


def test_the_over_saturation_test_needs_load_and_ttft_both_rising():
    ts = [10.0 * i for i in range(1, 13)]  # two minutes of load points
    both = [_point(t, 10 + t / 10, 0.2 + t / 1000) for t in ts]
    assert saturation([], 60.0, both, {})["saturating"] is True
    flat_ttft = [_point(t, 10 + t / 10, 0.2) for t in ts]
    assert saturation([], 60.0, flat_ttft, {})["saturating"] is False
    flat_load = [_point(t, 12, 0.2 + t / 1000) for t in ts]
    assert saturation([], 60.0, flat_load, {})["saturating"] is False
    assert "saturating" not in saturation([], 60.0, both[:4], {})  # too few points to say


def test_the_queue_and_power_reach_their_limits_at_the_trend():
    """Waiting rises 0.1 a second: at 89 s the trend stands at 8.9, so 20 waiting are 111 s away;
    a flat queue never is. Power rising 2 W a second, at 600 W now: its 700 W limit in 50 s."""
    rising = [Extract(t=float(t), gauges={"requests_waiting": {(): 0.1 * t}}) for t in range(90)]
    assert queue_full_in(rising, 300.0, 20.0) == pytest.approx(111.0)
    flat = [Extract(t=float(t), gauges={"requests_waiting": {(): 3.0}}) for t in range(90)]
    assert queue_full_in(flat, 300.0, 20.0) is None
    assert time_to([(float(t), 500 + 2.0 * t) for t in range(51)], 700.0) is None  # < a minute
    assert time_to([(float(t), 480 + 2.0 * t) for t in range(61)], 700.0) == pytest.approx(50.0)


def test_a_limit_already_reached_is_now_whatever_the_trend():
    """A queue at 37–54 waiting against its limit of 5.85 read None (no clean trend) or 97 s:
    the latest reading was never compared with the limit. Now it is, first."""
    waiting = [37, 52, 41, 54, 39, 50, 44, 53, 40, 54]
    past = [Extract(t=float(t), gauges={"requests_waiting": {(): float(w)}}) for t, w in
            enumerate(waiting * 9)]  # fmt: skip
    assert queue_full_in(past, 300.0, 5.85) == 0.0
    assert time_to([(0.0, 0.2), (1.0, 1.0)], 1.0) == 0.0  # a full pool is full now


def test_arrivals_are_counted_as_what_was_finished_plus_what_is_held():
    """Over each stretch of 10 s at least, requests finished plus running plus waiting rose by
    exactly what arrived: 100 + 10 + 0 → 110 + 12 + 3 is 15 in 10 s. DP ranks add up; a scrape
    under 10 s after the last is passed over; a stretch across a finished count that went down
    (a restart) is left out, and counting goes on from there."""

    def scrape(t: float, done: tuple[float, float], run: float, wait: float) -> Extract:
        ranks = ((("engine", "0"),), (("engine", "1"),))
        return Extract(
            t=t,
            gauges={"requests_running": {ranks[0]: run / 2, ranks[1]: run / 2},
                    "requests_waiting": {ranks[0]: wait, ranks[1]: 0.0}},
            counters={"requests_finished": {r: (d,) for r, d in zip(ranks, done, strict=True)}},
        )  # fmt: skip

    history = [
        scrape(0.0, (60.0, 40.0), 10.0, 0.0),
        scrape(5.0, (62.0, 41.0), 12.0, 1.0),
        scrape(10.0, (66.0, 44.0), 12.0, 3.0),
        scrape(20.0, (3.0, 2.0), 4.0, 0.0),
        scrape(31.0, (12.0, 8.0), 6.0, 0.0),
    ]
    assert _arrivals(history, 0.0, gauge_reader(None)) == [(0.0, 10.0, 15.0), (20.0, 31.0, 17.0)]
    assert _arrivals(history, 5.0, gauge_reader(None)) == [
        (20.0, 31.0, 17.0)
    ]  # from t = 5: 5 → 20 a restart


def test_a_pool_follows_its_arrivals_by_the_time_its_sequences_hold_their_tokens():
    """A request of 10 s holding a 300-token prompt at once and 200 output tokens as they come
    (400 held on average): the pool holds what arrived 10 × (150 + 66.7) / 400 = 5.42 s ago on a
    ramp; all prompt, half the request's time; all output, two thirds."""
    assert pool_lag(10.0, 400.0, 200.0) == pytest.approx(10 * (150 + 200 / 3) / 400)
    assert pool_lag(10.0, 300.0, 0.0) == pytest.approx(5.0)
    assert pool_lag(10.0, 100.0, 200.0) == pytest.approx(10 * 2 / 3)
    assert pool_lag(10.0, 0.0, 0.0) == 0.0


def test_no_trend_is_read_until_a_restarted_engine_has_settled_but_a_full_queue_is_now():
    """A queue rising 0.1 a second is 111 s from 20 waiting. The engine restarts at t = 60 (its
    counts go down): what waited before is gone and what waits after is the refill. With 10
    running and one request finishing a second, a request lives 10 s (Little's law), so the
    readings count from six lives after the restart (t = 120) on; a queue at its limit is "now"
    whatever the restart. An engine first seen as it started is read from six lives on too
    (t = 60, its count of finished requests at six times its running count); one that counts no
    finished requests is read by its TPOT histogram's count."""

    def scrape(t: int, waiting: float, restart_at: int | None = None) -> Extract:
        # (up long before the first scrape: 1,000 requests done; from 0 again after a restart)
        since = t - restart_at if restart_at is not None and t >= restart_at else 1000 + t
        return Extract(
            t=float(t),
            gauges={"requests_waiting": {(): waiting}, "requests_running": {(): 10.0}},
            counters={
                "generation_tokens": {(): (1000.0 * since,)},
                "requests_finished": {(): (1.0 * since,)},
            },
        )

    rising = [scrape(t, 0.1 * t) for t in range(90)]
    assert queue_full_in(rising, 300.0, 20.0) == pytest.approx(111.0)
    assert settled_from(rising) == 0.0
    refilled = [scrape(t, 0.1 * t, restart_at=60) for t in range(90)]
    assert last_restart(refilled) == 60.0
    assert settled_from(refilled) == pytest.approx(120.0)
    assert queue_full_in(refilled, 300.0, 20.0) is None
    later = [scrape(t, 0.1 * t, restart_at=60) for t in range(251)]  # readings from 120 on
    assert queue_full_in(later, 300.0, 60.0) == pytest.approx(350.0)
    young = [scrape(t, 0.1 * t, restart_at=0) for t in range(90)]  # first seen as it started
    assert last_restart(young) is None and settled_from(young) == 60.0  # 60 done: 6 x running
    past = [scrape(t, 30.0 + t % 5, restart_at=60) for t in range(90)]
    assert queue_full_in(past, 300.0, 20.0) == 0.0
    # an engine that counts no finished requests (SGLang, TGI): its TPOT histogram's count says
    for history, settled in ((refilled, 120.0), (young, 60.0)):
        by_tpot = [
            replace(ex, counters={"generation_tokens": ex.counters["generation_tokens"]},
                    histograms={"tpot": {(): [ex.counters["requests_finished"][()][0]]}})
            for ex in history
        ]  # fmt: skip
        assert settled_from(by_tpot) == pytest.approx(settled)


WARM_S = 600  # ten minutes of steady load before the console's first scrape (14 lifetimes)


def _ramp_with_restart(
    restart_at: int, slope: float = 0.002
) -> tuple[list[tuple[int, float | None]], int]:
    """The bench's ramp of arrivals (bench/exhaustion_ramps.py) on the simulator's vLLM, its
    requests 2,000 tokens long on average (a pool that takes minutes to refill), the engine
    restarted at ``restart_at``: the estimate's time to a full pool every 10 s, and the second
    at which the pool was full."""
    from console.engines import extract, profiles
    from console.figures.capacity import CAPACITY_WINDOW_S, estimate
    from console.figures.windowed import EngineHistory
    from console.promtext import parse
    from console.sim.engine import page_for
    from console.sim.traffic import TrafficModel, TrafficSpec

    clock = [1_000_000.0]
    spec = TrafficSpec(itl_base_s=0.018, itl_per_seq_s=0.000005, max_num_seqs=100_000,
                       kv_capacity_tokens=4_000_000, prompt_tokens=300, output_tokens=2000,
                       rate_rps=10.0, seed=7)  # fmt: skip
    model = TrafficModel(spec, clock=lambda: clock[0])
    for _ in range(WARM_S):  # the engine up and steady long before the console looks
        clock[0] += 1.0
        model.advance()
    hist = EngineHistory()  # as the deriver keeps it (the longest window's)
    said = []
    for s in range(3600):
        model.spec.rate_rps = 10.0 * (1 + slope * s)
        clock[0] += 1.0
        if s == restart_at:
            model.restart()
        hist.add(extract(parse(page_for("vllm", model)), profiles()["vllm"], clock[0]))
        if model.kv_used_tokens() >= 0.99 * spec.kv_capacity_tokens:
            return said, s
        if s % 10 == 0:
            got = estimate(hist.points, CAPACITY_WINDOW_S, ttft_limit_s=None, tpot_limit_s=None,
                           kv_capacity_tokens=spec.kv_capacity_tokens)  # fmt: skip
            said.append((s, got.kv_full_in_s))
    raise AssertionError("the pool never filled")


@pytest.mark.slow
def test_an_engine_restarted_mid_ramp_is_read_again_once_its_pool_has_refilled():
    """An engine up and steady for ten minutes, then its arrivals ramping 0.3 % a second; at
    t = 400 it restarts and its pool empties, then refills over minutes (requests live ~43 s,
    their KV grows over their lives) while the ramp fills it 476 s later. Read as a trend, the
    refill said "full in ~2 min" with 9 min left, and the readings across the drop "full in
    884 s" just after it. Now the forecast stands before the restart, none is read until six
    lifetimes after it, it is back before the pool fills, and none after says less than a third
    of the time left while more than a minute is."""
    said, full = _ramp_with_restart(400, 0.003)
    assert 800 < full < 950, full
    assert all(v is not None for s, v in said if 330 <= s < 400), said
    assert all(v is None for s, v in said if 400 <= s < 700), said
    assert any(v is not None for s, v in said if 700 <= s < full - 60), said
    assert all(v is None or v >= (full - s) / 3 for s, v in said if 400 <= s < full - 60), said


def test_an_engine_started_just_before_the_console_is_read_once_its_pool_has_filled():
    """The same engine first seen 10 s after it started, under steady arrivals: its pool fills
    from empty for minutes, a rise that is no trend of the load. Read as one, it said "KV cache
    full in ~7 min" for two minutes at 19-22 % used (the pool settles at 22 %). The finished
    count says how young the engine is: nothing is forecast until it holds six times the
    running count (about 250 s), and nothing after (the load is flat). The engine's history
    keeps where that was, found once, and answers as a walk of all its scrapes would."""
    from console.engines import extract, profiles
    from console.figures.capacity import CAPACITY_WINDOW_S, estimate
    from console.figures.windowed import EngineHistory
    from console.promtext import parse
    from console.sim.engine import page_for
    from console.sim.traffic import TrafficModel, TrafficSpec

    clock = [1_000_000.0]
    spec = TrafficSpec(itl_base_s=0.018, itl_per_seq_s=0.000005, max_num_seqs=100_000,
                       kv_capacity_tokens=4_000_000, prompt_tokens=300, output_tokens=2000,
                       rate_rps=10.0, seed=7)  # fmt: skip
    model = TrafficModel(spec, clock=lambda: clock[0])
    hist = EngineHistory()
    for s in range(900):
        clock[0] += 1.0
        if s < 10:
            model.advance()
            continue
        hist.add(extract(parse(page_for("vllm", model)), profiles()["vllm"], clock[0]))
        got = estimate(hist.points, CAPACITY_WINDOW_S, ttft_limit_s=None, tpot_limit_s=None,
                       kv_capacity_tokens=spec.kv_capacity_tokens)  # fmt: skip
        assert got.kv_full_in_s is None, (s, got.kv_full_in_s, model.kv_used_tokens())
        # the history keeps where it settled (looked for once), the same as a walk of it all
        assert settled_from(hist.points) == settled_from(list(hist.points)), s
        if s == 60:  # still filling: read from when its count will have said it settled
            assert settled_from(hist.points) > clock[0]
    assert 0.15 < model.kv_used_tokens() / spec.kv_capacity_tokens < 0.3
    first = hist.points[0].t  # (still in the history: the settling scrape stays the same)
    assert first + 200 < settled_from(hist.points) < first + 300  # six lives of ~43 s


@pytest.mark.parametrize("seed", [2, 3])
def test_a_steady_pool_at_three_quarters_is_no_trend_in_its_first_minutes(seed):
    """An H100-sized pool (the ramps bench's 400,000 tokens) held at 73 % by steady arrivals,
    up ten minutes before the console looks. Its readings a second apart swing together (a
    sequence holds its blocks for seconds): over the first minute of readings they rose past
    three times their median residual by chance, and said "full in 28 s" (seed 3; 195 s, seed
    2). The rise is also held to three of its standard errors, the readings counted at their
    effective number (lag-1 correlation): nothing is said in the first two minutes."""
    from console.sim.traffic import TrafficSpec

    spec = TrafficSpec(itl_base_s=0.018, itl_per_seq_s=0.000005, max_num_seqs=100_000,
                       kv_capacity_tokens=400_000, prompt_tokens=300, output_tokens=200,
                       rate_rps=130.0, seed=seed)  # fmt: skip
    used = 0.0
    for s, got, _, used in steady_estimates(spec, 120):  # noqa: B007 (the last is read below)
        assert got.kv_full_in_s is None, (s, got.kv_full_in_s)
    assert 0.6 < used < 0.9


def steady_estimates(spec, seconds: int):  # type: ignore[no-untyped-def]
    """(second, the estimate, the readings' trend alone, the KV share used) every 5 s after the
    first minute, of an engine under ``spec``'s steady arrivals, up ten minutes before its first
    scrape, scraped every second for ``seconds``."""
    from console.engines import extract, profiles
    from console.figures.capacity import CAPACITY_WINDOW_S, estimate, kv_full_in
    from console.figures.windowed import EngineHistory
    from console.promtext import parse
    from console.sim.engine import page_for
    from console.sim.traffic import TrafficModel

    clock = [1_000_000.0]
    model = TrafficModel(spec, clock=lambda: clock[0])
    for _ in range(600):
        clock[0] += 1.0
        model.advance()
    hist = EngineHistory()
    for s in range(seconds):
        clock[0] += 1.0
        hist.add(extract(parse(page_for("vllm", model)), profiles()["vllm"], clock[0]))
        if s > 60 and s % 5 == 0:
            got = estimate(hist.points, CAPACITY_WINDOW_S, ttft_limit_s=None, tpot_limit_s=None,
                           kv_capacity_tokens=spec.kv_capacity_tokens)  # fmt: skip
            used = model.kv_used_tokens() / spec.kv_capacity_tokens
            yield s, got, kv_full_in(hist.points, CAPACITY_WINDOW_S), used


def test_a_bending_rise_is_followed_along_its_bend():
    """KV use accelerating, 0.1 + 4e-6·t² over five minutes (0.46 now, rising 0.0024/s): the pool
    is full at t = √(0.9 / 4e-6) = 474.3 s, 174.3 s from now. A line through the window (its mean
    slope 0.0012/s) said about twice that."""
    pts = [(float(t), 0.1 + 4e-6 * t * t) for t in range(301)]
    assert time_to(pts, 1.0) == pytest.approx(math.sqrt(0.9 / 4e-6) - 300, rel=1e-6)


def test_a_wave_or_a_drift_is_no_exhaustion():
    """Load that swells and ebbs (the demo's four-minute wave) rises over most five-minute
    windows, and a drift of 4 points said "full in ~9 min" at 25 %: neither is a forecast."""
    for phase in range(0, 240, 20):
        wave = [
            (float(t), 0.45 + 0.2 * math.sin(2 * math.pi * (t + phase) / 240)) for t in range(301)
        ]
        assert time_to(wave, 1.0) is None, phase
    drift = [(float(t), 0.21 + 0.04 * t / 300) for t in range(301)]
    assert time_to(drift, 1.0) is None
    ramp = [(float(t), 0.1 + 0.3 * t / 300) for t in range(301)]  # rose 0.3: 0.6 more is near
    assert time_to(ramp, 1.0) == pytest.approx(600.0)


@pytest.mark.slow
def test_thirty_minutes_of_the_demo_node_raise_no_exhaustion_and_no_event():
    """The demo node (two engines on a four-minute wave) polled every second for 30 minutes, as
    the console polls it: no time to a full KV pool or a TTFT-breaking queue ever falls within
    the plan's 15-minute horizon, no alert is ever active, and its timeline holds no event."""
    import asyncio

    from console.figures.timeline import lines
    from tests.demo_node import demo_on

    clock = [1_800_000_000.0]
    node, live = demo_on(clock)
    soon: list[tuple[int, str, float]] = []
    alerts: list[tuple[int, str]] = []

    async def soak():
        try:
            for s in range(1800):
                clock[0] += 1.0
                frame = await live.poll()
                for e in frame.engines:
                    cap = e.capacity
                    for eta in (cap.kv_full_in_s, cap.queue_full_in_s) if cap else ():
                        if eta is not None and eta < 900:
                            soon.append((s, e.name, eta))
                alerts.extend((s, a.key) for a in frame.alerts if a.state == "active")
            return frame
        finally:
            await live.aclose()

    try:
        frame = asyncio.run(soak())
    finally:
        node.stop()
    assert soon == [], soon[:5]
    assert alerts == [], alerts[:5]
    assert frame.timeline is not None and frame.timeline.events == [], lines(frame.timeline)


def test_a_service_adds_its_replicas_room_and_the_tightest_names_the_slo():
    a = CapacityReport(
        requests_per_s=5.0,
        low=4.5,
        high=5.5,
        current_per_s=4.0,
        room_per_s=1.0,
        binding="tpot",
        limit="tpot",
        kv_full_in_s=600.0,
        saturation=0.7,
        saturation_slo="tpot",
    )
    b = CapacityReport(
        requests_per_s=6.0,
        low=5.0,
        high=7.0,
        current_per_s=2.0,
        room_per_s=4.0,
        binding="ttft",
        limit="kv",
        kv_full_in_s=300.0,
        saturation=0.9,
        saturation_slo="ttft",
        saturating=True,
    )
    got = service_capacity({"a": a, "b": b}, "least-loaded")
    assert got is not None
    assert (got.requests_per_s, got.low, got.high, got.room_per_s) == (11.0, 9.5, 12.5, 5.0)
    assert got.binding == "tpot" and got.current_per_s == 6.0
    # round-robin (the default): equal shares, so the service breaks with its weakest replica,
    # a, at 2 × 5 = 10 req/s (2 × its range), 4 of room over the 6 running now
    rr = service_capacity({"a": a, "b": b})
    assert rr is not None
    assert (rr.requests_per_s, rr.low, rr.high, rr.room_per_s) == (10.0, 9.0, 11.0, 4.0)
    assert rr.binding == "tpot" and rr.limit == "tpot" and "round-robin" in (rr.note or "")
    assert got.kv_full_in_s == 300.0 and got.saturation == 0.9 and got.saturating is True
    assert service_capacity({"a": a}) is a
    unsure = service_capacity({"a": a, "c": CapacityReport(cant_tell="load never varied")})
    assert unsure is not None and unsure.cant_tell == "c: load never varied"


def test_exhaustion_within_the_planned_horizon_is_an_alert():
    from console.figures.headroom import _exhaustion
    from console.figures.plan import Plan, Service
    from console.frame import Engine

    plan = Plan.model_validate({"alerts": {"exhaustion_horizon_s": 600}})
    svc = Service.model_validate(
        {
            "name": "chat",
            "model": "llama-3.1-8b",
            "weight_bits": 16,
            "device": "0",
            "tokens_per_sequence": 8192,
            "concurrent_sequences": 8,
        }
    )
    raised: list[tuple[str, str, str]] = []

    def cond(key: str, severity: str, subject: str, message: str, rule: str) -> None:
        raised.append((key, severity, message))

    def engine(kv_s: float | None, queue_s: float | None) -> Engine:
        cap = CapacityReport(cant_tell="x", kv_full_in_s=kv_s, queue_full_in_s=queue_s)
        return Engine(name="e", url="u", up=True, capacity=cap)

    kv = Headroom(name="kv", value=4.0, budget=8.0, unit="seqs", state="ok")
    queue = Headroom(name="queue", value=2.0, budget=0.0, unit="waiting", state="warning")
    got = _exhaustion(svc, plan, kv, engine(240.0, None), cond)
    assert got.exhausted_in_s == 240.0
    assert raised == [
        (
            "exhaustion:kv:chat",
            "warning",
            "KV cache full in ~4 min at this rate (planned horizon 10 min): add a replica or "
            "shed load before it fills",
        )
    ]
    raised.clear()
    assert _exhaustion(svc, plan, kv, engine(900.0, None), cond).exhausted_in_s == 900.0
    assert raised == []  # beyond the horizon: shown, not alerted
    assert _exhaustion(svc, plan, queue, engine(None, 30.0), cond).exhausted_in_s == 30.0
    assert raised and raised[0][0] == "exhaustion:queue:chat" and "~30 s" in raised[0][2]


def test_a_whole_budget_lasts_the_period_over_the_longest_ready_burn():
    from console.figures.slo import OutcomeHistory, burn_rates

    hist = OutcomeHistory()
    good = failed = 0.0
    for k in range(3601):  # an hour at 10x a 99.5 % budget (5 % failing)
        good, failed = good + 9.5, failed + 0.5
        hist.add(float(k), {("e", "ok"): (good, 1.0, 0.0), ("e", "err"): (failed, 0.0, 1.0)})
    burn = burn_rates(hist, 0.995)
    assert burn.budget_window == "6h"  # holds an hour: ready
    assert burn.budget_spent_in_s == pytest.approx(28 * 86400 / 10.0)  # 2.8 days of a 28-day one
    thirty = burn_rates(hist, 0.995, period_days=30)  # the service's budget_period_days
    assert thirty.period_days == 30 and thirty.budget_spent_in_s == pytest.approx(3 * 86400)
    young = OutcomeHistory()
    young.add(0.0, {("e", "ok"): (0.0, 1.0, 0.0)})
    assert burn_rates(young, 0.995).budget_spent_in_s is None


def test_saturation_and_exhaustion_on_every_surface():
    """The dashboard cell, the engine detail's sentence, the finding, snapshot.md, the exporter."""
    from console.figures.findings import findings
    from console.figures.plan import Plan
    from console.out.exporter import frame_metrics
    from console.out.snapshot import to_markdown
    from console.units import saturation_cell, saturation_text
    from tests.frames import node_frame

    cap = CapacityReport(
        cant_tell="load never varied enough",
        saturation=1.31,
        saturation_slo="ttft",
        saturating=True,
        queue_limit=12.0,
        queue_full_in_s=95.0,
    )
    assert saturation_cell(cap) == "1.31×↑"
    assert (
        saturation_text(cap) == "p90 TTFT at 1.31x its SLO, load and TTFT rising (over-saturation)"
    )
    frame = node_frame()
    e = frame.engines[0].model_copy(update={"capacity": cap})
    s = frame.services[0]
    heads = [
        h.model_copy(update={"exhausted_in_s": 95.0}) if h.name == "queue" else h
        for h in s.headroom
    ]
    heads += (
        []
        if any(h.name == "queue" for h in heads)
        else [
            Headroom(
                name="queue",
                value=3.0,
                budget=0.0,
                unit="waiting",
                state="warning",
                exhausted_in_s=95.0,
            )
        ]
    )
    s = s.model_copy(update={"headroom": heads, "capacity": cap})
    frame = frame.model_copy(
        update={"engines": [e, *frame.engines[1:]], "services": [s, *frame.services[1:]]}
    )
    (f,) = [f for f in findings(frame) if f.title.startswith("saturated")]
    assert (
        f.severity == "warning"
        and f.title == "saturated: p90 TTFT at 1.31x its SLO, load and TTFT rising"
    )
    md = to_markdown(frame).split("## Capacity to SLO breach")[1].split("\n## ")[0]
    assert "p90 TTFT at 1.31x its SLO" in md and "queue ~2 min" in md
    from console.out.checkplugin import perfdata

    assert f"'{e.name} saturation'=1.31;1" in perfdata(frame, Plan())
    page = frame_metrics(frame, Plan(), "t")
    assert f'inferdeck_saturation_ratio{{engine="{e.name}",slo="ttft"}} 1.31' in page
    assert f'inferdeck_saturating{{engine="{e.name}"}} 1.0' in page
    assert f'inferdeck_queue_full_in_seconds{{engine="{e.name}"}} 95.0' in page
    assert (
        f'inferdeck_headroom_exhausted_in_seconds{{service="{s.name}",rule="queue"}} 95.0' in page
    )


def test_an_engine_just_back_has_its_forecasts_withheld_on_every_surface():
    """For its first 10 s back an engine is not judged: the exporter serves no forecast of it,
    and snapshot.md's capacity row and the engine detail say why instead of the time to full;
    judged again, each states the forecast."""
    from console.figures.plan import Plan
    from console.out.exporter import frame_metrics
    from console.out.snapshot import to_markdown
    from screens.engines import _capacity_lines
    from tests.frames import node_frame

    cap = CapacityReport(kv_full_in_s=300.0, queue_limit=12.0, queue_full_in_s=95.0)
    why = "engine x back at 12:00:00Z, judged again on fresh data from 10 s after"
    frame = node_frame()
    for back in (why, None):
        e = frame.engines[0].model_copy(update={"capacity": cap, "not_judged": back})
        f = frame.model_copy(update={"engines": [e, *frame.engines[1:]]})
        md = to_markdown(f).split("## Capacity to SLO breach")[1].split("\n## ")[0]
        row = next(x for x in md.splitlines() if x.startswith(f"| {e.name} |"))
        page = frame_metrics(f, Plan(), "t")
        said: list[tuple[str, str]] = []
        _capacity_lines(e, lambda label, value, said=said: said.append((label, value)))
        labels = [label for label, _ in said]
        if back is not None:
            assert row.split(" | ")[2] == f"not judged: {why}", row
            assert f'inferdeck_kv_full_in_seconds{{engine="{e.name}"}}' not in page
            assert ("forecasts", f"not judged: {why}") in said
            assert "KV cache" not in labels and "queue" not in labels, said
        else:
            assert row.split(" | ")[2] == "~5 min", row
            assert f'inferdeck_kv_full_in_seconds{{engine="{e.name}"}} 300.0' in page
            assert ("KV cache", "full in ~5 min at this rate") in said
            assert "queue" in labels and "forecasts" not in labels, said


def test_the_queue_limit_leaves_the_first_token_its_own_time():
    """TTFT SLO 2 s; with nothing waiting half the first tokens come within 1 s, the rest within
    1.5 s (p95 1.45 s, interpolated); 4 requests finish a second. Queueing alone breaks the SLO
    once the wait reaches what is left, 2 s − p95: at (2 − 1.45) × 4 = 2.2 waiting — it used to
    be the whole 2 s × 4 = 8."""
    from console.figures.capacity import estimate, load_points, unqueued_ttft

    hist = []
    for k in range(120):
        t = float(k)
        done = 4.0 * k
        hist.append(
            Extract(
                t=t,
                gauges={"requests_running": {(): 8.0}, "requests_waiting": {(): 0.0}},
                counters={"generation_tokens": {(): (400.0 * k,)},
                          "requests_finished": {(): (done,)}},
                histograms={"ttft": {(): (0.0, 0.5 * done, done, done)}},
                bounds={"ttft": {(): (0.5, 1.0, 1.5, float("inf"))}},
            )
        )  # fmt: skip
    got = estimate(hist, 300.0, ttft_limit_s=2.0, tpot_limit_s=None, kv_capacity_tokens=None)
    _, p95 = unqueued_ttft(load_points(hist, 300.0, None))
    assert p95 == pytest.approx(1.0 + 0.5 * (0.95 - 0.5) / 0.5)  # 1.45 s, inside 1.0–1.5
    assert got.ttft_unqueued_p95_s == pytest.approx(p95)
    assert got.queue_limit == pytest.approx((2.0 - p95) * 4.0)
