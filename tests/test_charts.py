"""Bundle charts: the demo under overload, sampled for minutes of simulated time, writes SVG charts
of its key series with the SLO lines and every alert marked at its time, linked from snapshot.md."""

from __future__ import annotations

import asyncio
import re

import pytest

from console.figures.charts import bundle_charts
from console.figures.keyseries import KeySeries
from console.out.bundle import write_bundle
from console.read.live import LiveSource
from console.read.nvml import NvmlReader
from console.settings import demo_settings
from console.sim.demo import start_demo
from tests.test_golden import Clock


def overloaded_demo(polls: int):
    clock = Clock(1_780_000_000.0)
    settings = demo_settings()
    node = start_demo(settings, profiles={"llama-8b-a": "overload"}, clock=clock)
    keys = KeySeries()
    try:
        nvml = NvmlReader(node.nvml, simulated=True, clock=clock)
        live = LiveSource.reading(node.targets(), nvml, plan=settings, host="demo", clock=clock)

        async def run():
            frame = None
            for _ in range(polls):
                clock.t += 1.0
                frame = await live.poll()
                keys.add(frame)
            await live.aclose()
            return frame

        frame = asyncio.run(run())
    finally:
        node.stop()
    return frame, keys


@pytest.mark.slow
def test_overload_bundle_charts_mark_the_alert_at_its_time(tmp_path):
    frame, keys = overloaded_demo(150)
    alerts = [a for a in frame.alerts if a.subject in ("llama-8b-a",)]
    assert alerts, [a.key for a in frame.alerts]  # the overload raised something on the service
    path = write_bundle(tmp_path, frame, "INC-7", keys.export())
    charts = sorted(p.name for p in (path / "charts").iterdir())
    assert "engine-llama-8b-a-latency.svg" in charts and "gpu1-power.svg" in charts
    svg = (path / "charts" / "engine-llama-8b-a-load.svg").read_text()
    marked = {float(t) for t in re.findall(r'class="alert" data-t="([0-9.]+)"', svg)}
    for a in alerts:
        assert round(a.since.timestamp(), 3) in marked, (a.key, a.since)
    latency = (path / "charts" / "engine-llama-8b-a-latency.svg").read_text()
    assert "TTFT SLO" in latency and 'class="limit"' in latency  # the service's 1 s TTFT target
    assert latency.count('class="series"') >= 2
    md = (path / "snapshot.md").read_text()
    assert "## Charts" in md and "(charts/engine-llama-8b-a-latency.svg)" in md
    # a chart of another subject carries no mark of this service's alerts
    other = (path / "charts" / "engine-llama-70b-load.svg").read_text()
    assert 'class="alert"' not in other or all(a.subject == "llama-70b" for a in frame.alerts)


def test_no_history_no_charts(tmp_path):
    frame, _ = overloaded_demo(2)
    assert bundle_charts({"t": [], "series": {}}, frame) == {}
    path = write_bundle(tmp_path, frame, "", {})
    assert not (path / "charts").exists()
    assert "## Charts" not in (path / "snapshot.md").read_text()
