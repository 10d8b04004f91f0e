"""Every captured page yields the expected signals for its engine and version; missing ones are
null with a reason, never 0."""

import pytest

from console.engines import detect_kind, extract, needed_families, profiles
from console.figures.enginestats import derive
from console.promtext import parse
from tests.conftest import fixture_text


def read(name):
    page = parse(fixture_text(name), keep=needed_families().__contains__)
    kind = detect_kind(page)
    ex = extract(page, profiles()[kind], 0.0)
    return kind, ex, derive([ex], profiles()[kind], 60)


def test_vllm_live():
    kind, ex, d = read("vllm-live.prom")
    assert kind == "vllm" and ex.model == "smollm2"
    f = d.fields
    assert f["requests_running"] == 0 and f["requests_waiting"] == 0 and f["kv_cache_usage"] == 0
    assert f["kv_capacity_tokens"] == 728 * 128
    assert f["finish_reasons"] == {"stop": 3, "length": 3, "abort": 0, "error": 0, "repetition": 0}
    assert f["success_rate"] == 1.0 and f["requests_finished"] == 6
    assert (
        f["ttft_s"].p95 == pytest.approx(0.098, abs=1e-12) and f["ttft_s"].window == "since_start"
    )
    assert f["tpot_s"].observations == 6 and f["e2e_s"].observations == 6
    assert (
        ">= 0.9.2 (kv_cache_usage_perc)" in ex.hints
        and ">= 0.11 (inter_token_latency_seconds)" in ex.hints
    )
    assert ex.series["generation_tokens"] == "vllm:generation_tokens_total"


def test_vllm_early_v1_names():
    kind, ex, d = read("vllm-3.prom")
    assert kind == "vllm" and ex.model == "Qwen/Qwen2.5-Coder-32B-Instruct"
    assert ex.series["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert d.fields["kv_cache_usage"] == 0.0  # real zero from the renamed series, not a fake one
    assert "<= 0.10 (gpu_cache_usage_perc)" in ex.hints
    assert (
        "ttft_s" in d.unavailable and "vllm:time_to_first_token_seconds" in d.unavailable["ttft_s"]
    )


def test_vllm_0_10_has_both_prefix_names():
    kind, ex, d = read("vllm-2.prom")
    assert kind == "vllm"
    assert ex.series["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert ex.series["prefix_cache_queries"] == "vllm:prefix_cache_queries_total"
    assert d.fields["kv_cache_usage"] == pytest.approx(9.75010481363281e-06)
    # the excerpt cuts the pre-0.11 per-step histogram before +Inf: unusable, and said so
    assert "tpot" not in ex.series
    assert (
        d.unavailable["tpot_s"]
        == "vllm:time_per_output_token_seconds has no +Inf bucket (truncated page?)"
    )


def test_vllm_dp_excerpt_is_detected_from_its_prefix():
    kind, ex, d = read("vllm-4.prom")
    assert kind == "vllm" and ex.model == "/home/jovyan/qwen3-8b"
    assert d.fields.get("requests_running") is None and "requests_running" in d.unavailable


def test_sglang_docs_sample():
    kind, ex, d = read("sglang-1.prom")
    assert kind == "sglang" and ex.model == "meta-llama/Llama-3.1-8B-Instruct"
    f = d.fields
    assert (
        f["requests_running"] == 162
        and f["requests_waiting"] == 2826
        and f["kv_cache_usage"] == 0.28
    )
    assert f["prefix_cache_hit_rate"] == pytest.approx(0.007507552643049313)
    assert f["ttft_s"].observations == 11008
    assert f["ttft_s"].p99 is not None
    assert "success_rate" in d.unavailable  # no num_requests_total in this sample
    assert ex.series["generation_tokens"] == "sglang:generation_tokens_total"


def test_sglang_dp_ranks_with_pid_labels():
    kind, ex, d = read("sglang-4.prom")
    assert kind == "sglang" and ex.model == "deepseek-r1"
    assert "requests_running" in d.unavailable


def test_triton_trtllm_sample():
    kind, ex, d = read("triton-3.prom")
    assert kind == "triton" and ex.model == "tensorrt_llm"
    f = d.fields
    assert f["requests_waiting"] == 1 and f["requests_running"] == 0
    assert f["kv_cache_usage"] == 0.4875 and f["kv_capacity_tokens"] == 6239 * 64
    assert ex.series["requests_waiting"] == 'nv_trt_llm_request_metrics{request_type="waiting"}'
    assert "TensorRT-LLM backend" in ex.hints
    assert "success_rate" in d.unavailable and "ttft_s" in d.unavailable


@pytest.mark.parametrize("name", ["llamacpp-live.prom", "llamacpp-2.prom"])
def test_llamacpp(name):
    kind, ex, d = read(name)
    assert kind == "llamacpp"
    f = d.fields
    assert f["requests_running"] == 0 and f["requests_waiting"] == 0
    for missing in ("ttft_s", "tpot_s", "e2e_s", "kv_cache_usage", "success_rate"):
        assert missing in d.unavailable and f.get(missing) is None
    if name == "llamacpp-live.prom":
        assert "newer build (prompt_tokens_cached_total)" in ex.hints


def test_request_tokens_from_the_length_histograms():
    """vllm-live: prompts 4 in (5, 10] and 2 in (20, 50]; outputs 2 in (10, 20], 1 in (20, 50],
    3 in (50, 100]. p50 prompt = 5 + 5 x 3/4 = 8.75; p99 output = 50 + 50 x (5.94 - 3)/3 = 99;
    no request above 50 + 100 = 150 tokens."""
    _, _, d = read("vllm-live.prom")
    rt = d.fields["request_tokens"]
    assert rt.prompt_p50 == pytest.approx(8.75) and rt.output_p99 == pytest.approx(99.0)
    assert rt.most == 150.0 and rt.requests == 6 and rt.window == "since_start"
    _, _, d = read("sglang-4.prom")  # this build exports no length histograms: said, not 0
    assert "request_tokens" not in d.fields
    assert "sglang:prompt_tokens_histogram" in d.unavailable["request_tokens"]
