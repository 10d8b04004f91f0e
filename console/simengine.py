"""Simulated serving engines: a traffic model and real HTTP servers on 127.0.0.1 that serve
``/metrics`` in the engine's real exposition format (reference/engine-metrics.md §2, fixture
vllm-live.prom). They stand in for engines at the outermost edge only.
"""

from __future__ import annotations

import bisect
import math
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# vLLM 0.33 default bucket bounds (vllm/v1/metrics/buckets.py)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

PROFILES = ("steady", "burst", "overload")


class Histogram:
    """Cumulative histogram as prometheus_client keeps it (per-bucket counts, sum)."""

    __slots__ = ("bounds", "counts", "sum", "created")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0.0] * (len(bounds) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float, n: float = 1.0) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.sum += value * n

    def cumulative(self) -> list[tuple[float, float]]:
        out, running = [], 0.0
        for bound, c in zip(self.bounds + (math.inf,), self.counts, strict=True):
            running += c
            out.append((bound, running))
        return out

    @property
    def count(self) -> float:
        return sum(self.counts)


@dataclass
class Request:
    arrival: float
    prompt: int
    output: int
    stop: bool  # finishes on a stop token (else on max_tokens = "length")
    prefill_left: float = 0.0
    emitted: int = 0
    first_token: float | None = None
    scheduled: float | None = None
    carry: float = 0.0  # fractional tokens owed by the decode rate


@dataclass
class TrafficSpec:
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    rate_rps: float = 4.0  # mean arrivals per second
    prompt_tokens: int = 900
    output_tokens: int = 220
    max_num_seqs: int = 64
    kv_capacity_tokens: int = 160_000
    block_size: int = 16
    prefill_tok_s: float = 12_000.0
    prefill_overhead_s: float = 0.025  # tokenisation, scheduling, first forward pass
    itl_base_s: float = 0.018  # decode step time with one sequence
    itl_per_seq_s: float = 0.0004  # added per running sequence
    prefix_hit_share: float = 0.3
    profile: str = "steady"
    seed: int = 1
    warmup_s: float = 0.0  # start with this much traffic already simulated


@dataclass
class TrafficModel:
    """Discrete-time model of one vLLM-like engine. Advances lazily to the time it is read."""

    spec: TrafficSpec
    clock: Callable[[], float] = time.monotonic
    step_s: float = 0.05
    waiting: list[Request] = field(default_factory=list)
    running: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.spec.seed)
        self.lock = threading.Lock()
        self.t = self.clock()
        self.started = self.t
        self.overload = self.spec.profile == "overload"
        self.reset_counters()
        if self.spec.warmup_s > 0:
            self.t -= self.spec.warmup_s
            self.started = self.t
            self.advance()

    def reset_counters(self) -> None:
        self.prompt_tokens = 0.0
        self.generation_tokens = 0.0
        self.finished = {"stop": 0.0, "length": 0.0, "abort": 0.0, "error": 0.0, "repetition": 0.0}
        self.preemptions = 0.0
        self.prefix_queries = 0.0
        self.prefix_hits = 0.0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.tpot = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(LATENCY_BUCKETS)
        self.queue = Histogram(LATENCY_BUCKETS)
        self.created = time.time()

    def restart(self) -> None:
        """The engine process restarted: queues are lost and every counter starts from zero."""
        with self.lock:
            self.waiting.clear()
            self.running.clear()
            self.reset_counters()

    # --- model -------------------------------------------------------------------------
    def rate_at(self, t: float) -> float:
        base = self.spec.rate_rps
        if self.overload:
            return base * 4.0
        if self.spec.profile == "burst":
            return base * (3.0 if (t - self.started) % 60 < 15 else 0.5)
        return base

    def kv_used_tokens(self) -> int:
        bs = self.spec.block_size
        return sum(math.ceil((r.prompt + r.emitted) / bs) * bs for r in self.running)

    def advance(self) -> None:
        with self.lock:
            now = self.clock()
            if now - self.t > 120:  # nobody looked for a long time: skip ahead
                self.t = now - 120
            while self.t + self.step_s <= now:
                self.t += self.step_s
                self._step(self.t, self.step_s)

    def _step(self, t: float, dt: float) -> None:
        spec, rng = self.spec, self.rng
        # arrivals (Poisson)
        lam = self.rate_at(t) * dt
        n = 0
        threshold, p = math.exp(-lam), rng.random()
        while p > threshold and n < 50:
            n += 1
            p *= rng.random()
        for _ in range(n):
            out = max(2, int(rng.expovariate(1.0 / spec.output_tokens)))
            prompt = max(8, int(rng.lognormvariate(math.log(spec.prompt_tokens), 0.5)))
            self.waiting.append(Request(t - dt * rng.random(), prompt, out, rng.random() < 0.7))
        # admit while sequences and KV blocks allow
        while self.waiting and len(self.running) < spec.max_num_seqs:
            req = self.waiting[0]
            if self.kv_used_tokens() + req.prompt + spec.block_size > spec.kv_capacity_tokens:
                break
            self.waiting.pop(0)
            req.scheduled = t
            self.queue.observe(t - req.arrival)
            hit = int(req.prompt * spec.prefix_hit_share * rng.random() * 2)
            hit = min(hit, req.prompt - 1) // spec.block_size * spec.block_size
            self.prefix_queries += req.prompt
            self.prefix_hits += hit
            self.prompt_tokens += req.prompt
            req.prefill_left = spec.prefill_overhead_s + (req.prompt - hit) / spec.prefill_tok_s
            self.running.append(req)
        # decode / prefill progress
        itl = spec.itl_base_s + spec.itl_per_seq_s * len(self.running)
        if self.overload:
            itl *= 1.6
        done: list[Request] = []
        for req in self.running:
            if req.first_token is None:
                req.prefill_left -= dt
                if req.prefill_left <= 0:
                    req.first_token = t
                    req.emitted = 1
                    self.generation_tokens += 1
                    self.ttft.observe(t - req.arrival)
                continue
            step_itl = itl * (0.85 + 0.3 * rng.random())
            req.carry += dt / step_itl
            tokens = min(int(req.carry), req.output - req.emitted)
            if tokens > 0:
                req.carry -= tokens
                req.emitted += tokens
                self.generation_tokens += tokens
                self.itl.observe(step_itl, tokens)
            if req.emitted >= req.output:
                done.append(req)
        for req in done:
            self.running.remove(req)
            e2e = t - req.arrival
            self.e2e.observe(e2e)
            assert req.first_token is not None
            self.tpot.observe((t - req.first_token) / (req.emitted - 1) if req.emitted > 1 else 0.0)
            self.finished["stop" if req.stop else "length"] += 1
        # preemption when the KV pool overflows: the newest sequence goes back to the queue
        while self.running and self.kv_used_tokens() > spec.kv_capacity_tokens:
            victim = self.running.pop()
            victim.emitted, victim.first_token, victim.carry = 0, None, 0.0
            self.waiting.insert(0, victim)
            self.preemptions += 1

    # --- what the GPU sees -------------------------------------------------------------------
    def utilization(self) -> float:
        busy = len(self.running) / max(1, self.spec.max_num_seqs)
        return min(1.0, 0.05 + 1.4 * busy) if self.running else 0.0


def _fmt(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _labels(**kw: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(kw.items())) + "}"


def vllm_page(m: TrafficModel, engine: str = "0") -> str:
    """The model's state in vLLM V1's exposition (single-process mode: with _created series)."""
    m.advance()
    with m.lock:
        name = m.spec.model
        base = {"engine": engine, "model_name": name}
        lab = _labels(**base)
        out: list[str] = []

        def gauge(metric: str, help_: str, value: float, **extra: str) -> None:
            out.append(f"# HELP {metric} {help_}\n# TYPE {metric} gauge")
            out.append(f"{metric}{_labels(**base, **extra)} {_fmt(value)}")

        def counter(metric: str, help_: str, values: dict[str, float] | float, key: str = "") -> None:
            out.append(f"# HELP {metric}_total {help_}\n# TYPE {metric}_total counter")
            items = values.items() if isinstance(values, dict) else [("", values)]
            for k, v in items:
                extra = {key: k} if key else {}
                out.append(f"{metric}_total{_labels(**base, **extra)} {_fmt(v)}")
            for k, _ in items:
                extra = {key: k} if key else {}
                out.append(f"{metric}_created{_labels(**base, **extra)} {_fmt(m.created)}")

        def histogram(metric: str, help_: str, h: Histogram) -> None:
            out.append(f"# HELP {metric} {help_}\n# TYPE {metric} histogram")
            for bound, c in h.cumulative():
                out.append(f"{metric}_bucket{_labels(**base, le=_fmt(bound))} {_fmt(c)}")
            out.append(f"{metric}_count{lab} {_fmt(h.count)}")
            out.append(f"{metric}_sum{lab} {_fmt(h.sum)}")
            out.append(f"{metric}_created{lab} {_fmt(h.created)}")

        waiting = float(len(m.waiting))
        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", len(m.running))
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
        out.append("# HELP vllm:num_requests_waiting_by_reason Number of requests waiting, by reason.\n"
                   "# TYPE vllm:num_requests_waiting_by_reason gauge")
        out.append(f"vllm:num_requests_waiting_by_reason{_labels(**base, reason='capacity')} {_fmt(waiting)}")
        out.append(f"vllm:num_requests_waiting_by_reason{_labels(**base, reason='deferred')} 0.0")
        kv = m.kv_used_tokens() / m.spec.kv_capacity_tokens
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", min(1.0, kv))
        counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", m.prefix_queries)
        counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", m.prefix_hits)
        counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", m.preemptions)
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens)
        counter("vllm:generation_tokens", "Number of generation tokens processed.", m.generation_tokens)
        counter("vllm:request_success", "Count of successfully processed requests.", m.finished, "finished_reason")
        histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft)
        histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl)
        histogram("vllm:request_time_per_output_token_seconds",
                  "Histogram of time_per_output_token_seconds per request.", m.tpot)
        histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", m.e2e)
        histogram("vllm:request_queue_time_seconds",
                  "Histogram of time spent in WAITING phase for request.", m.queue)
        blocks = m.spec.kv_capacity_tokens // m.spec.block_size
        out.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                   "# TYPE vllm:cache_config_info gauge")
        out.append("vllm:cache_config_info" + _labels(
            block_size=str(m.spec.block_size), cache_dtype="auto", enable_prefix_caching="True",
            engine=engine, gpu_memory_utilization="0.9", num_gpu_blocks=str(blocks)) + " 1.0")
    return "\n".join(out) + "\n"


CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"


class MetricsServer:
    """A real HTTP server on 127.0.0.1 serving ``page()`` at /metrics, in a daemon thread."""

    def __init__(self, page: Callable[[], str | bytes], port: int = 0, content_type: str = CONTENT_TYPE) -> None:
        self.page = page
        self.content_type = content_type
        self.delay_s = 0.0
        outer = self

        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with outer._conns_lock:
                    outer._conns.add(self.connection)

            def finish(self) -> None:
                with outer._conns_lock:
                    outer._conns.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    if outer.delay_s:
                        time.sleep(outer.delay_s)
                    body = outer.page()
                    data = body.encode() if isinstance(body, str) else body
                    self._send(200, data, outer.content_type)
                elif path in ("/health", "/ping"):
                    self._send(200, b"", "text/plain")
                else:
                    self._send(404, b"Not Found", "text/plain")

            def _send(self, code: int, data: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name=f"sim-{self.port}", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop like a dying engine: no new connections, open keep-alive ones cut."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self._conns_lock:
            for conn in list(self._conns):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@dataclass
class SimEngine:
    kind: str
    model: TrafficModel
    server: MetricsServer

    @property
    def url(self) -> str:
        return self.server.url


def start_engine(kind: str, spec: TrafficSpec | None = None, port: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> SimEngine:
    if kind != "vllm":
        raise ValueError(f"no simulator for engine kind {kind!r} yet; available: vllm")
    model = TrafficModel(spec or TrafficSpec(), clock=clock)
    server = MetricsServer(lambda: vllm_page(model), port=port).start()
    return SimEngine(kind, model, server)
