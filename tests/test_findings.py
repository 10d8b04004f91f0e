"""Each finding rule: one frame that fires it, one that does not."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from console.figures.findings import findings
from console.frame import (
    BurnReport,
    BurnWindow,
    Engine,
    Frame,
    Gpu,
    GpuSource,
    MemoryLine,
    Percentiles,
    RequestTokens,
    ServiceStatus,
    SloReport,
)
from console.out.snapshot import to_markdown

GIB = 2**30


def frame(engines=(), gpus=(), services=()) -> Frame:
    return Frame(
        taken_at=datetime(2026, 12, 1, 12, tzinfo=UTC),
        host="n",
        inferdeck_version="t",
        window_s=60,
        gpu_source=GpuSource(kind="none"),
        engines=list(engines),
        gpus=list(gpus),
        services=list(services),
    )


def eng(**kw) -> Engine:
    return Engine(name="v", url="http://127.0.0.1:1/metrics", up=True, **kw)


def pct(p95: float) -> Percentiles:
    return Percentiles(p95=p95, window="1m", observations=100)


def titles(f: Frame) -> list[str]:
    return [x.title for x in findings(f)]


def test_a_late_first_token_after_a_queue_drained_is_load_not_prefill():
    """p90 TTFT at 38x its SLO, nothing waiting now and no rise: prefill, where the window's
    queue time is short (or the engine exports none); where queueing held most of the TTFT p95
    (a queue that drained is still in the window), those requests were late from load:
    saturated, with its knob; where the window cannot tell, no kind."""
    from console.figures.findings import saturation_kind
    from console.frame import CapacityReport

    cap = CapacityReport(saturation=38.0, saturation_slo="ttft", saturating=False,
                         saturation_requests=300)  # fmt: skip
    slow = eng(capacity=cap, ttft_s=pct(70.0), queue_time_s=pct(2.0), requests_waiting=0)
    assert saturation_kind(slow) == "prefill"
    assert titles(frame([slow]))[0].endswith("with nothing waiting: prefill, not load")
    drained = slow.model_copy(update={"queue_time_s": pct(60.0)})
    assert saturation_kind(drained) == "saturated"
    got = [f for f in findings(frame([drained])) if f.title.startswith("saturated")]
    assert got and "replica" in got[0].knob
    assert not any("prefill, not load" in t for t in titles(frame([drained])))
    # the window's TTFT p95 back to 0.24 s, its queue p95 only known to lie in (0, 0.3 s]: the
    # index (read every few seconds) is not borne out, and no kind is guessed
    vague = Percentiles(
        p95=0.285, window="1m", observations=100, buckets={"p95": (0.0, 0.3)}, wide=["p95"]
    )
    settled = slow.model_copy(update={"ttft_s": pct(0.24), "queue_time_s": vague})
    assert saturation_kind(settled) is None
    assert saturation_kind(slow.model_copy(update={"queue_time_s": None})) == "prefill"


def test_ttft_mostly_queueing_or_prefill():
    queued = frame([eng(ttft_s=pct(2.0), queue_time_s=pct(1.5), requests_waiting=12)])
    (f,) = findings(queued)
    assert f.severity == "warning" and f.title == "TTFT is mostly queueing (75% of its p95)"
    assert "queue p95 1.50s" in f.evidence[0] and "replica" in f.knob
    prefill = frame([eng(ttft_s=pct(2.0), queue_time_s=pct(0.1))])
    assert titles(prefill) == ["TTFT is mostly prefill (95% of its p95 after the queue)"]
    between = frame([eng(ttft_s=pct(2.0), queue_time_s=pct(0.6))])  # 30%: neither
    fast = frame([eng(ttft_s=pct(0.15), queue_time_s=pct(0.14))])  # not worth a finding
    # vLLM's first queue bucket is (0, 0.3 s]: a p95 of 285 ms there says only "under 0.3 s"
    vague = Percentiles(
        p95=0.285, window="1m", observations=100, buckets={"p95": (0.0, 0.3)}, wide=["p95"]
    )
    unresolved = frame([eng(ttft_s=pct(0.45), queue_time_s=vague)])
    assert titles(between) == titles(fast) == titles(unresolved) == []


def test_kv_pressure_with_preemptions():
    hot = frame([eng(kv_cache_usage=0.95, preemptions=7, kv_capacity_tokens=160000)])
    (f,) = findings(hot)
    assert f.severity == "critical" and "7 preemptions" in f.title
    assert titles(frame([eng(kv_cache_usage=0.95, preemptions=0)])) == []
    # one is one: "1 preemption", SGLang's "1 retraction"
    (one,) = findings(frame([eng(kv_cache_usage=0.95, preemptions=1)]))
    assert "with 1 preemption in the window" in one.title
    (sgl,) = findings(frame([eng(kind="sglang", kv_cache_usage=0.95, preemptions=1)]))
    assert "1 retraction in" in sgl.title and "retraction 1" not in sgl.evidence[1]
    assert titles(frame([eng(kv_cache_usage=0.6, preemptions=4)])) == []


def test_kv_findings_never_read_an_unread_kv_use_as_zero():
    """Requests waiting for KV (or preempted at a full window peak) with the current KV use
    unread: the evidence says n/a now, not 0.0%."""
    (waits,) = findings(frame([eng(requests_waiting_kv=3, kv_cache_usage_peak=0.97)]))
    assert "KV use n/a now, peak 97.0% in the window" in waits.evidence[0], waits.evidence
    (full,) = findings(frame([eng(kv_cache_usage_peak=0.95, preemptions=4)]))
    assert full.evidence[0].startswith("KV use n/a of n/a tokens now, peak 95.0%"), full.evidence
    (read,) = findings(frame([eng(requests_waiting_kv=3, kv_cache_usage=0.5)]))
    assert "KV use 50.0% now, peak 50.0%" in read.evidence[0]


def test_queue_finding_names_its_window_in_words():
    early = Percentiles(p95=2.0, window="since_start", observations=100)
    f = frame([eng(ttft_s=early, queue_time_s=pct(1.8))])
    (found,) = findings(f)
    assert "(since start)" in found.evidence[0] and "since_start" not in found.evidence[0]


def test_clock_events():
    def gpu(events):
        return Gpu(index=0, clock_events=events, power_w=590, power_limit_w=600)

    (f,) = findings(frame(gpus=[gpu(["power cap"])]))
    assert f.severity == "warning" and f.title == "clocks held back by power cap"
    (f,) = findings(frame(gpus=[gpu(["thermal (SW)"])]))
    assert f.severity == "critical" and "cooling" in f.knob
    assert titles(frame(gpus=[gpu(["idle"])])) == []


def test_imbalance_and_prefix_heavy():
    (f,) = findings(frame([eng(imbalance="rank engine=1 holds 11 of 14 waiting requests")]))
    assert f.title == "data-parallel imbalance" and "engine=1" in f.evidence[0]
    heavy = frame([eng(prefix_cache_hit_rate=0.8, prompt_tokens_per_s=10000.0)])
    (f,) = findings(heavy)
    assert f.title == "prefix-cache hits make 80% of prompt tokens"
    assert "about 2,000 tok/s computed" in f.evidence[0]
    assert titles(frame([eng(prefix_cache_hit_rate=0.3, prompt_tokens_per_s=1e4)])) == []


def svc(memory=(), burn=None) -> ServiceStatus:
    slo = None
    if burn is not None:
        slo = SloReport(
            window="5m",
            percentile="p95",
            burn=BurnReport(
                error_budget=0.005,
                period_days=30,
                windows={"1h": BurnWindow(bad_share=burn * 0.005, requests=1000, burn=burn)},
            ),
        )
    return ServiceStatus(
        name="s",
        engine="v",
        device="0",
        model="m",
        required_bytes=1.0,
        memory=list(memory),
        slo=slo,
    )


def test_plan_drift():
    short = MemoryLine(
        name="kv", planned_bytes=20 * GIB, engine_bytes=15 * GIB, drift_bytes=-5 * GIB, source="x"
    )
    over = MemoryLine(
        name="total", planned_bytes=40 * GIB, engine_bytes=43 * GIB, drift_bytes=3 * GIB, source="y"
    )
    got = titles(frame(services=[svc([short, over])]))
    assert got == [
        "the engine holds 5.0 GiB less KV cache than planned",
        "the engine uses 3.0 GiB more memory than planned",
    ]
    roomy = MemoryLine(
        name="kv", planned_bytes=20 * GIB, engine_bytes=25 * GIB, drift_bytes=5 * GIB, source="x"
    )
    assert titles(frame(services=[svc([roomy])])) == []


@pytest.mark.parametrize("burn,severity", [(20.0, "critical"), (7.0, "warning"), (2.0, None)])
def test_error_budget_burn(burn, severity):
    got = findings(frame(services=[svc(burn=burn)]))
    if severity is None:
        assert got == []
    else:
        (f,) = got
        assert f.severity == severity and f.title == f"error budget burning {burn:.1f}x over 1h"


def test_ranked_and_in_snapshot_md():
    f = frame(
        [eng(ttft_s=pct(2.0), queue_time_s=pct(1.5), kv_cache_usage=0.97, preemptions=3)],
        services=[svc(burn=7.0)],
    )
    assert [x.severity for x in findings(f)] == ["critical", "warning", "warning"]
    md = to_markdown(f)
    assert "## Findings (3)" in md and "  - consider: add capacity (a replica)" in md


def test_context_far_above_what_requests_use():
    """Planned 32 x 32,768 tokens; 400 requests, none above 2,000 + 1,000 tokens: the plan's
    context is 10.9x the largest request; at 6,144 tokens the same KV holds 170 sequences."""

    def case(most, requests=400.0, planned=32768):
        rt = RequestTokens(
            prompt_p50=700,
            prompt_p99=1900,
            output_p50=300,
            output_p99=950,
            most=most,
            requests=requests,
            window="5m",
        )
        svc = ServiceStatus(
            name="chat",
            engine="v",
            device="0",
            model="m",
            required_bytes=1.0,
            tokens_per_sequence=planned,
            concurrent_sequences=32,
        )
        return frame([eng(request_tokens=rt)], services=[svc])

    (f,) = findings(case(3000.0))
    assert f.severity == "info" and f.subject == "chat"
    assert f.title == "requests use at most 3,000 of the 32,768 tokens planned per sequence"
    assert "p99 1,900" in f.evidence[0] and "none above 3,000" in f.evidence[1]
    assert "at 6,144 tokens per sequence the planned KV holds 170 sequences instead of 32" in f.knob
    assert f.weight == pytest.approx(32768 / 3000)
    assert findings(case(9000.0)) == []  # 3.6x: within the spare allowed
    assert findings(case(None)) == []  # a request fell in +Inf: no bound
    assert findings(case(3000.0, requests=20)) == []  # too few requests to say
    assert findings(case(3000.0, planned=None)) == []  # no plan for this engine
