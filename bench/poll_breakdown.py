"""Where a poll's time goes: NVML read, scrape (HTTP), parse + extract, derive (windows, plan,
alerts), draw (the Textual panes), for (b) the demo node and (c) 32 engines + 8 GPUs x 7 MIG.

    python bench/poll_breakdown.py [--polls 30]

CPU milliseconds per poll, measured in one process with the engines served from another
(bench/simfarm.py). The NVML sim runs in-process, as a driver would.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from console.engines import detect_kind, extract, needed_families, profiles  # noqa: E402
from console.figures.derive import Deriver  # noqa: E402
from console.promtext import parse  # noqa: E402
from console.read.http1 import Http1  # noqa: E402
from console.read.nvml import NvmlReader  # noqa: E402
from console.read.scraper import scrape  # noqa: E402
from console.sample import EngineSample, Sample  # noqa: E402
from console.sim.nvml import DeviceLoad, SimNvml  # noqa: E402


def sim(big: bool) -> SimNvml:
    s = SimNvml(load=lambda g, m: DeviceLoad(0.5, 8 * 2**30))
    if big:
        for _ in range(8):
            s.add_gpu("h100-80gb", mig=[("1g.10gb", i) for i in range(7)])
    else:
        s.add_gpu("rtx-pro-6000-se")
        s.add_gpu("rtx-pro-6000-se", mig=[("2g.48gb", 0), ("2g.48gb", 6)])
        s.add_gpu("rtx-pro-6000-se", mig=[("1g.24gb", i) for i in (0, 3, 6, 9)])
        s.add_gpu("rtx-pro-6000-se")
    return s


async def run(n_engines: int, big: bool, polls: int) -> dict[str, float]:
    farm = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "simfarm.py"), str(n_engines)],
        stdout=subprocess.PIPE,
        text=True,
    )
    urls = [farm.stdout.readline().strip() for _ in range(n_engines)]
    reader = NvmlReader(sim(big), simulated=True)
    deriver = Deriver()
    totals = dict.fromkeys(("nvml", "scrape", "parse", "derive", "draw"), 0.0)
    from screens.app import InferdeckApp

    class Source:
        plan = deriver.plan
        window_s = 60.0

        async def poll(self):
            return frame

        async def aclose(self):
            return None

        def forget_mig(self, index):
            return None

    frame = None
    lean = Http1()  # plain-http pages as the poller reads them (httpx only for HTTPS and the rest)
    app = InferdeckApp(Source(), interval_s=3600)
    try:
        async with httpx.AsyncClient() as client, app.run_test(size=(160, 48)) as pilot:
            for i in range(polls + 3):
                c0 = time.process_time()
                source, gpus = reader.read()
                c1 = time.process_time()
                results = await asyncio.gather(*(scrape(client, u, 2.0, lean=lean) for u in urls))
                c2 = time.process_time()
                engines = []
                for r in results:
                    page = parse(r.text or "", keep=needed_families().__contains__)
                    kind = detect_kind(page)
                    engines.append(
                        EngineSample(
                            label=r.url,
                            url=r.url,
                            t=time.time(),
                            up=True,
                            kind=kind,
                            extract=extract(page, profiles()[kind], time.time()),
                        )
                    )
                c3 = time.process_time()
                frame = deriver.frame(
                    Sample(t=time.time(), source=source, gpus=gpus, engines=engines)
                )
                c4 = time.process_time()
                app.show(frame)
                await pilot.pause(0)
                c5 = time.process_time()
                if i >= 3:  # warm-up polls excluded
                    for key, dt in zip(
                        totals, (c1 - c0, c2 - c1, c3 - c2, c4 - c3, c5 - c4), strict=True
                    ):
                        totals[key] += dt
                await asyncio.sleep(max(0.0, 1.0 - (time.process_time() - c0)))
    finally:
        await lean.aclose()
        farm.kill()
    return {k: v / polls * 1000 for k, v in totals.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--polls", type=int, default=20)
    args = ap.parse_args()
    print(
        f"{'scenario':<28}"
        + "".join(f"{k:>9}" for k in ("nvml", "scrape", "parse", "derive", "draw", "total"))
    )
    for name, n, big in (
        ("b: demo node (3 engines)", 3, False),
        ("c: 32 engines, 8x7 MIG", 32, True),
    ):
        t = asyncio.run(run(n, big, args.polls))
        print(
            f"{name:<28}"
            + "".join(f"{v:>7.1f}ms" for v in t.values())
            + f"{sum(t.values()):>7.1f}ms"
        )
    print("(CPU ms per poll; the share of one core at 1 Hz is total / 10 %)")


if __name__ == "__main__":
    main()
