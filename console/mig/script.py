"""The nvidia-smi commands equivalent to a MIG change, for the preview and the operator's notes."""

from __future__ import annotations

from console.mig.layouts import Instance, diff


def nvidia_smi(
    index: int,
    current: list[Instance],
    target: list[Instance] | str,
    ids: dict[str, int],
    gi_ids: dict[Instance, int] | None = None,
) -> list[str]:
    """The equivalent nvidia-smi commands, runnable as printed: instances to destroy by their GPU
    instance ids (as the driver reported them), new ones by profile id and placement."""
    if target == "disable":
        return [
            f"nvidia-smi mig -i {index} -dci",
            f"nvidia-smi mig -i {index} -dgi",
            f"nvidia-smi -i {index} -mig 0",
        ]
    if target == "enable":
        return [f"nvidia-smi -i {index} -mig 1"]
    assert isinstance(target, list)
    _, destroy, create = diff(current, target)
    cmds = []
    for name, start in destroy:
        gi = (gi_ids or {}).get((name, start))
        ref = str(gi) if gi is not None else f"<GI id of {name}@{start}>"
        cmds.append(f"nvidia-smi mig -i {index} -dci -gi {ref}")
        cmds.append(f"nvidia-smi mig -i {index} -dgi -gi {ref}")
    for name, start in create:
        cmds.append(f"nvidia-smi mig -i {index} -cgi {ids.get(name, name)}:{start} -C")
    return cmds
