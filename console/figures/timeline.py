"""The incident timeline: events read from successive Frames, kept in order as ranges for states
(an engine down, KV at its limit, a queue) and points for edges (a restart, an XID, ECC errors),
repeats folded into counted entries, and the first sign of the incident marked: the earliest
event, on the same engine, service or GPU, of the chain that led to the first page or SLO miss.

Pure: the deriver observes each Frame it makes (live and in replay alike, so both give the same
timeline for the same samples); the screens, bundles and ``inferdeck timeline`` read it."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from console.frame import Engine, Event, Frame, Gpu, Scope, Severity, Timeline
from console.units import duration_text, num
from console.xids import describe

MAX_EVENTS = 400  # kept; older ones are dropped and counted (memory does not grow)
FOLD_S = 60.0  # a point repeated within this of the last is folded into it, counted
REOPEN_S = 30.0  # a range that closes and opens again within this goes on, counted
QUEUE_HOLD_S = 5.0  # requests waiting this long make a queue (a moment's wait does not)
QUEUE_GAP_S = 2.0  # polls without a wait that do not break that hold
KV_CLEAR = 0.05  # KV at its limit ends this far below it (no flapping on the line)
LOOKBACK_S = 900.0  # the first sign is sought this far before the first page
LINK_S = 5.0  # a state over this long before the chain's next event began is no link of it
# clock event reasons that slow the GPU against its will (idle, sync boost, display or
# application clocks are the operator's or the workload's own doing)
SLOWING = {
    "power cap": "warning",
    "HW slowdown": "critical",
    "thermal (SW)": "warning",
    "thermal (HW)": "critical",
    "power brake (HW)": "critical",
}
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


@dataclass
class _Range:
    kind: str
    subject: str
    scope: Scope
    severity: Severity
    start: datetime
    text: str
    evidence: dict[str, float | str] = field(default_factory=dict)
    end: datetime | None = None
    count: int = 1
    event: Event | None = None  # the record last built (rebuilt only when something changed)
    id: int = 0  # its place in the log a recording keeps (order of entry)


@dataclass(slots=True)
class _State:
    """One poll's view of a condition that holds: what it is (kind and id: the same condition
    again is the same entry), and how to describe it."""

    kind: str
    id: str
    subject: str
    scope: Scope
    severity: Severity
    text: str
    evidence: dict[str, float | str] = field(default_factory=dict)
    start: datetime | None = None  # when it began, where the frame says (an alert's since)


Note = _State  # an event a source tells of itself (the config read again), not read off a frame


def note(
    kind: str, subject: str, severity: Severity, text: str, evidence: dict[str, Any] | None = None
) -> Note:
    """An event a frame's maker adds itself (``EventBook.observe``'s ``points`` and ``states``):
    about the node, or the source the frames come from."""
    return _State(kind, f"{kind} {subject}", subject, "node", severity, text, evidence or {})


class EventBook:
    """Observes Frames in order and keeps the timeline. ``observe`` returns the Timeline as of
    that frame: the same object while nothing changed (a quiet poll costs a few comparisons)."""

    def __init__(self, max_events: int = MAX_EVENTS) -> None:
        self.max_events = max_events
        self.entries: list[_Range] = []  # oldest first (by start)
        self.open: dict[tuple[str, str], _Range] = {}
        self.closed_at: dict[tuple[str, str], _Range] = {}  # recently closed: may reopen
        self.pending: dict[tuple[str, str], datetime] = {}  # held conditions not yet long enough
        self.pending_seen: dict[tuple[str, str], datetime] = {}  # and when last seen holding
        # what edges are read against: each engine's (process start, version hints, command
        # line), each GPU's counts, and when each active alert was first seen firing
        self.engines_seen: dict[str, tuple[datetime | None, list[str], str | None]] = {}
        self.counts: dict[int, tuple[int | None, ...]] = {}
        self.fired: dict[str, str] = {}
        self.look_again = 0  # polls until an engine's command line not found is looked for again
        # each alert's, pending condition's and finding's state as last made, by what it says: a
        # poll that says the same again reuses it (they are read, never changed, downstream)
        self.said: dict[tuple[object, ...], _State] = {}
        self.since: datetime | None = None
        self.dropped = 0
        self.folded = 0
        self.changed = True
        self.timeline: Timeline | None = None
        self.serial = 0
        # what changed since the recorder last took it (kept only for a recorder: ``logging``)
        self.logging = self.log_first = False
        self.log_events: dict[int, Event] = {}
        self.log_gone: set[int] = set()

    # --- observing ---------------------------------------------------------------------------
    def observe(
        self, frame: Frame, points: Sequence[Note] = (), states: Sequence[Note] = ()
    ) -> Timeline:
        """The timeline after ``frame``, with the edges (``points``) and the states that hold
        (``states``) its maker tells of itself, beside those read off the frame."""
        t = frame.taken_at
        first = self.since is None
        if self.since is None:
            self.since = t
        now = {(s.kind, s.id): s for s in self._merged(list(self._states(frame, t)), frame, t)}
        now.update({(s.kind, s.id): s for s in states})
        for (kind, ident), s in now.items():  # an alert raised goes on from its pending range
            if kind != "alert" or (kind, ident) in self.open or ident.startswith("pending "):
                continue
            was = ("alert", f"pending {s.evidence.get('rule')} {s.subject}")
            if was in self.open:
                self.open[(kind, ident)] = self.open.pop(was)
        for key, s in now.items():
            self._hold(key, s, t)
        for key in [k for k in self.open if k not in now]:
            r = self.open.pop(key)
            r.end = t
            r.event = None
            if r.kind == "alert" and "fired" not in r.evidence:
                r.severity = "info"  # held too briefly to fire: the first to fold on page one
            self.closed_at[key] = r
            self.changed = True
        for key in [k for k in self.pending if k not in now]:  # a gap of a poll or two is no end
            if (t - self.pending_seen[key]).total_seconds() > QUEUE_GAP_S:
                del self.pending[key], self.pending_seen[key]
        for p in (*self._points(frame, first), *points):
            self._point(p, t)
        if self.changed:
            self.changed = False
            self._trim()
            # (the last timeline holds the old records: no id below is reused meanwhile)
            built = {id(r.event) for r in self.entries} if self.logging else set()
            self.timeline = build(self.entries, self.since, self.dropped, self.folded, frame)
            if self.logging:
                self.log_events.update(
                    {
                        r.id: r.event
                        for r in self.entries
                        if id(r.event) not in built and r.event is not None
                    }
                )
        assert self.timeline is not None
        return self.timeline

    def _hold(self, key: tuple[str, str], s: _State, t: datetime) -> None:
        r = self.open.get(key)
        if r is not None:  # going on: its worst severity and figures kept (the text at the peak)
            if _update(r, s):
                r.event = None
                self.changed = True
            return
        hold = QUEUE_HOLD_S if s.kind == "queue" else 0.0
        if hold:
            begun = self.pending.setdefault(key, t)
            self.pending_seen[key] = t
            if (t - begun).total_seconds() < hold:
                return
            s.start = s.start or begun
        again = self.closed_at.pop(key, None)
        if (
            again is not None
            and again.end is not None
            and ((t - again.end).total_seconds() <= REOPEN_S)
        ):
            again.end, again.event = None, None
            again.count += 1
            self.folded += 1
            if _worse(again, s):  # (its own copy: a state may be said again, unchanged)
                again.severity, again.text, again.evidence = s.severity, s.text, dict(s.evidence)
            self.open[key] = again
        else:
            r = _Range(s.kind, s.subject, s.scope, s.severity, s.start or t, s.text, s.evidence)
            self.open[key] = r
            self._add(r)
        self.changed = True

    def _point(self, p: _State, t: datetime) -> None:
        last = next(
            (r for r in reversed(self.entries[-20:]) if (r.kind, r.subject) == (p.kind, p.subject)),
            None,
        )
        at = p.start or t
        if last is not None and (at - (last.end or last.start)).total_seconds() <= FOLD_S:
            last.count += int(p.evidence.get("count", 1)) if p.kind != "restart" else 1
            last.end, last.event = at, None
            if _worse(last, p):
                last.severity, last.text = p.severity, p.text
            self.folded += 1
        else:
            r = _Range(p.kind, p.subject, p.scope, p.severity, at, p.text, p.evidence)
            r.count = int(p.evidence.get("count", 1)) if p.kind != "restart" else 1
            r.end = None
            r.event = None
            self._add(r, point=True)
        self.changed = True

    def start_log(self) -> None:
        """Keep what changes from now on for a recorder, starting with every entry held."""
        if not self.logging:
            self.logging = self.log_first = True
            self.log_events = {r.id: r.event for r in self.entries if r.event is not None}

    def take_log(self) -> dict[str, object] | None:
        """What changed in the timeline since the last call, as one line of a recording (the
        entries rebuilt, by their id, and those dropped), or None when nothing did. A replay
        rebuilds the timeline from these lines (console.figures.timeline.Replayed)."""
        if not (self.log_events or self.log_gone or self.log_first) or self.since is None:
            return None
        self.log_first = False  # (the first line says since when, events or none)
        line: dict[str, object] = {
            "since": self.since.isoformat(),
            "ev": [[k, e.model_dump(mode="json")] for k, e in sorted(self.log_events.items())],
            "gone": sorted(self.log_gone),
            "dropped": self.dropped,
            "folded": self.folded,
        }
        self.log_events, self.log_gone = {}, set()
        return line

    def _add(self, r: _Range, point: bool = False) -> None:
        self.serial += 1
        r.id = self.serial
        r.evidence = dict(r.evidence)
        if point:
            r.evidence.setdefault("point", 1)
        self.entries.append(r)
        if len(self.entries) > 1 and self.entries[-2].start > r.start:  # began before: in order
            self.entries.sort(key=lambda e: e.start)

    def _trim(self) -> None:
        over = len(self.entries) - self.max_events
        if over > 0:  # the oldest closed entries go first; open ranges stay
            keep = [r for r in self.entries if r.end is None and "point" not in r.evidence]
            gone = [r for r in self.entries if r not in keep][:over]
            self.entries = [r for r in self.entries if r not in gone]
            self.dropped += len(gone)
            if self.logging:
                self.log_gone |= {r.id for r in gone}
                for r in gone:
                    self.log_events.pop(r.id, None)
        for key in [k for k, r in self.closed_at.items() if r not in self.entries]:
            del self.closed_at[key]

    def _merged(self, states: list[_State], frame: Frame, t: datetime) -> list[_State]:
        """An alert or finding about a fact the timeline reads itself (KV at its limit, a queue,
        saturation, an engine down) joins that fact's entry, its severity and when it fired
        added, instead of standing beside it; while it holds, the fact's entry stays open."""
        facts = {(s.kind, s.subject): s for s in states if s.kind not in ("alert", "finding")}
        if len(facts) == len(states):
            return states  # no alert or finding: nothing to join
        groups = _related(frame)
        out: list[_State] = []
        for s in states:
            if s.kind != "alert" and s.kind != "finding":
                continue
            if s.kind == "alert" and s.evidence.get("rule") == "engine_restart":
                point = next(
                    (r for r in reversed(self.entries[-20:]) if r.kind == "restart"
                     and r.subject in groups.get(s.subject, {s.subject})),
                    None,
                )  # fmt: skip
                if point is not None:  # said by the restart's own entry
                    said = f"engine_restart alert fired {s.evidence.get('fired')}"
                    if point.evidence.get("alert") != said:
                        point.evidence["alert"], point.event, self.changed = said, None, True
                    continue
            topics = _topic(s)
            if not topics:
                out.append(s)
                continue
            names = sorted(groups.get(s.subject, {s.subject}))
            pairs = [(k, n) for k in topics for n in names]
            fact = next((facts[p] for p in pairs if p in facts), None)
            if fact is None:
                open_ = next(
                    (self.open[p] for p in pairs if p in self.open and p[0] in KEPT_OPEN), None
                )
                if open_ is not None:  # the fact dipped under its line: the alert keeps it on
                    fact = _State(open_.kind, open_.subject, open_.subject, open_.scope,
                                  open_.severity, open_.text, open_.evidence)  # fmt: skip
                    facts[(open_.kind, open_.subject)] = fact
                    out.append(fact)
                elif s.kind == "alert" and topics[0] in SAID_BY_ALERT:
                    # another source saw it first (a node's own export, before Prometheus' up
                    # turned): the fact opens from the alert, and goes on when it is read
                    fact = _State(topics[0], s.subject, s.subject, s.scope, s.severity, s.text)
                    facts[(fact.kind, fact.subject)] = fact
                    out.append(fact)
            if fact is None:
                out.append(s)
                continue
            if SEVERITY_RANK[s.severity] > SEVERITY_RANK[fact.severity]:
                fact.severity = s.severity
            if s.kind == "alert":
                rule = s.evidence.get("rule")
                fired = s.evidence.get("fired")
                said = f"{rule} alert " + (f"fired {fired}" if fired else "pending")
                fact.evidence = {**fact.evidence, "alert": said}
        kept = {id(s) for s in out}
        return out + [s for s in states if s.kind not in ("alert", "finding") and id(s) not in kept]

    # --- what a frame shows -------------------------------------------------------------------
    def _states(self, frame: Frame, t: datetime) -> Iterator[_State]:
        limit = frame.limits.kv_usage_critical
        for e in frame.engines:
            if not e.up:
                if e.error != "not polled yet":
                    yield _State(
                        "engine-down",
                        e.name,
                        e.name,
                        "engine",
                        "critical",
                        f"down: {e.error or 'no answer'}",
                    )
                continue
            yield from _engine_states(e, limit, (("kv-full", e.name) in self.open))
        for g in frame.gpus:
            yield from _gpu_states(g)
        if not frame.verdict and not frame.alerts:
            return
        scopes: dict[str, Scope] = {s.name: "service" for s in frame.services}
        scopes.update({e.name: "engine" for e in frame.engines})
        # each alert's, pending condition's and finding's state as last made: a poll that says the
        # same again reuses it. An alert's or pending condition's message is not compared (its
        # figures move every poll): the state kept takes the new text (a range copies what it
        # reads of a state, never holds it). A finding's message stays in: its gist is its id
        said, self.said = self.said, {}
        kept = self.said
        pending: list[_State] = []
        findings: list[_State] = []
        for v in frame.verdict:
            if v.source != "pending" and v.source != "finding":
                continue
            subject = v.subject
            scope = _scope(subject, scopes)
            if v.source == "pending":
                key: tuple[object, ...] = ("pending", v.rule, subject, scope, v.severity, v.since)
                text = v.message if "pending" in v.message else f"{v.message} (pending)"
                st = said.get(key)
                if st is None:
                    st = _State("alert", f"pending {v.rule} {subject}", subject, scope,
                                v.severity, text, {"rule": v.rule}, v.since)  # fmt: skip
                else:
                    st.text = text
                pending.append(st)
            else:
                key = ("finding", v.rule, subject, scope, v.severity, v.message)
                st = said.get(key)
                if st is None:
                    st = _State("finding", f"{subject} {_gist(v.message)}", subject, scope,
                                v.severity, v.message, {"rule": v.rule})  # fmt: skip
                findings.append(st)
            kept[key] = st
        yield from pending
        active = [a for a in frame.alerts if a.state == "active"]
        # an alert gone and raised again later fires at its own time
        fired_at = self.fired
        self.fired = {a.key: fired_at.get(a.key) or f"{t:%H:%M:%S}Z" for a in active}
        for a in active:
            fired = self.fired[a.key]
            scope = _scope(a.subject, scopes)
            key = ("alert", a.key, a.subject, scope, a.severity, a.rule, fired, a.since)
            st = said.get(key)
            if st is None:
                st = _State("alert", a.key, a.subject, scope, a.severity, a.message,
                            {"rule": a.rule, "fired": str(fired)}, a.since)  # fmt: skip
            else:
                st.text = a.message
            kept[key] = st
            yield st
        yield from findings

    def _points(self, frame: Frame, first: bool) -> Iterator[_State]:
        """Edges: what changed since the last frame (nothing at the first: a state the console
        found on starting is a range, a counter it found is a baseline)."""
        seen = self.engines_seen
        # each engine's process command line, where linking found it: read only where one is
        # still wanted (an engine new, without one yet, or restarted: a new process)
        wanted = any(
            (was := seen.get(e.name)) is None
            or (e.restarted_at is not None and e.restarted_at != was[0])
            for e in frame.engines
            if e.up
        )
        if not wanted and any(seen[e.name][2] is None for e in frame.engines if e.up):
            # one not found yet (its process may link later): looked for every LOOK_EVERY polls
            self.look_again -= 1
            if self.look_again <= 0:
                wanted, self.look_again = True, LOOK_EVERY
        commands = (
            {
                p.engine: p.command
                for g in frame.gpus
                for p in [
                    *g.processes,
                    *(p for d in (g.mig.devices if g.mig else []) for p in d.processes),
                ]
                if p.engine and p.command
            }
            if wanted and any(g.processes or g.mig for g in frame.gpus)
            else {}
        )
        for e in frame.engines:
            was = self.engines_seen.get(e.name)
            cmd = commands.get(e.name)
            if was is not None and e.restarted_at is not None and e.restarted_at != was[0]:
                yield _restart(e, was, cmd)
            if e.up:
                old_cmd = was[2] if was is not None else None
                self.engines_seen[e.name] = (e.restarted_at, list(e.version_hints), cmd or old_cmd)
        for g in frame.gpus:
            yield from _xids(g)
            now = _gpu_counts(g)
            before = self.counts.get(g.index)
            self.counts[g.index] = now
            if before is not None and not first and before != now:
                yield from _gpu_points(g, before, now)


def _scope(subject: str, scopes: dict[str, Scope]) -> Scope:
    if subject.startswith("GPU "):
        return "mig" if " MIG " in subject else "gpu"
    return scopes.get(subject, "node")


# --- the conditions, one function each ---------------------------------------------------------
def _engine_states(e: Engine, limit: float, kv_open: bool) -> Iterator[_State]:
    waiting = e.requests_waiting
    if waiting is not None and waiting > 0:
        yield _State(
            "queue",
            e.name,
            e.name,
            "engine",
            "warning",
            f"queue: {num(waiting)} waiting",
            {"waiting": waiting, "running": e.requests_running or 0.0},
        )
    kv = e.kv_cache_usage
    if kv is not None and (kv >= limit or (kv_open and kv >= limit - KV_CLEAR)):
        yield _State(
            "kv-full",
            e.name,
            e.name,
            "engine",
            "warning",
            f"KV cache ≥ {limit * 100:.0f} % ({kv * 100:.0f} % used)",
            {"kv_used": round(kv, 4)},
        )
    rate = e.preemptions_per_min
    if rate is not None and rate > 0 and not e.preemptions_since_start:
        yield _State(
            "preemptions",
            e.name,
            e.name,
            "engine",
            "warning",
            f"preemptions {rate:,.0f}/min",
            {"per_min": round(rate, 2), "in_window": e.preemptions or 0.0},
        )
    cap = e.capacity
    if cap is not None and cap.saturation is not None and cap.saturation >= 1.0:
        slo = (cap.saturation_slo or "").upper()
        yield _State(
            "saturation",
            e.name,
            e.name,
            "engine",
            "warning",
            f"saturated: p90 {slo} at {cap.saturation:.2f}× its SLO",
            {"saturation": round(cap.saturation, 2)},
        )


def _gpu_states(g: Gpu) -> Iterator[_State]:
    subject = f"GPU {g.index}"
    if g.fault:
        yield _State("gpu-lost", subject, subject, "gpu", "critical", g.fault)
        return
    for reason in g.clock_events or []:
        sev = SLOWING.get(reason)
        if sev is not None:
            yield _State(
                f"clocks {reason}",
                subject,
                subject,
                "gpu",
                sev,  # type: ignore[arg-type]
                f"clocks slowed: {reason}"
                + (f" (SM {g.clock_sm_mhz} of {g.clock_sm_max_mhz} MHz)" if g.clock_sm_mhz else ""),
                {"sm_mhz": float(g.clock_sm_mhz or 0), "power_w": float(g.power_w or 0)},
            )
    rr = g.remapped_rows
    if rr is not None and rr.pending:
        yield _State(
            "remap-pending",
            subject,
            subject,
            "gpu",
            "warning",
            "row remapping pending: reset the GPU",
        )
    if rr is not None and rr.failure:
        yield _State("remap-failed", subject, subject, "gpu", "critical", "row remapping failed")
    r = g.mig.recut if g.mig else None
    if r is not None:
        yield _State(
            "mig-recut",
            subject,
            subject,
            "gpu",
            "critical" if r.state == "neither" else "warning",
            f"MIG re-cut interrupted ({r.before} → {r.target}): {r.message}",
            {"apply_id": r.apply_id},
        )


def _xids(g: Gpu) -> Iterator[_State]:
    """XID errors NVML delivered since the last poll: each with its meaning and usual action
    (config/xids.yaml), on its MIG instance when it names one."""
    for x in g.xids:
        subject = f"GPU {g.index}"
        gi = next((i for i in (g.mig.instances if g.mig else []) if i.id == x.gpu_instance), None)
        if gi is not None:
            subject += f" MIG {gi.profile or '?'}@{gi.placement_start if gi.placement_start is not None else '?'}"
        severity, text = describe(x.xid)
        scope: Scope = "mig" if gi is not None else "gpu"
        yield _State(f"xid {x.xid}", subject, subject, scope, severity, text, {"xid": float(x.xid)})  # type: ignore[arg-type]


COUNTS = (  # the counts a GPU's edges are read from, in _gpu_counts' order
    ("ecc-u", "uncorrectable ECC errors", "critical"),
    ("ecc-c", "corrected ECC errors", "info"),
    ("remap-u", "rows remapped for uncorrectable errors", "critical"),
    ("remap-c", "rows remapped for correctable errors", "warning"),
)


def _gpu_counts(g: Gpu) -> tuple[int | None, ...]:
    rr = g.remapped_rows
    return (
        g.ecc_uncorrected_volatile,
        g.ecc_corrected_volatile,
        rr.uncorrectable if rr else None,
        rr.correctable if rr else None,
    )


def _gpu_points(
    g: Gpu, was: tuple[int | None, ...], now: tuple[int | None, ...]
) -> Iterator[_State]:
    subject = f"GPU {g.index}"
    for (key, what, sev), a, b in zip(COUNTS, was, now, strict=True):
        if isinstance(a, int) and isinstance(b, int) and b > a:
            yield _State(
                key,
                subject,
                subject,
                "gpu",
                sev,  # type: ignore[arg-type]
                f"{what} +{b - a} (now {b})",
                {"count": float(b - a), "total": float(b)},
            )


def _restart(
    e: Engine, was: tuple[datetime | None, list[str], str | None], cmd: str | None
) -> _State:
    """An engine's new process, with what changed: its version hints and its command line's
    flags, where they were seen before and after."""
    changes = []
    _, old_hints, old_cmd = was
    if old_hints != list(e.version_hints):
        changes.append(
            f"version {', '.join(old_hints) or '?'} → {', '.join(e.version_hints) or '?'}"
        )
    if old_cmd is not None and cmd is not None and old_cmd != cmd:
        changes.append(flags_diff(old_cmd, cmd))
    text = "restarted" + (f": {'; '.join(changes)}" if changes else "")
    assert e.restarted_at is not None
    return _State("restart", e.name, e.name, "engine", "warning", text, {}, e.restarted_at)


def flags_diff(old: str, new: str) -> str:
    """The flags two command lines differ in: "--max-num-seqs 256 → 128, + --enforce-eager"."""

    def flags(cmd: str) -> dict[str, str]:
        out: dict[str, str] = {}
        words = cmd.split()
        for i, w in enumerate(words):
            if not w.startswith("--"):
                continue
            if "=" in w:
                k, v = w.split("=", 1)
                out[k] = v
            else:
                nxt = words[i + 1] if i + 1 < len(words) else ""
                out[w] = "" if nxt.startswith("--") else nxt
        return out

    a, b = flags(old), flags(new)
    parts = [f"{k} {a[k]} → {b[k]}".replace("  ", " ") for k in a if k in b and a[k] != b[k]]
    parts += [f"+ {k} {b[k]}".rstrip() for k in b if k not in a]
    parts += [f"− {k}" for k in a if k not in b]
    return "flags " + ", ".join(parts) if parts else "same flags"


# an alert or finding that speaks of a fact the timeline reads itself joins that fact's entry:
# by the alert's rule, or words of the finding's head
CLOCKS = tuple(f"clocks {reason}" for reason in SLOWING)
TOPICS = {
    "kv": ("kv-full",),
    "engine_down": ("engine-down",),
    "saturation": ("saturation",),
    "queue": ("queue",),
    "power": ("clocks power cap",),
    "thermal": CLOCKS,
    "gpu": ("gpu-lost",),
}
FINDING_TOPICS = {
    "kv cache": ("kv-full",),
    "saturated": ("saturation",),
    "clock held back": CLOCKS,
}
LOOK_EVERY = 10  # polls between looks for an engine's command line that was not found
KEPT_OPEN = {"kv-full", "saturation", "queue"}  # (an engine's recovery is not its outage)
SAID_BY_ALERT = {"engine-down"}  # facts an alert alone states (the fleet's view of a node)


def _topic(s: _State) -> tuple[str, ...]:
    if s.kind == "alert":
        return TOPICS.get(str(s.evidence.get("rule", "")), ())
    if s.kind == "finding":
        gist = s.id.split(" ", 1)[-1]
        got = _FINDING_TOPIC.get(gist)
        if got is None:
            got = next((k for w, k in FINDING_TOPICS.items() if w in gist), ())
            _FINDING_TOPIC[gist] = got
        return got
    return ()


def _gist(message: str) -> str:
    """What a finding is about, the same while its figures move: its head (to the first ':',
    '(', ';' or dash), figures as '#', plurals as singulars, lower case."""
    head = _HEAD.split(message, maxsplit=1)[0]
    got = _GISTS.get(head)
    if got is None:
        if len(_GISTS) > 2048:  # (a head's figures may move: the memo is only for a while)
            _GISTS.clear()
        got = _GISTS[head] = _PLURAL.sub(r"\1", _FIGURE.sub("#", head.lower())).strip()
    return got


_GISTS: dict[str, str] = {}  # a finding's head -> its gist (each poll's findings say it again)
_FINDING_TOPIC: dict[str, tuple[str, ...]] = {}  # a gist -> the facts it is about (few)


_HEAD, _FIGURE, _PLURAL = (re.compile(p) for p in (r"[:(;]| — ", r"\d[\d,.]*%?", r"(\w\w)s\b"))


def _update(r: _Range, s: _State) -> bool:
    """Keeps a range's worst: its severity, each figure's peak (the text said at the peak), the
    alert it raised. True when something changed."""
    changed = False
    if _worse(r, s):
        r.severity, r.text, changed = s.severity, s.text, True
    for k, v in s.evidence.items():
        old = r.evidence.get(k)
        if isinstance(v, float | int) and isinstance(old, float | int):
            if v > old:
                r.evidence[k], r.text, changed = v, s.text, True
        elif v != old and not (k == "alert" and "fired" in str(old)):  # the first firing kept
            r.evidence[k], changed = v, True
    return changed


def _worse(r: _Range, s: _State) -> bool:
    return SEVERITY_RANK[s.severity] > SEVERITY_RANK[r.severity]


_GPU = re.compile(r"GPU (\d+)")


# --- the timeline as records ----------------------------------------------------------------
def build(
    entries: list[_Range], since: datetime, dropped: int, folded: int, frame: Frame
) -> Timeline:
    sign = first_sign(entries, frame)
    events = []
    for r in entries:
        mark = r is sign
        if r.event is None or r.event.first_sign != mark:
            point = "point" in r.evidence
            r.event = Event.model_construct(  # its values are this module's own: no check needed
                kind=r.kind,
                subject=r.subject,
                scope=r.scope,
                severity=r.severity,
                start=r.start,
                end=r.end,
                range=not point or r.count > 1,
                ongoing=not point and r.end is None,
                text=r.text,
                evidence={k: v for k, v in r.evidence.items() if k != "point"},
                count=r.count,
                first_sign=mark,
            )
        events.append(r.event)
    return Timeline.model_construct(
        schema_="inferdeck.timeline/1",
        since=since,
        events=events,
        dropped=dropped,
        folded=folded,
    )


def _related(frame: Frame) -> dict[str, set[str]]:
    """Each subject's group: an engine, its services and its GPU (and the GPU's MIG devices)."""
    global _LAST_RELATED
    key = (
        tuple((e.name, e.device) for e in frame.engines),
        tuple((s.name, s.engine, s.device_id) for s in frame.services),
    )
    if _LAST_RELATED is not None and _LAST_RELATED[0] == key:
        return _LAST_RELATED[1]  # (the same engines on the same devices: the poll before's)
    groups: dict[str, set[str]] = {}
    for e in frame.engines:
        served = [s for s in frame.services if s.engine == e.name]
        group = {e.name} | {s.name for s in served}
        m = _GPU.match(e.device or "")
        if m:
            group |= {f"GPU {m.group(1)}", e.device or ""}
        # where linking found no process, the plan's device as found on the node ("1/0")
        group |= {f"GPU {s.device_id.split('/')[0]}" for s in served if s.device_id}
        for name in group:
            groups.setdefault(name, set()).update(group)
    _LAST_RELATED = (key, groups)
    return groups


_LAST_RELATED: tuple[object, dict[str, set[str]]] | None = None


def _gpu_of(subject: str) -> str:
    m = _GPU.match(subject)
    return f"GPU {m.group(1)}" if m else subject


def first_sign(entries: list[_Range], frame: Frame) -> _Range | None:
    """The earliest event related to the first page (a critical alert) or SLO miss (a burn
    alert) in the chain that led to it: begun within LOOKBACK_S before it; a point (an XID, a
    restart) within REOPEN_S × 10 of it; a state still on when the chain's next event began (or
    over by no more than LINK_S: a poll or two). A state that cleared before the chain went on
    was over before the incident (a wave's peak that touched a line for seconds, 47 s before a
    power brake), and so is an alert that ended pending: its own rule passed it over."""
    pages = [
        r
        for r in entries
        if (r.kind == "alert" or "fired" in str(r.evidence.get("alert", "")))
        and (r.severity == "critical" or "burn" in str(r.evidence.get("rule", "")))
    ]
    if not pages:
        return None
    page = min(pages, key=lambda r: r.start)
    groups = _related(frame)
    subject = page.subject
    near = groups.get(subject, {subject}) | {_gpu_of(subject)}
    near |= {_gpu_of(s) for s in set(near)}
    best = page
    chain = page.start  # where the chain found so far begins

    def rank(r: _Range) -> tuple[datetime, int]:  # the earliest; at one time, a fact first
        return (r.start, r.kind in ("alert", "finding"))

    for r in reversed(entries):  # latest first: each link is read against the chain after it
        if r is page or rank(r) >= rank(best):
            continue
        if (page.start - r.start).total_seconds() > LOOKBACK_S:
            break
        if not (r.scope == "node" or r.subject in near or _gpu_of(r.subject) in near):
            continue
        if r.end is not None:
            if "point" in r.evidence:
                if (page.start - r.end).total_seconds() > REOPEN_S * 10:
                    continue
            elif r.kind == "alert" and "fired" not in r.evidence:
                continue
            elif (chain - r.end).total_seconds() > LINK_S:
                continue
        best, chain = r, min(chain, r.start)
    return best


class Replayed:
    """A timeline rebuilt from a recording's timeline lines (EventBook.take_log), as it stood
    at any recorded time: the same Timeline the live console had then."""

    def __init__(self, log: list[tuple[float, dict[str, Any]]]) -> None:
        self.log = log  # (time, line), in time order
        self._reset()

    def _reset(self) -> None:
        self.pos = 0
        self.events: dict[int, Event] = {}
        self.last: dict[str, Any] | None = None
        self.timeline: Timeline | None = None

    def at(self, t: float) -> Timeline | None:
        """The timeline as of recorded time ``t`` (None before its first line)."""
        if self.pos and self.log[self.pos - 1][0] > t:
            self._reset()  # back in time: from the start (lines are few, and cheap)
        moved = False
        while self.pos < len(self.log) and self.log[self.pos][0] <= t:
            line = self.log[self.pos][1]
            for k in line.get("gone", []):
                self.events.pop(int(k), None)
            for k, doc in line.get("ev", []):
                self.events[int(k)] = Event.model_validate(doc)
            self.last, moved = line, True
            self.pos += 1
        if moved and self.last is not None:
            self.timeline = Timeline.model_construct(
                schema_="inferdeck.timeline/1",
                since=datetime.fromisoformat(str(self.last["since"])),
                events=[
                    self.events[k]
                    for k in sorted(self.events, key=lambda k: (self.events[k].start, k))
                ],
                dropped=int(self.last.get("dropped", 0)),
                folded=int(self.last.get("folded", 0)),
            )
        return self.timeline


# --- the timeline as lines ------------------------------------------------------------------
def span_text(e: Event, until: datetime | None = None) -> str:
    """ "18:17:05Z" (a point), "18:17:05–18:21:40Z (4 min)" (a range), "18:17:05Z– (on, 4 min)"."""
    if not e.range:
        return f"{e.start:%H:%M:%S}Z"
    if e.end is None:
        on = f", {duration_text((until - e.start).total_seconds())}" if until else ""
        return f"{e.start:%H:%M:%S}Z– (on{on})"
    return (
        f"{e.start:%H:%M:%S}–{e.end:%H:%M:%S}Z ({duration_text((e.end - e.start).total_seconds())})"
    )


def event_text(e: Event) -> str:
    """What happened, without the knob its alert or finding adds, with the alert it raised and
    its fold count: "KV cache ≥ 90 % (100 % used), kv alert fired 18:17:20Z ×2"."""
    text = re.split(r" — |\): (?=[a-z])", e.text, maxsplit=1)
    out = text[0] + (
        ")" if len(text) > 1 and e.text[len(text[0]) : len(text[0]) + 1] == ")" else ""
    )
    fired = e.evidence.get("fired")
    if fired and "pending" not in out:
        out += f", fired {fired}"
    if e.evidence.get("alert"):
        out += f", {e.evidence['alert']}"
    return out + (f" ×{e.count}" if e.count > 1 else "")


def lines(
    tl: Timeline | None, until: datetime | None = None, max_lines: int | None = None
) -> list[str]:
    """The timeline as plain lines, oldest first: '▶' marks the first sign, '!' critical,
    '·' the rest; past ``max_lines`` the least severe, then the oldest, are folded into one
    line that says how many (never cut silently)."""
    if tl is None:
        return ["no timeline: this frame was not made by the console's deriver"]
    out = []
    if tl.dropped:
        out.append(f"… {tl.dropped} older events dropped (the timeline keeps {MAX_EVENTS})")
    events = list(tl.events)
    hidden: list[Event] = []
    room = None if max_lines is None else max(1, max_lines - len(out) - 1)
    if room is not None and len(events) > room:
        order = sorted(
            range(len(events)),
            key=lambda i: (
                not events[i].first_sign,
                -SEVERITY_RANK[events[i].severity],
                -events[i].start.timestamp(),
            ),
        )
        keep = set(order[:room])
        hidden = [e for i, e in enumerate(events) if i not in keep]
        events = [e for i, e in enumerate(events) if i in keep]
    if not events:
        out.append(f"nothing happened since {tl.since:%H:%M:%S}Z")
    for e in events:
        mark = "▶" if e.first_sign else ("!" if e.severity == "critical" else "·")
        out.append(f"{mark} {span_text(e, until)} {e.subject}: {event_text(e)}")
        if e.first_sign:
            out[-1] += "  ← first sign"
    if hidden:
        kinds = sorted({e.severity for e in hidden}, key=lambda s: -SEVERITY_RANK[s])
        out.append(
            f"… {len(hidden)} events folded ({', '.join(kinds)}): the whole list in --format json"
        )
    return out
