import math

import httpx
import pytest

from console.engines import extract, profiles
from console.figures.enginestats import derive
from console.figures.window import window_delta
from console.figures.windowed import EngineHistory, summed_buckets
from console.promtext import parse
from console.sim.engine import TrafficModel, TrafficSpec, page_for, start_engine


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def scrape(model, clock, prof, hist):
    ex = extract(parse(page_for("vllm", model)), prof, clock.t)
    hist.add(ex)
    return ex


def test_page_has_vllm_shape_and_is_served_over_http():
    eng = start_engine("vllm", TrafficSpec(warmup_s=30))
    try:
        resp = httpx.get(eng.url, headers={"Accept": "text/plain;version=0.0.4"})
    finally:
        eng.server.stop()
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    page = parse(resp.text)
    assert page.bad_lines == 0
    assert page.types["vllm:time_to_first_token_seconds"] == "histogram"
    assert "_created" in resp.text  # single-process prometheus_client exposes them
    bounds = [lab for lab, _ in page.get("vllm:time_to_first_token_seconds_bucket")]
    assert len(bounds) == 23  # 22 vLLM TTFT bounds + +Inf
    assert page.get("vllm:generation_tokens_total")[0][1] > 0


def test_windowed_p95_matches_hand_computed_histogram_quantile():
    clock = Clock()
    model = TrafficModel(TrafficSpec(rate_rps=6, seed=5), clock=clock)
    prof, hist = profiles()["vllm"], EngineHistory()
    pages = []
    for _ in range(100):
        clock.t += 1.0
        pages.append(parse(page_for("vllm", model)))
        hist.add(extract(pages[-1], prof, clock.t))
    d = derive(hist.points, prof, 60)

    # by hand: bucket deltas between the scrape 60 s ago and now, then histogram_quantile
    def buckets(page):
        return {
            float(dict(lab)["le"]): v
            for lab, v in page.get("vllm:time_to_first_token_seconds_bucket")
        }

    new, old = buckets(pages[-1]), buckets(pages[-60])  # the range (t - 60 s, t]: 60 scrapes
    deltas = sorted((le, new[le] - old[le]) for le in new)
    total = deltas[-1][1]
    rank = 0.95 * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in deltas:
        if c >= rank:
            expected = prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
            break
        prev_le, prev_c = le, c
    assert not math.isinf(expected)
    assert d.fields["ttft_s"].observations == total > 20
    assert abs(d.fields["ttft_s"].p95 - expected) < 1e-9


def test_restart_never_gives_negative_rates_and_resets_percentiles():
    clock = Clock()
    model = TrafficModel(TrafficSpec(rate_rps=5, seed=9), clock=clock)
    prof, hist = profiles()["vllm"], EngineHistory()
    for _ in range(40):
        clock.t += 1.0
        scrape(model, clock, prof, hist)
    model.restart()
    restart_t = clock.t
    for _ in range(10):
        clock.t += 1.0
        ex = scrape(model, clock, prof, hist)
        d = derive(hist.points, prof, 60)
        assert d.fields["generation_tokens_per_s"] >= 0
        assert d.reset_at is not None and d.reset_at > restart_t
    # Prometheus' increase(): what the window saw before the restart plus everything after it
    points = [(e.t, e.histograms["ttft"]) for e in hist.points]
    counts = [sum(v[-1] for v in vals.values()) for t, vals in points if t > clock.t - 60]
    drop = next(i for i in range(1, len(counts)) if counts[i] < counts[i - 1])
    delta = window_delta(points, 60)
    post = summed_buckets(delta, ex.bounds["ttft"])
    assert post[-1][1] == (counts[drop - 1] - counts[0]) + model.h["ttft"].count
    assert d.fields["ttft_s"].observations == post[-1][1]


def test_overload_fills_the_queue_and_kv():
    clock = Clock()
    model = TrafficModel(
        TrafficSpec(
            rate_rps=8, profile="overload", max_num_seqs=32, kv_capacity_tokens=40_000, seed=3
        ),
        clock=clock,
    )
    clock.t += 120
    model.advance()
    assert len(model.waiting) > 10
    assert model.kv_used_tokens() / model.spec.kv_capacity_tokens > 0.6


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="no simulator"):
        start_engine("ollama")
