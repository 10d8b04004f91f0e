"""Per-poll SLO and cost meters: joins the engines' histories with the plan (pure arithmetic lives
in slo.py and cost.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from console.engines import EngineProfile, Extract
from console.figures.alerts import Condition
from console.figures.cost import CostSpec, energy, node_hourly, per_million, slice_share
from console.figures.plan import Plan, Service, parse_device
from console.figures.slo import (
    LatencyHistory,
    OutcomeHistory,
    burn_alert,
    burn_rates,
    compliance,
    default_slo,
    latency_series,
    outcome_series,
)
from console.figures.windowed import Windowed, parse_window, restart_times
from console.frame import (
    BurnReport,
    CostReport,
    Gpu,
    GpuCost,
    NodeCost,
    PriceRange,
    ServiceStatus,
    SloReport,
)
from console.units import duration_text


def occupancy(histories: Sequence[Sequence[Extract]], window_s: float) -> float | None:
    """Share of the window's scrapes in which the service had requests running."""
    if not histories or not any(histories):
        return None
    newest = max(h[-1].t for h in histories if h)
    busy = total = 0
    for hist in histories:
        for ex in hist:
            if ex.t < newest - window_s:
                continue
            running = ex.gauges.get("requests_running")
            if running is None:
                continue
            total += 1
            busy += sum(running.values()) > 0
    return busy / total if total else None


def device_share(svc: Service, plan: Plan, gpus: list[Gpu]) -> float:
    """The service's share of the node: a whole GPU = 1/GPUs, a MIG slice by its slice share."""
    n = len(gpus) or (plan.node.gpus or 1)
    ref = parse_device(svc.device)
    share = 1.0 / n
    if ref.profile is not None:
        slices = int(ref.profile.split("g.", 1)[0])
        gpu = next((g for g in gpus if g.index == ref.gpu), None)
        full = max(
            (
                int(i.profile.split("g.", 1)[0])
                for i in (gpu.mig.instances if gpu and gpu.mig else [])
                if i.profile
            ),
            default=0,
        )
        from console.gpucatalog import catalog

        model = catalog().get(plan.node.gpu_model or "")
        if model is not None and model.mig is not None:
            full = max(p.slices for p in model.mig.profiles)
        share *= slice_share(slices, full or slices)
    return share


def service_meters(
    plan: Plan,
    services: list[ServiceStatus],
    histories: Mapping[str, Sequence[Extract]],
    profiles: dict[str, EngineProfile],
    burn_hist: dict[str, OutcomeHistory],
    gpus: list[Gpu],
    now: float,
) -> tuple[list[ServiceStatus], NodeCost | None, list[Condition]]:
    """Each service's SLO (with its burn rates) and cost, the node's cost, and the budget and burn
    conditions the alerts weigh."""
    conds: list[Condition] = []
    out = []
    hour = dt.datetime.fromtimestamp(now).hour
    node = _node_cost(plan.cost, gpus, hour) if plan.cost is not None else None
    by_name = {s.name: s for s in plan.services}
    for status in services:
        svc = by_name[status.name]
        hists = [histories[n] for n in svc.engine_names if histories.get(n)]
        prof = next((profiles[n] for n in svc.engine_names if n in profiles), None)
        w_s = parse_window(default_slo(svc).window)
        slo_doc = compliance(svc, hists, prof, w_s) if prof is not None and hists else None
        if slo_doc is not None and prof is not None:
            burn = _burn(svc, histories, prof, burn_hist, now)
            if burn is not None:
                slo_doc = slo_doc.model_copy(update={"burn": burn})
                conds += _burn_conditions(plan, svc.name, burn)
        cost_doc = (
            _cost(svc, plan, gpus, node, hists, prof, slo_doc, w_s, hour)
            if node is not None
            else None
        )
        out.append(status.model_copy(update={"slo": slo_doc, "cost": cost_doc}))
    return out, node, conds


def _node_cost(spec: CostSpec, gpus: list[Gpu], hour: int) -> NodeCost:
    """The node's hourly cost and energy, and each GPU's share on the node's basis (its board
    power, its share of the host, PUE)."""
    total_w = sum(g.power_w for g in gpus if g.power_w is not None) if gpus else None
    hourly = node_hourly(spec)
    e = energy(spec, total_w, hour)
    per_gpu = []
    for g in gpus:
        ge = energy(spec, g.power_w, hour, node_share=1 / len(gpus))
        per_gpu.append(
            GpuCost(
                gpu=g.index,
                usd_per_h=hourly / len(gpus),
                energy_usd_per_h=ge.usd_per_h,
                energy_basis=ge.basis,
            )
        )
    return NodeCost(
        usd_per_h=hourly,
        horizon_h=spec.horizon_h,
        energy=e,
        total_usd_per_h=hourly + (e.usd_per_h or 0.0),
        per_gpu=per_gpu,
    )


def _burn(
    svc: Service,
    histories: Mapping[str, Sequence[Extract]],
    prof: EngineProfile,
    burn_hist: dict[str, OutcomeHistory],
    now: float,
) -> BurnReport | None:
    """The service's error-budget burn: this poll's request outcomes and latency counts (every
    replica, a restarted one marked) added to its history, the burn rates read from it; None
    while no replica exports outcomes."""
    series: dict[tuple[Any, ...], tuple[float, float, float]] = {}
    restarted = set()
    for name in svc.engine_names:
        h = histories.get(name)
        if h:
            series.update({(name, *k): v for k, v in outcome_series(h[-1], prof).items()})
            if h[-1].t in restart_times(h):
                restarted.add(name)
    if not series:
        return None
    slo = default_slo(svc)
    hist = burn_hist.setdefault(svc.name, OutcomeHistory())
    hist.add(now, series, restarted)
    late: dict[str, dict[tuple[Any, ...], tuple[float, float]]] = {}
    for name in svc.engine_names:
        h = histories.get(name)
        if h:
            for key, rows in latency_series(h[-1], slo).items():
                late.setdefault(key, {}).update({(name, *k): v for k, v in rows.items()})
    for key, rows in late.items():
        hist.latency.setdefault(key, LatencyHistory()).add(now, rows, restarted)
    return burn_rates(hist, slo.completion, slo.percentile, slo.budget_period_days)


def _burn_conditions(plan: Plan, service: str, burn: BurnReport) -> list[Condition]:
    """The budget spent sooner than the plan's horizon, and a burn past its pace."""
    conds = []
    lasts = burn.budget_spent_in_s
    rule = plan.alerts.exhaustion
    if lasts is not None and lasts < plan.alerts.budget_horizon_s and rule.enabled:
        conds.append(
            Condition(
                f"exhaustion:budget:{service}",
                "warning",
                service,
                f"error budget spent in ~{duration_text(lasts)} at the {burn.budget_window} burn "
                f"({burn.period_days:g}-day budget; planned horizon "
                f"{duration_text(plan.alerts.budget_horizon_s)}): look at the failing or slow "
                "requests",
                "exhaustion",
                rule.for_s,
                rule.clear_s,
            )
        )
    hit = burn_alert(burn)
    if hit is not None and plan.alerts.burn.enabled:
        conds.append(
            Condition(
                f"burn:{service}",
                hit[0],
                service,
                hit[1],
                "burn",
                plan.alerts.burn.for_s,
                plan.alerts.burn.clear_s,
            )
        )
    return conds


def _cost(
    svc: Service,
    plan: Plan,
    gpus: list[Gpu],
    node: NodeCost,
    hists: list[Sequence[Extract]],
    prof: EngineProfile | None,
    slo: SloReport | None,
    window_s: float,
    hour: int,
) -> CostReport:
    """One service's cost meters: its share of the node, its energy, its per-token prices."""
    from console.figures.plan import live_device

    spec = plan.cost
    assert spec is not None
    share = device_share(svc, plan, gpus)
    hourly = node.usd_per_h * share
    _, _, _, parent = live_device(parse_device(svc.device), gpus)
    power = None
    if parent is not None and parent.power_w is not None:
        gpu_part = share * (len(gpus) or 1)  # the service's fraction of its GPU
        power = energy(spec, parent.power_w * gpu_part, hour, node_share=share)
    fields: dict[str, Any] = {"device_share": share, "usd_per_h": hourly}
    if power is not None:
        fields["energy"] = power
    if slo is not None and prof is not None:
        rate = slo.output_tokens_per_s
        fields["occupancy"] = occupancy(hists, window_s)
        if rate:
            fields["usd_per_m_output_tokens"] = per_million(hourly, rate, 1.0)
        good = slo.goodput_tokens_per_s
        if good:  # more good tokens: cheaper
            fields["usd_per_m_compliant_tokens"] = PriceRange(
                low=per_million(hourly, good.high, 1.0), high=per_million(hourly, good.low, 1.0)
            )
        win = Windowed(hists, window_s)
        o = win.outcomes(prof)
        if o is not None and power is not None and power.power_w and rate:
            fields["joules_per_output_token"] = power.power_w / rate
            done, span = o.good + o.failed, win.span()
            if done > 0 and span > 0:
                fields["wh_per_1000_requests"] = power.power_w * span / 3600 / done * 1000
    return CostReport.model_validate(fields)  # checked field by field; unset fields stay absent
