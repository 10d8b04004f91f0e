import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.figures.window import fraction_at_or_below, histogram_quantile, rate, window_delta

INF = math.inf


def test_quantile_hand_computed():
    # 10 observations: 2 in (0, 0.1], 5 in (0.1, 0.5], 3 in (0.5, 1]
    b = [(0.1, 2), (0.5, 7), (1.0, 10), (INF, 10)]
    # p50: rank 5 -> bucket (0.1, 0.5], 3 of 5 in: 0.1 + 0.4 * 3/5 = 0.34
    assert histogram_quantile(0.5, b) == (pytest.approx(0.34, abs=1e-12), False)
    # p95: rank 9.5 -> bucket (0.5, 1], 2.5 of 3: 0.5 + 0.5 * 2.5/3
    assert histogram_quantile(0.95, b)[0] == pytest.approx(0.5 + 0.5 * 2.5 / 3, abs=1e-12)
    # p10: rank 1 in the first bucket, lower bound 0: 0.1 * 1/2
    assert histogram_quantile(0.1, b)[0] == pytest.approx(0.05, abs=1e-12)


def test_quantile_in_inf_bucket_is_lower_bound():
    b = [(0.1, 1), (0.5, 2), (INF, 10)]
    assert histogram_quantile(0.95, b) == (0.5, True)
    assert histogram_quantile(0.1, b) == (pytest.approx(0.1), False)


def test_quantile_nan_cases():
    assert histogram_quantile(0.5, [(0.1, 0), (INF, 0)]) == (None, False)
    assert histogram_quantile(0.5, [(0.1, 3)]) == (None, False)  # no +Inf bucket
    assert histogram_quantile(1.5, [(0.1, 1), (INF, 1)]) == (INF, False)
    assert histogram_quantile(-1, [(0.1, 1), (INF, 1)]) == (-INF, False)


def test_quantile_on_vllm_live_fixture_is_prometheus_value():
    # vllm-live.prom TTFT: le=0.08 -> 3, le=0.1 -> 6, total 6. rank 5.7: 0.08 + 0.02 * 2.7/3 = 0.098
    b = [(0.06, 2), (0.08, 3), (0.1, 6), (0.25, 6), (INF, 6)]
    assert histogram_quantile(0.95, b)[0] == pytest.approx(0.098, abs=1e-12)


def test_rate_across_a_reset_is_never_negative_and_uses_post_reset_values():
    pts = [
        (0.0, {(): (100.0,)}),
        (10.0, {(): (150.0,)}),
        (20.0, {(): (30.0,)}),
        (30.0, {(): (60.0,)}),
    ]
    d = window_delta(pts, 60)
    assert d.reset_at == 20.0
    # Prometheus' increase(): both sides of the reset count (50 before, 30 at the reset, 30 after)
    assert d.values[()] == (110.0,)
    assert d.span_s == 30.0
    # rate(): the 30 s of scrapes extrapolated by half an interval at the start (the window reaches
    # 30 s further back, beyond 1.1 intervals), flush at the end: 110 x 35 / 30 over 60 s
    assert rate(d) == pytest.approx(110 * 35 / 30 / 60, abs=1e-12)


def test_window_is_a_prometheus_range_of_the_last_w_seconds():
    pts = [(float(t), {(): (float(t * 2),)}) for t in range(0, 121, 10)]
    d = window_delta(pts, 60)  # scrapes in (60, 120]: 70 .. 120
    assert d.values[()] == (100.0,) and d.span_s == 50.0 and not d.since_start
    assert rate(d) == pytest.approx(2.0, abs=1e-12)  # extrapolated to the window: the true rate
    short = window_delta(pts[:3], 60)  # only 20 s of history: the oldest scrape starts it
    assert short.span_s == 20.0 and short.values[()] == (40.0,)


def test_single_scrape_is_since_start():
    d = window_delta([(5.0, {(): (7.0, 9.0)})], 60)
    assert d.since_start and d.values[()] == (7.0, 9.0) and d.span_s == 0


def test_series_appearing_mid_window_counts_from_first_sight():
    pts = [
        (0.0, {("a",): (1.0,)}),
        (10.0, {("a",): (2.0,), ("b",): (5.0,)}),
        (20.0, {("a",): (3.0,), ("b",): (9.0,)}),
    ]
    d = window_delta(pts, 60)
    assert d.values[("a",)] == (2.0,) and d.values[("b",)] == (4.0,)


def test_fraction_exact_on_bound_and_interpolated_between():
    b = [(0.5, 4), (1.0, 8), (2.5, 9), (INF, 10)]
    assert fraction_at_or_below(1.0, b) == (0.8, True)
    share, exact = fraction_at_or_below(1.5, b)  # 8 + 1 * (0.5 / 1.5) of 10
    assert not exact and share == pytest.approx((8 + 1 / 3) / 10)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=12), st.floats(0, 1), st.floats(0, 1))
def test_quantiles_monotone_and_within_bounds(counts, q1, q2):
    bounds = [0.01 * 2**i for i in range(len(counts))]
    cum, running = [], 0
    for le, c in zip(bounds, counts, strict=True):
        running += c
        cum.append((le, running))
    cum.append((INF, running + 1))
    lo, hi = sorted((q1, q2))
    a, _ = histogram_quantile(lo, cum)
    b, _ = histogram_quantile(hi, cum)
    assert a <= b + 1e-12
    assert 0 <= a and b <= bounds[-1]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=20))
def test_rates_never_negative(values):
    pts = [(float(i), {(): (v,)}) for i, v in enumerate(values)]
    d = window_delta(pts, 5)
    assert d.values[()][0] >= 0


@pytest.mark.slow
def test_the_grown_shortcut_equals_the_step_walk():
    """A kept history marks the signals whose every series only grew since the previous scrape;
    over such runs a window is newest - oldest. On 1 s scrapes for 20 minutes — two DP ranks, one
    rank's counter reset alone, an engine restart, a scrape missing the signal, a histogram whose
    buckets change shape — every window equals the step-by-step walk of ``window_delta``."""
    import random
    from array import array

    from console.engines import Extract
    from console.figures.windowed import (
        EngineHistory,
        _points,
        restart_times,
        signal_delta,
        window_points,
    )

    rng = random.Random(7)
    hist = EngineHistory()
    counts = {"0": 0.0, "1": 0.0}
    buckets = [0.0, 0.0, 0.0]
    start = 1000.0
    for i in range(1200):
        t = 2_000_000.0 + i
        for rank in counts:
            counts[rank] += rng.choice([0.0, 1.0, 3.0])
        if i == 300:
            counts["1"] = 2.0  # one rank restarts on its own
        if i == 700:
            start += 500.0  # the engine restarts: everything from zero
            counts = {"0": 1.0, "1": 0.0}
            buckets = [0.0, 0.0, 0.0]
        for j in range(len(buckets)):
            buckets[j] += rng.choice([0.0, 1.0]) + (buckets[j - 1] - buckets[j] if j else 0)
        if i == 900:
            buckets.append(buckets[-1])  # a bucket appears
        ex = Extract(t=t, gauges={"process_start": {(): start}})
        if i != 500:  # one scrape without the counter
            ex.counters["requests"] = {(("engine", r),): array("d", [v]) for r, v in counts.items()}
        ex.histograms["ttft"] = {(): array("d", buckets + [buckets[-1]])}
        hist.add(ex)
        for kind, signal in (("counters", "requests"), ("histograms", "ttft")):
            for w in (60.0, 300.0):
                points, _ = _points(hist.points, kind, signal, w)
                want = window_delta(points, w, restart_times(hist.points), hist.points.first_t)
                got = signal_delta(hist.points, kind, signal, w)
                assert (got is None) == (want is None)
                if want is not None:
                    assert got == want, (i, kind, w)
    shortcut = sum(("counters", "requests") in ex.grew for ex in hist.points)
    assert 800 < shortcut < len(hist.points)  # both paths were taken
    # long after the last break a window is found by bisecting the scrape times: its two ends
    points, grew, scrapes = window_points(hist.points, "counters", "requests", 300.0)
    assert grew and len(points) == 2 and scrapes == 300  # (t - 300, t] at 1 s
    # a signal no kept scrape holds: nothing, without walking the history
    assert window_points(hist.points, "counters", "absent", 60.0) == ([], False, 0)
    assert signal_delta(hist.points, "counters", "absent", 60.0) is None


def test_a_kept_history_notes_where_the_counts_went_down_and_nothing_else():
    """An engine that exports no start time restarts: its token count goes down. The history
    notes that scrape (the capacity model's forecasts start again after it), not a series that
    appears (a new finished reason) or a scrape without the count, and forgets it with the
    scrape."""
    from array import array

    from console.engines import Extract
    from console.figures.windowed import EngineHistory

    hist = EngineHistory(keep_s=100.0)
    for i in range(300):
        tokens = 50.0 * (i if i < 120 else i - 120)  # the restart at i = 120
        finished = {(("reason", "stop"),): array("d", [float(i)])}
        if i >= 60:
            finished[(("reason", "abort"),)] = array("d", [1.0])  # a series appears at 60
        ex = Extract(t=float(i), counters={"requests_finished": finished})
        if i != 200:  # a scrape without the token count
            ex.counters["generation_tokens"] = {(): array("d", [tokens])}
        hist.add(ex)
        if i == 150:
            assert hist.points.resets == {120.0}
    assert hist.points.resets == set()  # kept 100 s: the restart's scrape is gone
    assert not hist.points.restarts


def test_windowed_figures_sum_replicas_each_with_its_own_restart():
    """One home for windowed history: a counter's increase, a histogram's buckets and the
    requests' outcomes summed over two replicas, one of which restarted (hand-computed)."""
    from console.engines import Extract, profiles
    from console.figures.windowed import Windowed

    def scrape(t, ok, failed, le1, inf):
        return Extract(
            t=t,
            counters={"ok": {(): (ok,)}, "bad": {(): (failed,)}},
            histograms={"ttft": {(): (le1, inf, 0.5 * inf)}},  # buckets, then the sum
            bounds={"ttft": {(): (1.0, math.inf)}},
        )

    a = [scrape(t, 10.0 * k, 1.0 * k, 8.0 * k, 10.0 * k) for k, t in enumerate((0.0, 10, 20, 30))]
    # b restarts between 10 s and 20 s: 100 -> 110, then 5 -> 15 (+10 +5 +10 = 25)
    b = [scrape(0.0, 100, 4, 90, 100), scrape(10, 110, 4, 99, 110)]
    b += [scrape(20, 5, 1, 5, 5), scrape(30, 15, 1, 15, 15)]
    win = Windowed([a, b, []], 60.0)
    sums, deltas = win.increase("ok")
    assert sums == {"": 30.0 + 25.0} and len(deltas) == 2
    buckets, since_start = win.buckets("ttft")
    # le=1: a 24; b 9 + 5 + 10 = 24 -> 48; +Inf: a 30, b 25 -> 55
    assert buckets == [(1.0, 48.0), (math.inf, 55.0)] and since_start is False
    assert win.span() == 30.0
    assert win.rate("absent") is None and win.increase("absent") == (None, [])
    spec = profiles()["tgi"].success  # ok vs failed counters, by name
    assert spec is not None and spec.ok and spec.failed
    renamed = [
        [
            Extract(t=x.t, counters={spec.ok: x.counters["ok"], spec.failed: x.counters["bad"]})
            for x in h
        ]
        for h in (a, b)
    ]
    done = Windowed(renamed, 60.0).outcomes(profiles()["tgi"])
    # failed: a 3; b 0 then 1 after its restart (a reset to 1 counts 1) -> 4
    assert done is not None and (done.good, done.failed, done.aborted) == (55.0, 4.0, 0.0)
    assert done.completion == pytest.approx(55 / 59)
