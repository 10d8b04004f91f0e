"""The simulated demo node: 4 x RTX PRO 6000 Blackwell Server Edition and three vLLM services.

GPU 0 whole, serving a 70B model; GPU 1 in MIG with 2 x 2g.48gb, one 8B service on each slice;
GPU 2 in MIG with 4 x 1g.24gb (idle); GPU 3 whole (idle). GPU load follows the engines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from console.figures.plan import Plan, fit
from console.read.poller import EngineTarget
from console.sim.engine import SimEngine, TrafficSpec, start_engine
from console.sim.nvml import DeviceLoad, SimNvml

GPU_MEMORY_UTILIZATION = 0.90  # what vLLM preallocates on its device when no plan sizes it
# activation/workspace memory per running sequence: a full batch eats into the planned margin
# (the engine starts with half its runtime reserve in use; the rest is for the batch's workspace).
# The wave's peaks stay short of it (llama-70b runs 23 at most of its 32, llama-8b-a 31 of 64):
# the margin is crossed only under overload (above 29 and 40 running).
WORKSPACE_PER_SEQ_BYTES = {
    "llama-70b": 0.12 * 2**30,
    "llama-8b-a": 0.05 * 2**30,
    "llama-8b-b": 0.05 * 2**30,
}

SERVICES = (
    # (name, device (gpu, mig index), traffic)
    (
        "llama-70b",
        (0, None),
        TrafficSpec(
            model="meta-llama/Llama-3.3-70B-Instruct",
            rate_rps=0.9,
            max_num_seqs=32,
            kv_capacity_tokens=110_000,
            prefill_tok_s=3500,
            itl_base_s=0.032,
            itl_per_seq_s=0.0009,
            seed=70,
            profile="wave",
        ),
    ),
    (
        "llama-8b-a",
        (1, 0),
        TrafficSpec(
            model="meta-llama/Llama-3.1-8B-Instruct", rate_rps=2.0, seed=81, profile="wave"
        ),
    ),
    (
        "llama-8b-b",
        (1, 1),
        TrafficSpec(model="meta-llama/Llama-3.1-8B-Instruct", rate_rps=2.0, seed=82),
    ),
)


@dataclass
class DemoNode:
    nvml: SimNvml
    engines: dict[str, SimEngine]
    devices: dict[tuple[int, int | None], str]

    def targets(self) -> list[EngineTarget]:
        where = {name: dev for dev, name in self.devices.items()}
        out = []
        for name, eng in self.engines.items():
            gpu, mig = where[name]
            out.append(
                EngineTarget(
                    url=eng.url,
                    kind=eng.kind,
                    name=name,
                    device=str(gpu) if mig is None else f"{gpu}/{mig}",
                )
            )
        return out

    def stop(self) -> None:
        for e in self.engines.values():
            e.server.stop()


def start_demo(
    plan: Plan | None = None,
    profiles: dict[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> DemoNode:
    """Start the demo node. ``profiles`` may set a traffic profile per service name. With a plan,
    each engine holds its planned weights and KV pool, half its runtime reserve, and a workspace
    that grows with the running batch: a full batch under overload eats into the planned margin."""
    engines: dict[str, SimEngine] = {}
    devices: dict[tuple[int, int | None], str] = {}
    for name, device, spec in SERVICES:
        if profiles and name in profiles:
            spec = replace(spec, profile=profiles[name])
        spec = replace(spec, warmup_s=90.0)
        engines[name] = start_engine("vllm", spec, clock=clock)
        devices[device] = name
    static: dict[str, float] = {}
    for svc in plan.services if plan else []:
        f = fit(svc, None, "catalog", "")
        static[svc.name] = f.weights_bytes + f.kv_bytes + f.runtime_bytes / 2

    nvml = SimNvml(clock=clock)

    def load(gpu: int, mig: int | None) -> DeviceLoad:
        name = devices.get((gpu, mig))
        if name is None:
            return DeviceLoad(0.0, 0)
        model = engines[name].model
        model.advance()
        if name in static:
            used = static[name] + WORKSPACE_PER_SEQ_BYTES[name] * len(model.running)
        else:
            gi = nvml.gpus[gpu].mig_devices()[mig][0] if mig is not None else None
            total = (
                (gi.profile.memory_mib if gi else nvml.gpus[gpu].model.memory_total_mib)
                * 1024
                * 1024
            )
            used = total * GPU_MEMORY_UTILIZATION
        return DeviceLoad(model.utilization(), int(used))

    nvml.load = load
    nvml.add_gpu("rtx-pro-6000-se")
    nvml.add_gpu("rtx-pro-6000-se", mig=[("2g.48gb", 0), ("2g.48gb", 6)])
    nvml.add_gpu(
        "rtx-pro-6000-se", mig=[("1g.24gb", 0), ("1g.24gb", 3), ("1g.24gb", 6), ("1g.24gb", 9)]
    )
    nvml.add_gpu("rtx-pro-6000-se")
    for pid, (gpu, mig) in enumerate(sorted(devices, key=devices.__getitem__), start=41001):
        load_now = load(gpu, mig)
        nvml.add_process(
            gpu, mig, pid, load_now.memory_used_bytes
        )  # the engine's worker, as NVML lists it
    return DemoNode(nvml, engines, devices)
