"""Memory of the history and over the hour after it fills: the demo node polled at 1 s of
simulated time (the clock is moved by hand, so this takes minutes, not an hour).

    python bench/memory_hour.py [--polls 4600]

The engine history keeps 15.5 minutes, so memory must stop growing once that is full (about poll
930). Prints RSS after 10 polls, when the history is full (poll 1000) and at the end. Targets
(issue "lean"): the 15-minute history (full - after 10 polls) <= 20 MB; growth < 5 MB over the
following hour (polls 1000..4600).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.read.live import LiveSource  # noqa: E402
from console.read.nvml import NvmlReader  # noqa: E402
from console.settings import demo_settings  # noqa: E402
from console.sim.demo import start_demo  # noqa: E402


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


async def run(polls: int) -> dict[str, float]:
    clock = Clock()
    settings = demo_settings()
    node = start_demo(settings, clock=clock)
    live = LiveSource.reading(
        node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings, clock=clock
    )
    marks: dict[str, float] = {}
    fill = min(polls, 1000)
    try:
        for i in range(polls):
            clock.t += 1.0
            await live.poll()
            at = [
                n
                for n, k in (("after 10 polls", 9), ("history full", fill - 1), ("end", polls - 1))
                if k == i
            ]
            if at:  # (with 1,000 polls or fewer, the history fills on the last: two marks at once)
                gc.collect()
                marks.update(dict.fromkeys(at, rss_mb()))
    finally:
        await live.aclose()
        node.stop()
    return marks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--polls", type=int, default=4600)
    args = ap.parse_args()
    marks = asyncio.run(run(args.polls))
    for k, v in marks.items():
        print(f"{k:>16}: {v:7.1f} MB RSS")
    history = marks["history full"] - marks["after 10 polls"]
    print(f"the 15-minute history: {history:+.1f} MB (target <= 20 MB)")
    if args.polls <= 1000:
        print("growth after the history filled: not measured (give --polls over 1000)")
        return
    growth = marks["end"] - marks["history full"]
    print(
        f"growth after the history filled: {growth:+.1f} MB over {args.polls - 1000} polls "
        f"(target < 5 MB over the hour) -> {'ok' if growth < 5 else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
