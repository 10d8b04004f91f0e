"""A simulated NVIDIA DCGM exporter: the GPUs of a simulated NVML node in dcgm-exporter's
exposition (``DCGM_FI_*`` gauges with gpu, UUID, device, modelName, Hostname labels; MIG
instances with GPU_I_PROFILE and GPU_I_ID), served like the real exporter on /metrics."""

from __future__ import annotations

from console.sim.engine import MetricsServer
from console.sim.nvml import SimNvml


def dcgm_page(sim: SimNvml, hostname: str) -> str:
    if not sim.initialized:
        sim.nvmlInit()
    lines: list[str] = []
    families = {
        "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
        "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
        "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
        "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
        "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
        "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
        "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    }
    rows: dict[str, list[str]] = {k: [] for k in families}
    for g in sim.gpus:
        h = sim.nvmlDeviceGetHandleByIndex(g.index)
        base = (
            f'gpu="{g.index}",UUID="{g.uuid}",pci_bus_id="{g.bus_id}",device="nvidia{g.index}",'
            f'modelName="{g.model.name}",Hostname="{hostname}"'
        )
        mem = sim.nvmlDeviceGetMemoryInfo(h)
        mib = 1024 * 1024
        power = sim.nvmlDeviceGetPowerUsage(h) / 1000
        temp = sim.nvmlDeviceGetTemperature(h, 0)
        clock = sim.nvmlDeviceGetClockInfo(h, 1)
        util, _ = sim._gpu_load(g)
        rows["DCGM_FI_DEV_POWER_USAGE"].append(f"{{{base}}} {power:.3f}")
        rows["DCGM_FI_DEV_GPU_TEMP"].append(f"{{{base}}} {temp}")
        rows["DCGM_FI_DEV_SM_CLOCK"].append(f"{{{base}}} {clock}")
        rows["DCGM_FI_DEV_XID_ERRORS"].append(f"{{{base}}} 0")
        if g.mig_current:
            for i, (gi, _ci) in enumerate(g.mig_devices()):
                mh = sim.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                mmem = sim.nvmlDeviceGetMemoryInfo(mh)
                load = sim._load(g.index, i)
                lab = f'{base},GPU_I_PROFILE="{gi.profile.name}",GPU_I_ID="{gi.gi_id}"'
                rows["DCGM_FI_DEV_FB_USED"].append(f"{{{lab}}} {mmem.used // mib}")
                rows["DCGM_FI_DEV_FB_FREE"].append(f"{{{lab}}} {mmem.free // mib}")
                rows["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].append(f"{{{lab}}} {load.utilization:.6f}")
        else:
            rows["DCGM_FI_DEV_GPU_UTIL"].append(f"{{{base}}} {round(util * 100)}")
            rows["DCGM_FI_DEV_FB_USED"].append(f"{{{base}}} {mem.used // mib}")
            rows["DCGM_FI_DEV_FB_FREE"].append(f"{{{base}}} {mem.free // mib}")
            rows["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].append(f"{{{base}}} {util:.6f}")
    for name, (kind, help_) in families.items():
        if not rows[name]:
            continue
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        lines += [f"{name}{row}" for row in rows[name]]
    return "\n".join(lines) + "\n"


def start_dcgm(sim: SimNvml, hostname: str, port: int = 0) -> MetricsServer:
    return MetricsServer(
        lambda: dcgm_page(sim, hostname), port=port, content_type="text/plain; version=0.0.4"
    ).start()
