"""The alert pane and the budget (pulse) pane. They draw from a Frame only."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from console.figures.columns import (
    BUDGET_COLUMNS,
    BUDGET_PANE,
    Column,
    drifts,
    headroom_of,
    headroom_words,
    pick,
)
from console.frame import Alert, Frame, Headroom, ServiceStatus
from screens.widgets import KeyedTable, Pane, Quiet, TablePane


def alert_lines(frame: Frame) -> int:
    """How many lines the Alerts pane draws for this frame (the dashboard sizes its panes by it):
    the knob, the active alerts, the other verdict entries and the alerts cleared lately."""
    knob = any(v.knob for v in frame.verdict)
    others = sum(1 for v in frame.verdict if v.source != "alert")
    return max(1, knob + len(frame.alerts) + others)


class AlertPane(Pane):
    def __init__(self) -> None:
        super().__init__("Alerts", id="alerts")

    def compose(self) -> ComposeResult:
        yield Quiet("", id="alert-lines")

    def show(self, frame: Frame) -> None:
        """The node's verdict: active alerts, then findings and pending conditions (every one an
        operator must see on the main screen), then the alerts cleared lately."""
        c = self.palette()
        active = [a for a in frame.alerts if a.state == "active"]
        others = [v for v in frame.verdict if v.source != "alert"]
        counts = [f"{len(active)} active"]
        for source, word in (("finding", "finding"), ("pending", "pending")):
            n = sum(1 for v in others if v.source == source)
            if n:
                counts.append(f"{n} {word}{'s' if n > 1 and word == 'finding' else ''}")
        status = {"critical": "CRITICAL", "warning": "WARNING"}.get(frame.status)
        self.set_title(f"Alerts ({', '.join(counts)})" + (f" {status}" if status else ""))
        lines = [] if active or others else [Text("No active alerts.", style=c["success"])]
        sev_of = {"critical": ("CRIT", c["error"]), "warning": ("WARN", c["warning"])}
        # the knob of the worst concern that has one, first: what to turn is on the main screen
        # whatever the pane's height (F gives the evidence, a every line in full)
        turn = next((v for v in frame.verdict if v.knob), None)
        if turn is not None:
            lines.append(
                Text.assemble(
                    ("▸ ", f"bold {sev_of.get(turn.severity, ('', ''))[1]}"),
                    (f"{turn.subject}: ", "bold"),
                    turn.knob or "",
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )
        for a in active:
            lines.append(self._alert_line(sev_of.get(a.severity, ("INFO", "")), a, c))
        for v in others:
            sev = sev_of.get(v.severity, ("INFO", ""))
            lines.append(
                Text.assemble(
                    (f"{sev[0]} ", f"bold {sev[1]}"),
                    (f"{v.source:<8} ", c["dim"]),
                    (f"{v.subject}: ", "bold"),
                    v.message,
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )
        for a in frame.alerts:
            if a.state == "active":
                continue
            sev = {"critical": ("CRIT", c["error"]), "warning": ("WARN", c["warning"])}.get(
                a.severity, ("INFO", "")
            )
            lines.append(self._alert_line(("OK  ", c["dim"]), a, c))
        text = Text("\n").join(lines)
        self.query_one("#alert-lines", Static).update(text)

    @staticmethod
    def _alert_line(sev: tuple[str, str], a: Alert, c: dict[str, str]) -> Text:
        when = f"{a.since:%H:%M:%S}" + (f"–{a.cleared_at:%H:%M:%S}" if a.cleared_at else "")
        return Text.assemble(
            (f"{sev[0]} ", f"bold {sev[1]}"),
            (f"{when} ", c["dim"]),
            (f"{a.subject}: ", "bold" if a.state == "active" else c["dim"]),
            (a.message, "" if a.state == "active" else c["dim"]),
            no_wrap=True,
            overflow="ellipsis",
        )


STATE_STYLE = {"ok": "success", "warning": "warning", "critical": "error", "unknown": "dim"}
HEADROOMS = ("memory", "kv", "queue", "power", "thermal")
BUDGET_SHOWN = pick(BUDGET_COLUMNS, BUDGET_PANE)


def headroom_cell(h: Headroom | None, c: dict[str, str], bars: bool = False) -> Text:
    """A headroom against its budget, in words (``headroom_words``), coloured by its state; with
    ``bars`` (wide panes) after a 4-cell bar that fills as the room is used, as the GPU pane's
    bars fill with use: half full exactly at the plan's margin, full at none left (KV: the share
    of the cache's sequences the plan takes)."""
    words = headroom_words(h)
    if h is None:
        return Text(words, style=c["dim"])
    color = c[STATE_STYLE[h.state]]
    if h.name == "engine":
        return Text(words, style=f"bold {color}")
    if h.value is None:
        return Text(words, style=c["dim"])
    text = Text(words, style="" if h.state == "ok" else color)
    if not bars:
        return text
    if h.name == "kv" and h.budget:
        # the plan's sequences over the capacity they have (value: the sequences past the
        # plan): a cache twice the plan is half full, the plan exactly met or missed is full
        left = max(0.0, min(1.0, h.value / (h.value + h.budget))) if h.value > 0 else 0.0
    elif h.budget:
        left = max(0.0, min(1.0, h.value / (2 * h.budget)))  # share of room left: 1/2 at margin
    else:
        left = 1.0 if h.value <= 0 else 0.0  # a queue: any waiting request is room used
    filled = 4 - round(left * 4)
    return Text.assemble(("█" * filled, color), ("░" * (4 - filled), c["dim"]), " ", text)


class ServicesPane(TablePane):
    """The pulse view: a row per planned service, each headroom against its budget."""

    def __init__(self) -> None:
        super().__init__("Budget: headroom left against the plan", id="services")

    def compose(self) -> ComposeResult:
        yield KeyedTable(id="service-table", cursor_type="row")
        yield Quiet("", id="service-note")

    def columns(self, wide: bool) -> list[tuple[str, str, int]]:
        return [
            (col.label, col.key, col.width_at(wide))
            for col in BUDGET_SHOWN
            if wide or not col.wide_only
        ]

    def _cell(self, s: ServiceStatus, col: Column[ServiceStatus], c: dict[str, str]) -> Text:
        text = col.short(s)
        if col.key == "service":  # its dot: the worst of its headrooms
            worst = max(
                (h.state for h in s.headroom),
                key=["ok", "unknown", "warning", "critical"].index,
                default="ok",
            )
            name = Text.assemble(("● ", c[STATE_STYLE[worst]]), text)
            name.truncate(12, overflow="ellipsis")
            return name
        if col.key == "dev":
            return Text(text, style="" if s.device_id else c["error"])
        if col.key in HEADROOMS:
            return headroom_cell(headroom_of(s, col.key), c, bool(self.wide))
        if col.key == "engine":
            return headroom_cell(headroom_of(s, "engine"), c)
        if col.key == "planned":
            return Text(text, style=c["error"] if s.fits is False else "")
        if col.key == "drift":  # KV below the plan, or a total above it: a warning
            return Text(text, style=c["dim"] if text == "-" else c["warning"] if drifts(s) else "")
        return Text(text)

    def fill(self, frame: Frame) -> None:
        self.frame = frame
        c = self.palette()
        shown = [col for col in BUDGET_SHOWN if self.wide or not col.wide_only]
        rows = [(f"svc:{s.name}", [self._cell(s, col, c) for col in shown]) for s in frame.services]
        table = self.query_one(KeyedTable)
        table.sync(rows)
        table.display = bool(rows)
        note = self.query_one("#service-note", Static)
        if not frame.services:
            note.update(
                Text(
                    "No plan: add services to the config to watch headroom against a budget "
                    "(see: inferdeck example-config).",
                    style=c["dim"],
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )
        note.display = not frame.services
