"""The verdict an operator reads (issue: when it matters, it says so): latency misses spend the
error budget, one verdict on every surface, check as a Nagios plugin."""

from __future__ import annotations

import math
from array import array

import pytest

from console.engines import Extract
from console.figures.plan import SloSpec
from console.figures.slo import (
    LatencyHistory,
    OutcomeHistory,
    burn_alert,
    burn_rates,
    latency_series,
)
from tests.test_findings import frame as _frame

LES = (0.5, 1.0, 2.5, math.inf)


def _scrape(t: float, within: tuple[float, float, float, float], ok: float) -> Extract:
    """One vLLM-shaped scrape: a TTFT histogram's cumulative buckets and the finished counter."""
    return Extract(
        t=t,
        histograms={"ttft": {(): array("d", [*within, within[-1]])}},
        bounds={"ttft": {(): LES}},
        counters={"requests_finished": {(("finished_reason", "stop"),): array("d", [ok])}},
        series={"ttft": "vllm:time_to_first_token_seconds"},
    )


def test_requests_over_a_latency_limit_are_counted_from_the_histogram_at_the_limit():
    ex = _scrape(0.0, (10.0, 70.0, 90.0, 100.0), 100.0)
    rows = latency_series(ex, SloSpec(ttft_s=1.0))["ttft_s"]
    assert rows == {("ttft", ()): (100.0, 70.0)}  # exact: 1.0 is a bucket bound
    rows = latency_series(ex, SloSpec(ttft_s=0.75))["ttft_s"]
    assert rows[("ttft", ())] == (100.0, pytest.approx(40.0))  # 10 + 60 x (0.25 / 0.5)
    assert latency_series(ex, SloSpec(ttft_s=None)) == {}


def _history(seconds: int, late_share: float, failed_share: float = 0.0) -> OutcomeHistory:
    """10 requests a second; ``late_share`` of them over the 1 s TTFT limit."""
    hist = OutcomeHistory()
    hist.latency["ttft_s"] = LatencyHistory()
    done = 0.0
    for k in range(seconds + 1):
        done += 10.0
        fast = done * (1 - late_share)
        hist.add(
            float(k),
            {
                ("e", "ok"): (done * (1 - failed_share), 1.0, 0.0),
                ("e", "err"): (done * failed_share, 0.0, 1.0),
            },
        )
        hist.latency["ttft_s"].add(float(k), {("e", "ttft"): (done, fast)})
    return hist


def test_a_latency_miss_with_no_errors_burns_the_budget_and_pages():
    """TTFT p95 78 s against 1 s, 0 % good, no engine error: burn read 0.0 and nothing fired.
    The TTFT objective's budget is 5 % (p95): every request late is 20x."""
    burn = burn_rates(_history(400, 1.0), 0.995, 0.95)
    five = burn.windows["5m"]
    assert five.objective == "ttft_s" and five.burn == pytest.approx(20.0)
    assert five.bad_share == pytest.approx(1.0)
    assert burn.objectives["completion"]["5m"].burn == 0.0
    assert burn.objectives["ttft_s"]["1h"].burn == pytest.approx(20.0)
    hit = burn_alert(burn)
    assert hit is not None and hit[0] == "critical" and "TTFT over its SLO" in hit[1]


def test_a_service_meeting_its_percentile_does_not_burn_past_budget():
    """4 % late against a p95 SLO is within its 5 % budget: 0.8x, no alert."""
    burn = burn_rates(_history(400, 0.04), 0.995, 0.95)
    assert burn.objectives["ttft_s"]["5m"].burn == pytest.approx(0.8)
    assert burn_alert(burn) is None


def test_failures_and_misses_combine_into_one_bad_share():
    """2 % failed and 10 % of the rest late: at least 2 % + 98 % x 10 % of requests were bad; the
    service burns as its worst objective (TTFT: 10 % / 5 % = 2x; errors: 2 % / 0.5 % = 4x)."""
    burn = burn_rates(_history(400, 0.1, failed_share=0.02), 0.995, 0.95)
    five = burn.windows["5m"]
    assert five.bad_share == pytest.approx(0.02 + 0.98 * 0.1)
    assert five.objective == "completion" and five.burn == pytest.approx(4.0)


def test_a_cache_full_in_bursts_is_judged_over_the_window():
    """KV >= 90 % for 3 s in every 10, 50 % between, preemptions in the window: the gauge at one
    instant missed it (38 of 146 s full on a real vLLM never showed)."""
    from console.engines import profiles
    from console.figures.enginestats import derive
    from console.figures.findings import findings
    from console.figures.windowed import EngineHistory
    from console.frame import Engine

    vllm = profiles()["vllm"]
    hist = EngineHistory()
    for k in range(65):
        kv = 0.97 if k % 10 < 3 else 0.5
        hist.add(
            Extract(
                t=float(k),
                gauges={"kv_cache_usage": {(): kv}},
                counters={"preemptions": {(): array("d", [float(k // 10)])}},
            )
        )
    d = derive(hist.points, vllm, 60.0)
    assert d.fields["kv_cache_usage"] == 0.5  # the instant looked between two bursts
    assert d.fields["kv_cache_usage_peak"] == 0.97
    assert d.fields["kv_full_share"] == pytest.approx(18 / 60)
    e = Engine(name="v", url="u", up=True, kind="vllm", **{
        k: d.fields[k] for k in ("kv_cache_usage", "kv_cache_usage_peak", "kv_full_share",
                                 "preemptions", "preemptions_since_start")
    })  # fmt: skip
    (f,) = [f for f in findings(_frame([e])) if "KV cache" in f.title]
    assert f.severity == "critical" and "97% full" in f.title and "preemptions" in f.title


@pytest.mark.parametrize(
    "kind,word,flag",
    [
        ("vllm", "preemptions", "--max-num-seqs"),
        ("sglang", "retractions", "--max-running-requests"),
    ],
)
def test_knobs_and_words_are_each_engines_own(kind, word, flag):
    from console.figures.findings import findings
    from console.frame import Engine, Percentiles

    full = Engine(name="e", url="u", up=True, kind=kind, kv_cache_usage=0.95, preemptions=4)
    (f,) = [f for f in findings(_frame([full])) if "KV cache" in f.title]
    assert word in f.title and flag in f.knob
    # TTFT mostly queueing with the cache full: never 'raise max-num-seqs'
    pct = Percentiles(p95=2.0, window="1m", observations=100)
    queued = Engine(name="e", url="u", up=True, kind=kind, kv_cache_usage=0.95,
                    ttft_s=pct, queue_time_s=Percentiles(p95=1.8, window="1m", observations=100),
                    requests_waiting=40)  # fmt: skip
    (q,) = [f for f in findings(_frame([queued])) if "queueing" in f.title]
    assert "raise" not in q.knob and "full" in q.knob
