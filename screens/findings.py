"""The findings view (`F`): what the frame says to look at, ranked, with evidence and the knob."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from console.figures.findings import findings
from console.frame import Frame
from screens.widgets import ReadingScreen, theme_colors


class FindingsScreen(ReadingScreen):
    BODY = "findings-body"
    BINDINGS = [Binding("escape,q,F", "app.pop_screen", "Back")]

    def show(self, frame: Frame) -> None:
        c = theme_colors(self.app.theme_variables)
        found = findings(frame)
        # two columns: what wraps stays right of the severity (hanging indents at any width)
        grid = Table.grid(padding=(0, 1, 0, 0))
        grid.add_column(width=10, no_wrap=True)
        grid.add_column(ratio=1)
        title = Text(f"Findings ({len(found)}) at {frame.taken_at:%H:%M:%S}Z", style="bold")
        if not found:
            grid.add_row(
                "", Text("Nothing stands out: no finding rule fires on this frame.", c["dim"])
            )
        style = {"critical": c["error"], "warning": c["warning"], "info": c["dim"]}
        for f in found:
            grid.add_row(
                Text(f.severity.upper(), style=f"bold {style[f.severity]}"),
                Text.assemble((f"{f.subject}: ", "bold"), f.title),
            )
            for ev in f.evidence:
                grid.add_row(Text("  ·", style=c["dim"]), Text(ev, style=c["dim"]))
            grid.add_row(Text("  →", style="bold"), Text(f.knob))
            grid.add_row("", "")
        self.query_one("#findings-body", Static).update(Group(title, Text(""), grid))
