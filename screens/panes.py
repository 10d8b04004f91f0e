"""The alert pane. It draws from a Frame only."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from console.frame import Frame
from screens.widgets import Pane


class AlertPane(Pane):
    def __init__(self) -> None:
        super().__init__("Alerts", id="alerts")

    def compose(self) -> ComposeResult:
        yield Static("", id="alert-lines")

    def show(self, frame: Frame) -> None:
        c = self.colors()
        self.border_title = f"Alerts ({len(frame.alerts)})"
        if not frame.alerts:
            text = Text("No active alerts.", style=c["success"])
        else:
            lines = []
            for a in frame.alerts:
                sev = {"critical": ("CRIT", c["error"]), "warning": ("WARN", c["warning"])}.get(a.severity, ("INFO", ""))
                line = Text.assemble((f"{sev[0]} ", f"bold {sev[1]}"), (f"{a.since:%H:%M:%S} ", c["dim"]),
                                     (f"{a.subject}: ", "bold"), a.message, no_wrap=True, overflow="ellipsis")
                lines.append(line)
            text = Text("\n").join(lines)
        self.query_one("#alert-lines", Static).update(text)
