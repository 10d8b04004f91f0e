"""The demo's Frame, golden: the simulated node (fixed clock, seeded traffic) polled 40 times gives
exactly the Frame JSON kept in tests/golden/demo-frame.json. A refactor that changes a figure, a
field name or a default shows up here; a deliberate change rewrites the file
(INFERDECK_GOLDEN=update) and says why in its commit."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time

import pytest

from console.read.live import LiveSource
from console.read.nvml import NvmlReader
from console.settings import demo_settings
from console.sim.demo import start_demo
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden" / "demo-frame.json"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def demo_frame_json(polls: int = 40) -> str:
    clock = Clock(1_780_000_000.0)
    settings = demo_settings()
    node = start_demo(settings, clock=clock)
    try:
        nvml = NvmlReader(node.nvml, simulated=True, clock=clock)
        live = LiveSource.reading(
            node.targets(),
            nvml,
            window_s=settings.window_s,
            host="golden",
            plan=settings,
            clock=clock,
        )

        async def run():
            frame = None
            for _ in range(polls):
                clock.t += 1.0
                frame = await live.poll()
            await live.aclose()
            return frame

        frame = asyncio.run(run())
    finally:
        node.stop()
    text = json.dumps(json.loads(frame.to_json()), indent=1, sort_keys=True) + "\n"
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)  # the simulators' ports
    return re.sub(r'"scrape_s": [0-9.e-]+', '"scrape_s": 0', text)  # wall time of each scrape


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # tariffs by hour of the local day
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.slow
def test_the_demo_frame_is_exactly_the_golden_one(utc):
    got = demo_frame_json()
    if os.environ.get("INFERDECK_GOLDEN") == "update":
        GOLDEN.write_text(got, encoding="utf-8")
    assert got == GOLDEN.read_text(encoding="utf-8")
