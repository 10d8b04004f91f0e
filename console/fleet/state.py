"""What the fleet source knows after a poll: a Frame per node, the queries that failed, trends."""

from __future__ import annotations

from dataclasses import dataclass, field

from console.frame import Frame


@dataclass
class FleetState:
    nodes: dict[str, Frame] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # query -> why it failed this poll
    last_ok: float | None = None
    taken_at: float = 0.0  # the time the figures describe (in the past while scrubbing)
    trends: dict[str, list[float]] = field(default_factory=dict)  # node -> output tok/s, last hour
    summary: dict[str, dict] = field(default_factory=dict)  # node -> SLO share and cost figures
