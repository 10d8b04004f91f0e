"""What a MIG change would do to the plan: which planned services land on which slice, and their
fit and headroom there (the plan's arithmetic), before anything is applied."""

from __future__ import annotations

from typing import Any

from console.gpucatalog import MIB
from console.mig.layouts import Instance
from console.mig.manager import GpuMig
from console.plan import GIB, Plan, fit, parse_device


def landing(plan: Plan, g: GpuMig, target: list[Instance] | str) -> list[dict[str, Any]]:
    """Per planned service on this GPU: where it lands and whether it fits there."""
    out: list[dict[str, Any]] = []
    for svc in plan.services:
        ref = parse_device(svc.device)
        if ref.gpu != g.index:
            continue
        if target == "disable" or target == "enable":
            whole = target == "disable" and ref.profile is None
            capacity = g.model.memory_total_mib * MIB if (whole and g.model) else None
            where = "the whole GPU" if whole else None
        else:
            inst = (ref.profile, ref.start) if ref.profile is not None else None
            if (
                inst is not None
                and inst in target
                and g.model is not None
                and g.model.mig is not None
            ):
                capacity = g.model.mig.profile(inst[0]).memory_mib * MIB
                where = f"{inst[0]}@{inst[1]}"
            else:
                capacity, where = None, None
        if where is None:
            out.append(
                {
                    "service": svc.name,
                    "lands_on": None,
                    "warning": f"{svc.name} loses its planned device {svc.device}: change the plan or pick "
                    "a layout that keeps it",
                }
            )
            continue
        f = fit(svc, capacity, "catalog", where)
        out.append(
            {
                "service": svc.name,
                "lands_on": where,
                "required_gib": f.required_bytes / GIB,
                "capacity_gib": f.capacity_bytes / GIB if f.capacity_bytes else None,
                "headroom_gib": f.headroom_bytes / GIB if f.headroom_bytes is not None else None,
                "fits": f.fits,
                "warning": None
                if f.fits
                else f"{svc.name} needs {f.required_bytes / GIB:.1f} GiB, more than {where}",
            }
        )
    return out
