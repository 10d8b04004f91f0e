"""What the fleet source knows after a poll: a Frame per node, the queries that failed, trends."""

from __future__ import annotations

from dataclasses import dataclass, field

from console.frame import Frame


@dataclass(frozen=True)
class NodeSummary:
    """The fleet's SLO and cost columns of one node."""

    ttft_within_target: float | None  # the worst engine's share of requests within the target
    ttft_target_s: float
    usd_per_m_compliant_tokens_at_least: float | None = None  # a lower bound from that share


@dataclass
class FleetState:
    nodes: dict[str, Frame] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # query -> why it failed this poll
    last_ok: float | None = None
    taken_at: float = 0.0  # the time the figures describe (in the past while scrubbing)
    trends: dict[str, list[float]] = field(default_factory=dict)  # node -> output tok/s, last hour
    summary: dict[str, NodeSummary] = field(default_factory=dict)  # node -> SLO share and cost
