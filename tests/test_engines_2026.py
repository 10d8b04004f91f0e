"""Engines as they ship in 2026: trtllm-serve (both naming eras), the Dynamo frontend, vLLM 0.33
with two DP engines, SGLang 0.5 with two DP schedulers, llama.cpp's newer counters and /slots.

The *-written.prom pages were written from each engine's released source (see
tests/fixtures/metrics/make_written.py); every figure below is worked out by hand from the counts
on the page, the arithmetic shown beside it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from console.cmdline import classify
from console.engines import detect_kind, extract, needed_families, profiles
from console.figures.enginestats import derive, imbalance
from console.figures.headroom import HeadroomState, evaluate, memory_lines
from console.figures.plan import GIB, Node, Plan, Service, fit
from console.frame import Engine, EngineRank
from console.promtext import parse
from console.read.discovery import from_processes, probe_ports
from console.read.live import LiveSource
from console.read.llamaslots import slots_kv
from console.read.poller import EngineTarget
from console.sim.engine import TrafficSpec, start_engine
from tests import promref

FIX = Path(__file__).parent / "fixtures" / "metrics"


def read(name: str, t: float = 100.0, kind: str | None = None):
    page = parse((FIX / name).read_text(), keep=needed_families().__contains__)
    found = detect_kind(page)
    assert found is not None
    return found, extract(page, profiles()[kind or found], t)


def derived(name: str):
    kind, ex = read(name)
    d = derive([ex], profiles()[kind], 60.0)
    return kind, d.fields, d.unavailable


def p95(pct) -> float:
    return pct.p95


# --- vLLM 0.33, two DP engines ------------------------------------------------------------------


def test_vllm_033_two_dp_engines_read_and_summed():
    kind, f, na = derived("vllm-0.33-dp2-written.prom")
    assert kind == "vllm"
    assert f["requests_running"] == 12 + 9
    assert f["requests_waiting"] == 3 + 11
    assert f["waiting_by_reason"] == {"capacity": 3 + 8, "deferred": 0 + 3}
    assert f["kv_cache_usage"] == 0.87  # the fuller engine
    # cache_config_info carries the DP-summed num_gpu_blocks on both engines' rows: read once
    assert f["kv_capacity_tokens"] == 20480 * 16
    # TTFT summed by le: <=0.1 holds 200+110=310, <=0.25 holds 346 of 361; rank 0.95*361 = 342.95
    assert p95(f["ttft_s"]) == pytest.approx(0.1 + 0.15 * (342.95 - 310) / 36)
    # ITL: <=0.05 holds 50000+15000, <=0.1 holds 70000; rank 66500
    assert p95(f["itl_s"]) == pytest.approx(0.075 + 0.025 * (66500 - 65000) / 5000)
    assert f["ttft_s"].window == "since_start"  # one scrape: the engine's own totals, labelled
    sp = f["speculative"]
    assert sp.acceptance_rate == pytest.approx((9000 + 7200) / (15000 + 12000))  # 0.6
    assert sp.mean_accepted_length == pytest.approx(1 + 16200 / (5000 + 4000))  # 2.8
    assert f["admission_rejections"] == {"max_num_queued_reqs": 7, "max_num_queued_tokens": 2}
    assert f["prompt_tokens_by_source"] == {
        "local_compute": 100000 + 90000,
        "local_cache_hit": 50000 + 30000,
        "external_kv_transfer": 0,
    }
    # engine 0: 196 requests never preempted, 4 once; engine 1: 155 never, 4 once, 1 twice
    assert f["preemptions_per_request"] == pytest.approx((4 + 4 + 2) / (200 + 160))
    assert f["preemptions"] == 10
    assert f["success_rate"] == pytest.approx(355 / 357)  # stop+length over those not aborted
    ranks = {r.key: r for r in f["ranks"]}
    assert ranks["engine=1"].requests_waiting == 11 and ranks["engine=0"].kv_cache_usage == 0.42
    # the busiest engine holds 11 of 14 waiting: 8 more than the other, 1.57x the mean of 7
    assert f["imbalance"] == "rank engine=1 holds 11 of 14 waiting requests (mean 7.0 per rank)"
    assert "kv_cache_usage" not in na and "speculative" not in na


def test_vllm_nothing_relies_on_removed_names():
    removed = {
        "vllm:gpu_cache_usage_perc",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:time_per_output_token_seconds",
    }
    text = (FIX / "vllm-0.33-dp2-written.prom").read_text()
    assert not any(name in text for name in removed)
    _, ex = read("vllm-0.33-dp2-written.prom")
    assert not set(ex.series.values()) & removed
    for signal in ("kv_cache_usage", "prefix_cache_hits", "itl", "tpot"):
        assert signal in ex.series  # each read from its new name


# --- SGLang 0.5, two DP schedulers --------------------------------------------------------------


def test_sglang_05_memory_split_spec_and_ranks():
    kind, f, _ = derived("sglang-0.5-dp2-written.prom")
    assert kind == "sglang"
    assert f["requests_running"] == 20 + 18
    assert f["requests_waiting"] == 2 + 5
    assert f["kv_cache_usage"] == 0.61
    assert f["kv_capacity_tokens"] == 250000 * 2  # each scheduler holds its own pool
    assert f["kv_evictable_tokens"] == 30000 + 25000
    # TTFT: <=0.4 holds 300, <=0.6 holds 390 of 400; rank 380
    assert p95(f["ttft_s"]) == pytest.approx(0.4 + 0.2 * (380 - 300) / 90)
    # ITL (per token): <=0.04 holds 90000, <=0.06 holds 100000; rank 95000
    assert p95(f["itl_s"]) == pytest.approx(0.04 + 0.02 * (95000 - 90000) / 10000)
    assert f["speculative"].acceptance_rate == pytest.approx((0.72 + 0.68) / 2)
    assert f["speculative"].mean_accepted_length == pytest.approx((3.1 + 2.9) / 2)
    mem = f["memory"]  # one scheduler's device; SGLang's "GB" are GiB
    assert mem.weights_bytes == pytest.approx(16.06 * GIB)
    assert mem.kv_bytes == pytest.approx(30.52 * GIB)
    assert mem.graphs_bytes == pytest.approx(1.25 * GIB)
    assert f["preemptions"] == 3 + 1  # retracted requests
    assert [r.key for r in f["ranks"]] == ["dp_rank=0", "dp_rank=1"]
    assert "imbalance" not in f  # 2 vs 5 waiting, 61% vs 55% KV: within bounds


def test_sglang_pd_queues():
    text = "\n".join(
        [
            "# TYPE sglang:num_running_reqs gauge",
            'sglang:num_running_reqs{engine_type="prefill",model_name="m",tp_rank="0"} 4',
            "# TYPE sglang:num_prefill_bootstrap_queue_reqs gauge",
            'sglang:num_prefill_bootstrap_queue_reqs{engine_type="prefill",model_name="m",tp_rank="0"} 3',
            'sglang:num_prefill_bootstrap_queue_reqs{engine_type="prefill",model_name="m",tp_rank="1"} 3',
            "# TYPE sglang:num_prefill_inflight_queue_reqs gauge",
            'sglang:num_prefill_inflight_queue_reqs{engine_type="prefill",model_name="m",tp_rank="0"} 7',
        ]
    )
    ex = extract(parse(text), profiles()["sglang"], 1.0)
    f = derive([ex], profiles()["sglang"], 60.0).fields
    # TP ranks repeat one scheduler's queue: counted once
    assert f["pd_queues"] == {"prefill_bootstrap": 3, "prefill_inflight": 7}


# --- trtllm-serve, both eras --------------------------------------------------------------------


def test_trtllm_serve_page():
    kind, f, na = derived("trtllm-serve-written.prom")
    assert kind == "trtllm"
    assert f["requests_running"] == 24 and f["requests_waiting"] == 6
    assert f["kv_cache_usage"] == 0.73
    assert f["kv_capacity_tokens"] == 8192 * 32
    # TTFT: <=0.25 holds 400, <=0.5 holds 520 of 547; rank 519.65
    assert p95(f["ttft_s"]) == pytest.approx(0.25 + 0.25 * (519.65 - 400) / 120)
    # time per output token: <=0.05 holds 500, <=0.075 holds 547
    assert p95(f["tpot_s"]) == pytest.approx(0.05 + 0.025 * (519.65 - 500) / 47)
    assert "itl_s" in na  # no per-step series: said, not invented
    assert f["speculative"].acceptance_rate == pytest.approx(4500 / 6000)
    assert f["speculative"].mean_accepted_length == 2.5  # its own gauge (no drafts counter)
    assert f["success_rate"] == pytest.approx(540 / 542)  # cancelled apart, timeout failed
    assert f["requests_aborted"] == 5 and f["requests_failed"] == 2
    assert f["memory"].total_bytes == 72e9


def test_trtllm_serve_first_release_unprefixed():
    kind, f, na = derived("trtllm-serve-2025-written.prom")
    assert kind == "trtllm"
    assert f["kv_cache_usage"] == 0.73
    assert p95(f["ttft_s"]) == pytest.approx(0.25 + 0.25 * (519.65 - 400) / 120)
    assert f["success_rate"] == pytest.approx(540 / 542)
    assert "requests_running" in na  # that release had no iteration gauges


def test_trtllm_named_as_dynamo_reexports_it():
    text = (FIX / "trtllm-serve-written.prom").read_text().replace("trtllm_", "trtllm:")
    page = parse(text, keep=needed_families().__contains__)
    assert detect_kind(page) == "trtllm"
    f = derive([extract(page, profiles()["trtllm"], 1.0)], profiles()["trtllm"], 60.0).fields
    assert f["requests_waiting"] == 6 and f["kv_capacity_tokens"] == 8192 * 32


def test_trtllm_discovered_at_its_prometheus_path(tmp_path):
    assert classify(["trtllm-serve", "serve", "nvidia/m", "--port", "8123"]) == ("trtllm", 8123)
    pid = tmp_path / "4242"
    pid.mkdir()
    (pid / "cmdline").write_bytes(b"/usr/bin/trtllm-serve\0serve\0m\0--port\08123\0")
    (found,) = from_processes([4242], tmp_path)
    assert (found.kind, found.url) == ("trtllm", "http://127.0.0.1:8123/prometheus/metrics")
    eng = start_engine("trtllm", TrafficSpec(rate_rps=2.0))
    try:
        # its /metrics answers JSON iteration stats; the probe finds the Prometheus text
        (probed,) = asyncio.run(probe_ports([eng.server.port]))
        assert (probed.kind, probed.url) == ("trtllm", eng.url)
        assert eng.url.endswith("/prometheus/metrics")
    finally:
        eng.stop()


# --- Dynamo frontend ----------------------------------------------------------------------------


def test_dynamo_frontend_page():
    kind, f, _ = derived("dynamo-frontend-written.prom")
    assert kind == "dynamo"
    assert f["requests_waiting"] == 3 + 1  # the router's queue, prefill + decode
    assert f["requests_running"] == 40 - 4  # in flight minus waiting
    # model_total_kv_blocks is one worker's pool; two decode workers hold one each
    assert f["kv_capacity_tokens"] == 10000 * 16 * 2
    assert f["kv_cache_usage"] == pytest.approx(6200 / 10000)
    # TTFT: <=0.5 holds 800, <=1.0 holds 900 of 912; rank 866.4
    assert p95(f["ttft_s"]) == pytest.approx(0.5 + 0.5 * (866.4 - 800) / 100)
    # ITL: <=0.025 holds 0, <=0.05 holds 880
    assert p95(f["itl_s"]) == pytest.approx(0.025 + 0.025 * 866.4 / 880)
    assert f["prefix_cache_hit_rate"] == pytest.approx(700 * 300 / (700 * 1000))
    assert f["success_rate"] == pytest.approx(900 / 912)
    roles = {dict(kv.split("=") for kv in r.key.split(","))["worker_id"]: r for r in f["ranks"]}
    assert f["ranks"][0].key == "worker_id=7587890253391261002,dp_rank=0"  # the profile's order
    assert roles["7587890253391261001"].role == "prefill"
    assert roles["7587890253391261001"].prefill_tokens_active == 12000
    assert roles["7587890253391261002"].role == "decode"
    assert roles["7587890253391261003"].last_itl_s == 0.027
    # decode workers compared with each other only: 62% against 31%
    assert "worker_id=7587890253391261002" in f["imbalance"]
    assert f["imbalance"].startswith("decode worker")


def test_dynamo_without_router_queue_uses_http_queue():
    text = "\n".join(
        line
        for line in (FIX / "dynamo-frontend-written.prom").read_text().splitlines()
        if "router_queue_pending" not in line
    )
    ex = extract(parse(text), profiles()["dynamo"], 1.0)
    f = derive([ex], profiles()["dynamo"], 60.0).fields
    assert f["requests_waiting"] == 12 and f["requests_running"] == 40 - 12


# --- windows, LoRA, MFU, llama.cpp --------------------------------------------------------------


def _vllm_page(t_drafts: float, t_draft_tokens: float, accepted: float, flops: float) -> str:
    return "\n".join(
        [
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="m"} 1',
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {t_drafts}',
            "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {t_draft_tokens}',
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
            "# TYPE vllm:estimated_flops_per_gpu_total counter",
            f'vllm:estimated_flops_per_gpu_total{{engine="0",model_name="m"}} {flops}',
        ]
    )


def test_spec_decode_and_mfu_over_the_window():
    prof = profiles()["vllm"]
    pages = [
        (0.0, (100, 300, 150, 1e14)),
        (10.0, (200, 600, 330, 6e14)),
        (20.0, (300, 900, 480, 1.1e15)),
    ]
    hist = [extract(parse(_vllm_page(*v)), prof, t) for t, v in pages]
    f = derive(hist, prof, 60.0).fields
    sp = f["speculative"]
    # window (t-60, t]: every scrape; increases 330 accepted of 600 drafted in 200 drafts
    assert sp.window == "1m"
    assert sp.acceptance_rate == pytest.approx(330 / 600)
    assert sp.mean_accepted_length == pytest.approx(1 + 330 / 200)
    ref = promref.rate([(t, v[3]) for t, v in pages], 20.0 - 60.0, 20.0)
    assert f["flops_per_gpu_per_s"] == pytest.approx(ref)


def test_lora_adapters_from_the_newest_info_row():
    text = "\n".join(
        [
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="m"} 1',
            "# TYPE vllm:lora_requests_info gauge",
            'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql",waiting_lora_adapters=""} 1.7e9',
            'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters="code"} 1.7e9+5',
        ]
    ).replace("1.7e9+5", "1700000005.0")
    f = derive([extract(parse(text), profiles()["vllm"], 1.0)], profiles()["vllm"], 60.0).fields
    assert f["lora"].running == ["sql", "chat"]
    assert f["lora"].waiting == ["code"] and f["lora"].max_lora == 4


def test_llamacpp_newer_counters_and_slots():
    kind, f, _ = derived("llamacpp-live.prom")
    assert kind == "llamacpp"
    text = (FIX / "llamacpp-live.prom").read_text()
    n_max = next(
        float(x.split()[-1]) for x in text.splitlines() if x.startswith("llamacpp:n_tokens_max")
    )
    assert f["context_tokens_max"] == n_max
    slots = json.dumps(
        [
            {
                "id": 0,
                "n_ctx": 4096,
                "is_processing": True,
                "n_prompt_tokens": 1000,
                "next_token": [{"n_decoded": 24}],
            },
            {
                "id": 1,
                "n_ctx": 4096,
                "is_processing": False,
                "n_prompt_tokens": 3000,
                "next_token": [{"n_decoded": 9}],
            },
        ]
    )
    usage, capacity, rows = slots_kv(slots)
    assert capacity == 8192 and usage == pytest.approx(1024 / 8192)
    assert rows[0].model_dump() == {
        "id": 0,
        "n_ctx": 4096,
        "processing": True,
        "prompt_tokens": 1000,
        "decoded_tokens": 24,
    }
    assert rows[1].processing is False and rows[1].prompt_tokens == 0  # idle: holds nothing


def test_llamacpp_spec_counters():
    text = "\n".join(
        [
            "# TYPE llamacpp:requests_processing gauge",
            "llamacpp:requests_processing 1",
            "# TYPE llamacpp:spec_decode_num_drafts_total counter",
            "llamacpp:spec_decode_num_drafts_total 40",
            "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter",
            "llamacpp:spec_decode_num_draft_tokens_total 160",
            "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter",
            "llamacpp:spec_decode_num_accepted_tokens_total 96",
        ]
    )
    prof = profiles()["llamacpp"]
    sp = derive([extract(parse(text), prof, 1.0)], prof, 60.0).fields["speculative"]
    assert sp.acceptance_rate == pytest.approx(96 / 160)
    assert sp.mean_accepted_length == pytest.approx(1 + 96 / 40)


# --- imbalance ----------------------------------------------------------------------------------


def test_imbalance_rule():
    def r(key: str, waiting: float | None = None, kv: float | None = None, role: str | None = None):
        return EngineRank(key=key, requests_waiting=waiting, kv_cache_usage=kv, role=role)

    assert imbalance([r("a", 3), r("b", 6)]) is None  # 3 apart: under 4
    assert (
        imbalance([r("a", 0), r("b", 4)])
        == "rank b holds 4 of 4 waiting requests (mean 2.0 per rank)"
    )
    assert imbalance([r("a", 10), r("b", 14), r("c", 12)]) is None  # 14 < 1.5 x 12
    assert (
        imbalance([r("a", kv=0.9), r("b", kv=0.55)]) == "rank a KV cache 90% full, least used 55%"
    )
    assert imbalance([r("a", kv=0.45), r("b", kv=0.1)]) is None  # under half full
    assert imbalance([r("p", kv=0.9, role="prefill"), r("d", kv=0.1, role="decode")]) is None


# --- plan against the engine --------------------------------------------------------------------


def _svc(**kw) -> Service:
    base = dict(
        name="s",
        device="0",
        model="llama-3.1-8b",
        weight_bits=16,
        tokens_per_sequence=8192,
        concurrent_sequences=16,
        runtime_reserve_gib=2.0,
    )
    return Service.model_validate(base | kw)


def test_memory_lines_sglang_and_vllm_dp():
    svc = _svc()
    f = fit(svc, 96 * GIB, "catalog", "GPU 0")
    _, fields, na = derived("sglang-0.5-dp2-written.prom")
    e = Engine(name="s", url="u", up=True, kind="sglang", unavailable=na, **fields)
    lines = {m.name: m for m in memory_lines(f, e, [])}
    assert lines["weights"].engine_bytes == pytest.approx(16.06 * GIB)
    assert lines["weights"].drift_bytes == pytest.approx(16.06 * GIB - 16e9)
    assert lines["kv"].planned_bytes == f.kv_bytes == 131072 * 8192 * 16
    assert lines["kv"].drift_bytes == pytest.approx(30.52 * GIB - 131072 * 8192 * 16)
    assert lines["runtime"].engine_bytes == pytest.approx(1.25 * GIB)
    assert lines["total"].engine_bytes is None and lines["total"].source
    _, fields, na = derived("vllm-0.33-dp2-written.prom")
    e = Engine(name="s", url="u", up=True, kind="vllm", unavailable=na, **fields)
    kv = next(m for m in memory_lines(f, e, []) if m.name == "kv")
    # 20480 blocks x 16 tokens over two ranks, at the plan's 131,072 bytes per token
    assert kv.engine_bytes == 20480 * 16 / 2 * 131072
    assert "one of 2 ranks" in kv.source


def test_shared_device_guard_and_imbalance_alert():
    plan = Plan(
        node=Node(gpus=1, gpu_model="rtx-pro-6000-se"),
        services=[
            _svc(name="a", concurrent_sequences=64),
            _svc(name="b", engine="b", concurrent_sequences=64),
        ],
    )
    e = Engine(
        name="v", url="http://127.0.0.1:1/metrics", up=True, imbalance="rank engine=1 holds 9 of 10"
    )
    services, conds = evaluate(plan, _none(), [], [e], HeadroomState(), 100.0)
    keys = {c.key: c for c in conds}
    shared = keys["shared-device:0"]
    total = sum(s.required_bytes for s in services)
    assert shared.severity == "critical" and total > services[0].capacity_bytes
    assert "a, b share device 0" in shared.message
    assert keys["imbalance:http://127.0.0.1:1/metrics"].rule == "imbalance"
    one = Plan(node=plan.node, services=[_svc(name="a")])
    _, conds = evaluate(one, _none(), [], [], HeadroomState(), 100.0)
    assert not any(c.key.startswith("shared-device") for c in conds)


def _none():
    from console.frame import GpuSource

    return GpuSource(kind="none")


@pytest.mark.parametrize("kind", ["trtllm", "dynamo"])
def test_simulators_polled_over_http(kind):
    eng = start_engine(kind, TrafficSpec(rate_rps=3.0, warmup_s=30.0))
    try:
        live = LiveSource.reading([EngineTarget(url=eng.url)], None)
        frame = asyncio.run(_poll_twice(live))
        (e,) = frame.engines
        assert e.up and e.kind == kind, e.error
        assert e.kv_capacity_tokens == 160_000  # the simulated pool
        assert e.ttft_s is not None and e.requests_running is not None
        # no GPU reader (--no-gpu): the GPU pane says why it is empty
        assert frame.gpu_source.note == "GPUs are not read: started with --no-gpu."
    finally:
        eng.stop()


async def _poll_twice(live: LiveSource):
    await live.poll()
    await asyncio.sleep(0.3)
    frame = await live.poll()
    await live.aclose()
    return frame


def test_kv_capacity_alert_fires_on_engine_sized_below_plan():
    """A simulated vLLM holding 160,000 KV tokens, planned for 32 sequences of 8,192 tokens
    (262,144 tokens): 19.5 sequences fit, the alert says so."""
    eng = start_engine("vllm", TrafficSpec(rate_rps=1.0))
    try:
        plan = Plan.model_validate(
            {
                "node": {"gpus": 1, "gpu_model": "rtx-pro-6000-se"},
                "services": [_svc(engine="v", concurrent_sequences=32).model_dump()],
                "alerts": {"kv": {"for_s": 0}},
            }
        )
        live = LiveSource.reading([EngineTarget(url=eng.url, name="v")], None, plan=plan)
        frame = asyncio.run(_poll_twice(live))
        (alert,) = [a for a in frame.alerts if a.key == "kv:s"]
        assert alert.severity == "warning"
        assert f"{160000 / 8192:.1f} seqs at 8,192 tokens < plan 32" in alert.message
        kv = next(h for h in frame.services[0].headroom if h.name == "kv")
        assert kv.value == pytest.approx(160000 / 8192 - 32)
    finally:
        eng.stop()


def test_dynamo_active_requests_replaces_inflight_with_the_same_figures():
    """Dynamo deprecated dynamo_frontend_inflight_requests for dynamo_frontend_active_requests:
    the page in the new name reads the same running count (40 in flight - 4 waiting)."""
    text = (
        (FIX / "dynamo-frontend-written.prom")
        .read_text()
        .replace("dynamo_frontend_inflight_requests", "dynamo_frontend_active_requests")
    )
    page = parse(text, keep=needed_families().__contains__)
    assert detect_kind(page) == "dynamo"
    ex = extract(page, profiles()["dynamo"], 100.0)
    f = derive([ex], profiles()["dynamo"], 60.0).fields
    assert f["requests_running"] == 40 - 4
    assert ex.series["requests_running"].startswith("dynamo_frontend_active_requests")


def test_tgi_says_it_is_archived_upstream():
    from console.sim.engine import page_for
    from console.sim.traffic import TrafficModel

    page = parse(page_for("tgi", TrafficModel(TrafficSpec())), keep=needed_families().__contains__)
    assert detect_kind(page) == "tgi"
    assert any("archived upstream" in h for h in extract(page, profiles()["tgi"], 1.0).hints)


def test_tgi_kv_use_is_its_batch_token_budget_over_its_total():
    """TGI exports no KV use: its router admits a request while the running batch's token
    budget (each request's input plus its max new tokens) leaves room under
    max_batch_total_tokens. That share is the pool's fullness as TGI admits by it: 6,144 of
    16,384 is 0.375. A page without the total says what it lacks, never 0."""
    text = (
        "# TYPE tgi_request_count counter\ntgi_request_count 10\n"
        "# TYPE tgi_request_success counter\ntgi_request_success 9\n"
        "# TYPE tgi_queue_size gauge\ntgi_queue_size 2\n"
        "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 3\n"
        "# TYPE tgi_batch_current_max_tokens gauge\ntgi_batch_current_max_tokens 6144\n"
    )
    total = "# TYPE tgi_batch_max_total_tokens gauge\ntgi_batch_max_total_tokens 16384\n"
    page = parse(text + total, keep=needed_families().__contains__)
    assert detect_kind(page) == "tgi"
    f = derive([extract(page, profiles()["tgi"], 1.0)], profiles()["tgi"], 60.0).fields
    assert f["kv_cache_usage"] == 6144 / 16384 == 0.375
    ex = extract(parse(text, keep=needed_families().__contains__), profiles()["tgi"], 1.0)
    assert "kv_cache_usage" not in ex.gauges
    assert "tgi_batch_current_max_tokens needs kv_capacity_tokens" in ex.problems["kv_cache_usage"]


def test_nvidia_nim_page_at_v1_metrics():
    """NIM's unprefixed vLLM-derived names: recognised (not as trtllm-serve's first release,
    which shares a few names), and each figure as worked out from the page."""
    kind, f, na = derived("nim-written.prom")
    assert kind == "nim"
    assert (f["requests_running"], f["requests_waiting"], f["kv_cache_usage"]) == (6, 2, 0.25)
    # TTFT: rank 0.95 x 200 = 190 falls in (0.5, 1.0]: 0.5 + 0.5 x (190 - 180) / 18
    assert p95(f["ttft_s"]) == pytest.approx(0.5 + 0.5 * 10 / 18)
    assert f["success_rate"] == pytest.approx(198 / 198)  # abort is neither good nor failed
    from console.engines import metrics_paths

    assert "/v1/metrics" in metrics_paths()  # the port probe and a URL without a path try it


def test_a_gauge_by_label_is_written_in_one_order_whatever_the_hash_seed():
    """waiting_by_reason (and every by-label gauge) comes out in the labels' sorted order, so two
    bundles of the same recording are the same bytes; the scrape's order here is the reverse."""
    from console.engines import gauge_by

    reasons = ["preempted", "lora", "kv_transfer", "deferred", "capacity", "batch", "admission"]
    values = {(("reason", r), ("dp_rank", str(i % 2))): float(i) for i, r in enumerate(reasons)}
    by = gauge_by(values, "reason", ["dp_rank"])
    assert list(by) == sorted(reasons)
    assert by["capacity"] == 4.0 and by["preempted"] == 0.0
