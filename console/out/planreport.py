"""``inferdeck plan``: the fit table per service and per device, as text or JSON."""

from __future__ import annotations

from typing import Any

from console.figures.plan import GIB, Fit, Plan, catalog_capacity, fit, parse_device, shape
from console.gpucatalog import catalog
from console.out.jsondocs import checked


def fits(plan: Plan) -> list[Fit]:
    out = []
    for svc in plan.services:
        capacity, label = catalog_capacity(parse_device(svc.device), plan.node)
        out.append(fit(svc, capacity, "catalog" if capacity is not None else "unknown", label))
    return out


def by_device(plan: Plan, rows: list[Fit]) -> list[dict[str, Any]]:
    groups: dict[str, list[Fit]] = {}
    for f in rows:
        groups.setdefault(f.device, []).append(f)
    out = []
    for dev, items in groups.items():
        capacity = items[0].capacity_bytes
        required = sum(f.required_bytes for f in items)
        out.append(
            {
                "device": dev,
                "label": items[0].device_label,
                "services": [f.service for f in items],
                "required_gib": required / GIB,
                "capacity_gib": capacity / GIB if capacity is not None else None,
                "headroom_gib": (capacity - required) / GIB if capacity is not None else None,
                "fits": capacity is not None and required <= capacity,
            }
        )
    return out


def plan_fits(plan: Plan) -> bool | None:
    """False when a service or a device's sum does not fit; None when a capacity is unknown."""
    rows = fits(plan)
    if any(f.fits is False for f in rows) or any(
        d["capacity_gib"] is not None and not d["fits"] for d in by_device(plan, rows)
    ):
        return False
    return None if any(f.fits is None for f in rows) else True


def plan_json(plan: Plan) -> str:
    rows = fits(plan)
    services = []
    for svc, f in zip(plan.services, rows, strict=True):
        services.append(
            {
                "name": svc.name,
                "device": svc.device,
                "device_label": f.device_label,
                "model": svc.model if isinstance(svc.model, str) else "inline",
                "weights_gib": f.weights_bytes / GIB,
                "kv_bytes_per_token": f.kv_bytes_per_token,
                "kv_cache_gib": f.kv_bytes / GIB,
                "runtime_gib": f.runtime_bytes / GIB,
                "margin_gib": f.margin_bytes / GIB,
                "required_gib": f.required_bytes / GIB,
                "capacity_gib": f.capacity_bytes / GIB if f.capacity_bytes is not None else None,
                "capacity_source": f.capacity_source,
                "headroom_gib": f.headroom_bytes / GIB if f.headroom_bytes is not None else None,
                "fits": f.fits,
            }
        )
    doc = {
        "schema": "inferdeck.plan/1",
        "node": plan.node.model_dump(),
        "services": services,
        "devices": by_device(plan, rows),
        "fits": all(d["fits"] for d in by_device(plan, rows)),
    }
    return checked("plan", doc)


def plan_text(plan: Plan) -> str:
    rows = fits(plan)
    model = catalog().get(plan.node.gpu_model or "")
    lines = [
        f"Plan for {plan.node.name or 'this node'}"
        + (
            f": {plan.node.gpus or '?'} x {model.name} (capacity from the GPU catalog)"
            if model
            else ""
        )
    ]
    lines.append("")
    head = (
        f"{'service':<14}{'device':<14}{'weights':>9}{'KV cache':>10}{'runtime':>9}{'margin':>8}"
        f"{'required':>10}{'capacity':>10}{'headroom':>10}  fits"
    )
    lines += [head, "-" * len(head)]
    for svc, f in zip(plan.services, rows, strict=True):
        cap = f"{f.capacity_bytes / GIB:10.2f}" if f.capacity_bytes is not None else f"{'?':>10}"
        room = f"{f.headroom_bytes / GIB:10.2f}" if f.headroom_bytes is not None else f"{'?':>10}"
        ok = {True: "yes", False: "NO", None: "?"}[f.fits]
        lines.append(
            f"{svc.name:<14}{svc.device:<14}{f.weights_bytes / GIB:9.2f}{f.kv_bytes / GIB:10.2f}"
            f"{f.runtime_bytes / GIB:9.2f}{f.margin_bytes / GIB:8.2f}{f.required_bytes / GIB:10.2f}"
            f"{cap}{room}  {ok}"
        )
        m = shape(svc)
        lines.append(
            f"{'':<14}{'':<14}KV {f.kv_bytes_per_token:,.0f} B/token x {svc.tokens_per_sequence:,} tokens"
            f" x {svc.concurrent_sequences} seqs; {m.title or svc.model} at "
            + (
                f"{svc.weight_bits:g} bit"
                if svc.weight_bits
                else f"{svc.weights_gib:g} GiB measured"
            )
        )
    lines += ["", "All figures in GiB (2^30 bytes). Per device:"]
    for d in by_device(plan, rows):
        cap = d["capacity_gib"]
        if cap is None:
            lines.append(
                f"  {d['device']:<14}{d['required_gib']:.2f} GiB needed; capacity unknown ({d['label']})"
            )
            continue
        verdict = "fits" if d["fits"] else "DOES NOT FIT"
        lines.append(
            f"  {d['device']:<14}{d['required_gib']:.2f} of {cap:.2f} GiB ({d['label']}): headroom "
            f"{d['headroom_gib']:.2f} GiB, {verdict} ({', '.join(d['services'])})"
        )
    return "\n".join(lines) + "\n"
