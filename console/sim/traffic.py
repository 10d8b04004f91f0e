"""Traffic model behind the simulated engines: arrivals, admission, prefill, decode, KV blocks,
preemption, finishing, restarts. It advances lazily to the time it is read, in fixed steps, from
a seeded RNG, and records what an engine's metrics would count. It also keeps each finished
request's own figures (the joint truth separate histograms lose), for goodput tests.
"""

from __future__ import annotations

import bisect
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

PROFILES = ("steady", "wave", "burst", "overload", "restart")


class Histogram:
    """Cumulative histogram as prometheus_client keeps it (per-bucket counts, sum)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0.0] * (len(bounds) + 1)
        self.sum = 0.0

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
    outcome: str  # stop | length | abort | error
    prefill_left: float = 0.0
    emitted: int = 0
    first_token: float | None = None
    scheduled: float | None = None
    carry: float = 0.0  # fractional tokens owed by the decode rate


@dataclass(frozen=True, slots=True)
class Finished:
    """One finished request's own figures."""

    t: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float
    output_tokens: int
    outcome: str


WAVE, WAVE_S = 0.6, 240.0  # profile "wave": the rate swings ±60 % over this period


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
    abort_share: float = 0.004  # clients that cancel
    error_share: float = 0.001  # server-side failures
    client_timeout_s: float = 60.0  # clients give up on requests still queued after this long
    profile: str = "steady"
    restart_every_s: float = 45.0  # with profile "restart"
    seed: int = 1
    warmup_s: float = 0.0  # start with this much traffic already simulated


DEFAULT_BUCKETS: dict[str, tuple[float, ...]] = {
    "ttft": (
        0.001,
        0.005,
        0.01,
        0.02,
        0.04,
        0.06,
        0.08,
        0.1,
        0.25,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        80.0,
        160.0,
        640.0,
        2560.0,
    ),
    "itl": (
        0.01,
        0.025,
        0.05,
        0.075,
        0.1,
        0.15,
        0.2,
        0.3,
        0.4,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        80.0,
    ),
    "latency": (
        0.3,
        0.5,
        0.8,
        1.0,
        1.5,
        2.0,
        2.5,
        5.0,
        10.0,
        15.0,
        20.0,
        30.0,
        40.0,
        50.0,
        60.0,
        120.0,
        240.0,
        480.0,
        960.0,
        1920.0,
        7680.0,
    ),
    "tokens": (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000),
}
DEFAULT_BUCKETS["queue"] = DEFAULT_BUCKETS["latency"]  # vLLM's request-latency edges

# histogram name -> bucket family
HISTOGRAMS = {
    "ttft": "ttft",
    "itl": "itl",
    "tpot": "itl",
    "e2e": "latency",
    "queue": "queue",
    "prefill": "latency",
    "validation": "latency",
    "prompt_len": "tokens",
    "output_len": "tokens",
}


@dataclass
class TrafficModel:
    """Discrete-time model of one LLM serving engine."""

    spec: TrafficSpec
    clock: Callable[[], float] = time.monotonic
    buckets: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: DEFAULT_BUCKETS)
    step_s: float = 0.05
    keep_finished_s: float = 1800.0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.spec.seed)
        self.lock = threading.RLock()
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.finished_log: deque[Finished] = deque()
        self.t = self.clock()
        self.started = self.t
        self.last_restart = self.t
        self.restarts = 0
        self.reset_counters()
        if self.spec.warmup_s > 0:
            self.t -= self.spec.warmup_s
            self.started = self.last_restart = self.t
            self.advance()

    def reset_counters(self) -> None:
        self.prompt_tokens = 0.0
        self.generation_tokens = 0.0
        self.outcomes = {"stop": 0.0, "length": 0.0, "abort": 0.0, "error": 0.0, "repetition": 0.0}
        self.preemptions = 0.0
        self.prefix_queries = 0.0
        self.prefix_hits = 0.0
        self.prompt_seconds = 0.0
        self.decode_seconds = 0.0
        self.decode_steps = 0.0
        self.max_tokens_seen = 0.0
        self.e2e_total_s = 0.0
        self.queue_total_s = 0.0
        self.h = {name: Histogram(self.buckets[family]) for name, family in HISTOGRAMS.items()}
        self.created = time.time()

    def restart(self) -> None:
        """The engine process restarted: queues are lost and every counter starts from zero."""
        with self.lock:
            self.waiting.clear()
            self.running.clear()
            self.restarts += 1
            self.last_restart = self.t
            self.reset_counters()

    # --- model -------------------------------------------------------------------------
    @property
    def overload(self) -> bool:
        return self.spec.profile == "overload"

    def set_profile(self, profile: str) -> None:
        with self.lock:
            self.advance()
            self.spec.profile = profile

    def rate_at(self, t: float) -> float:
        base = self.spec.rate_rps
        if self.overload:
            return base * 4.0
        if self.spec.profile == "burst":
            return base * (3.0 if (t - self.started) % 60 < 15 else 0.5)
        if self.spec.profile == "wave":  # load that swells and ebbs over four minutes
            return base * (1.0 + WAVE * math.sin(2 * math.pi * (t - self.started) / WAVE_S))
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

    def _arrivals(self, t: float, dt: float) -> None:
        spec, rng = self.spec, self.rng
        lam = self.rate_at(t) * dt
        n, threshold, p = 0, math.exp(-lam), rng.random()
        while p > threshold and n < 50:
            n += 1
            p *= rng.random()
        for _ in range(n):
            out = max(2, int(rng.expovariate(1.0 / spec.output_tokens)))
            mean_prompt = spec.prompt_tokens * (
                3 if self.overload else 1
            )  # overload: long-context surge
            prompt = max(8, int(rng.lognormvariate(math.log(mean_prompt), 0.5)))
            u = rng.random()
            outcome = (
                "error"
                if u < spec.error_share
                else "abort"
                if u < spec.error_share + spec.abort_share
                else "stop"
                if rng.random() < 0.7
                else "length"
            )
            self.waiting.append(Request(t - dt * rng.random(), prompt, out, outcome))
            self.h["validation"].observe(0.0005 + 0.002 * rng.random())

    def _admit(self, t: float) -> None:
        spec, rng = self.spec, self.rng
        if self.waiting and t - self.waiting[0].arrival > spec.client_timeout_s:
            keep = []
            for req in self.waiting:
                if t - req.arrival > spec.client_timeout_s:
                    self.outcomes["abort"] += 1
                    self.finished_log.append(Finished(t, None, None, t - req.arrival, 0, "abort"))
                else:
                    keep.append(req)
            self.waiting = keep
        while self.waiting and len(self.running) < spec.max_num_seqs:
            req = self.waiting[0]
            if self.kv_used_tokens() + req.prompt + spec.block_size > spec.kv_capacity_tokens:
                break
            self.waiting.pop(0)
            req.scheduled = t
            self.h["queue"].observe(t - req.arrival)
            self.queue_total_s += t - req.arrival
            hit = int(req.prompt * spec.prefix_hit_share * rng.random() * 2)
            hit = min(hit, req.prompt - 1) // spec.block_size * spec.block_size
            self.prefix_queries += req.prompt
            self.prefix_hits += hit
            self.prompt_tokens += req.prompt
            self.h["prompt_len"].observe(req.prompt)
            req.prefill_left = spec.prefill_overhead_s + (req.prompt - hit) / spec.prefill_tok_s
            self.prompt_seconds += req.prefill_left
            self.running.append(req)

    def _step(self, t: float, dt: float) -> None:
        spec, rng = self.spec, self.rng
        if spec.profile == "restart" and t - self.last_restart >= spec.restart_every_s:
            self.restart()
            self.last_restart = t
        self._arrivals(t, dt)
        self._admit(t)
        itl = spec.itl_base_s + spec.itl_per_seq_s * len(self.running)
        if self.overload:
            itl *= 1.6
        if self.running:
            self.decode_steps += dt / itl
            self.decode_seconds += dt
        done: list[Request] = []
        for req in self.running:
            if req.first_token is None:
                req.prefill_left -= dt
                if req.prefill_left <= 0:
                    req.first_token = t
                    req.emitted = 1
                    self.generation_tokens += 1
                    self.h["ttft"].observe(t - req.arrival)
                    self.h["prefill"].observe(t - (req.scheduled or t))
                    if req.outcome in ("abort", "error") and rng.random() < 0.5:
                        done.append(req)
                continue
            step_itl = itl * (0.85 + 0.3 * rng.random())
            req.carry += dt / step_itl
            tokens = min(int(req.carry), req.output - req.emitted)
            if tokens > 0:
                req.carry -= tokens
                req.emitted += tokens
                self.generation_tokens += tokens
                self.h["itl"].observe(step_itl, tokens)
            if req.emitted >= req.output:
                done.append(req)
        for req in done:
            self._finish(req, t)
        self.max_tokens_seen = max(
            [self.max_tokens_seen] + [r.prompt + r.emitted for r in self.running]
        )
        while self.running and self.kv_used_tokens() > spec.kv_capacity_tokens:
            victim = self.running.pop()
            victim.emitted, victim.first_token, victim.carry = 0, None, 0.0
            self.waiting.insert(0, victim)
            self.preemptions += 1

    def _finish(self, req: Request, t: float) -> None:
        self.running.remove(req)
        e2e = t - req.arrival
        ttft = (req.first_token - req.arrival) if req.first_token is not None else None
        tpot = (
            ((t - req.first_token) / (req.emitted - 1) if req.emitted > 1 else 0.0)
            if req.first_token is not None
            else None
        )
        self.outcomes[req.outcome] += 1
        if req.outcome in ("stop", "length"):
            self.h["e2e"].observe(e2e)
            self.e2e_total_s += e2e
            self.h["tpot"].observe(tpot or 0.0)
            self.h["output_len"].observe(req.emitted)
        self.finished_log.append(Finished(t, ttft, tpot, e2e, req.emitted, req.outcome))
        cut = t - self.keep_finished_s
        while self.finished_log and self.finished_log[0].t < cut:
            self.finished_log.popleft()

    # --- what the GPU sees -------------------------------------------------------------------
    def utilization(self) -> float:
        busy = len(self.running) / max(1, self.spec.max_num_seqs)
        return min(1.0, 0.05 + 1.4 * busy) if self.running else 0.0

    @property
    def finished_ok(self) -> float:
        return self.outcomes["stop"] + self.outcomes["length"] + self.outcomes["repetition"]
