"""Which engine each GPU process serves, and which device each engine runs on.

A process whose command line is an engine's (``vllm serve ... --port 8000``) belongs to the engine
scraped on that local port; otherwise, when exactly one engine is declared on the process's
device, it is that one. An engine with no declared device takes the device of its process.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from console.cmdline import classify
from console.frame import Engine, Gpu, GpuProcess

LOCAL = {"127.0.0.1", "localhost", "0.0.0.0", "::1"}


def _local_port(url: str) -> int | None:
    parts = urlsplit(url)
    if parts.hostname not in LOCAL:
        return None
    return parts.port or (443 if parts.scheme == "https" else 80)


def link(gpus: list[Gpu], engines: list[Engine]) -> tuple[list[Gpu], list[Engine]]:
    by_port = {p: e for e in engines if (p := _local_port(e.url)) is not None}
    by_device: dict[str, list[Engine]] = {}
    for e in engines:
        if e.device:
            by_device.setdefault(e.device, []).append(e)
    found_device: dict[str, str] = {}  # engine url -> device

    def match(p: GpuProcess, device: str) -> GpuProcess:
        engine = None
        if p.command:
            hit = classify(p.command.split())
            if hit is not None:
                engine = by_port.get(hit[1])
        if engine is None and len(by_device.get(device, [])) == 1:
            engine = by_device[device][0]
        if engine is None:
            return p
        found_device.setdefault(engine.url, device)
        return p.model_copy(update={"engine": engine.name})

    def matched(procs: list[GpuProcess], device: str) -> list[GpuProcess] | None:
        """The processes with their engines, or None when none was matched (nothing to copy)."""
        out = [match(p, device) for p in procs]
        return out if any(a is not b for a, b in zip(out, procs, strict=True)) else None

    out_gpus = []
    for g in gpus:
        procs = matched(g.processes, str(g.index))
        mig = g.mig
        if mig is not None and mig.devices:
            devices = []
            for d in mig.devices:
                found = matched(d.processes, f"{g.index}/{d.index}")
                devices.append(d if found is None else d.model_copy(update={"processes": found}))
            if any(a is not b for a, b in zip(devices, mig.devices, strict=True)):
                mig = mig.model_copy(update={"devices": devices})
        if procs is not None or mig is not g.mig:
            update: dict[str, object] = {"mig": mig}
            if procs is not None:
                update["processes"] = procs
            g = g.model_copy(update=update)
        out_gpus.append(g)
    out_engines = [
        e.model_copy(update={"device": found_device[e.url]})
        if not e.device and e.url in found_device
        else e
        for e in engines
    ]
    return out_gpus, out_engines
