"""The replay's time bar and its controls: where the cursor is in the recording, play/pause,
steps, jumps, speed and go-to-time. It changes the replay source and tells the app to redraw."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.text import Text
from textual.message import Message
from textual.widgets import Static

from screens.snapshots import PromptScreen

if TYPE_CHECKING:
    from console.read.replay import ReplaySource

BAR_WIDTH = 30


def _hms(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M:%S")


class ReplayBar(Static):
    class Moved(Message):
        """The cursor moved: the app derives and draws the frame there."""

    def __init__(self, source: ReplaySource | None) -> None:
        super().__init__("", id="timebar")
        self.source = source
        self.display = source is not None

    def draw(self) -> None:
        r = self.source
        if r is None:
            return
        start, cur, end = r.position()
        frac = (cur - start) / (end - start) if end > start else 1.0
        filled = round(frac * BAR_WIDTH)
        self.update(
            Text.assemble(
                (f" {'▶' if r.playing else '⏸'} {r.speed:g}x ", "bold"),
                (f"{_hms(cur)}Z ", "bold"),
                "█" * filled + "░" * (BAR_WIDTH - filled),
                f" {_hms(start)}–{_hms(end)}Z  ",
                (f"{r.indexing()}  " if r.indexing() else "", "yellow"),
                (
                    f"derived from {_hms(r.warmed_from)}Z  "
                    if r.warmed_from is not None and r.warmed_from > start
                    else "",
                    "dim",
                ),
                ("p play/pause  [ ] step  , . ±1 min  1 2 3 speed  g go to", "dim"),
            )
        )

    def step(self, n: int) -> None:
        if self.source is not None:
            self.source.step(n)
            self.post_message(self.Moved())

    def jump(self, seconds: float) -> None:
        if self.source is not None:
            self.source.jump(seconds)
            self.post_message(self.Moved())

    def speed(self, speed: float) -> None:
        if self.source is not None:
            self.source.set_speed(speed)
            self.draw()

    def toggle(self) -> None:
        if self.source is not None:
            self.source.toggle_play()
            self.draw()

    def seek(self) -> None:
        source = self.source
        if source is None:
            return

        def go(text: str | None) -> None:
            if text:
                problem = source.seek_text(text)
                if problem:
                    self.app.notify(problem, severity="warning", markup=False)
                self.post_message(self.Moved())

        self.app.push_screen(
            PromptScreen("Go to time (HH:MM[:SS] UTC, or an ISO date and time)", "12:34:56"), go
        )
