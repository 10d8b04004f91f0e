"""What the fleet source knows after a poll: a Frame per node, the queries that failed, trends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console.frame import Frame, Timeline
from console.units import PARTIAL, duration_text


@dataclass(frozen=True)
class NodeSummary:
    """The fleet's SLO and cost columns of one node."""

    ttft_within_target: float | None  # the worst engine's share of requests within the target
    ttft_target_s: float
    usd_per_m_compliant_tokens_at_least: float | None = None  # a lower bound from that share
    # True: the node's own figure (its inferdeck export: the lowest low bound of its services),
    # else the fleet's estimate from the TTFT share and the config's cost
    cost_from_node: bool = False
    # no request within the target: no compliant token was served, so no price per one exists
    # (a price from the node's own goodput bounds would read as a bargain)
    no_good: bool = False


@dataclass(frozen=True)
class SloRow:
    """One service objective as Prometheus' `inferdeck rules --slo` hold it: the error budget
    left over the period, and the burn alert's state with when it became active."""

    service: str
    slo: str
    remaining: float | None = None  # share of the period's budget left (negative: overspent)
    period: str = ""
    watched_s: float | None = None  # how much of the period the budget has data for
    alert: str | None = None  # the most urgent: "page" or "ticket"
    state: str | None = None  # "firing" or "pending"
    since: float | None = None  # activeAt (Unix time)
    where: dict[str, str] = field(default_factory=dict)  # the rules' labels (node, instance, ...)
    node: str | None = None  # the fleet node it was placed on (None: the rules do not say)


@dataclass
class FleetState:
    nodes: dict[str, Frame] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # query -> why it failed this poll
    last_ok: float | None = None
    taken_at: float = 0.0  # the time the figures describe (in the past while scrubbing)
    trends: dict[str, list[float]] = field(default_factory=dict)  # node -> output tok/s, last hour
    summary: dict[str, NodeSummary] = field(default_factory=dict)  # node -> SLO share and cost
    slo: list[SloRow] = field(default_factory=list)  # from Prometheus' SLO rules and alerts
    slo_note: str | None = None  # why those could not be read, when they could not
    # what Prometheus said it left out of its answers this poll ("partial response ..."): the
    # verdict is not OK while it stands (nodes it left out may be the ones down)
    warnings: list[str] = field(default_factory=list)
    # targets down that never served an engine or DCGM series (another job's, e.g. a windows
    # exporter): named once, not engines down
    other_down: list[str] = field(default_factory=list)
    down: dict[str, str] = field(default_factory=dict)  # node -> "last seen 40 s ago": all down
    window_s: float = 0.0  # the PromQL range the figures are over
    window_note: str | None = None  # why it is longer than the window asked for
    backend: str | None = None  # which backend answered ("Prometheus 2.42.0", "VictoriaMetrics")
    rates: str = ""  # its rate() semantics, said beside the rates
    recorded: list[str] = field(default_factory=list)  # figures read from `rules --fleet` records
    events: Timeline | None = None  # the fleet's own timeline (the backend not answering)


def budget_text(r: SloRow) -> str:
    """'99.2% of 28d (2h watched)': the budget left, partial while younger than its period."""
    if r.remaining is None:
        return "n/a"
    pct = f"{r.remaining * 100:.1f}%" if abs(r.remaining) < 1 else f"{r.remaining * 100:.0f}%"
    text = f"{pct} of {r.period or '?'}"
    if r.watched_s is not None:
        text += f" ({duration_text(r.watched_s)} watched)"
    return text


def other_down_line(st: FleetState) -> str | None:
    """The one sentence naming the down targets that are neither engines nor DCGM exporters."""
    if not st.other_down:
        return None
    n = len(st.other_down)
    shown = ", ".join(st.other_down[:3]) + (f" and {n - 3} more" if n > 3 else "")
    return (
        f"{n} other target{'s' if n != 1 else ''} down in Prometheus (never served an engine "
        f"or DCGM series; not counted): {shown}"
    )


def warnings_line(st: FleetState) -> str | None:
    if not st.warnings:
        return None
    more = f" (+{len(st.warnings) - 1} more)" if len(st.warnings) > 1 else ""
    return (
        f"Prometheus answered partially: {st.warnings[0]}{more}; nodes it left out are not judged"
    )


def node_row(
    node: str, f: Frame, summary: NodeSummary | None = None, down: str | None = None
) -> dict[str, Any]:
    """One node's fleet columns: what the fleet screen shows and `snapshot --prometheus` prints.
    ``down``: every target of the node is down ("last seen 40 s ago"); its worst reads "down"."""
    up = sum(1 for e in f.engines if e.up)
    p95 = [e.ttft_s.p95 for e in f.engines if e.ttft_s and e.ttft_s.p95 is not None]
    active = [a for a in f.alerts if a.state == "active"]
    worst = (
        "critical"
        if any(a.severity == "critical" for a in active)
        else "warning"
        if any(a.severity == "warning" for a in active)
        else "ok"
    )
    figures = [
        e.generation_tokens_per_s for e in f.engines if e.generation_tokens_per_s is not None
    ]
    if down is not None:
        worst = "down"
    return {
        "node": node,
        "gpus": len(f.gpus),
        "mig": sum(len(g.mig.devices) for g in f.gpus if g.mig),
        "engines": f"{up}/{len(f.engines)}",
        "worst": worst,
        # the node's targets are younger than the window: its rates cover this much of it
        "window_covered_s": f.window_covered_s,
        "ttft": max(p95) if p95 else None,
        "ttft_within_target": summary.ttft_within_target if summary else None,
        "ttft_target_s": summary.ttft_target_s if summary else None,
        # n/a, never 0, when no engine has the figure (down, stale, not in Prometheus)
        "tps": sum(figures) if figures else None,
        "usd_per_m_compliant_tokens_at_least": (
            summary.usd_per_m_compliant_tokens_at_least if summary else None
        ),
        "cost_basis": (
            f"no request within {summary.ttft_target_s:g} s: no compliant tokens"
            if summary is not None and summary.no_good
            else None
            if summary is None or summary.usd_per_m_compliant_tokens_at_least is None
            else "node's inferdeck export"
            if summary.cost_from_node
            else f"fleet estimate from the share of TTFT within {summary.ttft_target_s:g} s"
        ),
        "alerts": len(active),
        "down": down,
    }


def partial(row: dict[str, Any], value: object) -> str:
    """The partial-window mark on a node's figure (its targets are younger than the window)."""
    return PARTIAL if value is not None and row["window_covered_s"] is not None else ""


def fleet_timeline(st: FleetState) -> Timeline | None:
    """The fleet's timeline: its own events and every node's, each subject named with its
    node ("node-a/chat"), in order (each node's first sign kept)."""
    parts = [(None, st.events)] + [(n, f.timeline) for n, f in sorted(st.nodes.items())]
    held = [(n, tl) for n, tl in parts if tl is not None]
    if not held:
        return None
    events = sorted(
        (
            e if n is None else e.model_copy(update={"subject": f"{n}/{e.subject}"})
            for n, tl in held
            for e in tl.events
        ),
        key=lambda e: e.start,
    )
    return Timeline.model_construct(
        schema_=held[0][1].schema_,
        since=min(tl.since for _, tl in held),
        events=events,
        dropped=sum(tl.dropped for _, tl in held),
        folded=sum(tl.folded for _, tl in held),
    )
