"""Soak with chaos: the console against engines that flap, return garbage, truncated or 10 MB
pages, answer after 10 s or restart, and an NVML that raises every fault type at random, while
the terminal is resized again and again.

    python bench/soak.py [--seconds 1800]

Asserts: the app never exits, no worker dies silently (poll errors are counted and shown), every
pane keeps updating, memory stays bounded, and no negative or NaN figure is ever drawn. A
60-second run is part of `make test` (tests/test_soak.py).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pynvml  # noqa: E402

from console.frame import Frame  # noqa: E402
from console.read.live import LiveSource  # noqa: E402
from console.read.nvml import NvmlReader  # noqa: E402
from console.read.poller import EngineTarget  # noqa: E402
from console.sim.engine import page_for, start_engine  # noqa: E402
from console.sim.nvml import DeviceLoad, SimNvml  # noqa: E402

MODES = ("ok", "ok", "ok", "down", "garbage", "truncated", "huge", "slow", "restart")
NVML_FAULTS = (
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_NO_PERMISSION,
    pynvml.NVML_ERROR_TIMEOUT,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_UNKNOWN,
    pynvml.NVML_ERROR_GPU_IS_LOST,
)
NVML_FUNCTIONS = (
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMigMode",
)
HUGE = b"# filler\n" * 1_200_000  # over 10 MB


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Chaos:
    """Switches each engine's behaviour every few seconds."""

    def __init__(self, kinds: list[str], rng: random.Random) -> None:
        self.rng = rng
        self.engines = [start_engine(k) for k in kinds]
        self.mode = {i: "ok" for i in range(len(self.engines))}
        for i, eng in enumerate(self.engines):
            eng.server.page = self._page(i, eng)

    def _page(self, i: int, eng):
        def page() -> str | bytes:
            mode = self.mode[i]
            if mode == "down":
                raise ConnectionResetError(
                    "flapping"
                )  # the handler dies: the client sees a broken answer
            if mode == "garbage":
                return os.urandom(4000)
            text = page_for(eng.kind, eng.model)
            if mode == "truncated":
                return text[: len(text) // 3]
            if mode == "huge":
                return HUGE
            return text

        return page

    def shuffle(self) -> None:
        for i, eng in enumerate(self.engines):
            mode = self.rng.choice(MODES)
            self.mode[i] = mode
            eng.server.delay_s = 10.0 if mode == "slow" else 0.0
            if mode == "restart":
                eng.model.restart()

    def stop(self) -> None:
        for eng in self.engines:
            eng.server.delay_s = 0.0
            eng.stop()


def check_frame(frame: Frame) -> list[str]:
    """Figures that must never be negative or NaN (signed headrooms are exempt by design)."""
    bad = []
    for e in frame.engines:
        for name in (
            "requests_running",
            "requests_waiting",
            "kv_cache_usage",
            "prompt_tokens_per_s",
            "generation_tokens_per_s",
            "success_rate",
            "preemptions",
            "requests_finished",
        ):
            v = getattr(e, name)
            if v is not None and (math.isnan(v) or v < 0):
                bad.append(f"{e.name}.{name}={v}")
        for p in (e.ttft_s, e.tpot_s, e.itl_s, e.e2e_s):
            for q in (p.p50, p.p95, p.p99) if p else ():
                if q is not None and (math.isnan(q) or q < 0):
                    bad.append(f"{e.name} percentile {q}")
    for g in frame.gpus:
        for name in ("memory_used_bytes", "power_w", "temperature_c", "utilization_gpu_pct"):
            v = getattr(g, name)
            if v is not None and (isinstance(v, float) and math.isnan(v) or v < 0):
                bad.append(f"gpu{g.index}.{name}={v}")
    return bad


async def soak(seconds: float, engines: int = 4, seed: int = 7) -> dict:
    from screens.app import InferdeckApp

    rng = random.Random(seed)
    chaos = Chaos(
        ["vllm", "sglang", "tgi", "llamacpp", "triton"][:engines]
        if engines <= 5
        else ["vllm"] * engines,
        rng,
    )
    sim = SimNvml(load=lambda g, m: DeviceLoad(rng.random(), 8 * 2**30))
    for model in ("h100-80gb", "rtx-pro-6000-se", "a100-80gb", "l40s"):
        sim.add_gpu(model, mig=[("1g.10gb", 0), ("3g.40gb", 4)] if model == "a100-80gb" else None)
    live = LiveSource.reading(
        [
            EngineTarget(url=e.url, name=f"{e.kind}-{i}", timeout_s=2.0)
            for i, e in enumerate(chaos.engines)
        ],
        NvmlReader(sim, simulated=True),
    )
    live.poller.budget_s = 0.8
    app = InferdeckApp(live, interval_s=1.0)
    frames: list[Frame] = []  # only the latest: keeping every frame would be the harness's own leak
    seen = 0
    bad: list[str] = []
    original_show = app.show

    def show(frame: Frame) -> None:
        nonlocal seen
        seen += 1
        frames[:] = [frame]
        bad.extend(check_frame(frame))
        original_show(frame)

    app.show = show  # type: ignore[method-assign]
    stats = {"seconds": seconds, "resizes": 0, "shuffles": 0, "nvml_faults": 0}
    sizes = [(80, 24), (160, 48), (100, 30), (60, 20), (200, 60)]
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            start = time.monotonic()
            rss_start = None
            next_shuffle = next_fault = next_resize = start
            while time.monotonic() - start < seconds:
                now = time.monotonic()
                if now >= next_shuffle:
                    chaos.shuffle()
                    stats["shuffles"] += 1
                    next_shuffle = now + rng.uniform(2, 5)
                if now >= next_fault:
                    sim.faults.clear()
                    sim.inject(
                        rng.choice(NVML_FAULTS),
                        gpu=rng.randrange(len(sim.gpus)),
                        function=rng.choice(NVML_FUNCTIONS),
                        on_call=1,
                    )
                    stats["nvml_faults"] += 1
                    next_fault = now + rng.uniform(1, 4)
                if now >= next_resize:
                    await pilot.resize_terminal(*rng.choice(sizes))
                    stats["resizes"] += 1
                    next_resize = now + rng.uniform(0.5, 3)
                if rss_start is None and now - start > min(
                    960.0, seconds / 3
                ):  # once the 15.5-min history is full
                    rss_start = rss_mb()
                await pilot.pause(0.25)
                assert app.is_running, "the app exited"
            last = frames[-1]
            stats.update(
                frames=seen,
                fresh_at_end=time.time() - last.taken_at.timestamp(),
                poll_errors=app.poll_errors,
                worker_alive=any(w.group == "poll" and w.is_running for w in app.workers),
                engines_in_frame=len(last.engines),
                gpus_in_frame=len(last.gpus),
                engine_rows=app.query_one("#engine-table").row_count,
                gpu_rows=app.query_one("#gpu-table").row_count,
                rss_start_mb=rss_start,
                rss_end_mb=rss_mb(),
                bad_figures=bad[:10],
                status=str(app.query_one("#status").render()),
            )
    finally:
        chaos.stop()
    return stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1800)
    args = ap.parse_args()
    stats = asyncio.run(soak(args.seconds))
    for k, v in stats.items():
        print(f"{k:>18}: {v}")
    ok = (
        stats["worker_alive"]
        and stats["fresh_at_end"] < 3
        and not stats["bad_figures"]
        and stats["rss_end_mb"] - (stats["rss_start_mb"] or stats["rss_end_mb"]) < 50
    )
    print("PASS" if ok else "FAIL")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
