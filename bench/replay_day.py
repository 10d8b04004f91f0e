"""Replaying a day: a 24-hour recording at 1 s of the demo node (86,400 frames), opened the way
`inferdeck replay` opens it (console/read/recording.py `Recording`, lazy, and console/read/replay.py).

    python bench/replay_day.py [--hours 24] [--keep DIR]

The demo node is polled by the real Poller at 1 s of simulated time (the clock moved by hand)
with a Recorder attached for 30 minutes; the day is those 30 minutes written again with their
times shifted (the recorder's own line format and members). Prints the time to the first frame,
to a frame anywhere (seeks), the index build, and RSS; beside them the whole-file reader the
replay used before (`recording.read`, every frame decoded up front) on one hour of the same
recording, and the ratio. Targets (issue "hard to starve"): first frame < 1 s, seek < 1 s,
RSS < 300 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import random
import re
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.read.live import LiveSource  # noqa: E402
from console.read.nvml import NvmlReader  # noqa: E402
from console.read.recording import MEMBER_FRAMES, Recorder, Recording, read  # noqa: E402
from console.read.replay import ReplaySource  # noqa: E402
from console.settings import demo_settings  # noqa: E402
from console.sim.demo import start_demo  # noqa: E402

_T = re.compile(rb'"t":(-?[0-9][0-9.eE+-]*)')


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


async def record_block(out: Path, polls: int) -> Path:
    clock = Clock()
    settings = demo_settings()
    node = start_demo(settings, clock=clock)
    live = LiveSource.reading(
        node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings, clock=clock
    )
    live.recorder = Recorder(out, "demo", {"window_s": settings.window_s})
    try:
        for _ in range(polls):
            clock.t += 1.0
            await live.poll()
    finally:
        await live.aclose()
        live.recorder.close()
        node.stop()
    assert live.recorder.path is not None
    return live.recorder.path


def tile(block: Path, out: Path, frames: int) -> None:
    """``frames`` frames: the block's lines again and again, every time shifted by its span."""
    lines = gzip.decompress(block.read_bytes()).split(b"\n")
    head = lines[0]
    body = [x for x in lines if x.startswith(b'{"t":')]
    t0 = float(_T.search(body[0]).group(1))  # type: ignore[union-attr]
    span = float(_T.search(body[-1]).group(1)) - t0 + 1.0  # type: ignore[union-attr]
    with out.open("wb") as raw:
        comp, n = None, 0
        for k in range(frames):
            if n % MEMBER_FRAMES == 0:
                if comp is not None:
                    raw.write(comp.flush())
                comp = zlib.compressobj(6, zlib.DEFLATED, 31)
                raw.write(comp.compress(head + b"\n"))
            shift = (k // len(body)) * span
            line = body[k % len(body)]
            if shift:
                line = _T.sub(
                    lambda m, d=shift: b'"t":' + repr(float(m.group(1)) + d).encode(), line
                )
            raw.write(comp.compress(line + b"\n"))  # type: ignore[union-attr]
            n += 1
        if comp is not None:
            raw.write(comp.flush())


def open_lazy(path: Path) -> tuple[float, ReplaySource, Recording]:
    began = time.perf_counter()
    rec = Recording(path)
    src = ReplaySource(rec.header, rec)
    asyncio.run(src.poll())
    return time.perf_counter() - began, src, rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--keep", metavar="DIR", help="write the recordings here (kept)")
    ap.add_argument("--measure", nargs=2, metavar=("DAY", "HOUR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        measure(Path(args.measure[0]), Path(args.measure[1]))
        return
    where = Path(args.keep or tempfile.mkdtemp(prefix="inferdeck-replay-"))
    where.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    block = asyncio.run(record_block(where / "block", 1800))
    day = where / "day" / "demo-20270115-000000.idrec.gz"
    hour = where / "hour" / "demo-20270115-000000.idrec.gz"
    day.parent.mkdir(exist_ok=True)
    hour.parent.mkdir(exist_ok=True)
    tile(block, day, int(args.hours * 3600))
    tile(block, hour, 3600)
    print(f"recorded and written in {time.perf_counter() - began:.0f} s: "
          f"{day.stat().st_size / 2**20:.1f} MiB for {args.hours:g} h")  # fmt: skip

    # measured in a process of its own: its memory is the replay's, not the recording's
    import subprocess

    subprocess.run(
        [sys.executable, __file__, "--measure", str(day.parent), str(hour.parent)], check=True
    )
    if not args.keep:
        import shutil

        shutil.rmtree(where, ignore_errors=True)


def measure(day: Path, hour: Path) -> None:
    first, src, rec = open_lazy(day)
    print(f"first frame: {first:.2f} s (target < 1 s)")
    t = time.perf_counter()
    rec.done.wait()
    print(f"index of {len(rec):,} frames built in {time.perf_counter() - t + first:.1f} s")
    rng = random.Random(7)
    seeks = []
    for _ in range(8):
        i = rng.randrange(len(rec))
        t = time.perf_counter()
        src.seek(rec.times[i])
        asyncio.run(src.poll())
        seeks.append(time.perf_counter() - t)
    print(f"seek anywhere: worst {max(seeks):.2f} s, median {sorted(seeks)[4]:.2f} s "
          "(target < 1 s)")  # fmt: skip
    src.playing = False
    for _ in range(300):  # five minutes stepped through, frame by frame
        src.step(1)
        asyncio.run(src.poll())
    print(f"peak RSS after the day, its seeks and 300 steps: {rss_mb():.0f} MB (target < 300 MB)")

    t = time.perf_counter()
    _, samples = read(hour)
    whole = time.perf_counter() - t
    t = time.perf_counter()
    hour_first, _, _ = open_lazy(hour)
    print(f"baseline, one hour: whole-file read {whole:.2f} s before the first frame, lazy "
          f"{hour_first:.2f} s ({whole / max(hour_first, 1e-6):.0f}x); the whole-file reader "
          f"holds {len(samples):,} decoded frames")  # fmt: skip


if __name__ == "__main__":
    main()
