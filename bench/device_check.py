"""Read-only check of the NVML reader against real hardware.

    python bench/device_check.py

For every GPU, prints what inferdeck's reader reports next to the same fields read directly
through pynvml, and flags any difference. It only reads: it never changes MIG mode or layout,
clocks, power limits or anything else, and never resets a GPU.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pynvml  # noqa: E402

from console.read.nvml import NvmlReader  # noqa: E402


def direct(i: int) -> dict:
    """The same fields straight from pynvml (each guarded: n/a where not supported)."""
    h = pynvml.nvmlDeviceGetHandleByIndex(i)

    def get(fn, *args):
        try:
            return fn(h, *args)
        except pynvml.NVMLError as exc:
            return f"n/a ({exc})"

    mem = get(pynvml.nvmlDeviceGetMemoryInfo)
    mig = get(pynvml.nvmlDeviceGetMigMode)
    out = {
        "name": get(pynvml.nvmlDeviceGetName),
        "uuid": get(pynvml.nvmlDeviceGetUUID),
        "memory_total_bytes": getattr(mem, "total", mem),
        "memory_used_bytes": getattr(mem, "used", mem),
        "power_limit_w": (lambda v: v / 1000 if isinstance(v, int) else v)(
            get(pynvml.nvmlDeviceGetEnforcedPowerLimit)
        ),
        "temperature_slowdown_c": get(
            pynvml.nvmlDeviceGetTemperatureThreshold, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        "clock_sm_max_mhz": get(pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM),
        "mig": mig,
    }
    if isinstance(mig, list) and mig[0]:
        devices = []
        for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except pynvml.NVMLError:
                continue
            devices.append(
                {
                    "uuid": pynvml.nvmlDeviceGetUUID(mh),
                    "memory_total_bytes": pynvml.nvmlDeviceGetMemoryInfo(mh).total,
                }
            )
        out["mig_devices"] = devices
    return out


def gpm_direct(i: int, seconds: float = 1.0) -> dict:
    """GPM graphics and SM activity of the GPU straight from pynvml over ``seconds`` (read-only:
    samples are allocated, filled and freed; nothing is set)."""
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    try:
        if not pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
            return {"gpm": "not supported"}
        a, b = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
        try:
            pynvml.nvmlGpmSampleGet(h, a)
            time.sleep(seconds)
            pynvml.nvmlGpmSampleGet(h, b)
            mg = pynvml.c_nvmlGpmMetricsGet_t()
            mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = 2
            mg.sample1, mg.sample2 = a, b
            mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL
            mg.metrics[1].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
            pynvml.nvmlGpmMetricsGet(mg)
            return {"graphics_pct": mg.metrics[0].value, "sm_pct": mg.metrics[1].value}
        finally:
            pynvml.nvmlGpmSampleFree(a)
            pynvml.nvmlGpmSampleFree(b)
    except pynvml.NVMLError as exc:
        return {"gpm": f"n/a ({exc})"}


def events_direct(count: int) -> list[str]:
    """NVML's event API, read-only: a set, each GPU's supported event types, XID registration,
    one wait with timeout 0 (NVML_ERROR_TIMEOUT expected on a quiet GPU), the set freed. The
    reader's XID path makes the same calls (console/read/nvml.py ``_with_xids``)."""
    out = []
    es = pynvml.nvmlEventSetCreate()
    try:
        for i in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:
                types = pynvml.nvmlDeviceGetSupportedEventTypes(h)
            except pynvml.NVMLError as exc:
                out.append(f"GPU {i}: supported event types: {exc}")
                continue
            xid = bool(types & pynvml.nvmlEventTypeXidCriticalError)
            line = f"GPU {i}: supported event types 0x{types:x} (XID {'yes' if xid else 'no'})"
            if xid:
                try:
                    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
                    line += ", XID registered"
                except pynvml.NVMLError as exc:
                    line += f", XID registration: {exc}"
            out.append(line)
        try:
            data = pynvml.nvmlEventSetWait_v2(es, 0)
            out.append(f"an event pending: type 0x{data.eventType:x} data {data.eventData}")
        except pynvml.NVMLError_Timeout:
            out.append("wait(0): NVML_ERROR_TIMEOUT (no event pending), as expected")
        except pynvml.NVMLError as exc:
            out.append(f"wait(0): {exc}")
    finally:
        pynvml.nvmlEventSetFree(es)
    return out


def main() -> int:
    reader = NvmlReader()
    source, gpus = reader.read()
    if source.kind == "none":
        print(f"no GPU to check: {source.error}")
        return 0
    print(
        f"driver {source.driver_version}, CUDA {source.cuda_driver_version}, "
        f"NVML {source.nvml_version}, {len(gpus)} GPU(s)"
    )
    time.sleep(1.0)
    _, gpus = reader.read()  # the second read gives GPM activity where supported
    for g in gpus:
        acts = [(None, g.activity)] + [
            (d.gpu_instance_id, d.activity) for d in (g.mig.devices if g.mig else [])
        ]
        for gi, act in acts:
            where = f"GPU {g.index}" + (f" GI {gi}" if gi is not None else "")
            print(f"  GPM {where}: reader {act} ; {g.unavailable.get('activity', '')}")
        if not (g.mig and g.mig.current):
            print(f"  GPM GPU {g.index} direct (1 s, idle expected): {gpm_direct(g.index)}")
    mismatches = 0
    for g in gpus:
        d = direct(g.index)
        print(f"\n=== GPU {g.index}: {g.name}")
        print(json.dumps(g.model_dump(mode="json", exclude={"processes"}), indent=1)[:6000])
        for key in (
            "name",
            "uuid",
            "memory_total_bytes",
            "power_limit_w",
            "temperature_slowdown_c",
            "clock_sm_max_mhz",
        ):
            ours, theirs = getattr(g, key), d[key]
            same = ours == theirs or (
                isinstance(theirs, float | int) and ours is not None and abs(ours - theirs) < 1e-6
            )
            mismatches += not same
            print(
                f"  {key:<24} reader={ours!r:<40} pynvml={theirs!r} {'' if same else '  <-- differs'}"
            )
        if g.mig is not None:
            print(
                f"  mig current/pending      reader={[g.mig.current, g.mig.pending]} pynvml={d['mig']}"
            )
            for dev, raw in zip(g.mig.devices, d.get("mig_devices", []), strict=False):
                same = (
                    dev.uuid == raw["uuid"] and dev.memory_total_bytes == raw["memory_total_bytes"]
                )
                mismatches += not same
                print(
                    f"  MIG {dev.index}: {dev.profile}@{dev.placement_start} {dev.uuid} "
                    f"{'' if same else '  <-- differs from ' + str(raw)}"
                )
    print("\n=== NVML events (XID), read-only")
    for line in events_direct(len(gpus)):
        print(f"  {line}")
    print(f"  the reader: {[(g.index, g.xids, g.unavailable.get('xids')) for g in gpus]}")
    reader.close()
    print(f"\n{mismatches} mismatch(es)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
