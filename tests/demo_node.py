"""The demo node on a clock the test moves by hand, and the live source over it with its plan."""

from __future__ import annotations

from console.read.live import LiveSource
from console.read.nvml import NvmlReader
from console.settings import demo_settings
from console.sim.demo import DemoNode, start_demo


def demo_on(clock: list[float]) -> tuple[DemoNode, LiveSource]:
    """Start the demo node reading ``clock[0]``; the caller stops it (``node.stop()``) and closes
    the source (``await live.aclose()``)."""
    settings = demo_settings()
    node = start_demo(settings, clock=lambda: clock[0])
    live = LiveSource.reading(
        node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings,
        clock=lambda: clock[0],
    )  # fmt: skip
    return node, live
