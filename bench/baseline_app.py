"""The peer baseline for bench/tui_cost.py: a minimal Textual app redrawing one line at 1 Hz."""

from __future__ import annotations

import time

from textual.app import App, ComposeResult
from textual.widgets import Footer, Static


class Baseline(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("baseline ready", id="line")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(
            1.0, lambda: self.query_one("#line", Static).update(f"baseline ready {time.time():.0f}")
        )


if __name__ == "__main__":
    Baseline().run()
