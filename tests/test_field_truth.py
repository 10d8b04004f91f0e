"""Numbers that hold in the field: every windowed figure against an independent reference of
Prometheus' semantics (tests/promref.py) on generated scrape sequences — several DP engines,
resets of one series, jitter, the real 1 s cadence — and one test per defect the audit found."""

from __future__ import annotations

import math
import random
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.engines import Extract, gauge_value, profiles
from console.figures.cost import CostSpec, serving_goodput
from console.figures.derive import Deriver
from console.figures.enginestats import derive
from console.figures.meters import service_meters
from console.figures.plan import Plan, Service, SloSpec
from console.figures.slo import OutcomeHistory, burn_alert, burn_rates, compliance, outcome_series
from console.figures.window import fraction_at_or_below
from console.figures.windowed import EngineHistory
from console.frame import Gpu, GpuSource, Percentiles, RangeReport
from console.out.snapshot import to_markdown
from console.units import quantile_text, share_range
from tests import promref
from tests.frames import engine_sample, service

VLLM = profiles()["vllm"]
BOUNDS = (0.1, 0.5, 1.0, 2.5, math.inf)
REASONS = ("stop", "length", "abort", "error")


def eng(i: int, **more: str) -> tuple:
    return (("engine", str(i)), *sorted(more.items()))


class Sim:
    """Cumulative counters of N DP engines of one vLLM server, with resets of single engines."""

    def __init__(self, n: int, seed: int, reset_p: float = 0.0, fail_share: float = 0.05) -> None:
        self.n, self.rng, self.reset_p, self.fail = n, random.Random(seed), reset_p, fail_share
        self.tokens = [0.0] * n
        self.reasons = [dict.fromkeys(REASONS, 0.0) for _ in range(n)]
        self.ttft = [[0.0] * len(BOUNDS) for _ in range(n)]
        self.log: list[
            tuple[float, dict]
        ] = []  # (t, {series key: value or tuple}) for the reference

    def step(self, t: float) -> Extract:
        for i in range(self.n):
            if self.rng.random() < self.reset_p:  # this engine restarts: its series start again
                self.tokens[i] = 0.0
                self.reasons[i] = dict.fromkeys(REASONS, 0.0)
                self.ttft[i] = [0.0] * len(BOUNDS)
            self.tokens[i] += self.rng.randint(0, 60)
            for _ in range(self.rng.randint(0, 4)):
                r = self.rng.random()
                reason = (
                    "error"
                    if r < self.fail
                    else "abort"
                    if r < self.fail + 0.03
                    else self.rng.choice(("stop", "length"))
                )
                self.reasons[i][reason] += 1
                if reason != "error":
                    latency = self.rng.choice((0.05, 0.3, 0.7, 1.5, 4.0))
                    for b, le in enumerate(BOUNDS):
                        if latency <= le:
                            self.ttft[i][b] += 1
        counters = {
            "generation_tokens": {eng(i): array("d", [self.tokens[i]]) for i in range(self.n)},
            "requests_finished": {
                eng(i, finished_reason=r): array("d", [self.reasons[i][r]])
                for i in range(self.n)
                for r in REASONS
            },
        }
        hist = {eng(i): array("d", [*self.ttft[i], self.ttft[i][-1]]) for i in range(self.n)}
        self.log.append(
            (
                t,
                {
                    **{("tok", i): self.tokens[i] for i in range(self.n)},
                    **{("req", i, r): self.reasons[i][r] for i in range(self.n) for r in REASONS},
                    **{("ttft", i): tuple(hist[eng(i)]) for i in range(self.n)},
                },
            )
        )
        return Extract(
            t=t,
            counters=counters,
            histograms={"ttft": hist},
            bounds={"ttft": {eng(i): BOUNDS[:-1] + (math.inf,) for i in range(self.n)}},
            series={"generation_tokens": "vllm:generation_tokens_total"},
        )

    def series(self, key: tuple) -> list[tuple[float, object]]:
        return [(t, vals[key]) for t, vals in self.log if key in vals]


def reference(sim: Sim, window_s: float, first_seen: float | None = None) -> dict:
    """Prometheus' figures over the window, as known to a watcher whose first scrape was at
    ``first_seen`` (the sim may have run long before)."""
    end = sim.log[-1][0]
    start = end - window_s

    def inc(key: tuple) -> list[float]:
        return promref.raw_increase(promref.watched(sim.series(key), start, end, first_seen)[0])

    def one_rate(key: tuple) -> float:
        samples, begin = promref.watched(sim.series(key), start, end, first_seen)
        return promref.rate(samples, begin, end)

    rate = sum(one_rate(("tok", i)) for i in range(sim.n))
    reasons = {r: sum(inc(("req", i, r))[0] for i in range(sim.n)) for r in REASONS}
    buckets_inc = [sum(inc(("ttft", i))[b] for i in range(sim.n)) for b in range(len(BOUNDS))]
    buckets = list(zip(BOUNDS, buckets_inc, strict=True))
    good, bad = reasons["stop"] + reasons["length"], reasons["error"]
    return {
        "rate": rate,
        "buckets": buckets,
        "good": good,
        "bad": bad,
        "quantiles": {q: promref.histogram_quantile(q, buckets) for q in (0.5, 0.95, 0.99)},
    }


def near(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 4),
    seed=st.integers(0, 10_000),
    steps=st.integers(70, 400),
    window=st.sampled_from([60.0, 300.0]),
    reset_p=st.sampled_from([0.0, 0.01, 0.05]),
    jitter=st.floats(0.0, 0.3),
    before=st.sampled_from([0, 3600]),
)
def test_every_windowed_figure_equals_prometheus_semantics(
    n, seed, steps, window, reset_p, jitter, before
):
    """``before``: the engine ran that many 1 s scrapes before the console's first (an hour, or
    not at all); a window the console has not filled is rated over what it watched."""
    sim = Sim(n, seed, reset_p)
    rng = random.Random(seed + 1)
    hist, burn = EngineHistory(), OutcomeHistory()
    first_seen = None
    for k in range(before + steps):
        t = 1000.0 + k + rng.uniform(-jitter, jitter)
        ex = sim.step(t)
        if k < before:
            continue
        first_seen = t if first_seen is None else first_seen
        hist.add(ex)
        burn.add(t, {("e", *key): v for key, v in outcome_series(ex, VLLM).items()})
    ref = reference(sim, window, first_seen)
    d = derive(hist.points, VLLM, window)
    assert near(d.fields["generation_tokens_per_s"], ref["rate"])
    p: Percentiles = d.fields.get("ttft_s")
    if ref["buckets"][-1][1] > 0:
        for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
            assert near(getattr(p, name), ref["quantiles"][q]), name
        assert p.observations == ref["buckets"][-1][1]
    done = ref["good"] + ref["bad"]
    if done > 0:
        assert near(d.fields["success_rate"], ref["good"] / done)
    # the SLO block over the same history: attainment, completion, output tokens/s, burn
    svc = service(SloSpec(ttft_s=0.5, tpot_s=None, window=f"{window:g}s"))
    doc = compliance(svc, [hist.points], VLLM).model_dump()
    if ref["buckets"][-1][1] > 0:
        assert near(
            doc["targets"]["ttft_s"]["attainment"], promref.share_at_or_below(0.5, ref["buckets"])
        )
    if done > 0:
        assert near(doc["completion"]["observed"], ref["good"] / done)
    assert near(doc["output_tokens_per_s"], d.fields["generation_tokens_per_s"])
    share, requests = burn.bad_share(window)
    assert requests == pytest.approx(done, abs=1e-9)
    if done > 0:
        assert near(share, ref["bad"] / done)


def test_one_dp_engine_restarting_leaves_the_others_rate_alone():
    """Defect 2: engine 0 restarts mid-window; engine 1 runs at 50 tok/s throughout."""
    hist = EngineHistory()
    for k in range(120):
        t = float(k)
        e0 = 30.0 * (k - 99) if k >= 100 else 30.0 * k  # restarts before t = 100 (counts from 0)
        hist.add(Extract(t=t, counters={"generation_tokens": {eng(0): (e0,), eng(1): (50.0 * k,)}}))
    d = derive(hist.points, VLLM, 60)
    # in (60, 119]: engine 1 rises 50 / s, engine 0 rises 30 / s on both sides of its reset
    assert d.fields["generation_tokens_per_s"] == pytest.approx(80.0, rel=1e-9)


def test_a_restarted_good_counter_beside_a_steady_failed_one():
    """Defect 2 (vectors): each outcome series has its own reset; 1 failed in 80 -> 12.5x."""
    hist = OutcomeHistory()
    for k in range(400):
        good = 79.0 * (k - 199) if k >= 200 else 79.0 * k  # the good series restarts at 200
        hist.add(float(k), {("e", "good"): (good, 1.0, 0.0), ("e", "failed"): (1.0 * k, 0.0, 1.0)})
    share, n = hist.bad_share(300)
    assert n == pytest.approx(80 * 299) and share == pytest.approx(1 / 80)
    assert burn_rates(hist, 0.9).windows["5m"].burn == pytest.approx(0.125)


def test_burn_rates_compute_and_alert_at_a_1s_poll_for_6_hours():
    """Defect 1: at 1 s the 5 m, 1 h and 6 h windows all count requests, and the fast and slow
    burn alerts fire on an error burst and clear after it, over 7 simulated hours."""
    hist = OutcomeHistory()
    good = failed = 0.0
    fired: dict[str, list[float]] = {"critical": [], "warning": []}
    for k in range(7 * 3600):
        burst = 3 * 3600 <= k < 3 * 3600 + 1800  # thirty minutes of 50% errors
        good += 5.0 if burst else 10.0
        failed += 5.0 if burst else 0.01
        hist.add(float(k), {("e", "ok"): (good, 1.0, 0.0), ("e", "err"): (failed, 0.0, 1.0)})
        if k % 30 == 0:
            burn = burn_rates(hist, 0.995)
            if k == 3600:
                for w in ("5m", "1h"):
                    assert burn.windows[w].requests > 0 and burn.windows[w].burn is not None
            hit = burn_alert(burn)
            if hit:
                fired[hit[0]].append(k / 3600)
    burn = burn_rates(hist, 0.995)
    # 21,599 one-second steps in the last 6 h; the burst's 1,800 steps finished 10, not 10.01
    assert burn.windows["6h"].requests == pytest.approx(21599 * 10.01 - 1800 * 0.01, rel=1e-9)
    # fast burn once the 1 h window holds ~9 minutes of the burst; it ends 5 minutes after the burst
    assert (
        fired["critical"]
        and 3.1 < min(fired["critical"]) < 3.2
        and 3.5 < max(fired["critical"]) < 3.6
    )
    # slow burn (1 h and 6 h >= 6) outlasts it until the burst leaves the 1 h window
    assert fired["warning"] and 3.5 < min(fired["warning"]) and 4.3 < max(fired["warning"]) < 4.5
    assert burn_alert(burn) is None
    assert len(hist.t) <= 6 * 3600 + 60 + 600  # the history keeps 6 h (and trims in chunks)


def test_slo_and_cost_use_the_engine_s_span_after_a_restart():
    """Defect 3: the SLO block's output tokens/s is the engine's figure, restart or not."""
    hist = EngineHistory()
    for k in range(200):
        v = 536.0 * (k - 149) if k >= 150 else 536.0 * k
        hist.add(Extract(t=float(k), counters={"generation_tokens": {eng(0): (v,)}}))
    d = derive(hist.points, VLLM, 60)
    svc = service(SloSpec(window="1m"))
    doc = compliance(svc, [hist.points], VLLM).model_dump()
    assert d.fields["generation_tokens_per_s"] == pytest.approx(536.0)
    assert doc["output_tokens_per_s"] == d.fields["generation_tokens_per_s"]


def triton_extract(t: float, n: int) -> Extract:
    models = ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing")
    return Extract(
        t=t,
        counters={
            "requests_ok": {(("model", m), ("version", "1")): (float(n),) for m in models},
            "requests_failed": {
                (("model", m), ("reason", "BACKEND"), ("version", "1")): (0.0,) for m in models
            },
            "e2e_total_s": {
                (("model", m), ("version", "1")): (n * (2.0 if m == "ensemble" else 0.5),)
                for m in models
            },
        },
    )


@pytest.mark.parametrize("tops", [None, ["ensemble"]])
def test_a_triton_ensemble_request_counts_once(tops):
    """Defect 4: 59 client requests through a 3-step ensemble are 59, not 236; e2e is the ensemble's."""
    deriver = Deriver(window_s=60)
    for k, n in ((0, 0), (30, 59)):
        ex = triton_extract(float(k), n)
        frame = deriver.frame(
            engine_sample(ex, label="trt", kind="triton", port=8002, top_models=tops)
        )
    e = frame.engines[0]
    assert e.requests_finished == 59
    assert e.e2e_mean_s == pytest.approx(2.0)
    assert e.requests_by_model == {
        "ensemble": 59,
        "preprocessing": 59,
        "tensorrt_llm": 59,
        "postprocessing": 59,
    }
    assert "ensemble" in e.series["requests_counted"]


def test_triton_top_models_from_the_model_configuration():
    from console.triton import api_base, top_models

    index = [
        {"name": m}
        for m in ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing", "other")
    ]
    configs = {
        "ensemble": {
            "platform": "ensemble",
            "ensemble_scheduling": {
                "step": [
                    {"model_name": "preprocessing"},
                    {"model_name": "tensorrt_llm"},
                    {"model_name": "postprocessing"},
                ]
            },
        }
    }
    assert top_models(index, configs) == ["ensemble", "other"]
    assert api_base("http://10.0.0.1:8002/metrics") == "http://10.0.0.1:8000"


def test_aggregation_rules_across_dp_engines_tp_ranks_and_replicas():
    """Defect 5: TP ranks repeat one figure (once), DP ranks add (sum), vLLM's info once, replicas sum."""
    sglang = profiles()["sglang"]
    tp = {(("dp_rank", "0"), ("tp_rank", str(r))): 1000.0 for r in range(4)}
    assert gauge_value(tp, "sum", sglang.replica_labels) == 1000.0
    dp = {(("dp_rank", str(r)), ("tp_rank", str(r))): 1000.0 for r in range(8)}
    assert gauge_value(dp, "sum", sglang.replica_labels) == 8000.0
    # vLLM with internal DP: every engine row carries the DP-summed blocks; read it once
    info = (("block_size", "16"), ("engine", "0"), ("num_gpu_blocks", "2000"))
    hist = EngineHistory()
    hist.add(Extract(t=0.0, info={"kv_capacity_tokens": info}, gauges={}))
    assert derive(hist.points, VLLM, 60).fields["kv_capacity_tokens"] == 32000


def test_a_service_with_two_replicas_sums_their_kv_capacity():
    from console.figures.headroom import HeadroomState, evaluate

    plan = Plan(
        services=[
            Service(
                name="s",
                replicas=["a", "b"],
                device="0",
                model="llama-3.1-8b",
                weight_bits=16,
                tokens_per_sequence=8192,
                concurrent_sequences=6,
            )
        ]
    )
    from console.frame import Engine

    engines = [
        Engine(
            name=n,
            url=f"http://127.0.0.1:{p}/metrics",
            up=True,
            kv_capacity_tokens=4 * 8192.0,
            requests_waiting=0,
        )
        for n, p in (("a", 1), ("b", 2))
    ]
    services, conds = evaluate(plan, GpuSource(kind="none"), [], engines, HeadroomState(), 0.0)
    kv = next(h for h in services[0].headroom if h.name == "kv")
    assert kv.value == pytest.approx(2.0) and kv.state == "ok"  # 8 seqs of 8192 against 6 planned
    assert not [c for c in conds if c.rule == "kv"]


def test_tgi_time_to_first_token_with_no_traffic_is_not_zero_and_the_slo_uses_it():
    """Defect 6: no observations -> n/a with a reason; with traffic the SLO block uses the ~ sum."""
    tgi = profiles()["tgi"]
    empty = {f"ttft#{i}": {(): (0.0, 0.0, 0.0)} for i in range(3)}
    bounds = {f"ttft#{i}": {(): (0.1, math.inf)} for i in range(3)}
    hist = EngineHistory()
    for t in (0.0, 1.0):
        hist.add(Extract(t=t, histograms=dict(empty), bounds=bounds))
    d = derive(hist.points, tgi, 60)
    assert "ttft_s" not in d.fields and "no observations" in d.unavailable["ttft_s"]
    hist.add(
        Extract(
            t=2.0, histograms={f"ttft#{i}": {(): (4.0, 4.0, 4.0)} for i in range(3)}, bounds=bounds
        )
    )
    svc = service(SloSpec(ttft_s=1.0, window="1m"))
    doc = compliance(svc, [hist.points], tgi).model_dump()
    entry = doc["targets"]["ttft_s"]
    assert (
        entry["approx"]
        and entry["observed_s"] == pytest.approx(3 * 0.095)
        and entry["attainment"] is None
    )


def test_the_goodput_lower_bound_is_zero_when_an_slo_has_no_data():
    """Defect 7: TTFT known (90%), TPOT without data: the lower bound is 0, not 0.9 x c."""
    hist = EngineHistory()
    for t, n in ((0.0, 0.0), (10.0, 10.0)):
        hist.add(
            Extract(
                t=t,
                histograms={"ttft": {(): (0.0, n * 0.9, n, n)}},
                bounds={"ttft": {(): (0.1, 1.0, math.inf)}},
                counters={"requests_finished": {(("finished_reason", "stop"),): (n,)}},
            )
        )
    svc = service(SloSpec(ttft_s=1.0, tpot_s=0.05, window="1m"))
    doc = compliance(svc, [hist.points], VLLM).model_dump()
    assert doc["good_share"]["low"] == 0.0 and doc["good_share"]["high"] == pytest.approx(0.9)
    assert doc["good_share"]["unknown"] == ["tpot_s"]


def test_per_gpu_energy_uses_the_node_basis():
    """Defect 8: host share and PUE apply to each GPU's energy as to the node's."""
    plan = Plan(
        cost=CostSpec(
            hourly_usd=2.0,
            usd_per_kwh=0.1,
            host_power_w=400,
            facility_overhead_included=False,
            pue=1.5,
        )
    )
    gpus = [Gpu(index=i, power_w=300.0) for i in range(2)]
    _, node, _ = service_meters(plan, [], {}, {}, {}, gpus, 0.0)
    assert node is not None
    assert node.energy.usd_per_h == pytest.approx((600 + 400) * 1.5 / 1000 * 0.1)
    assert sum(g.energy_usd_per_h or 0.0 for g in node.per_gpu) == pytest.approx(
        node.energy.usd_per_h
    )
    assert node.per_gpu[0].energy_basis == node.energy.basis


def test_what_if_goodput_is_per_serving_second():
    """Defect 9: a window average of 80 tok/s at 40% busy is G = 200 tok/s while serving."""
    assert serving_goodput(80.0, 0.4) == pytest.approx(200.0)
    assert serving_goodput(80.0, None) is None


def test_good_share_never_reads_above_completion_and_markdown_keeps_marks():
    """Defect 10."""
    assert share_range(RangeReport(low=0.9951, high=0.9959, approx=False)) == "99.5–99.5%"
    assert share_range(RangeReport(low=0.99, high=0.99999, approx=True)) == "≈99.0–99.9%"
    p = Percentiles(
        p50=0.2,
        p95=2.09,
        p99=None,
        window="since_start",
        observations=2,
        lower_bound_only=[],
        buckets={"p95": (1.0, 2.5)},
        wide=["p95"],
    )
    assert quantile_text(p, "p95", ranges=True) == "2.09s* (1.00s–2.50s)·2"
    assert quantile_text(p, "p95") == "2.09s*±·2"
    from datetime import UTC, datetime

    from console.frame import Engine, Frame

    frame = Frame(
        taken_at=datetime(2026, 12, 1, tzinfo=UTC),
        host="h",
        inferdeck_version="x",
        window_s=60,
        gpu_source=GpuSource(kind="none"),
        engines=[Engine(name="e", url="http://127.0.0.1:1/metrics", up=True, ttft_s=p)],
    )
    md = to_markdown(frame)
    assert "2.09s* (1.00s–2.50s)·2" in md


def test_per_token_tpot_is_said_and_scaled_bounds_stay_exact():
    """Defect 11."""
    assert fraction_at_or_below(0.7, [(700 * 0.001, 9.0), (math.inf, 10.0)]) == (0.9, True)
    hist = EngineHistory()
    for t, n in ((0.0, 0.0), (10.0, 10.0)):
        hist.add(
            Extract(
                t=t,
                histograms={"tpot": {(): (n, n)}},
                bounds={"tpot": {(): (0.05, math.inf)}},
                series={"tpot": "vllm:time_per_output_token_seconds"},
            )
        )
    svc = service(SloSpec(ttft_s=None, tpot_s=0.05, window="1m"))
    entry = compliance(svc, [hist.points], VLLM).model_dump()["targets"]["tpot_s"]
    assert entry["counts"] == "tokens" and "token" in entry["note"]


def test_a_restart_shows_when_the_process_began_and_counts_both_sides():
    """Defect 12: the process start time reveals the restart (even before a counter goes down)
    and is the restart time shown; the increase counts both sides of the reset."""
    deriver = Deriver(window_s=60)
    frame = None
    for k in range(90):
        t = 1000.0 + k
        start = (
            900.0 if k < 50 else 1040.0 - 29
        )  # a new process began 29 s before its first good scrape
        tok = (
            60.0 * k if k < 50 else 5000.0 + 60.0 * (k - 50)
        )  # grew past the old value: no decrease
        if 40 <= k < 50:
            continue  # down for 10 s, not scraped
        ex = Extract(
            t=t,
            gauges={"process_start": {(): start}},
            counters={"generation_tokens": {eng(0): (tok,)}},
        )
        frame = deriver.frame(engine_sample(ex))
    e = frame.engines[0]
    assert e.restarted_at is not None and e.restarted_at.timestamp() == 1011.0
    # (1029, 1089]: before the restart 1030..1039 adds 9 x 60; the restart's first scrape counts its
    # whole value 5000; after it 39 x 60. Over scrapes 1030..1089 (59 s sampled), extrapolated by
    # one second to the window start: x 60 / 59, over 60 s.
    assert e.generation_tokens_per_s == pytest.approx((540 + 5000 + 2340) * (60 / 59) / 60)


def test_a_wide_bucket_is_shown_with_the_quantile():
    """Defect 13: a p95 inside the 1.0-2.5 s bucket carries the bucket."""
    hist = EngineHistory()
    for t, n in ((0.0, 0.0), (10.0, 100.0)):
        hist.add(
            Extract(
                t=t,
                histograms={"ttft": {(): (0.0, n * 0.5, n, n, n)}},
                bounds={"ttft": {(): (0.1, 1.0, 2.5, math.inf)}},
            )
        )
    p = derive(hist.points, VLLM, 60).fields["ttft_s"]
    assert p.p95 == pytest.approx(1.0 + 1.5 * 45 / 50) and p.buckets["p95"] == (1.0, 2.5)
    assert p.p50 == pytest.approx(1.0) and p.buckets["p50"] == (0.1, 1.0)  # 0.1-1.0: wide too


@pytest.mark.slow
@pytest.mark.integration
def test_snapshot_shows_the_5m_burn_of_an_engine_failing_one_in_101(tmp_path):
    """Acceptance: 10 good and 0.1 failed requests per second, 99.5% completion -> burn 1.98."""
    import json
    import subprocess
    import sys
    import time

    from console.sim.engine import MetricsServer
    from tests.conftest import ROOT

    t0 = time.time()

    def page() -> str:
        dt = time.time() - t0
        return (
            '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 4\n'
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{engine="0",finished_reason="stop"}} {1000 + 10 * dt!r}\n'
            f'vllm:request_success_total{{engine="0",finished_reason="error"}} {10 + 0.1 * dt!r}\n'
        )

    server = MetricsServer(page).start()
    try:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            f'engines:\n  - name: e\n    url: {server.url}\nservices:\n  - name: e\n    device: "0"\n'
            "    model: llama-3.1-8b\n    weight_bits: 16\n    tokens_per_sequence: 1000\n"
            "    concurrent_sequences: 1\n    slo: {completion: 0.995}\n"
        )
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "console",
                "snapshot",
                "--config",
                str(cfg),
                "--no-gpu",
                "--wait",
                "30",
                "--format",
                "json",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.stop()
    assert res.returncode == 0, res.stderr
    burn = json.loads(res.stdout)["services"][0]["slo"]["burn"]["windows"]["5m"]
    assert burn["requests"] > 250  # about 30 s of 10.1 requests a second
    assert burn["burn"] == pytest.approx((0.1 / 10.1) / 0.005, rel=1e-6)
    assert round(burn["burn"], 2) == 1.98


@pytest.mark.slow
def test_the_whole_derivation_at_1s_for_6_hours_fires_and_clears_burn_alerts():
    """Every history at the real cadence: the Deriver polled at 1 s for 6.5 simulated hours, with an
    error burst in the middle, raises the fast burn alert and clears it."""
    plan = Plan(
        services=[
            Service(
                name="s",
                engine="v",
                device="0",
                model="llama-3.1-8b",
                weight_bits=16,
                tokens_per_sequence=1000,
                concurrent_sequences=1,
                slo=SloSpec(completion=0.995),
            )
        ]
    )
    deriver = Deriver(plan, window_s=60)
    ok = err = tok = 0.0
    seen: dict[str, list[float]] = {}
    for k in range(int(6.5 * 3600)):
        t = 1_000_000.0 + k
        burst = 2 * 3600 <= k < 2 * 3600 + 1800
        ok += 5.0 if burst else 10.0
        err += 5.0 if burst else 0.0
        tok += 300.0
        ex = Extract(
            t=t,
            gauges={"requests_running": {eng(0): 3.0}},
            counters={
                "generation_tokens": {eng(0): (tok,)},
                "requests_finished": {
                    eng(0, finished_reason="stop"): (ok,),
                    eng(0, finished_reason="error"): (err,),
                },
            },
        )
        frame = deriver.frame(engine_sample(ex))
        for a in frame.alerts:
            if a.rule == "burn" and a.state == "active":
                seen.setdefault(a.severity, []).append(k / 3600)
    assert 2.0 < min(seen["critical"]) < 2.3 and max(seen["critical"]) < 2.7
    assert not [a for a in frame.alerts if a.rule == "burn" and a.state == "active"]
    assert frame.engines[0].generation_tokens_per_s == pytest.approx(300.0)
    assert len(deriver.tracks["v"].history.points) <= 931  # 15.5 minutes at 1 s


def test_a_replay_at_any_speed_draws_the_trend_seen_live():
    """Sparklines read one time-based history: jumping to the end of a recording (as 60x play does)
    gives the same last 16 seconds of tokens/s as the live console drew."""
    import asyncio

    from console.figures.keyseries import KeySeries
    from console.read.replay import ReplaySource

    samples = []
    for k in range(120):
        t = 5000.0 + k
        ex = Extract(t=t, counters={"generation_tokens": {eng(0): (float(k * k),)}})
        samples.append(engine_sample(ex))
    live, deriver = KeySeries(), Deriver(window_s=60)
    for s in samples:
        live.add(deriver.frame(s))
    src = ReplaySource({"window_s": 60}, samples)
    src.playing = False
    src.seek(samples[-1].t)
    asyncio.run(src.poll())
    want = live.trend("v.generation_tokens_per_s", 16)
    assert len(want) == 16 and src.history.trend("v.generation_tokens_per_s", 16) == want


def _burning(seconds: int, error_share: float, start: float = 0.0) -> OutcomeHistory:
    """An OutcomeHistory at 1 s polls: 10 requests a second, ``error_share`` of them failing."""
    hist = OutcomeHistory()
    good = failed = 0.0
    for k in range(seconds + 1):
        good += 10 * (1 - error_share)
        failed += 10 * error_share
        hist.add(start + k, {("e", "ok"): (good, 1.0, 0.0), ("e", "err"): (failed, 0.0, 1.0)})
    return hist


def test_burn_windows_say_how_much_they_hold_and_never_alert_on_too_little():
    """Defect 2: 20 s at 7x read 7x over 5m, 1h and 6h and fired both burn alerts. A window
    counts once it holds its pair's short window (5m whole; 1h for 5 m; 6h for 1 h)."""
    from console.figures.slo import BURN_READY_S

    assert BURN_READY_S == {300.0: 300.0, 3600.0: 300.0, 21600.0: 3600.0}
    burn = burn_rates(_burning(20, 0.035), 0.995)  # 7x
    for name, w in burn.windows.items():
        assert w.burn == pytest.approx(7.0) and w.covered_s == 20.0, name
        assert w.ready is False
    assert burn_alert(burn) is None
    # 20x for 299 s: still nothing; at 300 s the 5m and 1h windows hold 5 minutes: critical
    assert burn_alert(burn_rates(_burning(299, 0.1), 0.995)) is None
    hit = burn_alert(burn_rates(_burning(300, 0.1), 0.995))
    assert hit is not None and hit[0] == "critical"
    # 7x (slow burn) needs the 6h window to hold an hour
    assert burn_alert(burn_rates(_burning(3599, 0.035), 0.995)) is None
    hit = burn_alert(burn_rates(_burning(3600, 0.035), 0.995))
    assert hit is not None and hit[0] == "warning"


def test_a_burn_window_with_too_few_requests_never_alerts():
    from console.figures.slo import MIN_BURN_REQUESTS

    hist = OutcomeHistory()
    for k in range(400):  # one request a minute, every one failing
        n = float(k // 60)
        hist.add(float(k), {("e", "err"): (n, 0.0, 1.0), ("e", "ok"): (0.0, 1.0, 0.0)})
    burn = burn_rates(hist, 0.995)
    assert burn.windows["5m"].requests < MIN_BURN_REQUESTS
    assert burn.windows["5m"].burn == pytest.approx(200.0)
    assert burn.windows["5m"].ready is False and burn_alert(burn) is None


def test_a_node_with_no_request_within_target_has_no_price_per_good_token():
    """0 % of requests within the TTFT target read '$/M good ≥$0.20' (the node's own low bound):
    with no compliant token served there is no price per one, and the cell says so."""
    from console.fleet.prom import PromClient
    from console.fleet.source import FleetSource
    from console.fleet.state import node_row
    from console.frame import Engine
    from screens.fleet import _cost
    from tests.frames import node_frame

    src = FleetSource(PromClient("http://127.0.0.1:9"), cost=CostSpec(hourly_usd=2.0))
    e = Engine(name="e", url="u", up=True, generation_tokens_per_s=500.0)
    none = src._summary([e], [0.0], 0.2)
    assert none.no_good and none.usd_per_m_compliant_tokens_at_least is None
    assert _cost(none, "").plain == "no good"
    assert "no compliant tokens" in node_row("n", node_frame(), none)["cost_basis"]
    half = src._summary([e], [0.5], None)  # 250 good tok/s at $2/h
    assert half.usd_per_m_compliant_tokens_at_least == pytest.approx(2.0 * 1e6 / (3600 * 250))
    assert _cost(half, "").plain == f"≥${2.0 * 1e6 / (3600 * 250):,.2f}~"
    assert src._summary([e], [0.5], 0.2).usd_per_m_compliant_tokens_at_least == 0.2


def test_a_fleet_answer_without_the_engine_kinds_keeps_the_last_frames():
    """A poll in which Prometheus answered `up` but timed out on the queries that say which
    engines exist built nodes without their engines (the fleet table emptied for a refresh):
    such an answer is incomplete, and the last frames stay with their age."""
    import asyncio

    from console.fleet.prom import PromClient, PromError
    from console.fleet.source import FleetSource

    class Prom(PromClient):
        slow = False

        async def query(self, q, at=None):
            if q == "up":
                return [({"instance": "e:1", "node": "n", "job": "vllm"}, 1.0)]
            if self.slow and "vllm" in q:
                raise PromError("http://127.0.0.1:9: no answer within 1 s")
            if "vllm:num_requests_running" in q and "sum" not in q:
                return [({"instance": "e:1", "node": "n"}, 2.0)]
            return []

    prom = Prom("http://127.0.0.1:9")
    src = FleetSource(prom)
    first = asyncio.run(src.poll())
    before = dict(first.nodes)
    assert before and before["n"].engines, before
    prom.slow = True
    second = asyncio.run(src.poll())
    assert second.errors and second.nodes == before


def test_the_fleet_trend_names_nodes_as_the_table_does_without_a_node_label():
    """The 'Last hour tok/s' trend grouped by a `node` label only: targets without one got an
    empty trend. It is summed per node as the table names nodes (the instance's host)."""
    import asyncio

    from console.fleet.prom import PromClient
    from console.fleet.source import FleetSource

    class Prom(PromClient):
        async def query_range(self, q, start, end, step):
            assert "by (node, instance)" in q
            return [
                ({"instance": "gpu-7:8000"}, [(0.0, 10.0), (60.0, 12.0)]),
                ({"instance": "gpu-7:8001"}, [(0.0, 5.0), (60.0, 6.0)]),
                ({"instance": "e:1", "node": "n"}, [(60.0, 3.0)]),
            ]

    src = FleetSource(Prom("http://127.0.0.1:9"))
    asyncio.run(src._trends(1000.0))
    assert src.state.trends == {"gpu-7": [15.0, 18.0], "n": [3.0]}
