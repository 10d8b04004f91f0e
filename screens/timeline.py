"""The timeline view (`t`): what happened, in order, the first sign marked; it follows new frames
(in a replay, the time bar)."""

from __future__ import annotations

from datetime import datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from console.figures.timeline import MAX_EVENTS, event_text, span_text
from console.frame import Frame, Timeline
from screens.widgets import ReadingScreen, theme_colors


class TimelineScreen(ReadingScreen):
    BODY = "timeline-body"
    BINDINGS = [Binding("escape,q,t", "app.pop_screen", "Back")]

    def show(self, frame: Frame) -> None:
        body = self.query_one("#timeline-body", Static)
        body.update(timeline_body(frame.timeline, frame.taken_at, self.app.theme_variables))


def timeline_body(tl: Timeline | None, until: datetime, theme: dict[str, str]) -> RenderableType:
    """The timeline as the view draws it: a title, then the time and what happened, wrapped
    under itself (never under the time), the first sign marked."""
    c = theme_colors(theme)
    if tl is None:
        return Text("No timeline in this frame.", style=c["dim"])
    n = len(tl.events)
    head = f"Timeline since {tl.since:%H:%M:%S}Z: {n} event{'s' * (n != 1)}"
    if tl.folded:
        head += f", {tl.folded} repeats folded into them (×N)"
    title = Text(head, style="bold")
    grid = Table.grid(padding=(0, 1, 0, 0))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    style = {"critical": c["error"], "warning": c["warning"], "info": c["dim"]}
    if tl.dropped:
        grid.add_row(
            "",
            Text(f"… {tl.dropped} older events dropped (the last {MAX_EVENTS} are kept)",
                 style=c["dim"]),
        )  # fmt: skip
    if not tl.events:
        grid.add_row("", Text("Nothing has happened: no event since then.", style=c["dim"]))
    for e in tl.events:
        mark = "▶ " if e.first_sign else "  "
        grid.add_row(
            Text(mark + span_text(e, until), style=f"bold {style[e.severity]}"),
            Text.assemble(
                (f"{e.subject}: ", "bold"),
                event_text(e),
                ("  ← first sign" if e.first_sign else "", f"bold {c['error']}"),
            ),
        )
    return Group(title, Text(""), grid)
