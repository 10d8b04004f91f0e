"""What an operator sees first (issue: right from the first second): counters that jitter,
thresholds met exactly, phases that add up, gauges read at different instants, wide buckets,
impossible and ambiguous values, drift within tolerance, and trtllm-serve's first release."""

from __future__ import annotations

import math
from array import array

import pytest

from console.engines import Extract, detect_kind, extract, needed_families, profiles
from console.figures.enginestats import derive, imbalance
from console.figures.findings import findings, strays
from console.figures.headroom import drift_tolerance
from console.figures.slo import OutcomeHistory, burn_alert, burn_rates
from console.figures.thresholds import at_least, below
from console.figures.window import wide
from console.figures.windowed import EngineHistory
from console.frame import (
    BurnReport,
    BurnWindow,
    Engine,
    EngineRank,
    MemoryLine,
    ServiceStatus,
    SloReport,
)
from console.promtext import parse
from console.units import quantile_text
from tests.conftest import fixture_text
from tests.test_findings import frame as _frame

VLLM = profiles()["vllm"]


def page_extract(text: str, kind: str | None = None, t: float = 100.0):
    page = parse(text, keep=needed_families().__contains__)
    found = kind or detect_kind(page)
    assert found is not None
    return found, extract(page, profiles()[found], t)


# --- 3. float jitter is not a restart ----------------------------------------------------------


def test_a_counter_a_hair_below_its_last_value_is_jitter_not_a_restart():
    """175 tok/s on a counter near 1e6; one scrape reads 1e-6 below the one before. It read
    17,748 tok/s and 'engine restarted'."""
    hist = EngineHistory()
    value = 1e6
    for k in range(61):
        value += 175.0
        shown = value - 175.0 - 1e-6 if k == 30 else value
        if k == 30:
            value -= 175.0  # this scrape did not move; it printed a hair lower
        hist.add(Extract(t=float(k), counters={"generation_tokens": {(): array("d", [shown])}}))
    d = derive(hist.points, VLLM, 60.0)
    # (0, 60]: 59 steps, one of them still -> 58 x 175 over 59 s of samples, extrapolated to 60 s
    assert d.fields["generation_tokens_per_s"] == pytest.approx(175.0 * 58 / 59, rel=1e-9)
    assert d.reset_at is None
    # a real reset still is one
    hist.add(Extract(t=61.0, counters={"generation_tokens": {(): array("d", [40.0])}}))
    assert derive(hist.points, VLLM, 60.0).reset_at == 61.0


def test_outcome_jitter_is_not_a_reset():
    hist = OutcomeHistory()
    for k in range(100):
        good = 1e6 + 10 * k - (1e-6 if k == 50 else 0.0)
        hist.add(float(k), {("e", "ok"): (good, 1.0, 0.0), ("e", "err"): (5.0, 0.0, 1.0)})
    share, n = hist.bad_share(300)
    assert share == 0.0 and n == pytest.approx(990.0, abs=1e-3)


# --- 4. thresholds at exactly their value --------------------------------------------------------


def test_one_comparison_meets_a_threshold_exactly_despite_float_error():
    assert 1 - 0.99 != 0.01 and 0.06 / (1 - 0.99) < 6.0  # the float error the defect hit
    assert at_least(0.06 / (1 - 0.99), 6.0) and at_least(0.7 - 0.4, 0.3)
    assert not at_least(5.99, 6.0) and below(0.2999, 0.3) and not below(0.3, 0.3)


def _burn(windows: dict[str, float], budget: float) -> BurnReport:
    return BurnReport(
        error_budget=budget,
        period_days=30.0,
        windows={
            w: BurnWindow(burn=b, ready=True, requests=1000.0, covered_s=21600.0)
            for w, b in windows.items()
        },
    )


@pytest.mark.parametrize("target", [0.99, 0.995, 0.999])
def test_burn_alerts_fire_at_exactly_6x_and_14_4x(target):
    budget = 1 - target
    six = (6.0 * (1 - target)) / budget  # what burn_rates computes from a 6x bad share
    fast = (14.4 * (1 - target)) / budget
    hit = burn_alert(_burn({"5m": 0.0, "1h": six, "6h": six}, budget))
    assert hit is not None and hit[0] == "warning", six
    hit = burn_alert(_burn({"5m": fast, "1h": fast, "6h": 0.0}, budget))
    assert hit is not None and hit[0] == "critical"
    assert burn_alert(_burn({"5m": 0.0, "1h": 5.99, "6h": 5.99}, budget)) is None


def test_the_burn_rate_of_a_6x_share_at_a_99_target_fires():
    """burn_rates on a history whose bad share is exactly 6 % against a 1 % budget."""
    hist = OutcomeHistory()
    for k in range(21601):
        hist.add(float(k), {("e", "ok"): (94.0 * k, 1.0, 0.0), ("e", "err"): (6.0 * k, 0.0, 1.0)})
    burn = burn_rates(hist, 0.99)
    assert burn.windows["1h"].burn < 6.0  # 5.999999999999995
    hit = burn_alert(burn)
    assert hit is not None and hit[0] == "warning"


def test_findings_at_exactly_their_thresholds():
    # the 1 h burn finding at exactly 6x (a 99 % target)
    share = 0.06
    budget = 1 - 0.99
    slo = SloReport(
        window="5m",
        percentile="p95",
        burn=BurnReport(
            error_budget=budget,
            period_days=30,
            windows={"1h": BurnWindow(bad_share=share, requests=1000, burn=share / budget)},
        ),
    )
    svc = ServiceStatus(
        name="s", engine="v", device="0", model="m", required_bytes=1.0, fits=True, slo=slo
    )
    got = [f.title for f in findings(_frame(services=[svc]))]
    assert got == ["error budget burning 6.0x over 1h"]
    # KV at exactly 90 % with preemptions
    e = Engine(name="v", url="u", up=True, kv_cache_usage=0.9, preemptions=3)
    assert any("KV cache" in f.title for f in findings(_frame([e])))


def test_dp_imbalance_at_exactly_30_points():
    ranks = [
        EngineRank(key="engine=0", kv_cache_usage=0.7),
        EngineRank(key="engine=1", kv_cache_usage=0.4),
    ]
    assert imbalance(ranks) == "rank engine=0 KV cache 70% full, least used 40%"
    ranks[0] = EngineRank(key="engine=0", kv_cache_usage=0.69)
    assert imbalance(ranks) is None


# --- 5. SGLang's CUDA-graph memory adds its phases ----------------------------------------------


def test_sglang_graph_memory_sums_its_phases_then_takes_the_fullest_rank():
    text = fixture_text("sglang-0.5-dp2-written.prom")
    lines = []
    for line in text.splitlines():
        if line.startswith("sglang:graph_memory_usage_gb{"):
            lines.append(line.replace("1.25", "0.875"))
            lines.append(line.replace('phase="decode"', 'phase="prefill"').replace("1.25", "0.875"))
        else:
            lines.append(line)
    kind, ex = page_extract("\n".join(lines) + "\n")
    assert kind == "sglang"
    d = derive([ex], profiles()[kind], 60.0)
    assert d.fields["memory"].graphs_bytes == pytest.approx(1.75 * 2**30)  # was 0.875


# --- 6. Dynamo's running never goes negative ----------------------------------------------------


def test_dynamo_running_is_na_when_in_flight_and_queued_cross():
    text = fixture_text("dynamo-frontend-written.prom").replace(
        'dynamo_frontend_inflight_requests{model="Qwen/Qwen3-32B"} 40.0',
        'dynamo_frontend_inflight_requests{model="Qwen/Qwen3-32B"} 1.0',
    )
    kind, ex = page_extract(text)
    d = derive([ex], profiles()[kind], 60.0)
    assert "requests_running" not in d.fields or d.fields["requests_running"] is None
    why = d.unavailable["requests_running"]
    assert "different instants" in why and "(1)" in why


# --- 7. wide buckets from 1.5x --------------------------------------------------------------------


def test_vllms_2x_buckets_are_marked_and_every_bucket_is_in_the_json():
    assert wide((2.5, 5.0), 3.3) and wide((20.0, 40.0), 31.0) and wide((0.0, 0.3), 0.2)
    assert not wide((1.0, 1.5), 1.2) and not wide((0.1, 0.12), 0.11)
    hist = EngineHistory()
    les = (1.0, 2.5, 5.0, math.inf)
    for k, counts in enumerate(([0, 0, 0, 0], [0, 0, 100, 100])):
        hist.add(
            Extract(
                t=float(k),
                histograms={"ttft": {(): array("d", counts + [counts[-1]])}},
                bounds={"ttft": {(): les}},
            )
        )
    p = derive(hist.points, VLLM, 60.0).fields["ttft_s"]
    assert p.buckets["p50"] == (2.5, 5.0) and "p50" in p.wide
    assert quantile_text(p, "p95").startswith("4.88s")
    assert "±" in quantile_text(p, "p95")


# --- 8. impossible and ambiguous values ---------------------------------------------------------


def _vllm_page(**replace: str) -> str:
    text = fixture_text("vllm-live.prom")
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text


def _gauge_line(name: str) -> str:
    return next(
        line for line in fixture_text("vllm-live.prom").splitlines() if line.startswith(name + "{")
    )


@pytest.mark.parametrize(
    "series,value,signal,why",
    [
        ("vllm:kv_cache_usage_perc", "-5", "kv_cache_usage", "below zero"),
        ("vllm:kv_cache_usage_perc", "1.7", "kv_cache_usage", "above 1"),
        ("vllm:kv_cache_usage_perc", "+Inf", "kv_cache_usage", "not a finite number"),
        ("vllm:num_requests_waiting", "+Inf", "requests_waiting", "not a finite number"),
        ("vllm:num_requests_waiting", "-3", "requests_waiting", "below zero"),
    ],
)
def test_a_value_outside_its_domain_is_na_naming_the_engines_value(series, value, signal, why):
    line = _gauge_line(series)
    head = line.rsplit(" ", 1)[0]
    kind, ex = page_extract(_vllm_page(**{line: f"{head} {value}"}))
    d = derive([ex], profiles()[kind], 60.0)
    assert d.fields.get(signal) is None
    assert why in d.unavailable[signal] and series in d.unavailable[signal]
    assert f"reads {float(value):g}" in d.unavailable[signal]


def test_a_duplicated_series_is_na_with_a_reason():
    line = _gauge_line("vllm:num_requests_running")
    kind, ex = page_extract(_vllm_page(**{line: line + "\n" + line.rsplit(" ", 1)[0] + " 7"}))
    d = derive([ex], profiles()[kind], 60.0)
    assert d.fields.get("requests_running") is None
    assert "appears twice with the same labels" in d.unavailable["requests_running"]
    bucket = next(
        x
        for x in fixture_text("vllm-live.prom").splitlines()
        if x.startswith("vllm:time_to_first_token_seconds_bucket{")
    )
    kind, ex = page_extract(_vllm_page(**{bucket: bucket + "\n" + bucket}))
    d = derive([ex], profiles()[kind], 60.0)
    assert "a bucket twice" in d.unavailable["ttft_s"]


def test_plan_drift_has_a_tolerance():
    planned = 16 * 2**30
    tol = drift_tolerance(planned, 0.0)
    assert tol == pytest.approx(0.01 * planned)
    assert drift_tolerance(planned, 2 * 2**30) == 2 * 2**30  # the plan's margin when larger
    small = MemoryLine(
        name="kv", planned_bytes=planned, drift_bytes=-2 * 2**20, tolerance_bytes=tol
    )
    big = MemoryLine(name="kv", planned_bytes=planned, drift_bytes=-2 * 2**30, tolerance_bytes=tol)
    assert not strays(small) and strays(big)


# --- 9. trtllm-serve's first release ------------------------------------------------------------


def test_trtllm_serves_first_release_page_is_recognised():
    page = "\n".join(
        line
        for line in fixture_text("trtllm-serve-2025-written.prom").splitlines()
        if line.startswith(("# HELP time_to_first", "# TYPE time_to_first", "time_to_first"))
    )
    assert 'engine_type="trtllm"' in page
    kind, ex = page_extract(page + "\n")
    assert kind == "trtllm"
    assert "first release (no prefix)" in ex.hints
    d = derive([ex], profiles()[kind], 60.0)
    assert d.fields["ttft_s"].observations > 0
