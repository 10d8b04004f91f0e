"""A simulated NVIDIA DCGM exporter: the GPUs of a simulated NVML node in dcgm-exporter's
exposition, served like the real exporter on /metrics, in either generation of its names:

* ``"4.8"`` (up to 4.8.2): ``DCGM_FI_DEV_FB_USED`` (MiB), ``…_GPU_UTIL`` (%), ``…_SM_CLOCK``
  (MHz), ``…_POWER_USAGE``, ``…_GPU_TEMP``, ``…_XID_ERRORS``, ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``;
  a ``Hostname`` label.
* ``"4.9"`` (4.9.0 on): DCGM 4.7's canonical names in base units — ``…_FB_USED_BYTES``,
  ``…_FB_FREE_BYTES``, ``…_GPU_UTIL_RATIO`` (0-1), ``…_SM_CLOCK_HERTZ``,
  ``…_BOARD_POWER_WATTS``, ``…_GPU_TEMP_CELSIUS``, ``…_XID_ERROR``,
  ``DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO``; a ``hostname`` label (4.8.3 on) and the driver version
  as a label. Every series of a MIG GPU carries its instance's ``GPU_I_ID`` and
  ``GPU_I_PROFILE``, board-wide figures included, as the exporter's default monitoring writes
  them.
* ``"4.10"`` (4.10.0 on): 4.9's, and the PCIe throughput fields gain ``_PER_SECOND``
  (``DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND``); before, ``DCGM_FI_PROF_PCIE_TX_BYTES``, bytes/s too.
"""

from __future__ import annotations

import pynvml

from console.sim.engine import MetricsServer
from console.sim.nvml import GPM_TRUTH, SimNvml

MIB = 1024 * 1024
# field: (4.8 name, 4.9 name, 4.9 value per 4.8 unit, HELP)
FIELDS = {
    "util": ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", 0.01, "GPU utilization."),
    "used": ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", MIB, "Framebuffer memory used."),
    "free": ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_FREE_BYTES", MIB, "Framebuffer memory free."),
    "power": ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", 1.0, "Power draw."),
    "temp": ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", 1.0, "GPU temperature."),
    "clock": ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", 1e6, "SM clock frequency."),
    "active": (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
        1.0,
        "Ratio of time the graphics engine is active.",
    ),
    "xid": ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", 1.0, "Last XID error."),
    # bytes/s in both generations; the new name is 4.10's
    "pcie_tx": (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
        1.0,
        "The rate of data transmitted over the PCIe bus, in bytes per second.",
    ),
    "pcie_rx": (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
        1.0,
        "The rate of data received over the PCIe bus, in bytes per second.",
    ),
}
PCIE = ("pcie_tx", "pcie_rx")


def dcgm_page(sim: SimNvml, hostname: str, generation: str = "4.8") -> str:
    if not sim.initialized:
        sim.nvmlInit()
    new = generation != "4.8"

    def renamed(field: str) -> bool:
        return generation == "4.10" if field in PCIE else new

    rows: dict[str, list[str]] = {k: [] for k in FIELDS}

    def put(field: str, labels: str, value: float) -> None:
        v = value * FIELDS[field][2] if renamed(field) else value
        rows[field].append(f"{{{labels}}} {v:.15g}")

    for g in sim.gpus:
        h = sim.nvmlDeviceGetHandleByIndex(g.index)
        host = (
            f'hostname="{hostname}",driver_version="{sim.driver_version}"'
            if new
            else (f'Hostname="{hostname}"')
        )
        base = (
            f'gpu="{g.index}",UUID="{g.uuid}",pci_bus_id="{g.bus_id}",device="nvidia{g.index}",'
            f'modelName="{g.model.name}",{host}'
        )
        mem = sim.nvmlDeviceGetMemoryInfo(h)
        power = round(sim.nvmlDeviceGetPowerUsage(h) / 1000, 3)
        temp = sim.nvmlDeviceGetTemperature(h, 0)
        clock = sim.nvmlDeviceGetClockInfo(h, 1)
        util, _ = sim._gpu_load(g)
        if g.mig_current:
            for i, (gi, _ci) in enumerate(g.mig_devices()):
                mh = sim.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                mmem = sim.nvmlDeviceGetMemoryInfo(mh)
                load = sim._load(g.index, i)
                lab = f'{base},GPU_I_PROFILE="{gi.profile.name}",GPU_I_ID="{gi.gi_id}"'
                put("used", lab, mmem.used // MIB)
                put("free", lab, mmem.free // MIB)
                put("active", lab, round(load.utilization, 6))
                # board-wide figures: on every instance's series (4.9), once for the GPU (4.8)
                if new or i == 0:
                    where = lab if new else base
                    put("power", where, power)
                    put("temp", where, temp)
                    put("clock", where, clock)
                    put("xid", where, 0)
        else:
            put("power", base, power)
            put("temp", base, temp)
            put("clock", base, clock)
            put("xid", base, 0)
            put("util", base, round(util * 100))
            put("used", base, mem.used // MIB)
            put("free", base, mem.free // MIB)
            put("active", base, round(util, 6))
            # PCIe throughput as the simulated GPM answers it, in bytes/s
            put("pcie_tx", base, util * GPM_TRUTH[pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC] * MIB)
            put("pcie_rx", base, util * GPM_TRUTH[pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC] * MIB)
    lines: list[str] = []
    for field, (old, canonical, _, help_) in FIELDS.items():
        if not rows[field]:
            continue
        name = canonical if renamed(field) else old
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
        lines += [f"{name}{row}" for row in rows[field]]
    return "\n".join(lines) + "\n"


def start_dcgm(
    sim: SimNvml, hostname: str, port: int = 0, generation: str = "4.8"
) -> MetricsServer:
    return MetricsServer(
        lambda: dcgm_page(sim, hostname, generation),
        port=port,
        content_type="text/plain; version=0.0.4",
    ).start()
