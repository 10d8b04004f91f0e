"""CPU per NVML poll: 8 simulated H100s, each cut into 7 x 1g.10gb MIG devices.

    python bench/nvml_poll.py [--polls N]

Prints the reader's CPU time per poll (target: under 20 ms) next to a baseline measured in the
same run: the bare simulated NVML calls a minimal reader would make (handle, memory, power,
temperature, MIG mode, each MIG device's memory), so the ratio shows inferdeck's own overhead.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.read.nvml import NvmlReader  # noqa: E402
from console.sim.nvml import DeviceLoad, SimNvml  # noqa: E402


class Clock:
    """One simulated second per poll, so every poll reads GPM (a poll within 0.5 s of the last
    keeps the previous figure and would leave GPM out of the measurement)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def node(clock: Clock) -> SimNvml:
    sim = SimNvml(load=lambda g, m: DeviceLoad(0.6, 8 * 1024**3), clock=clock)
    for _ in range(8):
        sim.add_gpu("h100-80gb", mig=[("1g.10gb", s) for s in range(7)])
    sim.nvmlInit()
    return sim


def bare(sim: SimNvml) -> None:
    for i in range(sim.nvmlDeviceGetCount()):
        h = sim.nvmlDeviceGetHandleByIndex(i)
        sim.nvmlDeviceGetMemoryInfo(h)
        sim.nvmlDeviceGetPowerUsage(h)
        sim.nvmlDeviceGetTemperature(h, 0)
        sim.nvmlDeviceGetMigMode(h)
        for j in range(sim.nvmlDeviceGetMaxMigDeviceCount(h)):
            sim.nvmlDeviceGetMemoryInfo(sim.nvmlDeviceGetMigDeviceHandleByIndex(h, j))


def cpu_per_call(fn, n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--polls", type=int, default=200)
    args = ap.parse_args()
    clock = Clock()
    sim = node(clock)
    reader = NvmlReader(sim, simulated=True, clock=clock)

    def read() -> None:
        clock.t += 1.0
        reader.read()

    _, gpus = reader.read()
    assert len(gpus) == 8 and all(len(g.mig.devices) == 7 for g in gpus)
    sim.calls.clear()
    reader_s = cpu_per_call(read, args.polls)
    calls = sum(sim.calls.values()) / args.polls
    bare_s = cpu_per_call(lambda: bare(sim), args.polls)
    print("8 GPUs x 7 MIG devices, simulated NVML, a poll a second (GPM read every poll)")
    print(
        f"  inferdeck reader : {reader_s * 1e3:6.2f} ms CPU per poll ({calls:.0f} NVML calls)"
        f"  target < 20 ms: {'OK' if reader_s < 0.020 else 'OVER'}"
    )
    print(f"  bare NVML calls  : {bare_s * 1e3:6.2f} ms CPU per poll")
    print(f"  ratio            : {reader_s / bare_s:6.1f}x")


if __name__ == "__main__":
    main()
