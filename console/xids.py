"""XID errors (config/xids.yaml): what each means, who usually owns it and what to do. Pure."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Literal

from console.records import Record
from console.yamlfile import load_entries

Cause = Literal["application", "driver", "hardware"]
# NVML's gpuInstanceId / computeInstanceId when an event is not tied to one MIG instance
ALL_INSTANCES = 0xFFFFFFFF


class XidInfo(Record):
    meaning: str
    cause: Cause
    action: str


@cache
def catalog() -> dict[int, XidInfo]:
    text = resources.files("config").joinpath("xids.yaml").read_text(encoding="utf-8")
    return {int(k): v for k, v in load_entries(text, "config/xids.yaml", XidInfo).items()}


def describe(xid: int) -> tuple[str, str]:
    """(severity, sentence) for an XID: an application's fault is a warning (the GPU is fine), a
    driver's or the hardware's is critical."""
    info = catalog().get(xid)
    if info is None:
        return "warning", (
            f"XID {xid}: not in inferdeck's list; look it up in NVIDIA's Xid catalog "
            "(docs.nvidia.com/deploy/xid-errors)"
        )
    severity = "warning" if info.cause == "application" else "critical"
    return severity, f"XID {xid}, {info.cause} fault: {info.meaning}; {info.action}"
