"""One verdict per node, derived once from a Frame: its active alerts, the conditions that hold
now but whose hold has not elapsed (pending: at least a warning, so a headless check that samples
a few seconds is as loud as the console will be), and the findings. The dashboard (alerts pane,
engine dots, header), ``inferdeck check`` (exit code, first line, performance data), the exporter
and snapshot.md all read it.

Status: critical when an alert or a finding is critical; warning when one is a warning or any
condition is pending; ok otherwise; unknown when nothing is watched (no engine and no GPU).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime

from console.figures.alerts import SEVERITY_ORDER, Condition
from console.figures.findings import findings
from console.frame import Concern, Frame

SOURCE_ORDER = {"alert": 0, "finding": 1, "pending": 2}
EXIT = {"ok": 0, "warning": 1, "critical": 2, "unknown": 3}


def concerns(
    frame: Frame,
    pending: Sequence[tuple[Condition, float]] = (),
    inhibited: Collection[str] = (),
) -> list[Concern]:
    """The verdict's entries, worst first. ``pending``: conditions held but not raised yet, with
    when they began. ``inhibited``: subjects (an engine down or just back, and its services)
    whose findings are not counted until they are judged on fresh data."""
    out = [
        Concern(
            severity=a.severity,
            source="alert",
            subject=a.subject,
            message=a.message,
            rule=a.rule,
            since=a.since,
        )
        for a in frame.alerts
        if a.state == "active"
    ]
    raised = {(a.subject, a.rule) for a in frame.alerts if a.state == "active"}
    for cond, began in pending:
        if cond.severity == "info" or (cond.subject, cond.rule) in raised:
            continue
        out.append(
            Concern(
                severity="warning",
                source="pending",
                subject=cond.subject,
                message=f"{cond.message} (pending: {cond.severity} once held {cond.for_s:g} s)",
                rule=cond.rule,
                since=datetime.fromtimestamp(began, tz=UTC),
            )
        )
    for f in findings(frame):
        if f.severity == "info" or f.subject in inhibited:
            continue
        out.append(
            Concern(
                severity="critical" if f.severity == "critical" else "warning",
                source="finding",
                subject=f.subject,
                message=f"{f.title} ({'; '.join(f.evidence)}) — {f.knob}",
                rule="finding",
                knob=f.knob,
            )
        )
    out.sort(key=lambda c: (SEVERITY_ORDER[c.severity], SOURCE_ORDER[c.source], c.subject))
    return out


def status(frame: Frame, verdict: Sequence[Concern]) -> str:
    if not frame.engines and not frame.gpus:
        return "unknown"
    levels = {c.severity for c in verdict}
    return "critical" if "critical" in levels else "warning" if "warning" in levels else "ok"


def judged(
    frame: Frame,
    pending: Sequence[tuple[Condition, float]] = (),
    inhibited: Collection[str] = (),
) -> Frame:
    """The frame with its verdict and status."""
    verdict = concerns(frame, pending, inhibited)
    return frame.model_copy(update={"verdict": verdict, "status": status(frame, verdict)})


def worst_for(verdict: Sequence[Concern], subjects: set[str]) -> str | None:
    """The worst severity among the verdict's entries about these subjects (an engine and its
    services), or None."""
    hits = [c.severity for c in verdict if c.subject in subjects and c.severity != "info"]
    return min(hits, key=SEVERITY_ORDER.__getitem__) if hits else None
