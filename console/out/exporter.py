"""What only inferdeck knows, in the Prometheus text format: per service the plan's headroom rules,
SLO attainment, good-share bounds, burn rates, cost; active alerts; engines up; GPU and MIG
activity. Base units, ``_total`` only on counters, dimensions as labels. Pure: Frame in, text out
(``inferdeck export`` serves it; ``inferdeck rules`` writes alerting rules over it)."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable

from console.figures.plan import AlertRule, AlertRules, Plan
from console.figures.verdict import EXIT
from console.frame import BurnReport, CapacityReport, Engine, Frame, Gpu, ServiceStatus

PREFIX = "inferdeck_"
SEVERITY = {"ok": 0, "warning": 1, "critical": 2}  # unknown headroom: no sample (never 0)
# a headroom's unit on screen -> (base unit for Prometheus, factor)
BASE_UNITS = {
    "GiB": ("bytes", 2.0**30),
    "W": ("watts", 1.0),
    "°C": ("celsius", 1.0),
    "seqs": ("sequences", 1.0),
    "waiting": ("requests", 1.0),
    "s down": ("seconds", 1.0),
}
# the headroom families, one per unit (the fleet reads them back by this pattern)
HEADROOM_NAMES = "|".join(
    f"{PREFIX}headroom_{part}{unit}" for unit, _ in BASE_UNITS.values() for part in ("", "budget_")
)
HELP = {
    "build_info": ("gauge", "inferdeck version and the hash of the plan it evaluates (value 1)."),
    "frame_timestamp_seconds": ("gauge", "When the newest frame was derived (Unix time)."),
    "engine_up": ("gauge", "1 when the engine's metrics page was read at the last poll."),
    **{
        f"headroom_{unit}": (
            "gauge",
            f"Live headroom of a planned service against its budget, in {unit}.",
        )
        for unit, _ in BASE_UNITS.values()
    },
    **{
        f"headroom_budget_{unit}": ("gauge", f"What the plan allows for that headroom, in {unit}.")
        for unit, _ in BASE_UNITS.values()
    },
    "headroom_severity": (
        "gauge",
        "Headroom state: 0 ok, 1 warning, 2 critical (absent: unknown).",
    ),
    "slo_target_seconds": ("gauge", "The plan's latency SLO limit."),
    "slo_observed_seconds": ("gauge", "The SLO's percentile over its window."),
    "slo_attainment_ratio": ("gauge", "Share of requests within the SLO limit over the window."),
    "slo_completion_ratio": ("gauge", "Requests completed OK over those completed (aborts apart)."),
    "slo_good_share_ratio": ("gauge", "Bounds on the share of requests meeting every SLO."),
    "slo_burn_rate": (
        "gauge",
        "Error-budget burn rate over the window (1 = on budget); absent until the window holds "
        "enough data to alert on.",
    ),
    "slo_objective_burn_rate": (
        "gauge",
        "Burn rate of one objective (completion: failed requests against the completion target; "
        "ttft_s, tpot_s, e2e_s: requests over the latency limit against 1 - its percentile); "
        "absent until the window holds enough data.",
    ),
    "slo_burn_window_covered_seconds": (
        "gauge",
        "Seconds of the burn window the console has watched.",
    ),
    "service_total_hourly_cost": (
        "gauge",
        "The service's share of the node's hourly cost in USD (named as OpenCost names its "
        "hourly figures, e.g. node_total_hourly_cost).",
    ),
    "cost_usd_per_million_compliant_tokens": (
        "gauge",
        "Cost per million output tokens of requests meeting every SLO (bounds).",
    ),
    "alerts_active": ("gauge", "Active alerts by rule and severity."),
    "alert_since_timestamp_seconds": (
        "gauge",
        "Each active alert (rule, severity, the service or engine it is about): when its "
        "condition began.",
    ),
    "status": (
        "gauge",
        "The node's verdict, as the console and `inferdeck check` give it: 0 ok, 1 warning, "
        "2 critical, 3 unknown (nothing watched).",
    ),
    "verdict_concerns": (
        "gauge",
        "Entries of the node's verdict by severity and source (alert, finding, pending).",
    ),
    "capacity_requests_per_second": (
        "gauge",
        "The finished-request rate at which the engine's first SLO breaks (slo: the one that "
        "breaks; bound: estimate, low, high, or at_least past the load seen: only a floor; "
        "console/figures/capacity.py), absent when it cannot tell.",
    ),
    "capacity_room_requests_per_second": (
        "gauge",
        "Requests a second the engine can take above its current rate before that SLO breaks "
        "(bound: estimate, or at_least: a floor).",
    ),
    "capacity_queue_limit_requests": (
        "gauge",
        "Requests waiting at which queueing alone breaks the TTFT SLO (the wait it leaves after "
        "the unqueued TTFT p95, times the finished rate).",
    ),
    "capacity_backtest_estimates": (
        "gauge",
        "The engine's last capacity estimates scored on the minute of load after each "
        "(outcome: held, missed).",
    ),
    "capacity_batch_limit_sequences": (
        "gauge",
        "The batch cap the capacity model used (from: engine, command line, plan, load).",
    ),
    "kv_full_in_seconds": (
        "gauge",
        "When the KV cache is full at its rising trend over the window (absent: no such trend).",
    ),
    "queue_full_in_seconds": (
        "gauge",
        "When the requests waiting reach the count at which queueing alone breaks the TTFT SLO, "
        "at their rising trend (absent: no such trend).",
    ),
    "saturation_ratio": (
        "gauge",
        "The saturation index: the worst of p90 latency / its SLO (slo: the one it is); 1 or "
        "more is saturated.",
    ),
    "saturating": (
        "gauge",
        "1 when running + waiting and TTFT both rise over the last two minutes (over-saturation).",
    ),
    "headroom_exhausted_in_seconds": (
        "gauge",
        "When the service's headroom (rule: kv, queue, power) is used up at its rising trend.",
    ),
    "slo_budget_spent_in_seconds": (
        "gauge",
        "How long a whole period's error budget lasts at the burn of the longest ready window.",
    ),
    "service_capacity_requests_per_second": (
        "gauge",
        "The service's capacity to its first SLO breach under its routing (round-robin: "
        "replicas x the weakest; least-loaded: summed; bound: estimate, low, high, or at_least: "
        "a floor).",
    ),
    "service_capacity_room_requests_per_second": (
        "gauge",
        "Requests a second the service takes above its current rate (bound: estimate, or "
        "at_least: a floor).",
    ),
    "gpu_utilization_ratio": ("gauge", "NVML GPU utilisation (absent under MIG)."),
    "gpu_activity_ratio": ("gauge", "GPM graphics activity of a GPU or MIG GPU instance."),
}


# what stated the batch cap (CapacityReport.batch_from), as a label value
_BATCH_FROM = {
    "the engine's own figure": "engine",
    "its command line": "command_line",
    "the plan": "plan",
}


def _bounds(cap: CapacityReport) -> list[tuple[str, float | None]]:
    """A capacity's exported bounds: the estimate and its range, or past the load seen only a
    floor (bound="at_least"), never shown as an estimate."""
    if cap.at_least:
        return [("at_least", cap.requests_per_s)]
    return [("estimate", cap.requests_per_s), ("low", cap.low), ("high", cap.high)]


def plan_hash(plan: Plan) -> str:
    return hashlib.sha256(plan.model_dump_json().encode()).hexdigest()[:12]


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


class Figures:
    """The figures of one frame, by family: (labels, value) each, in the order added."""

    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = {}

    def add(self, name: str, value: float | None, **labels: str) -> None:
        if value is None or math.isnan(value):
            return  # a figure that could not be read is absent, never 0
        self.samples.setdefault(name, []).append((labels, float(value)))

    def text(self) -> str:
        out = []
        for name, rows in self.samples.items():
            kind, doc = HELP[name]
            out += [f"# HELP {PREFIX}{name} {doc}", f"# TYPE {PREFIX}{name} {kind}"]
            for labels, value in rows:
                body = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
                out.append(f"{PREFIX}{name}{{{body}}} {_num(value)}" if body else
                           f"{PREFIX}{name} {_num(value)}")  # fmt: skip
        return "\n".join(out) + "\n"


def frame_metrics(frame: Frame, plan: Plan, version: str) -> str:
    """The Prometheus page of one frame."""
    return frame_figures(frame, plan, version).text()


def frame_figures(frame: Frame, plan: Plan, version: str) -> Figures:
    """Every figure the exporter serves for one frame (the Prometheus page and OTLP alike): each
    family by the function for its subject, in the order the page lists them."""
    p = Figures()
    _node_figures(p, frame, plan, version)
    for e in frame.engines:
        _engine_figures(p, e)
    for s in frame.services:
        for section in SERVICE_SECTIONS:
            section(p, s)
    _alert_figures(p, frame)
    for g in frame.gpus:
        _gpu_figures(p, g)
    return p


def _node_figures(p: Figures, frame: Frame, plan: Plan, version: str) -> None:
    p.add("build_info", 1.0, version=version, plan_hash=plan_hash(plan))
    p.add("frame_timestamp_seconds", frame.taken_at.timestamp())
    p.add("status", float(EXIT[frame.status]))
    tally: dict[tuple[str, str], int] = {}
    for v in frame.verdict:
        tally[(v.severity, v.source)] = tally.get((v.severity, v.source), 0) + 1
    for (severity, source), n in sorted(tally.items()):
        p.add("verdict_concerns", float(n), severity=severity, source=source)


def _engine_figures(p: Figures, e: Engine) -> None:
    p.add("engine_up", 1.0 if e.up else 0.0, engine=e.name, kind=e.kind or "")
    cap = e.capacity
    if cap is None:
        return
    if cap.requests_per_s is not None:
        breaks = cap.binding or ""
        for bound, value in _bounds(cap):
            p.add("capacity_requests_per_second", value, engine=e.name, slo=breaks, bound=bound)
        p.add("capacity_room_requests_per_second", cap.room_per_s, engine=e.name, slo=breaks,
              bound="at_least" if cap.at_least else "estimate")  # fmt: skip
    if cap.backtest_scored:
        held = float(cap.backtest_held or 0)
        p.add("capacity_backtest_estimates", held, engine=e.name, outcome="held")
        p.add("capacity_backtest_estimates", cap.backtest_scored - held, engine=e.name,
              outcome="missed")  # fmt: skip
    if cap.queue_limit is not None:
        p.add("capacity_queue_limit_requests", cap.queue_limit, engine=e.name)
    if cap.batch_limit is not None:
        p.add("capacity_batch_limit_sequences", cap.batch_limit, engine=e.name,
              source=_BATCH_FROM.get(cap.batch_from or "", "load"))  # fmt: skip
    if e.not_judged is None:  # just back: nothing to fire on yet
        p.add("kv_full_in_seconds", cap.kv_full_in_s, engine=e.name)
        p.add("queue_full_in_seconds", cap.queue_full_in_s, engine=e.name)
        p.add("saturation_ratio", cap.saturation, engine=e.name, slo=cap.saturation_slo or "")
        if cap.saturating is not None:
            p.add("saturating", float(cap.saturating), engine=e.name)


def _service_headroom(p: Figures, s: ServiceStatus) -> None:
    for h in s.headroom:
        if h.unit in BASE_UNITS:  # one unit per name, so sum() and rate() mean something
            unit, scale = BASE_UNITS[h.unit]
            labels = {"service": s.name, "rule": h.name}
            p.add(f"headroom_{unit}", None if h.value is None else h.value * scale, **labels)
            budget = None if h.budget is None else h.budget * scale
            p.add(f"headroom_budget_{unit}", budget, **labels)
        p.add("headroom_severity", SEVERITY.get(h.state), service=s.name, rule=h.name)
        p.add("headroom_exhausted_in_seconds", h.exhausted_in_s, service=s.name, rule=h.name)


def _service_capacity(p: Figures, s: ServiceStatus) -> None:
    cap = s.capacity
    if cap is None or cap.requests_per_s is None:
        return
    breaks = cap.binding or ""
    for bound, value in _bounds(cap):
        p.add("service_capacity_requests_per_second", value, service=s.name, slo=breaks,
              bound=bound)  # fmt: skip
    p.add("service_capacity_room_requests_per_second", cap.room_per_s, service=s.name,
          slo=breaks, bound="at_least" if cap.at_least else "estimate")  # fmt: skip


def _service_slo(p: Figures, s: ServiceStatus) -> None:
    slo = s.slo
    if slo is None:
        return
    for key, t in slo.targets.items():
        target = key.removesuffix("_s")
        p.add("slo_target_seconds", t.target_s, service=s.name, slo=target)
        p.add("slo_observed_seconds", t.observed_s, service=s.name, slo=target)
        p.add("slo_attainment_ratio", t.attainment, service=s.name, slo=target)
    if slo.completion is not None:
        p.add("slo_completion_ratio", slo.completion.observed, service=s.name)
    if slo.good_share is not None:
        p.add("slo_good_share_ratio", slo.good_share.low, service=s.name, bound="low")
        p.add("slo_good_share_ratio", slo.good_share.high, service=s.name, bound="high")
    if slo.burn is not None:
        _service_burn(p, s.name, slo.burn)


def _service_burn(p: Figures, service: str, burn: BurnReport) -> None:
    p.add("slo_budget_spent_in_seconds", burn.budget_spent_in_s, service=service,
          window=burn.budget_window or "")  # fmt: skip
    for window, w in burn.windows.items():
        # absent until the window holds enough (slo.BURN_READY_S): rules never page on 20 s of
        # data; its coverage says how far it has come
        ready = w.ready is not False
        p.add("slo_burn_rate", w.burn if ready else None, service=service, window=window)
        p.add("slo_burn_window_covered_seconds", w.covered_s, service=service, window=window)
    for objective, per in burn.objectives.items():
        for window, w in per.items():
            p.add("slo_objective_burn_rate", w.burn if w.ready is not False else None,
                  service=service, objective=objective, window=window)  # fmt: skip


def _service_cost(p: Figures, s: ServiceStatus) -> None:
    if s.cost is None:
        return
    p.add("service_total_hourly_cost", s.cost.usd_per_h, service=s.name)
    price = s.cost.usd_per_m_compliant_tokens
    if price is not None:
        for bound in ("low", "high"):
            p.add("cost_usd_per_million_compliant_tokens", getattr(price, bound),
                  service=s.name, bound=bound)  # fmt: skip


# a service's families, in the order the page lists them
SERVICE_SECTIONS: tuple[Callable[[Figures, ServiceStatus], None], ...] = (
    _service_headroom,
    _service_capacity,
    _service_slo,
    _service_cost,
)


def _alert_figures(p: Figures, frame: Frame) -> None:
    active = [a for a in frame.alerts if a.state == "active"]
    counts = Counter((a.rule or a.key.split(":", 1)[0], a.severity) for a in active)
    for (rule, severity), n in sorted(counts.items()):
        p.add("alerts_active", float(n), rule=rule, severity=severity)
    for a in active:
        p.add("alert_since_timestamp_seconds", a.since.timestamp(),
              rule=a.rule or a.key.split(":", 1)[0], severity=a.severity,
              subject=a.subject)  # fmt: skip


def _gpu_figures(p: Figures, g: Gpu) -> None:
    if g.utilization_gpu_pct is not None:
        p.add("gpu_utilization_ratio", g.utilization_gpu_pct / 100, gpu=str(g.index))
    if g.activity is not None and g.activity.graphics_pct is not None:
        p.add("gpu_activity_ratio", g.activity.graphics_pct / 100, gpu=str(g.index),
              gpu_instance="")  # fmt: skip
    seen: set[int | None] = set()
    for d in g.mig.devices if g.mig else []:
        if d.gpu_instance_id in seen or d.activity is None:
            continue
        seen.add(d.gpu_instance_id)
        if d.activity.graphics_pct is not None:
            p.add("gpu_activity_ratio", d.activity.graphics_pct / 100, gpu=str(g.index),
                  gpu_instance=str(d.gpu_instance_id))  # fmt: skip


# one alerting rule: its name, PromQL, `for` in seconds, severity and summary
Rule = tuple[str, str, float, str, str]


def alert_rules(plan: Plan) -> str:
    """Prometheus alerting rules over the exported series, with the plan's for durations: each
    headroom rule (warning and critical), multi-window burn (fast: 5m and 1h >= 14.4x, critical;
    slow: 1h and 6h >= 6x, warning), saturation, exhaustion, engine down, the node's verdict and
    the exporter itself."""
    lines = ["groups:", "  - name: inferdeck", "    rules:"]
    for family in RULE_FAMILIES:
        for rule in family(plan.alerts):
            lines += _rule_yaml(*rule)
    return "\n".join(lines) + "\n"


def _rule_yaml(name: str, expr: str, for_s: float, severity: str, summary: str) -> list[str]:
    return [
        f"      - alert: {name}",
        f"        expr: {expr}",
        f"        for: {int(for_s)}s",
        "        labels:",
        f"          severity: {severity}",
        # these read the exporter's gauges: they live only as long as it runs (the SLO burn that
        # must outlive it is `inferdeck rules --slo`, from the engines' series)
        "          source: inferdeck-export",
        "        annotations:",
        f'          summary: "{summary}"',
    ]


def _headroom_rules(r: AlertRules) -> list[Rule]:
    out: list[Rule] = []
    for key in ("memory", "kv", "queue", "power", "thermal"):
        cfg = getattr(r, key)
        if not cfg.enabled:
            continue
        title = key.capitalize()
        sel = f'{PREFIX}headroom_severity{{rule="{key}"}}'
        # severities nest (>= 1, >= 2): a condition going from warning to critical keeps the
        # warning firing, so neither resets the other's `for`
        out.append((
            f"Inferdeck{title}HeadroomCritical",
            f"{sel} >= 2",
            cfg.for_s,
            "critical",
            f"{{{{ $labels.service }}}}: {key} headroom critical (severity {{{{ $value }}}}); "
            "the console and inferdeck check say why",
        ))  # fmt: skip
        out.append((
            f"Inferdeck{title}HeadroomWarning",
            f"{sel} >= 1",
            cfg.for_s,
            "warning",
            f"{{{{ $labels.service }}}}: {key} headroom at or past its budget (severity "
            "{{ $value }}); the console and inferdeck check say why",
        ))  # fmt: skip
    return out


def _burn_rules(r: AlertRules) -> list[Rule]:
    if not r.burn.enabled:
        return []
    burn = f"{PREFIX}slo_burn_rate"
    return [
        (
            "InferdeckErrorBudgetFastBurn",
            f'{burn}{{window="5m"}} >= 14.4 and on(instance, service) {burn}{{window="1h"}} >= 14.4',
            r.burn.for_s,
            "critical",
            "{{ $labels.service }}: error budget burning at 14.4x or more (5m and 1h)",
        ),
        (
            "InferdeckErrorBudgetSlowBurn",
            f'{burn}{{window="1h"}} >= 6 and on(instance, service) {burn}{{window="6h"}} >= 6',
            r.burn.for_s,
            "warning",
            "{{ $labels.service }}: error budget burning at 6x or more (1h and 6h)",
        ),
    ]


def _one(rule: AlertRule, name: str, expr: str, severity: str, summary: str) -> list[Rule]:
    """A family of one rule, written where the plan leaves it on."""
    return [(name, expr, rule.for_s, severity, summary)] if rule.enabled else []


def _saturation_rules(r: AlertRules) -> list[Rule]:
    return _one(
        r.saturation, "InferdeckEngineSaturated", f"{PREFIX}saturation_ratio >= 1", "warning",
        "{{ $labels.engine }}: p90 {{ $labels.slo }} at {{ $value }}x its SLO (saturated); "
        "the console's Room and Sat columns say how much more it takes",
    )  # fmt: skip


def _exhaustion_rules(r: AlertRules) -> list[Rule]:
    return _one(
        r.exhaustion, "InferdeckHeadroomExhaustedSoon",
        f"{PREFIX}headroom_exhausted_in_seconds < {r.exhaustion_horizon_s:g}", "warning",
        "{{ $labels.service }}: {{ $labels.rule }} used up in {{ $value }} s at its trend "
        f"(planned horizon {r.exhaustion_horizon_s:g} s)",
    )  # fmt: skip


def _engine_down_rules(r: AlertRules) -> list[Rule]:
    return _one(
        r.engine_down, "InferdeckEngineDown", f"{PREFIX}engine_up == 0", "critical",
        "{{ $labels.engine }} on {{ $labels.instance }}: metrics page unreadable",
    )  # fmt: skip


def _node_rules(r: AlertRules) -> list[Rule]:
    """The node's verdict and the exporter itself: always on."""
    return [
        (
            "InferdeckNodeCritical",
            f"{PREFIX}status == 2",
            60,
            "critical",
            "{{ $labels.instance }}: the node's verdict is CRITICAL (a critical alert or finding) "
            "for a minute; inferdeck check says which",
        ),
        (
            "InferdeckExporterDown",
            'up{job="inferdeck"} == 0',
            60,
            "critical",
            "inferdeck export on {{ $labels.instance }} is not answering",
        ),
    ]


# the rules, family by family, in the order the file lists them
RULE_FAMILIES: tuple[Callable[[AlertRules], list[Rule]], ...] = (
    _headroom_rules,
    _burn_rules,
    _saturation_rules,
    _exhaustion_rules,
    _engine_down_rules,
    _node_rules,
)


ALERTMANAGER_EXAMPLE = """\
# Alertmanager routing for inferdeck's rules (an example: receivers are yours to fill in).
# One incident, one page: a node's alerts are grouped together (a saturation raises the KV and
# queue headrooms, the engine's saturation and the node's verdict at once), a critical silences
# the warning of the same rule, the node's verdict alert is silenced while a named critical says
# more, and an engine down silences what was built from its figures (its KV and queue
# severities the exporter already leaves out while the engine is down or just back).
route:
  receiver: gpu-oncall
  group_by: [alertname, node, instance]
  routes:
    - matchers:
        - alertname =~ "Inferdeck.*"
        - severity = "critical"
      receiver: gpu-oncall-page
      group_by: [node, instance]
      group_wait: 30s
      group_interval: 5m
      repeat_interval: 1h
    - matchers:
        - alertname =~ "Inferdeck.*"
        - severity = "warning"
      receiver: gpu-oncall
      group_by: [node, instance]
      repeat_interval: 4h
inhibit_rules:
  # a critical headroom silences the same rule's warning (and forecast) on the same service
  - source_matchers: [severity = "critical", 'rule =~ ".+"']
    target_matchers: [severity = "warning"]
    equal: [instance, service, rule]
  # an SLO page silences its ticket
  - source_matchers: [alertname = "InferdeckSLOBurnPage"]
    target_matchers: [alertname = "InferdeckSLOBurnTicket"]
    equal: [service, slo]
  # the node's verdict says nothing a named critical of the same node does not
  - source_matchers: ['alertname =~ "Inferdeck(Kv|Queue|Memory|Power|Thermal)HeadroomCritical|InferdeckEngineDown"']
    target_matchers: [alertname = "InferdeckNodeCritical"]
    equal: [instance]
  # an engine down: its saturation and exhaustion forecasts were built from its last figures
  - source_matchers: [alertname = "InferdeckEngineDown"]
    target_matchers: ['alertname =~ "InferdeckEngineSaturated"']
    equal: [instance, engine]
  # the exporter down: every alert built from its gauges is stale
  - source_matchers: [alertname = "InferdeckExporterDown"]
    target_matchers: ['alertname =~ "Inferdeck.*"', 'alertname != "InferdeckExporterDown"']
    equal: [instance]
receivers:
  - name: gpu-oncall-page
  - name: gpu-oncall
"""
