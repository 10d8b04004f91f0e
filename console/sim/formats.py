"""Each engine's real exposition format, written from a TrafficModel's state
(the engines' metric definitions and the captures in tests/fixtures/metrics)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from console.sim.traffic import DEFAULT_BUCKETS, Histogram, TrafficModel


def _fmt(v: float, integer: bool = False) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if integer and float(v).is_integer():
        return str(int(v))
    return repr(float(v))


class Exposition:
    """Writes HELP/TYPE headers and samples with sorted labels."""

    def __init__(self, base: dict[str, str], integers: bool = False) -> None:
        self.base = base
        self.integers = integers
        self.lines: list[str] = []

    def labels(self, **extra: str) -> str:
        items = sorted({**self.base, **extra}.items())
        return "{" + ",".join(f'{k}="{v}"' for k, v in items) + "}" if items else ""

    def head(self, name: str, kind: str, help_: str) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, **extra: str) -> None:
        self.lines.append(f"{name}{self.labels(**extra)} {_fmt(value, self.integers)}")

    def gauge(self, name: str, help_: str, value: float, **extra: str) -> None:
        self.head(name, "gauge", help_)
        self.sample(name, value, **extra)

    def counter(
        self, name: str, help_: str, value: float, created: float | None = None, **extra: str
    ) -> None:
        self.head(name, "counter", help_)
        self.sample(name, value, **extra)
        if created is not None:
            self.sample(name.removesuffix("_total") + "_created", created, **extra)

    def histogram(
        self,
        name: str,
        help_: str,
        h: Histogram,
        scale: float = 1.0,
        created: float | None = None,
        **extra: str,
    ) -> None:
        self.head(name, "histogram", help_)
        for bound, c in h.cumulative():
            self.sample(
                name + "_bucket",
                c,
                **extra,
                le=_fmt(bound * scale if not math.isinf(bound) else bound),
            )
        self.sample(name + "_count", h.count, **extra)
        self.sample(name + "_sum", h.sum * scale, **extra)
        if created is not None:
            self.sample(name + "_created", created, **extra)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def vllm_page(m: TrafficModel) -> str:
    """vLLM V1 (0.3x), single-process prometheus_client: labels engine/model_name, _created series."""
    e = Exposition({"engine": "0", "model_name": m.spec.model})
    c = m.created
    e.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        len(m.running),
    )
    e.gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", len(m.waiting)
    )
    e.head("vllm:num_requests_waiting_by_reason", "gauge", "Number of requests waiting, by reason.")
    e.sample("vllm:num_requests_waiting_by_reason", len(m.waiting), reason="capacity")
    e.sample("vllm:num_requests_waiting_by_reason", 0, reason="deferred")
    e.gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        min(1.0, m.kv_used_tokens() / m.spec.kv_capacity_tokens),
    )
    e.counter(
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        m.prefix_queries,
        c,
    )
    e.counter(
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
        m.prefix_hits,
        c,
    )
    e.counter(
        "vllm:num_preemptions_total",
        "Cumulative number of preemption from the engine.",
        m.preemptions,
        c,
    )
    e.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", m.prompt_tokens, c)
    e.head("vllm:prompt_tokens_by_source_total", "counter", "Number of prompt tokens by source.")
    for source, v in (
        ("local_compute", m.prompt_tokens - m.prefix_hits),
        ("local_cache_hit", m.prefix_hits),
        ("external_kv_transfer", 0.0),
    ):
        e.sample("vllm:prompt_tokens_by_source_total", v, source=source)
    e.counter(
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        m.generation_tokens,
        c,
    )
    e.head("vllm:request_success_total", "counter", "Count of successfully processed requests.")
    for reason, v in m.outcomes.items():
        e.sample("vllm:request_success_total", v, finished_reason=reason)
    for reason in m.outcomes:
        e.sample("vllm:request_success_created", c, finished_reason=reason)
    e.histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        m.h["ttft"],
        created=c,
    )
    e.histogram(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        m.h["itl"],
        created=c,
    )
    e.histogram(
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        m.h["tpot"],
        created=c,
    )
    e.histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        m.h["e2e"],
        created=c,
    )
    e.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        m.h["queue"],
        created=c,
    )
    e.histogram(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        m.h["prefill"],
        created=c,
    )
    e.histogram(
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        m.h["prompt_len"],
        created=c,
    )
    e.histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        m.h["output_len"],
        created=c,
    )
    blocks = m.spec.kv_capacity_tokens // m.spec.block_size
    e.head("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    e.sample(
        "vllm:cache_config_info",
        1.0,
        block_size=str(m.spec.block_size),
        cache_dtype="auto",
        enable_prefix_caching="True",
        gpu_memory_utilization="0.9",
        num_gpu_blocks=str(blocks),
    )
    return e.text()


SGLANG_BUCKETS = {
    "ttft": (
        0.1,
        0.2,
        0.4,
        0.6,
        0.8,
        1.0,
        2.0,
        4.0,
        6.0,
        8.0,
        10.0,
        20.0,
        40.0,
        60.0,
        80.0,
        100.0,
        200.0,
        400.0,
    ),
    "itl": (
        0.002,
        0.004,
        0.006,
        0.008,
        0.010,
        0.015,
        0.020,
        0.025,
        0.030,
        0.035,
        0.040,
        0.060,
        0.080,
        0.100,
        0.200,
        0.400,
        0.600,
        0.800,
        1.0,
        2.0,
        4.0,
        6.0,
        8.0,
    ),
    "latency": (
        0.1,
        0.2,
        0.4,
        0.6,
        0.8,
        1.0,
        2.0,
        4.0,
        6.0,
        8.0,
        10.0,
        20.0,
        40.0,
        60.0,
        80.0,
        100.0,
        200.0,
        400.0,
        600.0,
        1200.0,
        1800.0,
        2400.0,
    ),
    "tokens": DEFAULT_BUCKETS["tokens"],
    # sglang:queue_time_seconds (collector.py)
    "queue": (0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
              60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0,
              900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0),
}  # fmt: skip


def sglang_page(m: TrafficModel) -> str:
    """SGLang 0.5 (multiprocess mode: no _created, labels sorted)."""
    tok = Exposition({"engine_type": "unified", "model_name": m.spec.model})
    sch = Exposition(
        {"engine_type": "unified", "model_name": m.spec.model, "pp_rank": "0", "tp_rank": "0"}
    )
    used = m.kv_used_tokens()
    sch.gauge("sglang:num_running_reqs", "The number of running requests.", len(m.running))
    sch.gauge(
        "sglang:num_queue_reqs", "The number of requests in the waiting queue.", len(m.waiting)
    )
    sch.gauge("sglang:num_used_tokens", "The number of used tokens.", used)
    sch.gauge(
        "sglang:max_total_num_tokens",
        "Maximum total number of tokens in the KV cache pool.",
        m.spec.kv_capacity_tokens,
    )
    sch.gauge("sglang:token_usage", "The token usage.", round(used / m.spec.kv_capacity_tokens, 4))
    sch.gauge(
        "sglang:gen_throughput",
        "The generation throughput (token/s).",
        len(m.running) / max(m.spec.itl_base_s, 1e-3),
    )
    sch.gauge(
        "sglang:cache_hit_rate",
        "The prefix cache hit rate.",
        m.prefix_hits / m.prefix_queries if m.prefix_queries else 0.0,
    )
    sch.head("sglang:realtime_tokens_total", "counter", "Realtime token counts by mode.")
    sch.sample(
        "sglang:realtime_tokens_total", m.prompt_tokens - m.prefix_hits, mode="prefill_compute"
    )
    sch.sample("sglang:realtime_tokens_total", m.prefix_hits, mode="prefill_cache")
    sch.sample("sglang:realtime_tokens_total", m.generation_tokens, mode="decode")
    sch.counter("sglang:num_retracted_requests_total", "Retracted requests.", m.preemptions)
    sch.histogram(
        "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", m.h["queue"]
    )
    ok = m.finished_ok
    aborted = m.outcomes["abort"] + m.outcomes["error"]
    tok.counter(
        "sglang:prompt_tokens_total",
        "Number of prefill tokens processed.",
        m.prompt_tokens,
        is_streaming="true",
    )
    tok.counter(
        "sglang:generation_tokens_total",
        "Number of generation tokens processed.",
        m.generation_tokens,
        is_streaming="true",
    )
    tok.counter(
        "sglang:num_requests_total",
        "The number of finished requests.",
        ok + aborted,
        is_streaming="true",
    )
    tok.counter("sglang:num_aborted_requests_total", "The number of aborted requests.", aborted)
    tok.histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        m.h["ttft"],
        is_streaming="true",
    )
    tok.histogram(
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        m.h["itl"],
    )
    tok.histogram(
        "sglang:request_time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        m.h["tpot"],
        is_streaming="true",
    )
    tok.histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        m.h["e2e"],
        is_streaming="true",
    )
    return sch.text() + tok.text()


def _geometric(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Edges as TGI's router computes them: the value multiplied in turn (not start x factor^k,
    which differs in the last digit and so in the ``le`` text)."""
    out, v = [], start
    for _ in range(count):
        v *= factor
        out.append(v)
    return tuple(out)


_TGI_DURATION = _geometric(0.0001, 1.5, 35)
TGI_BUCKETS = {
    "ttft": _TGI_DURATION,
    "itl": _TGI_DURATION,
    "latency": _TGI_DURATION,
    "queue": _TGI_DURATION,
    "tokens": tuple(float(x) for x in range(41, 4097, 41)),
}


def tgi_page(m: TrafficModel) -> str:
    """TGI (metrics-exporter-prometheus): counters without _total, no labels but method/err."""
    e = Exposition({})
    ok = m.finished_ok
    e.gauge("tgi_queue_size", "", len(m.waiting))
    e.gauge("tgi_batch_current_size", "", len(m.running))
    e.gauge("tgi_batch_current_max_tokens", "", m.kv_used_tokens())
    e.gauge("tgi_batch_max_total_tokens", "", m.spec.kv_capacity_tokens)
    e.counter("tgi_request_count", "", ok + m.outcomes["error"] + m.outcomes["abort"])
    e.counter("tgi_request_success", "", ok)
    e.head("tgi_request_failure", "counter", "")
    e.sample("tgi_request_failure", m.outcomes["error"], err="generation")
    e.sample("tgi_request_failure", m.outcomes["abort"], err="incomplete")
    e.histogram("tgi_request_duration", "", m.h["e2e"])
    e.histogram("tgi_request_queue_duration", "", m.h["queue"])
    e.histogram("tgi_request_validation_duration", "", m.h["validation"])
    e.histogram("tgi_request_mean_time_per_token_duration", "", m.h["tpot"])
    e.histogram("tgi_batch_inference_duration", "", m.h["prefill"], method="prefill")
    e.histogram("tgi_request_generated_tokens", "", m.h["output_len"])
    e.histogram("tgi_request_input_length", "", m.h["prompt_len"])
    return e.text()


TRITON_BUCKETS = {
    "ttft": (0.1, 0.5, 2.0, 5.0),
    "itl": DEFAULT_BUCKETS["itl"],
    "latency": DEFAULT_BUCKETS["latency"],
    "queue": DEFAULT_BUCKETS["latency"],
    "tokens": (10.0, 50.0, 100.0, 500.0, 1000.0),
}
# Dynamo's frontend latency histograms share one set of edges
_DYNAMO_LATENCY = (0.0, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                   60.0, 120.0, 300.0)  # fmt: skip
DYNAMO_BUCKETS = {
    **DEFAULT_BUCKETS,
    "ttft": _DYNAMO_LATENCY,
    "itl": _DYNAMO_LATENCY,
    "latency": _DYNAMO_LATENCY,
    "queue": _DYNAMO_LATENCY,
}


def triton_page(m: TrafficModel) -> str:
    """Triton with the TensorRT-LLM backend (prometheus-cpp: integer values, model/version labels)."""
    e = Exposition({"model": "tensorrt_llm", "version": "1"}, integers=True)
    bs = m.spec.block_size
    max_blocks = m.spec.kv_capacity_tokens // bs
    used_blocks = math.ceil(m.kv_used_tokens() / bs)
    e.head("nv_trt_llm_request_metrics", "gauge", "TRT LLM request metrics")
    for kind, v in (
        ("waiting", len(m.waiting)),
        ("context", 0),
        ("scheduled", len(m.running)),
        ("max", m.spec.max_num_seqs),
        ("active", len(m.running)),
    ):
        e.sample("nv_trt_llm_request_metrics", v, request_type=kind)
    e.head("nv_trt_llm_kv_cache_block_metrics", "gauge", "TRT LLM KV cache block metrics")
    kv_rows: tuple[tuple[str, float], ...] = (
        ("fraction", round(used_blocks / max_blocks, 4)),
        ("tokens_per", bs),
        ("used", used_blocks),
        ("free", max_blocks - used_blocks),
        ("max", max_blocks),
    )
    for kind, value in kv_rows:
        e.sample("nv_trt_llm_kv_cache_block_metrics", value, kv_cache_block_type=kind)
    ok = m.finished_ok
    e.counter(
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        ok,
    )
    e.head(
        "nv_inference_request_failure",
        "counter",
        "Number of failed inference requests, all batch sizes",
    )
    e.sample("nv_inference_request_failure", m.outcomes["error"], reason="BACKEND")
    e.sample("nv_inference_request_failure", m.outcomes["abort"], reason="CANCELED")
    e.counter("nv_inference_count", "Number of inferences performed", ok)
    e.counter("nv_inference_exec_count", "Number of model executions performed", ok)
    e.counter(
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds",
        round(m.e2e_total_s * 1e6),
    )
    e.counter(
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds",
        round(m.queue_total_s * 1e6),
    )
    e.gauge(
        "nv_inference_pending_request_count",
        "Instantaneous number of pending requests",
        len(m.waiting),
    )
    e.histogram(
        "nv_inference_first_response_histogram_ms",
        "Duration from request to first response in milliseconds",
        m.h["ttft"],
        scale=1000.0,
    )
    e.histogram(
        "nv_llm_output_token_len",
        "TRT LLM response metrics",
        m.h["output_len"],
        response_metric_type="total_output_tokens",
    )
    e.histogram(
        "nv_llm_input_token_len",
        "TRT LLM response metrics",
        m.h["prompt_len"],
        response_metric_type="total_input_tokens",
    )
    return e.text()


def llamacpp_page(m: TrafficModel) -> str:
    """llama-server --metrics (hand-written exposition, no labels, no histograms)."""
    e = Exposition({})
    e.counter("llamacpp:prompt_tokens_total", "Number of prompt tokens processed.", m.prompt_tokens)
    e.counter("llamacpp:prompt_seconds_total", "Prompt process time", round(m.prompt_seconds, 6))
    e.counter(
        "llamacpp:tokens_predicted_total",
        "Number of generation tokens processed.",
        m.generation_tokens,
    )
    e.counter(
        "llamacpp:tokens_predicted_seconds_total",
        "Predict process time",
        round(m.decode_seconds, 6),
    )
    e.counter(
        "llamacpp:n_decode_total",
        "Total number of llama_decode() calls",
        math.floor(m.decode_steps),
    )
    e.counter("llamacpp:n_tokens_max", "Largest observed n_tokens.", m.max_tokens_seen)
    e.gauge(
        "llamacpp:prompt_tokens_seconds",
        "Average prompt throughput in tokens/s.",
        m.spec.prefill_tok_s,
    )
    e.gauge(
        "llamacpp:predicted_tokens_seconds",
        "Average generation throughput in tokens/s.",
        1.0 / m.spec.itl_base_s,
    )
    e.gauge("llamacpp:requests_processing", "Number of requests processing.", len(m.running))
    e.gauge("llamacpp:requests_deferred", "Number of requests deferred.", len(m.waiting))
    return e.text()


def llamacpp_slots(m: TrafficModel) -> str:
    """GET /slots: one entry per slot, as llama-server answers with --slots."""
    slots = []
    per_slot = m.spec.kv_capacity_tokens // max(1, m.spec.max_num_seqs)
    for i in range(m.spec.max_num_seqs):
        req = m.running[i] if i < len(m.running) else None
        slots.append(
            {
                "id": i,
                "n_ctx": per_slot,
                "is_processing": req is not None,
                # a slot holds at most its context (llama-server refuses longer prompts)
                "n_prompt_tokens": min(req.prompt, per_slot) if req else 0,
                "next_token": [
                    {
                        "n_decoded": min(req.emitted, per_slot - min(req.prompt, per_slot))
                        if req
                        else 0
                    }
                ],
            }
        )
    return json.dumps(slots)


def trtllm_page(m: TrafficModel) -> str:
    """trtllm-serve's /prometheus/metrics (tensorrt_llm/metrics/collector.py, prefix trtllm_):
    single-process prometheus_client, labels model_name and engine_type."""
    e = Exposition({"engine_type": "trtllm", "model_name": m.spec.model})
    c = m.created
    blocks = m.spec.kv_capacity_tokens // m.spec.block_size
    used_blocks = math.ceil(m.kv_used_tokens() / m.spec.block_size)
    e.head("trtllm_request_success_total", "counter", "Count of successfully processed requests.")
    reasons = [({"abort": "cancelled"}.get(r, r), v) for r, v in m.outcomes.items()]
    for reason, v in reasons:
        e.sample("trtllm_request_success_total", v, finished_reason=reason)
    for reason, _ in reasons:
        e.sample("trtllm_request_success_created", c, finished_reason=reason)
    e.histogram(
        "trtllm_e2e_request_latency_seconds",
        "Histogram of end to end request latency in seconds.",
        m.h["e2e"],
        created=c,
    )
    e.histogram(
        "trtllm_time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        m.h["ttft"],
        created=c,
    )
    e.histogram(
        "trtllm_time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        m.h["tpot"],
        created=c,
    )
    e.histogram(
        "trtllm_request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        m.h["queue"],
        created=c,
    )
    e.counter(
        "trtllm_prompt_tokens_total",
        "Cumulative number of prompt (input) tokens processed.",
        m.prompt_tokens,
        c,
    )
    e.counter(
        "trtllm_generation_tokens_total",
        "Cumulative number of generation (output) tokens produced.",
        m.generation_tokens,
        c,
    )
    e.gauge(
        "trtllm_kv_cache_hit_rate",
        "KV cache hit rate",
        m.prefix_hits / m.prefix_queries if m.prefix_queries else 0.0,
    )
    e.gauge("trtllm_kv_cache_utilization", "KV cache utilization", min(1.0, used_blocks / blocks))
    e.gauge("trtllm_num_requests_running", "Number of active requests", len(m.running))
    e.gauge("trtllm_num_requests_waiting", "Number of queued requests", len(m.waiting))
    e.gauge("trtllm_kv_cache_max_blocks", "Maximum number of KV cache blocks", blocks)
    e.gauge("trtllm_kv_cache_used_blocks", "Number of used KV cache blocks", used_blocks)
    e.gauge("trtllm_kv_cache_free_blocks", "Number of free KV cache blocks", blocks - used_blocks)
    e.gauge(
        "trtllm_kv_cache_tokens_per_block", "Number of tokens per KV cache block", m.spec.block_size
    )
    return e.text()


def trtllm_iteration_stats(m: TrafficModel) -> str:
    """trtllm-serve's own /metrics: JSON iteration statistics, not Prometheus text."""
    return json.dumps(
        [{"numActiveRequests": len(m.running), "numQueuedRequests": len(m.waiting), "iter": 1}]
    )


DYNAMO_WORKERS = (("7587890253391261001", 0.6), ("7587890253391261002", 0.4))


def dynamo_page(m: TrafficModel) -> str:
    """Dynamo's HTTP frontend (python -m dynamo.frontend, aggregated: workers report as decode):
    the deployment's requests and, per worker, the router's view of its KV blocks."""
    e = Exposition({"model": m.spec.model})
    waiting, running = len(m.waiting), len(m.running)
    e.gauge("dynamo_frontend_inflight_requests", "Number of inflight requests", waiting + running)
    e.gauge(
        "dynamo_frontend_queued_requests",
        "Number of requests in HTTP processing queue",
        waiting,
    )
    e.head("dynamo_frontend_requests_total", "counter", "Total number of LLM requests processed")
    base = {"endpoint": "chat_completions", "request_type": "stream"}
    e.sample(
        "dynamo_frontend_requests_total",
        m.outcomes["stop"] + m.outcomes["length"],
        **base,
        status="success",
        error_type="",
    )
    e.sample(
        "dynamo_frontend_requests_total",
        m.outcomes["abort"],
        **base,
        status="error",
        error_type="cancelled",
    )
    e.sample(
        "dynamo_frontend_requests_total",
        m.outcomes["error"],
        **base,
        status="error",
        error_type="internal",
    )
    e.counter(
        "dynamo_frontend_output_tokens_total",
        "Total number of output tokens generated",
        m.generation_tokens,
    )
    e.histogram(
        "dynamo_frontend_time_to_first_token_seconds", "Time to first token in seconds", m.h["ttft"]
    )
    e.histogram(
        "dynamo_frontend_inter_token_latency_seconds", "Inter-token latency in seconds", m.h["itl"]
    )
    e.histogram("dynamo_frontend_request_duration_seconds", "Duration of LLM requests", m.h["e2e"])
    e.histogram(
        "dynamo_frontend_input_sequence_tokens",
        "Input sequence length in tokens",
        m.h["prompt_len"],
    )
    e.histogram(
        "dynamo_frontend_output_sequence_tokens",
        "Output sequence length in tokens",
        m.h["output_len"],
    )
    per_worker = m.spec.kv_capacity_tokens // m.spec.block_size // len(DYNAMO_WORKERS)
    e.gauge(
        "dynamo_frontend_model_total_kv_blocks",
        "Total KV blocks available for a worker serving the model",
        per_worker,
    )
    e.gauge(
        "dynamo_frontend_model_kv_cache_block_size",
        "KV cache block size for a worker serving the model",
        m.spec.block_size,
    )
    w = Exposition({})
    w.head(
        "dynamo_frontend_worker_active_decode_blocks",
        "gauge",
        "Active KV cache decode blocks per worker",
    )
    blocks = m.kv_used_tokens() / m.spec.block_size
    for wid, share in DYNAMO_WORKERS:
        w.sample(
            "dynamo_frontend_worker_active_decode_blocks",
            math.floor(blocks * share),
            worker_id=wid,
            dp_rank="0",
            worker_type="decode",
        )
    return e.text() + w.text()


FORMATS: dict[str, tuple[Callable[[TrafficModel], str], dict[str, tuple[float, ...]], str]] = {
    # kind: (page writer, bucket families, content type)
    "vllm": (vllm_page, DEFAULT_BUCKETS, "text/plain; version=1.0.0; charset=utf-8"),
    "sglang": (sglang_page, SGLANG_BUCKETS, "text/plain; version=0.0.4; charset=utf-8"),
    "tgi": (tgi_page, TGI_BUCKETS, "text/plain"),
    "triton": (triton_page, TRITON_BUCKETS, "text/plain; charset=utf-8"),
    "llamacpp": (llamacpp_page, DEFAULT_BUCKETS, "text/plain; version=0.0.4"),
    "trtllm": (trtllm_page, DEFAULT_BUCKETS, "text/plain; version=0.0.4; charset=utf-8"),
    "dynamo": (dynamo_page, DYNAMO_BUCKETS, "text/plain; version=0.0.4"),
}
# where an engine serves its Prometheus text when not at /metrics, and what /metrics then answers
METRICS_PATHS: dict[str, tuple[str, Callable[[TrafficModel], str]]] = {
    "trtllm": ("/prometheus/metrics", trtllm_iteration_stats),
}
