"""Alert hysteresis, and the demo plan under the simulator's overload profile, with a
controllable clock: memory, KV and queue alerts rise within their `for` durations and clear
after the load ends, with no flapping in between."""

import asyncio

import pytest

from console.figures.alerts import AlertBook, Condition
from console.read.live import LiveSource
from console.read.nvml import NvmlReader
from console.settings import demo_settings
from console.sim.demo import start_demo


def test_for_and_clear_durations_prevent_flapping():
    book = AlertBook()
    c = Condition("q", "warning", "svc", "queue", "queue", for_s=60, clear_s=30)
    assert book.update([c], 0) == []
    assert book.update([c], 59) == []
    (a,) = book.update([c], 60)
    assert (
        a.state == "active"
        and a.since.timestamp() == 0
        and [x.key for x in book.raised_now] == ["q"]
    )
    assert book.update([], 70)[0].state == "active"  # gone 10 s: still active (clear_s 30)
    assert (
        book.update([c], 75)[0].state == "active" and book.raised_now == []
    )  # back: no second raise
    assert book.update([], 80)[0].state == "active"
    (cleared,) = book.update([], 110)
    assert cleared.state == "cleared" and cleared.cleared_at.timestamp() == 110
    assert book.update([c], 111) == [cleared]  # a new condition starts its own `for` again


def test_a_blip_shorter_than_for_never_raises():
    book = AlertBook()
    c = Condition("k", "critical", "s", "m", "kv", for_s=15, clear_s=30)
    for t in range(0, 14):
        assert book.update([c], t) == []
    assert book.update([], 14) == [] and book.update([c], 15) == []


class Clock:
    def __init__(self):
        self.t = 1_800_000_000.0

    def __call__(self):
        return self.t


@pytest.mark.slow
def test_overload_raises_memory_kv_queue_and_they_clear():
    clock = Clock()
    settings = demo_settings()
    node = start_demo(settings, clock=clock)
    live = LiveSource.reading(
        node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings, clock=clock
    )
    rules = settings.alerts
    history: list[tuple[float, set[str]]] = []
    prefill: list[float] = []  # polls where a late first token was called prefill

    async def run(seconds):
        for _ in range(seconds):
            clock.t += 1.0
            frame = await live.poll()
            history.append((clock.t, {a.key for a in frame.alerts if a.state == "active"}))
            if any("prefill, not load" in v.message for v in frame.verdict):
                prefill.append(clock.t)
        return frame

    async def scenario():
        try:
            await run(90)
            steady_end = clock.t
            node.engines["llama-8b-a"].model.set_profile("overload")
            over_start = clock.t
            frame = await run(150)
            node.engines["llama-8b-a"].model.set_profile("steady")
            calm_start = clock.t
            await run(240)
            return frame, steady_end, over_start, calm_start
        finally:
            await live.aclose()

    try:
        frame, steady_end, over_start, calm_start = asyncio.run(scenario())
    finally:
        node.stop()
    keys = ("memory:llama-8b-a", "kv:llama-8b-a", "queue:llama-8b-a")
    assert not any(k in active for _, active in history if _ <= steady_end for k in keys)

    def first_raise(key):
        return next(t for t, active in history if key in active)

    for key in keys:
        raised = first_raise(key)
        assert over_start < raised < calm_start, key
    # within the rule's `for` of the condition first appearing (conditions need load to build first)
    assert first_raise("queue:llama-8b-a") - over_start <= rules.queue.for_s + 30
    kv_alert = next(a for a in frame.alerts if a.key == "kv:llama-8b-a")
    assert kv_alert.severity == "critical" and "KV cache" in kv_alert.message
    mem_alert = next(a for a in frame.alerts if a.key == "memory:llama-8b-a")
    assert "planned margin 2.0 GiB" in mem_alert.message
    # cleared after the load ends, and each raised once and cleared once: no flapping
    for key in keys:
        states = [key in active for _, active in history]
        transitions = sum(1 for a, b in zip(states, states[1:], strict=False) if a != b)
        assert transitions == 2, (key, transitions)
        assert key not in history[-1][1]
    # its queue drained in the calm: the first tokens late from it were load, never "prefill"
    assert prefill == [], (prefill[0] - calm_start, len(prefill))
    # the other services were never disturbed
    assert not any(
        k.endswith("llama-8b-b") or k.endswith("llama-70b")
        for _, active in history
        for k in active
        if k.split(":")[0] in ("memory", "kv", "queue")
    )


@pytest.mark.slow
@pytest.mark.integration
def test_check_demo_exit_codes():
    import subprocess
    import sys

    from tests.conftest import ROOT

    res = subprocess.run(
        [sys.executable, "-m", "console", "check", "--demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and res.stdout.startswith("INFERDECK OK - ")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "console",
            "check",
            "--demo",
            "--engine",
            "http://127.0.0.1:9/metrics",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and res.stdout.startswith(
        "INFERDECK CRITICAL - 127.0.0.1:9: engine down"
    )


def test_a_mig_re_cut_is_a_recent_event_for_ten_minutes():
    """A GPU whose MIG layout changed between polls raises an info event (before -> after) that
    snapshot.md lists under Recent events; the first reading and a steady layout raise none."""
    from console.figures.headroom import LAYOUT_EVENT_S, HeadroomState, evaluate
    from console.figures.plan import Plan
    from console.frame import GpuSource
    from console.out.snapshot import to_markdown
    from tests.frames import node_frame

    frame = node_frame()
    gpus = frame.gpus
    g = next(g for g in gpus if g.mig is not None and g.mig.current and g.mig.devices)
    state, book, source = HeadroomState(), AlertBook(), GpuSource(kind="nvml")

    def events(gpus, t):
        _, conds = evaluate(Plan(), source, gpus, [], state, t)
        return [a for a in book.update(conds, t) if a.key.startswith("mig-layout:")]

    assert events(gpus, 1000.0) == [] and events(gpus, 1001.0) == []
    one = g.mig.devices[:1]
    recut = [
        x.model_copy(update={"mig": x.mig.model_copy(update={"devices": one})}) if x is g else x
        for x in gpus
    ]
    (ev,) = events(recut, 1002.0)
    assert ev.severity == "info" and ev.subject == f"GPU {g.index}"
    before = ",".join(
        f"{d.profile}@{d.placement_start}"
        for d in sorted(g.mig.devices, key=lambda d: d.placement_start or 0)
    )
    assert ev.message.endswith(f"{before} -> {one[0].profile}@{one[0].placement_start}")
    md = to_markdown(frame.model_copy(update={"alerts": [ev]}))
    assert "MIG layout changed" in md.split("## Recent events")[1]
    assert [e.state for e in events(recut, 1002.0 + LAYOUT_EVENT_S - 1)] == ["active"]
    assert all(e.state == "cleared" for e in events(recut, 1002.0 + LAYOUT_EVENT_S + 1))
