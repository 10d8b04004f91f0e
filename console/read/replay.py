"""Replay: a recording fed back through the live derivation (windows, alerts) as a FrameSource,
with a cursor that plays at 1x/10x/60x, pauses, steps, jumps and seeks."""

from __future__ import annotations

import bisect
import copy
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from console.figures.derive import Deriver
from console.figures.keyseries import KeySeries
from console.figures.plan import Plan, plan_of
from console.figures.timeline import Replayed
from console.frame import Frame
from console.sample import Sample

CHECKPOINT_EVERY = 120  # samples between saved derivation states (cheap backward seeks)
MAX_CHECKPOINTS = 24  # kept (the oldest dropped): memory does not grow with the recording
# a far seek derives from a window and this before the frame, not from the start: the frame's
# windowed figures are whole, and a minute of trend behind it drawn as live
WARM_EXTRA_S = 30.0


class ReplaySource:
    def __init__(
        self,
        header: dict[str, Any],
        samples: Sequence[Sample],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not samples:
            raise ValueError("a replay needs at least one sample")
        self.header = header
        self.samples = samples
        # a lazy Recording's times grow while its index builds; a list's are taken here
        got = getattr(samples, "times", None)
        self.times: list[float] = got if isinstance(got, list) else [s.t for s in samples]
        self.plan = _plan(header.get("plan"))
        # the plans the console read again from its config file while it recorded: a far jump
        # derives with the plan in force there
        got_log = getattr(samples, "config_log", None)
        self.config_log: list[tuple[float, dict[str, Any]]] = (
            got_log
            if isinstance(got_log, list)
            else [(s.t, s.config.plan) for s in samples if s.config and s.config.plan]
        )
        self._window_s = float(header.get("window_s", 60.0))
        self.clock = clock
        self.playing = True
        self.speed = 1.0
        self.history = KeySeries()  # every derived frame's key series: trends as they were live
        self.origin = str(header.get("origin") or "a recording")  # what a bundle says it came from
        # the timeline as the live console recorded it: whole at any time the cursor goes to
        # (a far jump derives frames from shortly before it, so their own timeline starts there)
        log = getattr(samples, "timeline_log", None)
        self.recorded = Replayed(log) if log is not None else None
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
        self.warmed_from: float | None = None  # a far seek: derived from this recorded time

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
        start = max((k for k in self.checkpoints if k <= i), default=None)
        # far ahead of the derivation and of any checkpoint: derive from a window before the
        # frame (its windowed figures whole, longer ones partial and marked so), not from here
        warm = self._index(self.times[i] - self._window_s - WARM_EXTRA_S)
        # the nearest place the derivation could go on from: where it is (when not past the
        # frame) or the last checkpoint before the frame
        near = max(self.pos if self.pos <= i else -1, start if start is not None else -1)
        if warm > near + 1 and i - near > 1.25 * (i - warm):  # (where it saves a good part)
            checkpoints = self.checkpoints
            self._reset()
            self.checkpoints = checkpoints
            self.pos = warm - 1
            self.warmed_from = self.times[warm]
            at = bisect.bisect_left(self.config_log, self.times[warm], key=lambda c: c[0])
            if at:
                self.deriver.plan = _plan(self.config_log[at - 1][1])
        elif i < self.pos:
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
                while len(self.checkpoints) > MAX_CHECKPOINTS:
                    del self.checkpoints[next(iter(self.checkpoints))]
        assert self.frame is not None
        if self.recorded is not None and self.recorded.log:
            tl = self.recorded.at(self.times[i])
            if tl is not None and tl is not self.frame.timeline:
                self.frame = self.frame.model_copy(update={"timeline": tl})
        return self.frame

    def last_frame(self) -> Frame:
        """The recording derived from its first sample to its last by a deriver of its own (the
        cursor's left alone): its last Frame, holding the whole recording's timeline, as the live
        console made it (``recorded`` has it without deriving, where the recording holds it)."""
        deriver = Deriver(self.plan, self._window_s, self.header.get("host"))
        frame = None
        for sample in self.samples:
            frame = deriver.frame(sample)
        assert frame is not None
        return frame

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

    def indexing(self) -> str | None:
        """While a lazy recording's index builds, how far it is (the end grows meanwhile);
        then what its reading found damaged, if anything."""
        progress = getattr(self.samples, "progress", None)
        if progress is not None and progress() < 1.0:
            return f"reading the recording: {progress() * 100:.0f} %"
        notes = getattr(self.samples, "notes", None) or self.header.get("truncated") or []
        if notes:
            return str(notes[0]) + (f" (+{len(notes) - 1} more)" if len(notes) > 1 else "")
        return None

    def position(self) -> tuple[float, float, float]:
        """(start, cursor, end) in recorded time."""
        return self.times[0], self.cursor, self.times[-1]


def _plan(doc: object) -> Plan:
    """A recorded plan (a header holds the whole config but its engines), else the default."""
    try:
        return plan_of(doc)
    except ValidationError:
        return Plan()
