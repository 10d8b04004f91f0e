"""The live console's FrameSource: each poll the poller's Sample (read, nothing derived), written
to the recording when there is one, then derived into a Frame, as a replay derives its samples."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from console.figures.alerts import AlertBook
from console.figures.derive import Deriver
from console.figures.plan import Plan
from console.frame import Frame
from console.read.nvml import NvmlReader
from console.read.poller import EngineTarget, Poller
from console.read.recording import Recorder
from console.sample import Sample


class LiveSource:
    """A ``FrameSource`` over a ``Poller`` (acquires), a ``Deriver`` (derives) and, when set, a
    ``Recorder`` (appends every Sample and the timeline's changes)."""

    def __init__(self, poller: Poller, deriver: Deriver, recorder: Recorder | None = None) -> None:
        self.poller = poller
        self.deriver = deriver
        self.recorder = recorder
        self.last_sample: Sample | None = None
        self.last_frame: Frame | None = None

    @classmethod
    def reading(
        cls,
        targets: list[EngineTarget],
        nvml: NvmlReader | None,
        window_s: float = 60.0,
        host: str | None = None,
        plan: Plan | None = None,
        clock: Callable[[], float] | None = None,
    ) -> LiveSource:
        """A source that reads these engines and GPUs, derived under ``plan`` over ``window_s``."""
        return cls(Poller(targets, nvml, clock=clock), Deriver(plan, window_s, host))

    @property
    def plan(self) -> Plan:
        return self.deriver.plan

    @property
    def alerts(self) -> AlertBook:
        return self.deriver.alerts

    @property
    def window_s(self) -> float:
        return self.deriver.window_s

    @window_s.setter
    def window_s(self, value: float) -> None:
        self.deriver.window_s = value

    def forget_mig(self, index: int) -> None:
        """Read GPU ``index``'s MIG layout afresh at the next poll (after a re-layout)."""
        self.poller.forget_mig(index)

    async def poll(self) -> Frame:
        sample = self.last_sample = await self.poller.acquire()
        rec = self.recorder
        change = sample.config
        if rec is not None and change is not None and change.plan is not None:
            rec.header["plan"] = {**rec.header.get("plan", {}), **change.plan}
        if rec is not None:
            await asyncio.to_thread(rec.write, sample)
        # derived on a worker thread, as pages are parsed: a key pressed meanwhile is answered
        # from the last Frame instead of waiting for this one (polls run one at a time, and
        # screens read Frames only, never the deriver's state)
        self.last_frame = await asyncio.to_thread(self.deriver.frame, sample)
        if rec is not None:  # the timeline's changes, after the frame they came from
            await asyncio.to_thread(rec.write_timeline, self.deriver.events, sample.t)
        return self.last_frame

    async def aclose(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        await self.poller.aclose()
