"""GPU catalog (config/gpus.yaml) and the MIG profile naming rule mig-parted uses."""

from __future__ import annotations

import math
from functools import cache
from importlib import resources
from typing import Literal

from console.records import Record
from console.yamlfile import load_entries

MIB = 1024 * 1024
GIB = 1024 * MIB

# GI profile index constant -> name attribute suffix (go-nvlib's rule; REV2 is the double-memory 1g)
INDEX_ATTRS = {
    7: "+me",
    8: "+me",
    10: "+gfx",
    11: "+gfx",
    12: "+gfx",
    13: "-me",
    14: "-me",
    15: "+me.all",
    16: "+me.all",
    17: "+gfx",
}


class MigProfile(Record):
    name: str
    id: int
    index: int
    slices: int
    memory_mib: int
    max: int
    size: int
    starts: list[int]


class MigSpec(Record):
    max_instances: int
    profiles: list[MigProfile]

    def profile(self, name: str) -> MigProfile:
        for p in self.profiles:
            if p.name == name:
                return p
        raise KeyError(name)


class GpuModel(Record):
    name: str
    pci_device_id: str
    memory_gb: int  # as sold
    memory_total_mib: int  # as the driver reports
    memory_bandwidth_gbs: float
    power_limit_w: float
    power_idle_w: float
    temperature_slowdown_c: float
    temperature_shutdown_c: float
    architecture: Literal["ampere", "ada", "hopper", "blackwell"]
    sm_clock_max_mhz: int
    mem_clock_max_mhz: int
    ecc: bool
    fan: bool
    mig: MigSpec | None = None

    @property
    def mig_mode_immediate(self) -> bool:
        """Hopper and newer change MIG mode without a GPU reset (and lose it on driver reload)."""
        return self.architecture in ("hopper", "blackwell")


@cache
def catalog() -> dict[str, GpuModel]:
    text = resources.files("config").joinpath("gpus.yaml").read_text(encoding="utf-8")
    return load_entries(text, "config/gpus.yaml", GpuModel)


def mig_profile_name(
    slices: int, memory_mib: int, total_bytes: int, index: int | None = None
) -> str:
    """``<slices>g.<GB>gb[+attr]`` with GB computed as mig-parted does, so names match its configs."""
    frac = math.ceil(memory_mib * MIB / total_bytes * 8) / 8
    gb = math.floor(frac * math.ceil(total_bytes / GIB) + 0.5)  # Go's math.Round
    return f"{slices}g.{gb}gb{INDEX_ATTRS.get(index, '') if index is not None else ''}"
