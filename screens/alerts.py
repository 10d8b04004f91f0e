"""The alerts view (`a`): every line of the node's verdict in full, wrapped, with how long each
has held: the active alerts, the conditions still in their hold, the findings, and the alerts
cleared lately. The dashboard's pane cuts its lines at the terminal's width; this view does not."""

from __future__ import annotations

from datetime import datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from console.frame import Frame
from console.units import counted
from screens.widgets import ReadingScreen, theme_colors


def age(since: datetime | None, now: datetime) -> str:
    """'for 2m 05s' (how long a condition has held at the frame's time)."""
    if since is None:
        return ""
    s = max(0, int((now - since).total_seconds()))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"for {h}h {m:02d}m" if h else f"for {m}m {sec:02d}s" if m else f"for {sec}s"


class AlertsScreen(ReadingScreen):
    """Redrawn on every frame, as the pane is."""

    BODY = "alerts-body"
    BINDINGS = [
        Binding("escape,q,a", "app.pop_screen", "Back"),
        Binding("c", "copy", "Copy for the ticket"),
    ]

    text = ""
    copied = ""  # what the last c copied, said under the lines

    def action_copy(self) -> None:
        """Every line of this view on the clipboard, over SSH too (OSC 52, as Textual writes it;
        terminals that do not allow OSC 52 ignore it)."""
        self.app.copy_to_clipboard(self.text)
        n = self.text.count("\n") + 1 if self.text else 0
        self.copied = f"{n} lines copied to the clipboard (OSC 52)."
        self.notify(self.copied, markup=False)
        if self.deck.frame is not None:
            self.show(self.deck.frame)  # said in the view too, where a toast may not show

    def show(self, frame: Frame) -> None:
        c = theme_colors(self.app.theme_variables)
        now = frame.taken_at
        sev_style = {"critical": c["error"], "warning": c["warning"], "info": c["dim"]}
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)  # severity
        grid.add_column(no_wrap=True)  # source and age
        grid.add_column(ratio=1)  # subject: message (wraps under itself)

        lines: list[str] = []

        def row(sev: str, label: str, subject: str, message: str, dim: bool = False) -> None:
            lines.append(f"{sev.upper()[:4]} {label} {subject}: {message}")
            grid.add_row(
                Text(
                    sev.upper()[:4], style=f"bold {sev_style.get(sev, '')}" if not dim else c["dim"]
                ),
                Text(label, style=c["dim"]),
                Text.assemble(
                    (f"{subject}: ", "bold" if not dim else c["dim"]),
                    (message, c["dim"] if dim else ""),
                ),
            )

        active = [a for a in frame.alerts if a.state == "active"]
        for a in active:
            row(a.severity, f"{a.since:%H:%M:%S} {age(a.since, now)}", a.subject, a.message)
        for v in frame.verdict:
            if v.source != "alert":
                label = f"{v.source} {age(v.since, now)}".strip()
                row(v.severity, label, v.subject, v.message)
        cleared = [a for a in frame.alerts if a.state != "active"]
        for a in cleared:
            when = f"{a.since:%H:%M:%S}–{a.cleared_at:%H:%M:%S}" if a.cleared_at else "cleared"
            row("ok", when, a.subject, a.message, dim=True)
        head = Text(
            f"Alerts at {now:%H:%M:%S}Z: {len(active)} active, "
            f"{sum(1 for v in frame.verdict if v.source == 'pending')} pending, "
            f"{counted(sum(1 for v in frame.verdict if v.source == 'finding'), 'findings')}, "
            f"{len(cleared)} cleared lately",
            style="bold",
        )
        parts: list[RenderableType] = [head, Text("")]
        if grid.row_count:
            parts.append(grid)
        else:
            parts.append(Text("No active alerts, nothing pending, no finding.", style=c["success"]))
        if self.copied:
            parts += [Text(""), Text(self.copied, style="bold")]
        parts += [
            Text(""),
            Text(
                "F shows each finding's evidence and the knob to turn; an alert is raised once its "
                "condition has held for the rule's hold (pending until then).",
                style=c["dim"],
            ),
        ]
        self.text = "\n".join([head.plain, *lines])  # the lines drawn, unwrapped (tests, record)
        self.query_one("#alerts-body", Static).update(Group(*parts))
