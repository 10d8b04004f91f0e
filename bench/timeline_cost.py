"""What the incident timeline costs: the live extractor per poll, and an hour's timeline read back.

    python bench/timeline_cost.py [--minutes 60]

The demo node is polled by the real Poller at 1 s of simulated time (the clock moved by hand)
with a Recorder attached, for ``--minutes``: steady for a while, then an incident (a power cap, an
XID 13, one engine overloaded, an XID 79) and back. Measured:

- the live extractor (``EventBook.observe``) per poll, its thread's CPU time inside the real
  live source's deriver, on the steady polls and the incident's; beside it the process's CPU for the
  whole poll (the simulated engines' servers included);
- ``inferdeck timeline`` on the hour: the recorded timeline read back (``Recording`` and
  ``Replayed``), and beside it the same timeline derived again from the samples (what a
  recording without timeline lines takes), and the ratio.

Targets (issue "incident timeline"): under 0.1 ms a poll live; under 1 s for an hour's timeline.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.figures.timeline import EventBook, lines  # noqa: E402
from console.read.live import LiveSource  # noqa: E402
from console.read.nvml import NvmlReader  # noqa: E402
from console.read.recording import Recorder, Recording  # noqa: E402
from console.read.replay import ReplaySource  # noqa: E402
from console.settings import demo_settings  # noqa: E402
from console.sim.demo import start_demo  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


class TimedBook(EventBook):
    """The live extractor, its every observe timed (the deriver's own, inside the live); beside
    it a second book that observes the same frame at once after, timed too: the same work with
    its code and data just run (what the poll's other 17 ms leave cold is the difference)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []
        self.again = EventBook()
        self.warm: list[float] = []

    def observe(self, frame, points=(), states=()):  # type: ignore[no-untyped-def]
        began = time.thread_time()  # its own CPU: the engines' servers share the process
        out = super().observe(frame, points, states)
        self.times.append(time.thread_time() - began)
        began = time.thread_time()
        self.again.observe(frame, points, states)
        self.warm.append(time.thread_time() - began)
        return out


async def record(
    out: Path, minutes: int
) -> tuple[list[float], list[float], list[float], list[str]]:
    clock = Clock()
    settings = demo_settings()
    node = start_demo(settings, clock=clock)
    live = LiveSource.reading(
        node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings, clock=clock
    )
    book = TimedBook()
    live.deriver.events = book
    header = {  # as `inferdeck record` writes it (console/compose.py)
        "window_s": settings.window_s,
        "plan": settings.model_dump(mode="json", exclude={"engines"}),
    }
    live.recorder = Recorder(out, live.deriver.host, header)
    derive: list[float] = []
    phase: list[str] = []
    polls = minutes * 60
    start, stop = polls // 3, polls // 3 + 15 * 60  # a 15-minute incident a third of the way in
    name = next(iter(node.engines))
    steady = replace(node.engines[name].model.spec)
    try:
        for k in range(polls):
            clock.t += 1.0
            if k == start:
                node.nvml.gpus[0].enforced_limit_w = 150.0
            if k == start + 60:
                node.nvml.inject_xid(0, 13)
                spec = node.engines[name].model.spec
                spec.rate_rps, spec.max_num_seqs = spec.rate_rps * 8, 32
            if k == start + 300:
                node.nvml.inject_xid(0, 79)
            if k == stop:
                node.nvml.gpus[0].enforced_limit_w = None
                node.engines[name].model.spec = replace(steady)
            began = time.process_time()
            await live.poll()
            derive.append(time.process_time() - began)
            phase.append("incident" if start <= k < stop + 120 else "steady")
    finally:
        await live.aclose()
        live.recorder.close()
        node.stop()
    return book.times, book.warm, derive, phase


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=int, default=60)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rec"
        print(f"recording {args.minutes} min of the demo node at 1 s (simulated time)…")
        observe, warm, polls, phase = asyncio.run(record(out, args.minutes))
        for which in ("steady", "incident"):
            o = [x for x, p in zip(observe, phase, strict=True) if p == which]
            w = [x for x, p in zip(warm, phase, strict=True) if p == which]
            d = [x for x, p in zip(polls, phase, strict=True) if p == which]
            o_sorted = sorted(o)
            print(
                f"live extractor, {which} polls ({len(o)}): median {statistics.median(o) * 1e3:.3f} ms, "
                f"p99 {o_sorted[int(len(o) * 0.99)] * 1e3:.3f} ms, max {max(o) * 1e3:.3f} ms "
                f"(target < 0.1 ms); a whole poll {statistics.median(d) * 1e3:.1f} ms median, the "
                f"extractor {statistics.median(o) / statistics.median(d) * 100:.2f} % of it; "
                f"the same work at once again (warm) {statistics.median(w) * 1e3:.3f} ms"
            )
        began = time.perf_counter()
        rec = Recording(out)
        rec.done.wait()
        source = ReplaySource(rec.header, rec)
        assert source.recorded is not None
        tl = source.recorded.at(rec.times[-1])
        read_s = time.perf_counter() - began
        assert tl is not None
        for line in lines(tl, None, 80):
            print("   ", line[:150])
        began = time.perf_counter()
        derived = ReplaySource(rec.header, rec).last_frame().timeline
        derive_s = time.perf_counter() - began
        same = derived == tl
        print(
            f"an hour's timeline ({len(rec)} frames, {len(tl.events)} events, {tl.folded} folded): "
            f"read back {read_s:.2f} s (target < 1 s); derived again {derive_s:.1f} s; "
            f"{derive_s / read_s:.0f}x faster; the two {'identical' if same else 'DIFFER'}"
        )


if __name__ == "__main__":
    main()
