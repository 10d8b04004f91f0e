"""Replay: a recording fed back through the live derivation (windows, alerts) as a FrameSource,
with a cursor that plays at 1x/10x/60x, pauses, steps, jumps and seeks."""

from __future__ import annotations

import bisect
import copy
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from console.derive import Deriver
from console.frame import Frame
from console.keyseries import KeySeries
from console.plan import Plan
from console.sample import Sample

CHECKPOINT_EVERY = 120  # samples between saved derivation states (cheap backward seeks)


class ReplaySource:
    def __init__(
        self,
        header: dict[str, Any],
        samples: list[Sample],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not samples:
            raise ValueError("a replay needs at least one sample")
        self.header = header
        self.samples = samples
        self.times = [s.t for s in samples]
        try:
            self.plan = Plan.model_validate(
                {k: v for k, v in (header.get("plan") or {}).items() if k in Plan.model_fields}
            )
        except ValidationError:
            self.plan = Plan()
        self._window_s = float(header.get("window_s", 60.0))
        self.clock = clock
        self.playing = True
        self.speed = 1.0
        self.history = KeySeries()  # every derived frame's key series: trends as they were live
        self.origin = str(header.get("origin") or "a recording")  # what a bundle says it came from
        self._reset()
        self.cursor = samples[0].t  # recorded time shown
        self._last_wall: float | None = None

    def _reset(self) -> None:
        self.deriver = Deriver(self.plan, self._window_s, self.header.get("host"))
        self.history.points.clear()
        self.pos = -1
        self.frame: Frame | None = None
        # sample index -> the derivation's state, its frame and the key series up to it
        self.checkpoints: dict[int, tuple[Deriver, Frame, list[Any]]] = {}

    # --- FrameSource ----------------------------------------------------------------------
    async def poll(self) -> Frame:
        now = self.clock()
        if self.playing and self._last_wall is not None:
            self.cursor = min(self.times[-1], self.cursor + (now - self._last_wall) * self.speed)
            if self.cursor >= self.times[-1]:
                self.playing = False  # the end of the recording
        self._last_wall = now
        return self._frame_at(self._index(self.cursor))

    async def aclose(self) -> None:
        return None

    def forget_mig(self, index: int) -> None:
        """A recording never changes: nothing to read again."""

    @property
    def window_s(self) -> float:
        return self._window_s

    @window_s.setter
    def window_s(self, value: float) -> None:
        """A new window re-derives the recording with it (histories are the same)."""
        self._window_s = value
        target = max(self.pos, 0)
        self._reset()
        self._frame_at(target)

    # --- cursor -----------------------------------------------------------------------------
    def _index(self, t: float) -> int:
        return max(0, bisect.bisect_right(self.times, t) - 1)

    def _frame_at(self, i: int) -> Frame:
        if i < self.pos:
            start = max((k for k in self.checkpoints if k <= i), default=None)
            checkpoints = self.checkpoints
            self._reset()
            self.checkpoints = checkpoints
            if start is not None:  # the state right after deriving sample `start`, and its frame
                deriver, frame, points = checkpoints[start]
                self.deriver, self.frame, self.pos = copy.deepcopy(deriver), frame, start
                self.history.points.extend(points)  # the charts' past, and none of their future
        while self.pos < i:
            self.pos += 1
            self.frame = self.deriver.frame(self.samples[self.pos])
            self.history.add(self.frame)
            if self.pos % CHECKPOINT_EVERY == 0 and self.pos not in self.checkpoints:
                self.checkpoints[self.pos] = (
                    copy.deepcopy(self.deriver),
                    self.frame,
                    list(self.history.points),
                )
        assert self.frame is not None
        return self.frame

    def toggle_play(self) -> None:
        if not self.playing and self.cursor >= self.times[-1]:
            self.cursor = self.times[0]
        self.playing = not self.playing

    def set_speed(self, speed: float) -> None:
        self.speed = speed

    def step(self, n: int) -> None:
        self.playing = False
        i = min(len(self.samples) - 1, max(0, self._index(self.cursor) + n))
        self.cursor = self.times[i]

    def jump(self, seconds: float) -> None:
        self.cursor = min(self.times[-1], max(self.times[0], self.cursor + seconds))

    def seek(self, t: float) -> None:
        self.cursor = min(self.times[-1], max(self.times[0], t))

    def seek_text(self, text: str) -> str | None:
        """Seek to 'HH:MM[:SS]' (UTC, on the recording's days) or an ISO time; the answer to give
        the operator when it is not a time or lies outside the recording, else None."""
        text = text.strip()
        try:
            when = datetime.fromisoformat(text)
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
        except ValueError:
            parts = text.split(":")
            if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
                return f"{text!r} is not a time: type HH:MM[:SS] (UTC) or an ISO date and time."
            h, m, s = (int(p) for p in parts + ["0"] * (3 - len(parts)))
            if h > 23 or m > 59 or s > 59:
                return f"{text!r} is not a time of day: type HH:MM[:SS] (UTC), hours 0-23."
            when = datetime.fromtimestamp(self.cursor, tz=UTC).replace(
                hour=h, minute=m, second=s, microsecond=0
            )
        t = when.timestamp()
        # the frame nearest the time typed (the one at or before it may be a poll early)
        i = min(range(len(self.times)), key=lambda k: abs(self.times[k] - t))
        self.seek(self.times[i])
        if not self.times[0] <= t <= self.times[-1]:
            return f"{text} is outside the recording: it spans {self.span()} (UTC); went to the nearest end."
        return None

    def span(self) -> str:
        def hms(t: float) -> str:
            return datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M:%S")

        return f"{hms(self.times[0])}–{hms(self.times[-1])}"

    def position(self) -> tuple[float, float, float]:
        """(start, cursor, end) in recorded time."""
        return self.times[0], self.cursor, self.times[-1]
