"""NVIDIA mig-parted's `version: v1` config: export the node's layouts, import a label's."""

from __future__ import annotations

from typing import Any

import yaml

from console.mig.layouts import Instance, MigError, parse_layout
from console.mig.manager import GpuMig
from console.yamlfile import ConfigError, load_yaml


def export_mig_parted(gpus: list[GpuMig], label: str = "current") -> str:
    specs = []
    for g in gpus:
        spec: dict[str, Any] = {"devices": [g.index], "mig-enabled": g.mode_current}
        if g.model is not None:
            spec = {"device-filter": g.model.pci_device_id, **spec}
        if g.mode_current:
            counts: dict[str, int] = {}
            for n, _ in g.layout:
                counts[n] = counts.get(n, 0) + 1
            spec["mig-devices"] = counts
        specs.append(spec)
    return yaml.safe_dump({"version": "v1", "mig-configs": {label: specs}}, sort_keys=False)


def import_mig_parted(
    text: str, label: str, gpus: list[GpuMig], source: str = "mig-parted config"
) -> dict[int, list[Instance] | str]:
    """Per GPU index, the layout (or mode word) a mig-parted config label asks for. Errors are one
    sentence naming ``source`` and the line."""
    try:
        doc, where = load_yaml(text, source)
    except ConfigError as exc:
        raise MigError(str(exc)) from None
    if (
        not isinstance(doc, dict)
        or doc.get("version") != "v1"
        or not isinstance(doc.get("mig-configs"), dict)
    ):
        raise MigError(
            f"{source}: not a mig-parted config: expected `version: v1` and a `mig-configs:` mapping."
        )
    configs = doc["mig-configs"]
    if label not in configs:
        raise MigError(
            f"{source}: no config labelled {label!r}; labels: {', '.join(map(str, configs))}."
        )
    if not isinstance(configs[label], list):
        raise MigError(
            f"{where(('mig-configs', label))}: {label} should be a list of device specs."
        )
    out: dict[int, list[Instance] | str] = {}
    for i, spec in enumerate(configs[label]):
        at = where(("mig-configs", label, i))
        if not isinstance(spec, dict):
            raise MigError(
                f"{at}: each entry of {label} should be a mapping (devices, mig-enabled, mig-devices)."
            )
        unknown = set(spec) - {"device-filter", "devices", "mig-enabled", "mig-devices"}
        if unknown:
            raise MigError(f"{at}: unknown field {sorted(unknown)[0]!r} in {label}.")
        filters = spec.get("device-filter")
        filters = [filters] if isinstance(filters, str) else (filters or [])
        devices = spec.get("devices")
        if devices != "all" and not (
            isinstance(devices, list) and all(isinstance(d, int) for d in devices)
        ):
            raise MigError(
                f"{where(('mig-configs', label, i, 'devices'))}: devices should be `all` or a list of "
                "GPU indexes."
            )
        counts = spec.get("mig-devices") or {}
        if not isinstance(counts, dict) or not all(
            isinstance(c, int) and c >= 0 for c in counts.values()
        ):
            raise MigError(
                f"{where(('mig-configs', label, i, 'mig-devices'))}: mig-devices should map profile "
                "names to counts (e.g. 1g.24gb: 4)."
            )
        for g in gpus:
            if devices != "all" and g.index not in devices:
                continue
            if filters and (
                g.model is None or g.model.pci_device_id.lower() not in [f.lower() for f in filters]
            ):
                continue
            if not spec.get("mig-enabled"):
                out[g.index] = "disable"
                continue
            if not counts:
                out[g.index] = "enable"
                continue
            if g.spec is None:
                raise MigError(
                    f"GPU {g.index}'s MIG profiles are unknown (not in the catalogue, driver silent)."
                )
            layout = parse_layout("+".join(f"{n}*{c}" for n, c in counts.items() if c), g.spec)
            if isinstance(layout, str):
                raise MigError(
                    f"{where(('mig-configs', label, i, 'mig-devices'))}: GPU {g.index}: {layout}"
                )
            out[g.index] = layout
    return out
