"""The field as it ships in December 2026: Dynamo 1.7's stage counts, SGLang's hybrid-model pools,
vLLM's KV offload counters (0.27.1's flat names and the labelled ones before), prompt tokens the
engine computed apart from cache hits, LMCache's hit rate from its counters, and speculative
decoding acceptance per draft position.

Each *-written.prom page was written from the engine's released source (make_written.py says
which); the older generation is the same page as the older release writes it (the lines it lacks
removed), so both are read side by side. Every figure is worked out by hand beside its assert."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from console.engines import detect_kind, extract, needed_families, parse_selector, profiles
from console.figures.enginestats import derive
from console.figures.findings import findings
from console.fleet.promql import signal_query
from console.frame import Engine
from console.out.snapshot import to_markdown
from console.promtext import parse
from tests.test_findings import frame

FIX = Path(__file__).parent / "fixtures" / "metrics"
COUNTER_SAMPLE = re.compile(r"^(\S+?(?:_total|_sum|_count|_bucket)(?:\{[^}]*\})?) (\S+)$", re.M)


def text(name: str) -> str:
    return (FIX / name).read_text()


def without(page: str, *names: str) -> str:
    """The page as a release that does not write these families serves it."""
    return "\n".join(ln for ln in page.splitlines() if not any(n in ln for n in names)) + "\n"


def grown(page: str, factor: float) -> str:
    """The same page later: every counter (and histogram part) times ``factor``."""
    return COUNTER_SAMPLE.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * factor!r}", page)


def figures(*pages: str, step: float = 60.0, window: float = 60.0):
    """Each page scraped in turn ``step`` seconds apart; the figures after the last."""
    history = []
    kind = None
    for i, body in enumerate(pages):
        page = parse(body, keep=needed_families().__contains__)
        kind = kind or detect_kind(page)
        assert kind is not None
        history.append(extract(page, profiles()[kind], 1000.0 + i * step))
    d = derive(history, profiles()[kind], window)
    return kind, d.fields, d.unavailable, history[-1]


# --- selectors: one label matched to several words ----------------------------------------------


def test_selector_matches_one_of_several_words_and_keeps_that_label():
    assert parse_selector('x{a="b",stage=~"route|dispatch"}') == (
        "x",
        (("a", "b"), ("stage", ("route", "dispatch"))),
    )
    for bad in ('x{stage=~"route.*"}', 'x{stage=~"(a|b)"}', 'x{a="b" junk}'):
        with pytest.raises(ValueError, match="not a series selector"):
            parse_selector(bad)
    # Prometheus is asked for the same series the node reads
    q = signal_query("requests_waiting", "gauge", "1m") or ""
    assert 'dynamo_frontend_stage_requests{stage=~"preprocess|route|dispatch"}' in q


# --- Dynamo 1.7: stage_requests and active_requests ----------------------------------------------


def test_dynamo_17_stages_replace_the_deprecated_queue_with_the_same_figures():
    """1.7 without --router-queue-threshold: waiting = preprocess 2 + route 1 + dispatch 9 = 12,
    running = active 40 - 12 = 28; the older frontend's queued_requests (12) and in-flight (40),
    its router queue removed, read the same."""
    kind, new, _, ex = figures(text("dynamo-frontend-1.7-written.prom"))
    assert kind == "dynamo"
    assert (new["requests_waiting"], new["requests_running"]) == (12, 28)
    assert ex.series["requests_waiting"].startswith("dynamo_frontend_stage_requests")
    assert ex.series["requests_running"].startswith("dynamo_frontend_active_requests")
    _, old, _, _ = figures(without(text("dynamo-frontend-written.prom"), "router_queue_pending"))
    assert (old["requests_waiting"], old["requests_running"]) == (12, 28)
    # a stage the profile does not count (a request already at a worker) changes nothing
    more = text("dynamo-frontend-1.7-written.prom").replace(
        'dynamo_frontend_stage_requests{model="Qwen/Qwen3-32B",stage="dispatch"} 9.0',
        'dynamo_frontend_stage_requests{model="Qwen/Qwen3-32B",stage="dispatch"} 9.0\n'
        'dynamo_frontend_stage_requests{model="Qwen/Qwen3-32B",stage="respond"} 30.0',
    )
    assert "respond" in more
    assert figures(more)[1]["requests_waiting"] == 12


# --- SGLang hybrid models: full, sliding-window and Mamba pools ----------------------------------


def test_sglang_hybrid_kv_is_the_attention_pool_and_the_mamba_pool_binds():
    """Qwen3-Next on SGLang 0.5.23: token_usage 0.96 is the Mamba pool (round(max(0.42, 0, 0.96),
    2)); the KV cache is the full-attention pool, 0.42; the Mamba pool is shown apart and binds."""
    kind, f, _, ex = figures(text("sglang-0.5-hybrid-written.prom"))
    assert kind == "sglang"
    assert f["kv_cache_usage"] == 0.42
    assert ex.series["kv_cache_usage"].startswith("sglang:full_token_usage")
    assert f["kv_pools"] == {"full": 0.42, "swa": 0.0, "mamba": 0.96}
    assert f["kv_binding_pool"] == "mamba"
    engine = Engine(name="qwen-next", url="http://x", kind=kind, up=True, **f)
    (found,) = [x for x in findings(frame([engine])) if "pool" in x.title]
    assert found.title.startswith("the mamba pool is 96% full")
    assert "--max-mamba-cache-size" in found.knob  # SGLang's own flag, from engines.yaml
    md = to_markdown(frame([engine]))
    assert "42.0% (mamba 96% binds)" in md


def test_sglang_sliding_window_pool_counts_as_kv_and_older_builds_say_what_they_lack():
    """A sliding-window hybrid: KV is the fuller of the full (0.42) and SWA (0.7) pools, as
    SGLang's own KV token figure. A build before full_token_usage has only token_usage (0.96, the
    fullest pool): shown as KV, with the reason no pool can be named as binding."""
    page = text("sglang-0.5-hybrid-written.prom")
    swa = page.replace("sglang:swa_token_usage{", "sglang:swa_token_usage{").replace(
        'sglang:swa_token_usage{engine_type="unified",model_name="Qwen/Qwen3-Next-80B-A3B-Instruct",'
        'moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0',
        'sglang:swa_token_usage{engine_type="unified",model_name="Qwen/Qwen3-Next-80B-A3B-Instruct",'
        'moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.7',
    )
    assert swa != page
    f = figures(swa)[1]
    assert f["kv_cache_usage"] == 0.7
    assert f["kv_binding_pool"] == "mamba"
    _, old, na, _ = figures(without(page, "full_token_usage"))
    assert old["kv_cache_usage"] == 0.96 and "full" not in old["kv_pools"]
    assert "kv_binding_pool" not in old
    assert "sglang:token_usage" in na["kv_binding_pool"]
    # a model with one pool (SGLang writes the others at 0): no pools shown
    _, plain, _, _ = figures(text("sglang-0.5-dp2-written.prom"))
    assert "kv_pools" not in plain and plain["kv_cache_usage"] == 0.61


# --- vLLM KV offload ------------------------------------------------------------------------------


def test_vllm_offload_counters_both_generations_and_the_pinned_gauge_never_read():
    """vLLM 0.27.1 stores 8e9 B in 2.0 s and loads 2e9 B in 0.5 s by the first scrape; a minute
    later every counter has grown by half: stored 4e9 B in the window, 4e9/60 B/s, at 4e9/1.0 =
    4 GB/s while moving. The older page (labelled counters only) reads the same."""
    new = text("vllm-0.27-offload-written.prom")
    old = without(new, "kv_offload_store_", "kv_offload_load_")
    assert "kv_offload_total_bytes_total" in old and "kv_offload_store_bytes" not in old
    for page, series in (
        (new, "vllm:kv_offload_store_bytes_total"),
        (old, "vllm:kv_offload_total_bytes_total"),
    ):
        _, f, _, ex = figures(page, grown(page, 1.5))
        off = f["kv_offload"]
        assert ex.series["offload_store_bytes"].startswith(series)
        assert off.store_bytes == pytest.approx(4e9) and off.load_bytes == pytest.approx(1e9)
        assert off.store_bytes_per_s == pytest.approx(4e9 / 60)
        assert off.load_bytes_per_s == pytest.approx(1e9 / 60)
        assert off.store_transfer_bytes_per_s == pytest.approx(4e9 / 1.0)
        assert off.load_transfer_bytes_per_s == pytest.approx(1e9 / 0.25)
        assert off.window == "1m"
        # kv_offload_cpu_cache_usage_perc (0.03) counts blocks pinned by transfers in flight: it
        # is no figure of how full the CPU tier is, and none is made of it
        assert f["kv_cache_usage"] == 0.7
        assert not any("cpu_cache_usage" in s for s in ex.series.values())
        assert 0.03 not in [v for v in f.values() if isinstance(v, float)]


# --- prompt tokens computed, and LMCache ------------------------------------------------------------


@pytest.mark.parametrize(
    ("page", "prompt", "computed"),
    [
        # vLLM: prompt_tokens counts cache hits; prompt_tokens_by_source{local_compute} is the work
        ("vllm-0.33-dp2-written.prom", 150000 + 120000, 100000 + 90000),
        # SGLang: realtime_tokens{mode="prefill_compute"}
        ("sglang-0.5-dp2-written.prom", 550000, 200000 + 180000),
        # trtllm-serve: prompt - prompt_cached
        ("trtllm-serve-written.prom", 400000, 400000 - 150000),
    ],
)
def test_prefill_work_is_the_computed_prompt_tokens(page: str, prompt: float, computed: float):
    """The page at t and again a minute later with every counter doubled: each counter grew by its
    value on the page, over 60 s."""
    body = text(page)
    _, f, _, _ = figures(body, grown(body, 2.0))
    assert f["prompt_tokens_per_s"] == pytest.approx(prompt / 60)
    assert f["prefill_tokens_per_s"] == pytest.approx(computed / 60)


def test_prefill_finding_uses_the_engines_computed_counter():
    body = text("vllm-0.33-dp2-written.prom")
    kind, f, _, _ = figures(body, grown(body, 2.0))
    engine = Engine(
        name="v", url="http://x", kind=kind, up=True, **(f | {"prefix_cache_hit_rate": 0.6})
    )
    (found,) = [x for x in findings(frame([engine])) if "prefix-cache" in x.title]
    assert (
        f"{190000 / 60:,.0f} tok/s computed (the engine's computed-token counter)"
        in (found.evidence[0])
    )


def test_engines_without_a_computed_counter_say_so():
    _, f, na, _ = figures(text("nim-written.prom"), grown(text("nim-written.prom"), 2.0))
    assert "prefill_tokens_per_s" not in f
    assert "counts prefix-cache hits too" in na["prefill_tokens_per_s"]


def test_lmcache_hit_rate_from_its_counters_not_its_stale_gauge():
    """35,000 of 100,000 requested tokens hit: 0.35, where the retrieve_hit_rate gauge says 0.9.
    A minute with no retrievals: no rate, said so (the gauge still says 0.9)."""
    body = text("vllm-lmcache-written.prom")
    _, f, _, _ = figures(body)
    assert f["lmcache_hit_rate"] == pytest.approx(35000 / 100000)
    _, f, na, _ = figures(body, body)
    assert "lmcache_hit_rate" not in f
    assert na["lmcache_hit_rate"] == "no LMCache retrievals in the last 1m"
    _, f, _, _ = figures(body, grown(body, 3.0))  # 70,000 of 200,000 in the minute
    assert f["lmcache_hit_rate"] == pytest.approx(70000 / 200000)


# --- speculative decoding per draft position -----------------------------------------------------


def test_spec_acceptance_per_draft_position():
    """vLLM 0.33: 9,000 drafts offer each position once; accepted 8,100 / 5,400 / 2,700 at
    positions 0-2: 0.9, 0.6, 0.3. trtllm-serve: per-position drafted and accepted counters,
    1,800/2,000, 1,600/2,000, 1,100/2,000."""
    _, f, _, _ = figures(text("vllm-0.33-dp2-written.prom"))
    assert f["speculative"].by_position == pytest.approx([0.9, 0.6, 0.3])
    _, f, _, _ = figures(text("trtllm-serve-written.prom"))
    assert f["speculative"].by_position == pytest.approx([0.9, 0.8, 0.55])
    # a minute in which the counters doubled: the window's own shares, the same here
    body = text("trtllm-serve-written.prom")
    _, f, _, _ = figures(body, grown(body, 2.0))
    assert f["speculative"].by_position == pytest.approx([0.9, 0.8, 0.55])
    assert f["speculative"].window == "1m"


# --- request and preemption rates (the dashboard's Req/s, the engine detail) ---------------------


@pytest.mark.parametrize(
    ("page", "finished", "preempted"),
    [
        # vLLM: every finish reason of both DP engines, 361 requests; 4 + 6 preemptions
        ("vllm-0.33-dp2-written.prom", 180 + 15 + 3 + 2 + 150 + 10 + 1, 4 + 6),
        # SGLang: num_requests_total counts every finished request (aborts included); retractions
        ("sglang-0.5-dp2-written.prom", 400, 3 + 1),
    ],
)
def test_requests_and_preemptions_per_unit_of_time(page: str, finished: float, preempted: float):
    """The page again a minute later with every counter doubled: each grew by its value, so
    rate() is the page's count over 60 s. One scrape has no rate: none is made up."""
    body = text(page)
    _, once, _, _ = figures(body)
    assert "requests_per_s" not in once and "preemptions_per_min" not in once
    _, f, _, _ = figures(body, grown(body, 2.0))
    assert f["requests_per_s"] == pytest.approx(finished / 60)
    assert f["preemptions_per_min"] == pytest.approx(preempted / 60 * 60)
