"""The findings view (`F`): what the frame says to look at, ranked, with evidence and the knob."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.findings import findings
from console.frame import Frame
from screens.widgets import DeckScreen, KeyBar, Quiet, theme_colors


class FindingsScreen(DeckScreen):
    AUTO_FOCUS = "#detail"  # PageDown, End and the arrows scroll the view at once
    BINDINGS = [Binding("escape,q,F", "app.pop_screen", "Back")]

    def compose(self) -> ComposeResult:
        yield Quiet(id="status")  # the header, as on the dashboard
        with VerticalScroll(id="detail"):
            yield Quiet(id="findings-body")
        yield KeyBar()

    def on_mount(self) -> None:
        if self.deck.frame is not None:
            self.show(self.deck.frame)

    def show(self, frame: Frame) -> None:
        c = theme_colors(self.app.theme_variables)
        found = findings(frame)
        t = Text()
        t.append(f"Findings ({len(found)}) at {frame.taken_at:%H:%M:%S}Z\n\n", style="bold")
        if not found:
            t.append("Nothing stands out: no finding rule fires on this frame.\n", style=c["dim"])
        style = {"critical": c["error"], "warning": c["warning"], "info": c["dim"]}
        for f in found:
            t.append(f"{f.severity.upper():<9}", style=f"bold {style[f.severity]}")
            t.append(f"{f.subject}: ", style="bold")
            t.append(f"{f.title}\n")
            for ev in f.evidence:
                t.append(f"         · {ev}\n", style=c["dim"])
            t.append("         → ", style="bold")
            t.append(f"{f.knob}\n\n")
        self.query_one("#findings-body", Static).update(t)
