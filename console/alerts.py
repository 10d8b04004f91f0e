"""Active alerts with the time each was first raised (the plan issue adds for/clear durations)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from console.frame import Alert

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True, slots=True)
class Condition:
    key: str
    severity: str
    subject: str
    message: str


class AlertBook:
    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def update(self, conditions: list[Condition], now: float) -> list[Alert]:
        keys = {c.key for c in conditions}
        for key in list(self._since):
            if key not in keys:
                del self._since[key]
        alerts = []
        for c in conditions:
            since = self._since.setdefault(c.key, now)
            alerts.append(Alert(key=c.key, severity=c.severity, subject=c.subject, message=c.message,
                                since=datetime.fromtimestamp(since, tz=UTC)))
        alerts.sort(key=lambda a: (SEVERITY_ORDER[a.severity], a.since, a.key))
        return alerts
