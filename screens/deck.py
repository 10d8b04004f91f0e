"""What the console's screens and the app ask of each other, as protocols: a screen reads the app
as a ``Deck`` (never importing the app, which imports the screens), the app draws each new frame
on any screen that is a ``FrameView``, and the app's source is a ``FrameSource``."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from console.figures.keyseries import KeySeries
from console.figures.plan import Plan
from console.frame import Frame


class FrameSource(Protocol):
    """What the console needs of a source: frames, the plan behind them, a window it may change,
    and a way to have a GPU's MIG layout read afresh (``console.read.live.LiveSource`` and
    ``console.read.replay.ReplaySource`` both are one)."""

    window_s: float

    @property
    def plan(self) -> Plan: ...

    async def poll(self) -> Frame: ...
    async def aclose(self) -> None: ...
    def forget_mig(self, index: int) -> None: ...


class Deck(Protocol):
    """The app as its screens read it: the frame drawn last, the key-series history the charts
    read, whether changes are refused, its source (the plan), the header, and a GPU's MIG layout
    to read afresh after a re-cut."""

    frame: Frame | None
    keys: KeySeries
    read_only: bool
    source: FrameSource

    def draw_status(self) -> None: ...
    def forget_mig(self, index: int) -> None: ...


@runtime_checkable
class FrameView(Protocol):
    """A screen drawn from each frame the app receives."""

    def show(self, frame: Frame) -> None: ...
