"""What a MIG change would do to the plan: which planned services land on which slice, their fit
and headroom there (the plan's arithmetic), and their capacity to SLO breach there, scaled from
the one measured on the device they run on now, before anything is applied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from console.figures.cost import slice_share
from console.figures.plan import GIB, Plan, fit, parse_device
from console.frame import CapacityReport, Frame
from console.gpucatalog import MIB
from console.mig.layouts import Instance

if TYPE_CHECKING:  # the manager reads NVML: a preview only reads what it read
    from console.mig.manager import GpuMig


def device_share(g: GpuMig, profile: str | None) -> tuple[float, float] | None:
    """(compute, memory) share of the GPU a device holds: the whole GPU (1, 1), a MIG profile its
    compute slices of the GPU's and its memory of the GPU's; None when the profile is unknown."""
    if profile is None:
        return 1.0, 1.0
    spec = g.spec or (g.model.mig if g.model is not None else None)
    if spec is None or g.model is None or not spec.profiles:
        return None
    try:
        p = spec.profile(profile)
    except KeyError:
        return None
    full = max(q.slices for q in spec.profiles)
    return slice_share(p.slices, full), p.memory_mib / g.model.memory_total_mib


def predicted_capacity(
    cap: CapacityReport | None, was: tuple[float, float] | None, lands: tuple[float, float] | None
) -> dict[str, Any] | None:
    """The capacity measured on the device a service runs on, scaled to the one it lands on: by
    memory when the KV pool binds, by compute otherwise (decode steps slow with fewer SMs). A
    scaling, not a measurement: said so wherever it is shown."""
    if cap is None or cap.requests_per_s is None or cap.at_least or not was or not lands:
        return None
    by = "memory" if cap.limit == "kv" else "compute"
    scale = lands[1] / was[1] if by == "memory" else lands[0] / was[0]
    return {
        "measured_rps": cap.requests_per_s,
        "predicted_rps": cap.requests_per_s * scale,
        "scale": scale,
        "scaled_by": by,
        "binding": cap.binding,
    }


def landing(
    plan: Plan,
    g: GpuMig,
    target: list[Instance] | str,
    measured: Mapping[str, tuple[CapacityReport | None, str | None]] | None = None,
) -> list[dict[str, Any]]:
    """Per planned service on this GPU: where it lands, whether it fits there, and (given each
    service's measured capacity and the MIG profile it runs on now, None for a whole GPU) its
    capacity there, scaled."""
    out: list[dict[str, Any]] = []
    for svc in plan.services:
        ref = parse_device(svc.device)
        if ref.gpu != g.index:
            continue
        lands_profile: str | None = None
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
                lands_profile = inst[0]
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
        cap, now_on = (measured or {}).get(svc.name, (None, None))
        out.append(
            {
                "service": svc.name,
                "lands_on": where,
                "required_gib": f.required_bytes / GIB,
                "capacity_gib": f.capacity_bytes / GIB if f.capacity_bytes else None,
                "headroom_gib": f.headroom_bytes / GIB if f.headroom_bytes is not None else None,
                "fits": f.fits,
                "capacity": predicted_capacity(
                    cap, device_share(g, now_on), device_share(g, lands_profile)
                ),
                "warning": None
                if f.fits
                else f"{svc.name} needs {f.required_bytes / GIB:.1f} GiB, more than {where}",
            }
        )
    return out


def measured_on(frame: Frame | None) -> dict[str, tuple[CapacityReport | None, str | None]]:
    """Each planned service's capacity now and the MIG profile of the device it runs on (None:
    a whole GPU), from the newest frame; services not found on the node are left out."""
    out: dict[str, tuple[CapacityReport | None, str | None]] = {}
    for s in frame.services if frame is not None else []:
        if s.device_id is None:
            continue
        gpu, _, mig = s.device_id.partition("/")
        g = next((x for x in frame.gpus if str(x.index) == gpu), None) if frame else None
        if g is None:
            continue
        if not mig:
            out[s.name] = (s.capacity, None)
            continue
        d = next((d for d in (g.mig.devices if g.mig else []) if str(d.index) == mig), None)
        if d is not None and d.profile is not None:
            out[s.name] = (s.capacity, d.profile)
    return out


def capacity_there(pred: Mapping[str, Any] | None) -> str:
    """ "~4.1 req/s before TPOT p95 breaks (measured 6.2 here now, x0.67 by compute: a scaling,
    not a measurement)"."""
    if pred is None:
        return "unknown: none measured on its device yet"
    slo = (pred.get("binding") or "an SLO").upper()
    return (
        f"~{pred['predicted_rps']:.1f} req/s before {slo} p95 breaks (measured "
        f"{pred['measured_rps']:.1f} now, x{pred['scale']:.2f} by {pred['scaled_by']}: a scaling, "
        "not a measurement)"
    )
