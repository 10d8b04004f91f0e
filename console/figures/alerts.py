"""Alerts with hysteresis: a condition must hold for its rule's ``for`` duration before it is
raised, and be gone for its ``clear`` duration before it clears, so nothing flaps. Time is passed
in, so tests drive it with a controllable clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from console.frame import Alert, Severity

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
KEEP_CLEARED_S = 600.0
MAX_CLEARED = 20


@dataclass(frozen=True, slots=True)
class Condition:
    key: str
    severity: Severity
    subject: str
    message: str
    rule: str = ""
    for_s: float = 0.0
    clear_s: float = 0.0


@dataclass
class _Track:
    cond: Condition
    first_seen: float
    raised: bool = False
    absent_since: float | None = None


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


@dataclass
class AlertBook:
    tracks: dict[str, _Track] = field(default_factory=dict)
    cleared: list[Alert] = field(default_factory=list)
    raised_now: list[Alert] = field(
        default_factory=list
    )  # raised by the last update (toasts, bell)
    max_for_s: float | None = None  # cap on every `for` (headless checks that sample briefly)

    def update(
        self, conditions: list[Condition], now: float, inhibited: dict[str, str] | None = None
    ) -> list[Alert]:
        """``inhibited``: subjects whose conditions are not judged now (an engine down, or just
        back), with why. Their conditions other than the engine_down rule's are dropped, and an
        alert of theirs already raised is cleared at once with the reason, so nothing built from
        a dead engine's last figures stays active, and nothing comes back before it holds again
        on fresh data."""
        self.raised_now = []
        quiet = inhibited or {}
        conditions = [c for c in conditions if c.rule == "engine_down" or c.subject not in quiet]
        for key in list(self.tracks):
            held = self.tracks[key]
            why = quiet.get(held.cond.subject)
            if why is None or held.cond.rule == "engine_down":
                continue
            del self.tracks[key]
            if held.raised:
                self.cleared.insert(
                    0,
                    self._alert(held).model_copy(
                        update={
                            "state": "cleared",
                            "cleared_at": _utc(now),
                            "message": f"{held.cond.message} (inhibited: {why})",
                        }
                    ),
                )
        present = {c.key: c for c in conditions}
        for key, cond in present.items():
            track = self.tracks.get(key)
            if track is None:
                track = self.tracks[key] = _Track(cond, now)
            track.cond, track.absent_since = cond, None
            for_s = cond.for_s if self.max_for_s is None else min(cond.for_s, self.max_for_s)
            if not track.raised and now - track.first_seen >= for_s:
                track.raised = True
                self.raised_now.append(self._alert(track))
        for key in list(self.tracks):
            if key in present:
                continue
            track = self.tracks[key]
            if not track.raised:
                del self.tracks[key]  # never raised: forget it
                continue
            if track.absent_since is None:
                track.absent_since = now
            if now - track.absent_since >= track.cond.clear_s:
                del self.tracks[key]
                self.cleared.insert(
                    0,
                    self._alert(track).model_copy(
                        update={
                            "state": "cleared",
                            "cleared_at": _utc(now),
                            "message": track.cond.message,
                        }
                    ),
                )
        self.cleared = [
            a
            for a in self.cleared[:MAX_CLEARED]
            if a.cleared_at is not None and now - a.cleared_at.timestamp() < KEEP_CLEARED_S
        ]
        active = [self._alert(t) for t in self.tracks.values() if t.raised]
        active.sort(key=lambda a: (SEVERITY_ORDER[a.severity], a.since, a.key))
        return active + self.cleared

    def pending(self) -> list[tuple[Condition, float]]:
        """Conditions that hold now but have not held for their ``for`` yet, with when they
        began (from the last update)."""
        return [(t.cond, t.first_seen) for t in self.tracks.values() if not t.raised]

    @staticmethod
    def _alert(track: _Track) -> Alert:
        c = track.cond
        message = c.message
        if track.absent_since is not None:
            # raised, no longer holding, not yet cleared (the clear hysteresis): its sentence
            # speaks of the figures it last held with, so it is dated, never read as now's
            gone = track.absent_since
            message = (
                f"until {_utc(gone):%H:%M:%S}Z: {message} (no longer holds; clears at "
                f"{_utc(gone + c.clear_s):%H:%M:%S}Z)"
            )
        return Alert(
            key=c.key,
            rule=c.rule,
            severity=c.severity,
            subject=c.subject,
            message=message,
            since=_utc(track.first_seen),
        )


def worst(alerts: list[Alert]) -> str | None:
    active = [a.severity for a in alerts if a.state == "active"]
    return min(active, key=SEVERITY_ORDER.__getitem__) if active else None
