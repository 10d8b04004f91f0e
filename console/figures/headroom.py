"""Live headroom against the plan, and the conditions that become alerts.

Per planned service: memory (device used vs planned required: below the planned margin warns,
below zero is critical), KV capacity in sequences at the planned context (below the planned
concurrency warns; requests waiting for the KV cache, or use >= 90% with preemptions, is
critical), queue
(waiting > 0, held for the rule's `for`), engine found and up. Per GPU: power within 5% of the
enforced limit or power-cap clock events warn; within 5 °C of slowdown warns, thermal clock events
are critical. Plus node faults: NVML unavailable, a lost GPU, a scraped engine that is down.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from console.figures.alerts import Condition
from console.figures.capacity import CAPACITY_WINDOW_S, service_capacity, time_to
from console.figures.findings import knobs, saturation_kind, saturation_knob
from console.figures.plan import (
    GIB,
    Fit,
    Plan,
    Service,
    catalog_capacity,
    fit,
    live_device,
    parse_device,
    shape,
)
from console.figures.thresholds import at_least
from console.frame import (
    Engine,
    Gpu,
    GpuSource,
    Headroom,
    MemoryLine,
    MemoryPart,
    ServiceStatus,
    Severity,
)
from console.units import counted, duration_text, eta_text

THERMAL_EVENTS = {"thermal (SW)", "thermal (HW)"}

CondFn = Callable[[str, Severity, str, str, str], None]  # key, severity, subject, message, rule


@dataclass
class HeadroomState:
    """What the evaluator remembers between polls (outages, MIG layouts, power trends)."""

    down_since: dict[str, float] = field(default_factory=dict)
    recovered: dict[str, tuple[float, float]] = field(
        default_factory=dict
    )  # engine -> (at, took_s)
    layouts: dict[str, str] = field(default_factory=dict)  # GPU uuid or index -> MIG layout
    relaid: dict[str, tuple[float, str, str]] = field(default_factory=dict)  # (at, before, after)
    # each GPU's power readings over the capacity window, for its trend to the limit
    power: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def _fmt_gib(v: float) -> str:
    return f"{v / GIB:,.1f} GiB"


def evaluate(
    plan: Plan,
    source: GpuSource,
    gpus: list[Gpu],
    engines: list[Engine],
    state: HeadroomState,
    now: float,
) -> tuple[list[ServiceStatus], list[Condition]]:
    r = plan.alerts
    conds: list[Condition] = []

    def cond(key: str, severity: Severity, subject: str, message: str, rule: str) -> None:
        rule_cfg = getattr(r, rule)
        if rule_cfg.enabled:
            conds.append(
                Condition(key, severity, subject, message, rule, rule_cfg.for_s, rule_cfg.clear_s)
            )

    # node faults
    if source.kind == "none" and source.error:
        conds.append(Condition("gpu-source", "warning", "GPUs", source.error, "gpu"))
    for g in gpus:
        if g.fault:
            conds.append(
                Condition(f"gpu-fault:{g.index}", "critical", f"GPU {g.index}", g.fault, "gpu")
            )
        _gpu_conditions(g, plan, cond)
        conds += _layout_change(g, state, now)
        if g.power_w is not None:
            seen = state.power.setdefault(g.uuid or str(g.index), deque())
            seen.append((now, g.power_w))
            while seen[0][0] < now - CAPACITY_WINDOW_S:
                seen.popleft()
    by_name = {e.name: e for e in engines}
    planned = {s.engine_name for s in plan.services}
    for e in engines:
        _outage(e, state, now)
        if e.up and e.imbalance:
            cond(
                f"imbalance:{e.url}",
                "warning",
                e.name,
                f"data-parallel imbalance: {e.imbalance}; check the router's balancing and the "
                "requests' lengths",
                "imbalance",
            )
        if e.up and e.capacity is not None:
            _saturation(e, cond)
        if not e.up and e.name not in planned:
            cond(
                f"engine-down:{e.url}", "critical", e.name, f"engine down: {e.error}", "engine_down"
            )
        if e.up and e.restarted_at is not None and now - e.restarted_at.timestamp() < 300:
            conds.append(
                Condition(
                    f"engine-restart:{e.url}",
                    "info",
                    e.name,
                    f"engine restarted at {e.restarted_at:%H:%M:%S}Z: counters reset, windows "
                    "restart there",
                    "engine_restart",
                    0.0,
                    0.0,
                )
            )
    services = [
        _service(
            svc,
            plan,
            gpus,
            by_name.get(svc.engine_name),
            state,
            now,
            cond,
            [by_name[n] for n in svc.engine_names if n in by_name],
        )
        for svc in plan.services
    ]
    _shared_devices(services, cond)
    return services, conds


def _shared_devices(services: list[ServiceStatus], cond: CondFn) -> None:
    """Two or more services planned on one device whose planned memory sums above its capacity:
    engines that size their KV cache from the free memory they find at start (vLLM's
    gpu_memory_utilization) mis-size each other when started together."""
    by_device: dict[str, list[ServiceStatus]] = {}
    for s in services:
        by_device.setdefault(s.device_id or s.device, []).append(s)
    for device, group in by_device.items():
        capacity = next((s.capacity_bytes for s in group if s.capacity_bytes), None)
        if len(group) < 2 or capacity is None:
            continue
        total = sum(s.required_bytes for s in group)
        if total > capacity:
            names = ", ".join(s.name for s in group)
            cond(
                f"shared-device:{device}",
                "critical",
                f"device {group[0].device}",
                f"{names} share device {group[0].device}: planned {_fmt_gib(total)} > "
                f"{_fmt_gib(capacity)}; engines sizing their KV cache from free memory at start "
                "mis-size each other: give each its own device or cap each one's memory "
                "(--gpu-memory-utilization, --mem-fraction-static)",
                "memory",
            )


DRIFT_SHARE = 0.01  # plan and engine agree within 1 % of the planned figure (or the plan's margin)


def drift_tolerance(planned: float, margin_bytes: float) -> float:
    """How far the engine's figure may stand from the plan before it is a drift worth a finding:
    the plan's allocation margin, or 1 % of the planned figure, whichever is larger."""
    return max(margin_bytes, DRIFT_SHARE * abs(planned))


def memory_lines(f: Fit, engine: Engine | None, gpus: list[Gpu]) -> list[MemoryLine]:
    """The plan's weights / KV / runtime / total beside the engine's own figures: SGLang's memory
    gauges, KV tokens the engine holds (vLLM's blocks x block size, llama.cpp's contexts,
    TensorRT-LLM's blocks) x the plan's KV bytes per token, and the device memory NVML shows for the
    engine's processes."""
    mem = engine.memory if engine is not None and engine.up else None
    none = "engine not up" if engine is None or not engine.up else ""

    def line(
        name: MemoryPart, planned: float, value: float | None, source: str, missing: str
    ) -> MemoryLine:
        return MemoryLine(
            name=name,
            planned_bytes=planned,
            engine_bytes=value,
            drift_bytes=None if value is None else value - planned,
            tolerance_bytes=drift_tolerance(planned, f.margin_bytes),
            source=source if value is not None else (none or missing),
        )

    kv, kv_source = None, ""
    if mem is not None and mem.kv_bytes is not None:
        kv, kv_source = mem.kv_bytes, "engine's KV cache memory gauge"
    elif engine is not None and engine.up and engine.kv_capacity_tokens:
        # under DP (or behind Dynamo) each rank holding a KV pool is one device's share
        ranks = max(1, sum(1 for r in engine.ranks or [] if r.kv_cache_usage is not None))
        kv = engine.kv_capacity_tokens / ranks * f.kv_bytes_per_token
        kv_source = (
            f"{engine.kv_capacity_tokens / ranks:,.0f} KV tokens x plan's "
            f"{f.kv_bytes_per_token:,.0f} B/token"
            + (f" (one of {ranks} ranks)" if ranks > 1 else "")
        )
    total, total_source = None, ""
    if mem is not None and mem.total_bytes is not None:
        total, total_source = mem.total_bytes, "engine's GPU memory gauge"
    elif engine is not None and engine.up:
        procs = [
            p.used_memory_bytes
            for g in gpus
            for p in g.processes
            + [q for d in (g.mig.devices if g.mig else []) for q in d.processes]
            if p.engine == engine.name and p.used_memory_bytes is not None
        ]
        if procs:
            total, total_source = float(sum(procs)), f"NVML, {len(procs)} engine process(es)"
    return [
        line(
            "weights",
            f.weights_bytes,
            mem.weights_bytes if mem else None,
            "engine's weight memory gauge",
            "the engine exports no weight memory",
        ),
        line("kv", f.kv_bytes, kv, kv_source, "the engine exports no KV capacity"),
        line(
            "runtime",
            f.runtime_bytes,
            mem.graphs_bytes if mem else None,
            "engine's CUDA graph memory gauge",
            "the engine exports no runtime memory",
        ),
        line(
            "total",
            f.weights_bytes + f.kv_bytes + f.runtime_bytes,
            total,
            total_source,
            "no memory figure for the engine's processes",
        ),
    ]


def _outage(e: Engine, state: HeadroomState, now: float) -> None:
    if not e.up:
        state.down_since.setdefault(e.name, now)
    elif e.name in state.down_since:
        began = state.down_since.pop(e.name)
        state.recovered[e.name] = (now, now - began)


LAYOUT_EVENT_S = 600.0  # a MIG re-cut stays among the recent events this long


def mig_layout(g: Gpu) -> str:
    """A GPU's MIG layout in words: its instances by placement, MIG off, or not readable."""
    if g.mig is None:
        return "n/a"
    if not g.mig.current:
        return "MIG off"
    parts = sorted((d.placement_start or 0, d.profile or "?") for d in g.mig.devices)
    return ",".join(f"{p}@{s}" for s, p in parts) or "MIG on, no instances"


def _layout_change(g: Gpu, state: HeadroomState, now: float) -> list[Condition]:
    """An info event for LAYOUT_EVENT_S after the GPU's MIG layout (or mode) changed between
    polls (the first reading of a GPU is no change)."""
    key = g.uuid or str(g.index)
    layout = mig_layout(g)
    before = state.layouts.get(key)
    state.layouts[key] = layout
    if before is not None and before != layout and "n/a" not in (before, layout):
        state.relaid[key] = (now, before, layout)
    change = state.relaid.get(key)
    if change is None or now - change[0] >= LAYOUT_EVENT_S:
        return []
    at, was, became = change
    return [
        Condition(
            f"mig-layout:{key}",
            "info",
            f"GPU {g.index}",
            f"MIG layout changed at {_utc(at):%H:%M:%S}Z: {was} -> {became}",
            "gpu",
            0.0,
            0.0,
        )
    ]


def _gpu_conditions(g: Gpu, plan: Plan, cond: CondFn) -> None:
    r = plan.alerts
    events = set(g.clock_events or [])
    if g.power_w is not None and g.power_limit_w:
        near = at_least(g.power_w, g.power_limit_w * (1 - r.power_within_pct / 100))
        if near or "power cap" in events:
            why = (
                "power-cap clock events"
                if "power cap" in events
                else f"within {r.power_within_pct:g}% of the limit"
            )
            cond(
                f"power:{g.index}",
                "warning",
                f"GPU {g.index}",
                f"power {g.power_w:.0f} W of {g.power_limit_w:.0f} W enforced ({why}): clocks are being held back; "
                "check the load balance or the power limit",
                "power",
            )
    if g.temperature_c is not None:
        if events & THERMAL_EVENTS:
            cond(
                f"thermal:{g.index}",
                "critical",
                f"GPU {g.index}",
                f"thermal slowdown active at {g.temperature_c:.0f} °C: check cooling and airflow now",
                "thermal",
            )
        elif g.temperature_slowdown_c and at_least(
            g.temperature_c, g.temperature_slowdown_c - r.thermal_within_c
        ):
            cond(
                f"thermal:{g.index}",
                "warning",
                f"GPU {g.index}",
                f"temperature {g.temperature_c:.0f} °C is within {r.thermal_within_c:g} °C of slowdown "
                f"({g.temperature_slowdown_c:.0f} °C): check cooling",
                "thermal",
            )


def _service(
    svc: Service,
    plan: Plan,
    gpus: list[Gpu],
    engine: Engine | None,
    state: HeadroomState,
    now: float,
    cond: CondFn,
    replicas: list[Engine] | None = None,
) -> ServiceStatus:
    """One planned service: its fit on paper, and each live headroom against the plan's budget
    (engine, memory, KV, queue, then the parent GPU's power and thermal), raising conditions."""
    ref = parse_device(svc.device)
    device_id, capacity, used, parent = live_device(ref, gpus)
    source = "driver"
    label = f"device {svc.device}"
    if capacity is None:
        capacity, label = catalog_capacity(ref, plan.node)
        source = "catalog" if capacity is not None else "unknown"
    f = fit(svc, capacity, source, label)
    na: dict[str, str] = {}
    model_name = svc.model if isinstance(svc.model, str) else (svc.model.title or "inline model")
    down_since, engine_head = _engine_headroom(svc, engine, state, now, cond)
    heads = [engine_head]
    recovered = state.recovered.get(engine.name) if engine is not None else None
    if engine is not None and recovered is not None and now - recovered[0] < 300:
        cond(
            f"service-recovered:{svc.name}",
            "info",
            svc.name,
            f"engine {engine.name} recovered after {recovered[1]:.0f} s down",
            "engine_down",
        )
    if device_id is None and gpus:
        na["device"] = f"planned device {svc.device} is not on this node"
        cond(
            f"service-device:{svc.name}",
            "critical",
            svc.name,
            f"planned device {svc.device} is not on this node: check the MIG layout or the plan's device",
            "memory",
        )
    heads.append(_memory_headroom(svc, f, device_id, used, cond))
    if engine is not None and engine.up:
        heads.append(_kv_headroom(svc, plan, engine, replicas or [engine], cond))
        queue = _queue_headroom(svc, plan, engine, cond)
        if queue is not None:
            heads.append(queue)
    if parent is not None:  # the parent GPU's power and thermal headroom, for the pulse view
        heads += [
            h for h in (_power_headroom(parent, plan, state), _thermal_headroom(parent, plan)) if h
        ]
    heads = [_exhaustion(svc, plan, h, engine, cond) for h in heads]
    shape(svc)  # validated already; keeps the catalog warm
    return ServiceStatus(
        name=svc.name,
        engine=svc.engine_name,
        device=svc.device,
        device_id=device_id,
        model=model_name,
        required_bytes=f.required_bytes,
        tokens_per_sequence=svc.tokens_per_sequence,
        concurrent_sequences=svc.concurrent_sequences,
        capacity_bytes=f.capacity_bytes,
        planned_headroom_bytes=f.headroom_bytes,
        fits=f.fits,
        engine_up=engine.up if engine is not None else None,
        down_since=down_since,
        last_recovery_s=recovered[1] if recovered else None,
        headroom=heads,
        capacity=service_capacity(
            {e.name: e.capacity for e in replicas or [engine] if e.up and e.capacity},
            svc.routing,
        )
        if engine is not None
        else None,
        memory=memory_lines(f, engine, gpus),
        unavailable=na,
    )


def _engine_headroom(
    svc: Service, engine: Engine | None, state: HeadroomState, now: float, cond: CondFn
) -> tuple[datetime | None, Headroom]:
    """Whether the service's engine is watched and up: (down since, its headroom)."""
    if engine is None:
        cond(
            f"service-engine:{svc.name}",
            "critical",
            svc.name,
            f"engine {svc.engine_name!r} is not found: add it to engines in the config (or check its name)",
            "engine_down",
        )
        return None, Headroom(
            name="engine",
            state="critical",
            detail=f"no engine named {svc.engine_name!r} is watched",
        )
    if not engine.up:
        began = state.down_since.get(engine.name, now)
        cond(
            f"service-down:{svc.name}",
            "critical",
            svc.name,
            f"engine {engine.name} down for {now - began:.0f} s: {engine.error}",
            "engine_down",
        )
        return _utc(began), Headroom(
            name="engine",
            state="critical",
            value=now - began,
            unit="s down",
            detail=engine.error or "",
        )
    return None, Headroom(name="engine", state="ok", detail="up")


def _memory_headroom(
    svc: Service, f: Fit, device_id: str | None, used: float | None, cond: CondFn
) -> Headroom:
    """Device memory used against the plan's required bytes, with the plan's margin."""
    if used is None:
        return Headroom(name="memory", state="unknown", detail="device memory not readable")
    head = f.required_bytes - used
    margin = f.margin_bytes
    st: Literal["ok", "warning", "critical"] = (
        "critical" if head < 0 else "warning" if head < margin else "ok"
    )
    if st != "ok":
        cond(
            f"memory:{svc.name}",
            st,
            svc.name,
            f"memory headroom {head / GIB:.1f} GiB on {device_id} < planned margin {margin / GIB:.1f} GiB "
            f"({_fmt_gib(used)} used, plan {_fmt_gib(f.required_bytes)}): check other processes on the device "
            "and the engine's memory settings",
            "memory",
        )
    return Headroom(
        name="memory",
        value=head / GIB,
        budget=margin / GIB,
        unit="GiB",
        state=st,
        detail=f"{_fmt_gib(used)} used of {_fmt_gib(f.required_bytes)} planned",
    )


def _kv_headroom(
    svc: Service,
    plan: Plan,
    engine: Engine,
    replicas: list[Engine],
    cond: CondFn,
) -> Headroom:
    """KV capacity in sequences against the plan's concurrency; requests waiting for the KV cache,
    or a cache full over the window with preemptions (critical), or full without them (warning)."""
    seqs_needed = svc.concurrent_sequences
    # separate replicas (endpoints) each hold their own KV cache: their capacities add up
    caps = [e.kv_capacity_tokens for e in replicas if e.up and e.kv_capacity_tokens]
    if not caps:
        return Headroom(
            name="kv",
            state="unknown",
            detail=engine.unavailable.get("kv_capacity_tokens", "engine reports no KV capacity"),
        )
    seqs = sum(caps) / svc.tokens_per_sequence
    st: Literal["ok", "warning", "critical"] = "warning" if seqs < seqs_needed else "ok"
    detail = f"{seqs:.1f} seqs at {svc.tokens_per_sequence:,} tokens (plan {seqs_needed})"
    if len(caps) > 1:
        detail += f", summed over {len(caps)} replicas"
    usage = engine.kv_cache_usage
    peak = max(usage or 0.0, engine.kv_cache_usage_peak or 0.0)
    value = seqs - seqs_needed
    # full over the window (its peak), so a cache that fills in bursts is not missed
    full = usage is not None and at_least(peak, plan.alerts.kv_usage_critical)
    # requests waiting for the KV cache (judged over the window: enginestats.kv_waiting)
    kv_wait = engine.requests_waiting_kv or 0.0
    if (full or kv_wait > 0) and usage is not None:
        # live use binds, not the plan: the figure is what is free now, and value,
        # severity and alert text all speak of the cache as it is
        value = max(0.0, 1.0 - usage) * sum(caps) / svc.tokens_per_sequence
        detail = f"cache {usage * 100:.0f}% full: {value:.1f} seqs free now"
    if kv_wait > 0 and usage is not None:
        detail += f", {kv_wait:.0f} waiting for KV"
    alert = _kv_alert(svc, engine, seqs, value, full, peak)
    if alert is not None:
        st, message = alert
        cond(f"kv:{svc.name}", st, svc.name, message, "kv")
    return Headroom(
        name="kv", value=value, budget=float(seqs_needed), unit="seqs", state=st, detail=detail
    )


def _kv_alert(
    svc: Service, engine: Engine, seqs: float, value: float, full: bool, peak: float
) -> tuple[Literal["warning", "critical"], str] | None:
    """The KV condition, worst first: requests waiting for the cache, a full window with
    preemptions (both critical), a full window without them, or less capacity than planned."""
    usage = engine.kv_cache_usage
    kv_wait = engine.requests_waiting_kv or 0.0
    preempted = 0.0 if engine.preemptions_since_start else (engine.preemptions or 0.0)
    k = knobs(engine.kind)
    if kv_wait > 0 and usage is not None:
        return "critical", (
            f"{counted(kv_wait, 'requests')} waiting for the KV cache (use {usage * 100:.0f}% now, "
            f"peak {peak * 100:.0f}% in the window"
            + (f", {counted(engine.preemptions, k.preemptions)}" if preempted > 0 else "")
            + f"): add a replica or shed load, or raise {k.memory} for a larger cache"
        )
    if full and usage is not None and preempted > 0:
        return "critical", (
            f"KV cache {peak * 100:.0f}% full in the window with "
            f"{counted(engine.preemptions, k.preemptions)}: shed load, add a replica, or lower "
            f"{k.max_seqs}"
        )
    if full and usage is not None:
        return "warning", (
            f"KV cache {peak * 100:.0f}% full in the window (use {usage * 100:.0f}% now, "
            f"{value:.1f} seqs free), no request waiting for it and no preemption yet: the next "
            "burst will queue"
        )
    if seqs < svc.concurrent_sequences:
        return "warning", (
            f"KV capacity {seqs:.1f} seqs at {svc.tokens_per_sequence:,} tokens < plan "
            f"{svc.concurrent_sequences}: lower {k.max_len} or raise {k.memory}"
        )
    return None


def _queue_headroom(svc: Service, plan: Plan, engine: Engine, cond: CondFn) -> Headroom | None:
    """Requests waiting (the budget is none)."""
    waiting = engine.requests_waiting
    if waiting is None:
        return None
    if waiting > 0:
        cond(
            f"queue:{svc.name}",
            "warning",
            svc.name,
            f"{waiting:.0f} requests waiting for over {plan.alerts.queue.for_s:.0f} s: the service is at "
            "capacity; check KV use and the arrival rate",
            "queue",
        )
    return Headroom(
        name="queue",
        value=waiting,
        budget=0.0,
        unit="waiting",
        state="warning" if waiting > 0 else "ok",
        detail=f"{waiting:.0f} waiting",
    )


def _power_headroom(parent: Gpu, plan: Plan, state: HeadroomState) -> Headroom | None:
    if parent.power_w is None or not parent.power_limit_w:
        return None
    lim = parent.power_limit_w
    seen = list(state.power.get(parent.uuid or str(parent.index), ()))
    near = at_least(parent.power_w, lim * (1 - plan.alerts.power_within_pct / 100))
    return Headroom(
        name="power",
        value=lim - parent.power_w,
        budget=lim * plan.alerts.power_within_pct / 100,
        unit="W",
        state="warning" if near else "ok",
        detail=f"{parent.power_w:.0f} of {lim:.0f} W",
        exhausted_in_s=None if near else time_to(seen, lim),
    )


# what using a headroom up means, in the alert's words
_EXHAUSTED = {
    "kv": ("KV cache full", "add a replica or shed load before it fills"),
    "queue": (
        "queue long enough to break the TTFT SLO",
        "add a replica or shed load; the engine is past its capacity",
    ),
    "power": ("GPU power at its limit", "clocks will be held back; spread the load"),
}


def _exhaustion(
    svc: Service, plan: Plan, h: Headroom, engine: Engine | None, cond: CondFn
) -> Headroom:
    """The headroom with its time to exhaustion (KV and queue from the engine's capacity
    estimate, power from the GPU's trend), and a warning when it falls within the plan's
    horizon."""
    cap = engine.capacity if engine is not None and engine.up else None
    eta = h.exhausted_in_s
    if cap is not None and h.name == "kv" and h.state == "ok":
        eta = cap.kv_full_in_s
    elif cap is not None and h.name == "queue":
        eta = cap.queue_full_in_s
    if eta is None or h.name not in _EXHAUSTED:
        return h
    horizon = plan.alerts.exhaustion_horizon_s
    if eta < horizon:
        what, knob = _EXHAUSTED[h.name]
        cond(
            f"exhaustion:{h.name}:{svc.name}",
            "warning",
            svc.name,
            f"{what} {eta_text(eta)} at this rate (planned horizon "
            f"{duration_text(horizon)}): {knob}",
            "exhaustion",
        )
    return h.model_copy(update={"exhausted_in_s": eta})


def _saturation(e: Engine, cond: CondFn) -> None:
    """A warning while the engine is saturated or saturating (findings.saturation_kind); slow
    prefill is not load (the burn rules page on it)."""
    kind, cap = saturation_kind(e), e.capacity
    if kind not in ("saturated", "saturating") or cap is None or cap.saturation is None:
        return
    cond(
        f"saturation:{e.url}",
        "warning",  # pages go through the burn rules' windows, never one minute's p90
        e.name,
        f"saturated: p90 {(cap.saturation_slo or '').upper()} at {cap.saturation:.2f}x its SLO"
        + (", load and TTFT both rising" if cap.saturating else "")
        + f": {saturation_knob(cap, knobs(e.kind))}",
        "saturation",
    )


def _thermal_headroom(parent: Gpu, plan: Plan) -> Headroom | None:
    if parent.temperature_c is None or not parent.temperature_slowdown_c:
        return None
    head = parent.temperature_slowdown_c - parent.temperature_c
    hot = bool(set(parent.clock_events or []) & THERMAL_EVENTS)
    return Headroom(
        name="thermal",
        value=head,
        budget=plan.alerts.thermal_within_c,
        unit="°C",
        state="critical" if hot else "warning" if head <= plan.alerts.thermal_within_c else "ok",
        detail=f"{parent.temperature_c:.0f} °C, slowdown {parent.temperature_slowdown_c:.0f} °C",
    )
