"""Findings: what a frame says an operator should look at, ranked, each with its evidence (the
figures and where they come from) and the knob to consider. Pure: Frame in, findings out; shown by
the console (`F`), `inferdeck check` and snapshot.md."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from console.engines import Knobs, profiles
from console.figures.capacity import CAPACITY_WINDOW_S, SATURATION_MIN
from console.figures.enginestats import KV_FULL
from console.figures.slo import FAST_BURN, OBJECTIVES
from console.figures.slo import SLOW_BURN as BURN_SLOW
from console.figures.thresholds import at_least, below
from console.frame import CapacityReport, Engine, Frame, MemoryLine, MigRecut, ServiceStatus
from console.units import (
    GIB,
    basis,
    capacity_text,
    counted,
    duration_text,
    eta_text,
    gib,
    num,
    pct,
    seconds,
)

RANK = {"critical": 0, "warning": 1, "info": 2}
KV_FULL_SOON_S = 600.0  # a KV trend reaching full sooner than this is a finding
SATURATING = 0.8  # a saturation index this high while load and TTFT rise: saturation coming
QUEUE_SHARE = 0.5  # queueing holds at least half of the TTFT p95
PREFILL_SHARE = 0.8  # queueing under a fifth of it: the rest is prefill
TTFT_WORTH_S = 0.2  # below this, where TTFT goes is not worth a finding
# KV_FULL (0.9) is enginestats': the window's share above it is counted there
PREFIX_HEAVY = 0.5  # half the prompt tokens served from the prefix cache
CONTEXT_SPARE = 4.0  # the plan's context per sequence is at least 4x what any request used
CONTEXT_MIN_REQUESTS = 50  # requests in the window behind that verdict
MISS_MIN_REQUESTS = 100  # requests behind an SLO miss before it is on the verdict


@dataclass(frozen=True)
class Finding:
    severity: str  # critical | warning | info
    subject: str
    title: str
    evidence: list[str] = field(default_factory=list)
    knob: str = ""
    weight: float = 0.0  # orders findings of one severity (bigger first)


def findings(frame: Frame) -> list[Finding]:
    out: list[Finding] = []
    for e in frame.engines:
        if e.up:
            out += _engine(e)
    for g in frame.gpus:
        events = set(g.clock_events or [])
        hot = events & {"thermal (SW)", "thermal (HW)", "HW slowdown"}
        if hot or "power cap" in events:
            out.append(
                Finding(
                    "critical" if hot else "warning",
                    f"GPU {g.index}",
                    "clocks held back by " + ", ".join(sorted(hot or {"power cap"})),
                    [
                        f"clock events: {', '.join(sorted(events))}",
                        f"power {num(g.power_w)} of {num(g.power_limit_w)} W, "
                        f"{num(g.temperature_c)} °C (slowdown {num(g.temperature_slowdown_c)})",
                        f"SM clock {g.clock_sm_mhz} of {g.clock_sm_max_mhz} MHz",
                    ],
                    "check cooling and airflow"
                    if hot
                    else "spread the load, or raise the power limit if the plan allows",
                    float(g.power_w or 0),
                )
            )
    out += [_recut(g.index, g.mig.recut) for g in frame.gpus if g.mig and g.mig.recut]
    engines = {e.name: e for e in frame.engines}
    for s in frame.services:
        engine = engines.get(s.engine)
        out += _service(s, engine.kind if engine else None) + _context(s, engine)
    return sorted(out, key=lambda f: (RANK[f.severity], -f.weight, f.subject))


def _recut(index: int, r: MigRecut) -> Finding:
    """A MIG re-cut begun and never ended: critical when the GPU is in neither layout (a slice
    may have no MIG device), a warning when it is in the old one or cannot be read, info when the
    change was made and only its record is open."""
    severity = {"neither": "critical", "old": "warning", "unknown": "warning"}.get(r.state, "info")
    who = (r.user or "someone") + (f", pid {r.pid}" if r.pid else "")
    return Finding(
        severity,
        f"GPU {index}",
        "MIG re-cut interrupted: "
        + {
            "new": "the change was made, its record left open",
            "old": "the GPU is still in the old layout",
            "neither": "the GPU is in neither layout",
        }.get(r.state, "its layout cannot be read back (needs root)"),
        [
            f"{r.before or 'none'} -> {r.target}, begun {r.begun[:19]}Z by {who}",
            f"journal apply {r.apply_id}",
        ],
        f"{r.action} (preselected in the MIG menu, m)",
        1.0,
    )


def knobs(kind: str | None) -> Knobs:
    """The engine's own flag names (vLLM's for an engine of unknown kind)."""
    prof = profiles().get(kind or "")
    return prof.knobs if prof is not None else Knobs()


def _queue_knob(e: Engine, kv_full: bool) -> str:
    """What to turn for a TTFT spent queueing: the binding resource decides (more sequences at
    once only while the KV cache has room for them)."""
    k = knobs(e.kind)
    if kv_full:  # more sequences at once would only preempt more
        return (
            "add capacity (a replica); the KV cache is full, so more sequences at once would "
            "only preempt more"
        )
    if (e.requests_waiting_kv or 0.0) > 0:
        return (
            f"add capacity (a replica) or raise {k.memory}: requests wait for the KV cache, "
            "not for a batch slot"
        )
    if e.kv_cache_usage is None:
        return f"add capacity (a replica), or raise {k.max_seqs} if the KV cache has room"
    return (
        f"add capacity (a replica), or raise {k.max_seqs}: the KV cache has room "
        f"({e.kv_cache_usage * 100:.0f}% used)"
    )


def _kv_peak(e: Engine) -> float:
    """The KV use judged over the window, not one instant: the cache filled in bursts between two
    looks (0 when it was never read: no KV finding then rests on it)."""
    return max(e.kv_cache_usage or 0.0, e.kv_cache_usage_peak or 0.0)


def _preempted(e: Engine) -> float:
    """Preemptions in the window (none counted while the window only has the lifetime count)."""
    return 0.0 if e.preemptions_since_start else (e.preemptions or 0.0)


def _ttft_shares(e: Engine) -> tuple[float, float] | None:
    """The least and most share of the window's TTFT p95 its queue-time p95 may hold: a queue
    percentile inside a wide bucket (vLLM's first is (0, 0.3 s]) is only known to lie in it.
    None where TTFT is too short to be worth splitting or the engine exports no queue time."""
    ttft, queue = e.ttft_s, e.queue_time_s
    if not (ttft and ttft.p95 and at_least(ttft.p95, TTFT_WORTH_S) and queue and queue.p95):
        return None
    low, high = queue.buckets["p95"] if "p95" in queue.wide else (queue.p95, queue.p95)
    return low / ttft.p95, high / ttft.p95


def _ttft_went(shares: tuple[float, float] | None) -> str | None:
    """Where the window's late first tokens went (``_ttft_shares``), judged on the bucket edge
    that speaks against each answer: "queueing" (QUEUE_SHARE of the TTFT p95 or more),
    "prefill" (queueing under 1 - PREFILL_SHARE of it), or None (neither shown, or nothing to
    split)."""
    if shares is None:
        return None
    if at_least(shares[0], QUEUE_SHARE):
        return "queueing"
    return "prefill" if below(shares[1], 1 - PREFILL_SHARE) else None


def _ttft_split(e: Engine) -> Finding | None:
    """Where a late first token goes: mostly queueing (the knob by what binds) or mostly prefill."""
    shares, ttft, queue = _ttft_shares(e), e.ttft_s, e.queue_time_s
    went = _ttft_went(shares)
    if went is None or shares is None or ttft is None or not ttft.p95 or queue is None:
        return None
    evidence = [
        f"TTFT p95 {seconds(ttft.p95)} ({basis(ttft.window)}), queue p95 {seconds(queue.p95)}",
        f"waiting {num(e.requests_waiting)}, running {num(e.requests_running)}",
    ]
    if went == "queueing":
        return Finding(
            "warning",
            e.name,
            f"TTFT is mostly queueing ({min(shares[0], 1) * 100:.0f}% of its p95)",
            evidence,
            _queue_knob(e, at_least(_kv_peak(e), KV_FULL)),
            ttft.p95,
        )
    k = knobs(e.kind)
    return Finding(
        "info",
        e.name,
        f"TTFT is mostly prefill ({(1 - shares[1]) * 100:.0f}% of its p95 after the queue)",
        evidence,
        f"long prompts: {k.prefix} for shared prefixes, or lower {k.batched_tokens} to keep "
        "decode steps short",
        ttft.p95,
    )


def _kv_waiting(e: Engine) -> Finding | None:
    """No preemption between these looks, but requests wait for KV the cache cannot give."""
    kv_wait = e.requests_waiting_kv or 0.0
    if not (kv_wait > 0 and _preempted(e) == 0):
        return None
    return Finding(
        "critical",
        e.name,
        f"{counted(kv_wait, 'requests')} waiting for the KV cache: saturated",
        [
            f"KV use {pct(e.kv_cache_usage, 1)} now, peak {_kv_peak(e) * 100:.1f}% in the window; "
            f"requests waited for KV in {pct(e.kv_blocked_share)} of its scrapes",
            f"waiting {num(e.requests_waiting)}, running {num(e.requests_running)}",
        ],
        f"add a replica or shed load, or raise {knobs(e.kind).memory} for a larger cache",
        kv_wait,
    )


def _kv_full_preempting(e: Engine) -> Finding | None:
    peak = _kv_peak(e)
    if not (at_least(peak, KV_FULL) and _preempted(e) > 0):
        return None
    k = knobs(e.kind)
    full_share = (
        f", at or above {KV_FULL * 100:.0f}% in {e.kv_full_share * 100:.0f}% of the window's "
        "scrapes"
        if e.kv_full_share is not None
        else ""
    )
    per_request = (
        f", {e.preemptions_per_request:.2f} per finished request"
        if e.preemptions_per_request is not None
        else ""
    )
    return Finding(
        "critical",
        e.name,
        f"KV cache {peak * 100:.0f}% full with {counted(e.preemptions, k.preemptions)} in the window",
        [
            f"KV use {pct(e.kv_cache_usage, 1)} of {num(e.kv_capacity_tokens)} tokens now, peak "
            f"{peak * 100:.1f}%" + full_share,
            counted(e.preemptions, k.preemptions) + per_request,
        ],
        f"lower {k.max_seqs} or {k.max_len}, raise {k.memory}, or add a replica",
        e.preemptions or 0.0,
    )


def _imbalance(e: Engine) -> Finding | None:
    if not e.imbalance:
        return None
    return Finding(
        "warning",
        e.name,
        "data-parallel imbalance",
        [e.imbalance],
        "check the router's balancing (session affinity, prefix routing) and request lengths",
    )


def _binding_pool(e: Engine) -> Finding | None:
    """A hybrid model's Mamba or sliding-window pool full before the KV cache."""
    pool = e.kv_binding_pool
    if not (pool and pool != "full" and e.kv_pools and at_least(e.kv_pools[pool], KV_FULL)):
        return None
    k = knobs(e.kind)
    pools = ", ".join(
        f"{name} {v * 100:.0f}%" for name, v in e.kv_pools.items() if v or name == "full"
    )
    cache = f"; KV cache {e.kv_cache_usage * 100:.0f}%" if e.kv_cache_usage is not None else ""
    return Finding(
        "warning",
        e.name,
        f"the {pool} pool is {e.kv_pools[pool] * 100:.0f}% full: it, not the KV cache, limits "
        "admission",
        ["pools: " + pools + cache],
        f"raise {k.mamba if pool == 'mamba' else k.swa}, or lower {k.max_seqs}",
        e.kv_pools[pool],
    )


def _prefix_heavy(e: Engine) -> Finding | None:
    hit = e.prefix_cache_hit_rate
    if not (hit is not None and at_least(hit, PREFIX_HEAVY) and e.prompt_tokens_per_s):
        return None
    measured = e.prefill_tokens_per_s is not None
    computed = (
        e.prefill_tokens_per_s
        if e.prefill_tokens_per_s is not None
        else e.prompt_tokens_per_s * (1 - hit)
    )
    return Finding(
        "info",
        e.name,
        f"prefix-cache hits make {hit * 100:.0f}% of prompt tokens",
        [
            f"prompt {e.prompt_tokens_per_s:,.0f} tok/s counted, "
            f"{'' if measured else 'about '}{computed:,.0f} tok/s computed"
            + (" (the engine's computed-token counter)" if measured else ""),
        ],
        "compare throughput with computed prompt tokens (prompt tokens by source), not the "
        "prompt counter",
        hit,
    )


def _kv_full_soon(e: Engine) -> Finding | None:
    full_in = e.capacity.kv_full_in_s if e.capacity is not None else None
    if full_in is None or full_in >= KV_FULL_SOON_S or at_least(_kv_peak(e), KV_FULL):
        return None
    return Finding(
        "warning",
        e.name,
        f"KV cache full {eta_text(full_in)} at this rate",
        [
            f"KV use {pct(e.kv_cache_usage)} now, rising over the last "
            f"{CAPACITY_WINDOW_S / 60:.0f} minutes (its robust trend)",
            f"room before an SLO breaks: {capacity_text(e.capacity)}",
        ],
        f"add a replica or shed load before it fills; lower {knobs(e.kind).max_len} if requests "
        "are shorter than it",
        KV_FULL_SOON_S - full_in,
    )


def _engine(e: Engine) -> list[Finding]:
    out: list[Finding] = []
    for rule in ENGINE_RULES:
        got = rule(e)
        if isinstance(got, Finding):
            out.append(got)
        elif got:
            out += got
    return out


def saturation_kind(e: Engine) -> str | None:
    """ "saturated" (llm-d's index, the worst p90 / SLO, at 1 or more), "saturating" (past
    SATURATING while load and TTFT both rise: GuideLLM's test), "prefill" (a late first token
    with nothing waiting, no rise and the window's queue time short: not load), or None. The
    finding and the alert both ask."""
    cap = e.capacity
    index = cap.saturation if cap is not None else None
    if cap is None or index is None:
        return None
    if cap.saturation_requests is not None and cap.saturation_requests < SATURATION_MIN:
        return None  # a p90 of a handful of requests is shown, not judged
    rising = bool(cap.saturating)
    if below(index, 1.0) and not (rising and at_least(index, SATURATING)):
        return None
    if cap.saturation_slo == "ttft" and not rising and not e.requests_waiting:
        # nothing waits now: prefill where the window shows its queue time short (or the engine
        # exports none); saturated where the window's TTFT was spent queueing (a queue that
        # drained is still in it: those requests were late from load); else the window's own
        # figures do not bear the index out (it is read every few seconds): no kind
        if e.queue_time_s is None:
            return "prefill"
        went = _ttft_went(_ttft_shares(e))
        return "saturated" if went == "queueing" else went
    return "saturated" if at_least(index, 1.0) else "saturating"


def saturation_knob(cap: CapacityReport, k: Knobs) -> str:
    if cap.saturation_slo == "tpot":
        return f"lower {k.max_seqs}: smaller batches decode faster (or add a replica)"
    return "add a replica or shed load: requests are queueing"


def _saturation(e: Engine) -> list[Finding]:
    """The engine takes more than it serves (saturation_kind), with the evidence and knob."""
    kind, cap = saturation_kind(e), e.capacity
    if kind is None or cap is None or cap.saturation is None:
        return []
    k = knobs(e.kind)
    index = cap.saturation
    if kind == "prefill":
        return [
            Finding(
                "warning",
                e.name,
                f"p90 TTFT at {index:.2f}x its SLO with nothing waiting: prefill, not load",
                [
                    f"p90 TTFT at {index:.2f}x its SLO, waiting 0, running "
                    f"{num(e.requests_running)}",
                ],
                f"long prompts: {k.prefix} for shared prefixes, or a larger {k.batched_tokens}",
                index,
            )
        ]
    slo = (cap.saturation_slo or "").upper()
    rising = bool(cap.saturating)
    evidence = [
        "running + waiting and TTFT both rising over the last two minutes"
        if rising
        else f"waiting {num(e.requests_waiting)}, running {num(e.requests_running)}",
        f"room before an SLO breaks: {capacity_text(cap)}",
    ]
    if cap.saturation_bucket:
        low, high = cap.saturation_bucket
        evidence.append(f"that p90 lies in a bucket of {low:.2f}–{high:.2f}x its SLO")
    return [
        Finding(
            "warning",  # the burn rules page, over their windows
            e.name,
            f"{kind}: p90 {slo} at {index:.2f}x its SLO"
            + (", load and TTFT rising" if rising else ""),
            evidence,
            saturation_knob(cap, k),
            index,
        )
    ]


# an up engine's rules, in the order their findings are listed (then ranked by severity)
ENGINE_RULES: tuple[Callable[[Engine], Finding | list[Finding] | None], ...] = (
    _ttft_split,
    _kv_waiting,
    _kv_full_preempting,
    _imbalance,
    _binding_pool,
    _prefix_heavy,
    _saturation,
    _kv_full_soon,
)


def _context(s: ServiceStatus, e: Engine | None) -> list[Finding]:
    """The plan reserves far more context per sequence than any request used: the same KV would
    hold several times the sequences at a context sized to the traffic."""
    rt = e.request_tokens if e is not None and e.up else None
    planned, seqs = s.tokens_per_sequence, s.concurrent_sequences
    if rt is None or rt.most is None or not planned or not seqs:
        return []
    if rt.requests < CONTEXT_MIN_REQUESTS or rt.most * CONTEXT_SPARE > planned:
        return []
    # twice what the largest request used, in whole thousands (1,024) of tokens
    suggest = max(1024, math.ceil(2 * rt.most / 1024) * 1024)
    more = planned * seqs // suggest
    return [
        Finding(
            "info",
            s.name,
            f"requests use at most {rt.most:,.0f} of the {planned:,} tokens planned per sequence",
            [
                f"{rt.requests:,.0f} requests over {rt.window}: prompt p50 {_tok(rt.prompt_p50)} "
                f"p99 {_tok(rt.prompt_p99)}, output p50 {_tok(rt.output_p50)} "
                f"p99 {_tok(rt.output_p99)} tokens",
                f"none above {rt.most:,.0f} tokens (the highest prompt and output buckets "
                "holding a request)",
                f"plan: {seqs} sequences x {planned:,} tokens",
            ],
            f"size the context to the traffic: at {suggest:,} tokens per sequence the planned KV "
            f"holds {more:,} sequences instead of {seqs} (plan tokens_per_sequence and "
            f"concurrent_sequences; the engine's {knobs(e.kind if e is not None else None).max_len})",
            planned / rt.most,
        )
    ]


def _tok(v: float | None) -> str:
    return f"{v:,.0f}" if v is not None else "n/a"


def strays(m: MemoryLine) -> bool:
    """The engine holds less KV cache, or more memory in all, than planned: beyond the line's
    tolerance (the plan's margin, or 1 %), so a 2 MiB shortfall is agreement."""
    d = m.drift_bytes
    if d is None:
        return False
    return (m.name == "kv" and -d > m.tolerance_bytes) or (
        m.name == "total" and d > m.tolerance_bytes
    )


def _service(s: ServiceStatus, engine_kind: str | None = None) -> list[Finding]:
    out = []
    lines = {m.name: m for m in s.memory}
    kv = lines.get("kv")
    if kv is not None and kv.drift_bytes is not None and strays(kv):
        out.append(
            Finding(
                "warning",
                s.name,
                f"the engine holds {-kv.drift_bytes / GIB:.1f} GiB less KV cache than planned",
                [
                    f"KV planned {gib(kv.planned_bytes, 2)} GiB, engine "
                    f"{gib(kv.engine_bytes, 2)} GiB ({kv.source})"
                ],
                f"raise {knobs(engine_kind).memory}, or lower {knobs(engine_kind).max_len}",
                -kv.drift_bytes,
            )
        )
    total = lines.get("total")
    if total is not None and total.drift_bytes is not None and strays(total):
        out.append(
            Finding(
                "warning",
                s.name,
                f"the engine uses {total.drift_bytes / GIB:.1f} GiB more memory than planned",
                [
                    f"planned {gib(total.planned_bytes, 2)} GiB, engine "
                    f"{gib(total.engine_bytes, 2)} GiB ({total.source})"
                ],
                "update the plan's runtime reserve, or cap the engine's memory",
                total.drift_bytes,
            )
        )
    burn = s.slo.burn if s.slo else None
    if burn is not None:
        hour = burn.windows.get("1h")
        obj = (hour.objective if hour is not None else None) or "completion"
        if (
            hour is not None
            and hour.burn is not None
            and hour.ready is not False
            and at_least(hour.burn, BURN_SLOW)
        ):
            out.append(
                Finding(
                    "critical" if at_least(hour.burn, FAST_BURN) else "warning",
                    s.name,
                    f"error budget burning {hour.burn:.1f}x over 1h",
                    [
                        f"{pct(hour.bad_share, 2)} of {hour.requests:,.0f} requests "
                        f"failed or missed a latency SLO against a {burn.error_budget * 100:.2f}% "
                        f"budget; the worst objective: {OBJECTIVES.get(obj, obj)}"
                    ],
                    "look at the failing requests (finish reasons in the engine detail)"
                    if obj == "completion"
                    else "look at where the latency goes (the engine detail: queue, prefill, decode)",
                    hour.burn,
                )
            )
    return out + _missed(s)


def _missed(s: ServiceStatus) -> list[Finding]:
    """An SLO the window watched misses, over at least MISS_MIN_REQUESTS requests: a warning
    from the first poll that shows it (burn alerts keep their coverage rules, and may raise it
    to critical later). Fewer requests say nothing yet."""
    slo = s.slo
    if slo is None:
        return []
    watched = (
        f"in {duration_text(slo.covered_s)} watched"
        if slo.covered_s is not None
        else f"over the {slo.window} window"
    )
    hour = slo.burn.windows.get("1h") if slo.burn is not None else None
    judged = hour is not None and hour.ready is True
    tail = (
        "the burn is judged over the hour beside it"
        if judged
        else "burn not yet judged: its windows are not covered yet"
    )
    done = slo.completion.requests if slo.completion is not None else None
    out = []
    c = slo.completion
    if c is not None and c.observed is not None and c.requests >= MISS_MIN_REQUESTS:
        # missed even with one failure fewer: a single request is no miss
        if (c.target - c.observed) * c.requests >= 1.0:
            out.append(
                Finding(
                    "warning",
                    s.name,
                    f"SLO missed: completion {pct(c.observed, 1)} < {pct(c.target, 1)}",
                    [f"over {c.requests:,.0f} requests {watched}", tail],
                    "look at the failing requests (finish reasons in the engine detail)",
                    1.0 - c.observed,
                )
            )
    for key, t in slo.targets.items():
        n = done if t.counts == "tokens" else t.requests
        if t.met is not False or t.observed_s is None or n is None or n < MISS_MIN_REQUESTS:
            continue
        allowed = 1.0 - float(slo.percentile.removeprefix("p")) / 100
        if t.attainment is not None and (1.0 - t.attainment - allowed) * n < 1.0:
            continue  # one late request fewer and the percentile would be met
        name = key.removesuffix("_s").upper()
        out.append(
            Finding(
                "warning",
                s.name,
                f"SLO missed: {name} {slo.percentile} "
                f"{seconds(t.observed_s, t.observed_lower_bound_only)} > {seconds(t.target_s)}",
                [
                    f"over {n:,.0f} requests {watched}"
                    + (f", {pct(t.attainment, 1)} within it" if t.attainment is not None else ""),
                    tail,
                ],
                "look at where the latency goes (the engine detail: queue, prefill, decode)",
                t.observed_s / t.target_s,
            )
        )
    return out
