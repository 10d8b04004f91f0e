"""What the fleet source knows after a poll: a Frame per node, the queries that failed, trends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console.frame import Frame


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
    alert: str | None = None  # the most urgent: "page" or "ticket"
    state: str | None = None  # "firing" or "pending"
    since: float | None = None  # activeAt (Unix time)


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


def node_row(node: str, f: Frame, summary: NodeSummary | None = None) -> dict[str, Any]:
    """One node's fleet columns: what the fleet screen shows and `snapshot --prometheus` prints."""
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
    return {
        "node": node,
        "gpus": len(f.gpus),
        "mig": sum(len(g.mig.devices) for g in f.gpus if g.mig),
        "engines": f"{up}/{len(f.engines)}",
        "worst": worst,
        "ttft": max(p95) if p95 else None,
        "ttft_within_target": summary.ttft_within_target if summary else None,
        "ttft_target_s": summary.ttft_target_s if summary else None,
        "tps": sum(e.generation_tokens_per_s or 0 for e in f.engines),
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
    }
