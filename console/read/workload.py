"""The workload behind a GPU process: its container (runtime and id) and Kubernetes pod from
/proc/PID/cgroup (cgroup v1 and v2; containerd, CRI-O and Docker paths, systemd and cgroupfs
drivers); the pod's name and namespace from the process itself (its HOSTNAME, its service-account
namespace file) or from the kubelet's /pods answer. Pure: reading files and JSON, no HTTP."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from console.frame import Gpu, GpuProcess, Workload

_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
# systemd driver: cri-containerd-<id>.scope, crio-<id>.scope, docker-<id>.scope
_SCOPE = re.compile(r"(cri-containerd|crio|docker|containerd)-([0-9a-f]{64})\.scope")
_BARE = re.compile(r"/([0-9a-f]{64})(?:/|$)")  # cgroupfs driver: the id is the last directory
RUNTIMES = {"cri-containerd": "containerd", "containerd": "containerd", "crio": "cri-o"}
SA_NAMESPACE = "var/run/secrets/kubernetes.io/serviceaccount/namespace"


def parse_cgroup(text: str) -> Workload | None:
    """Container and pod from the lines of /proc/PID/cgroup (None for a process on the host)."""
    pod_uid = runtime = container = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = _POD.search(path)
        if m:
            pod_uid = m.group(1).replace("_", "-")
        s = _SCOPE.search(path)
        if s:
            runtime, container = RUNTIMES.get(s.group(1), s.group(1)), s.group(2)
        elif container is None:
            b = _BARE.search(path)
            if b:
                container = b.group(1)
                runtime = "docker" if path.startswith("/docker/") else None
    if container is None and pod_uid is None:
        return None
    return Workload(runtime=runtime, container_id=container, pod_uid=pod_uid)


def workload_of(pid: int, proc: Path = Path("/proc")) -> Workload | None:
    """The container and pod of a process, named when the process says (best effort: a process
    we may not read is simply not described)."""
    base = proc / str(pid)
    try:
        found = parse_cgroup((base / "cgroup").read_text(errors="replace"))
    except OSError:
        return None
    if found is None or found.pod_uid is None:
        return found
    update: dict[str, str] = {}
    try:
        env = (base / "environ").read_bytes().split(b"\0")
        host = next((e[9:].decode(errors="replace") for e in env if e.startswith(b"HOSTNAME=")), "")
        if host:
            update["pod"] = host
    except OSError:
        pass
    try:
        ns = (base / "root" / SA_NAMESPACE).read_text().strip()
        if ns:
            update["namespace"] = ns
    except OSError:
        pass
    return found.model_copy(update=update) if update else found


def kubelet_index(text: str) -> dict[str, dict[str, str]]:
    """From the kubelet's GET /pods answer: pod UID and container id -> names. Raises ValueError
    on an answer of another shape."""
    data: Any = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise ValueError("expected a PodList with items")
    out: dict[str, dict[str, str]] = {}
    for item in data["items"]:
        meta = item.get("metadata") or {}
        pod = {"pod": str(meta.get("name", "")), "namespace": str(meta.get("namespace", ""))}
        if meta.get("uid"):
            out[str(meta["uid"])] = pod
        status = item.get("status") or {}
        for cs in (status.get("containerStatuses") or []) + (
            status.get("initContainerStatuses") or []
        ):
            cid = str(cs.get("containerID", "")).split("://", 1)[-1]
            if cid:
                out[cid] = {**pod, "container": str(cs.get("name", ""))}
    return out


def named(w: Workload, index: dict[str, dict[str, str]]) -> Workload:
    """A workload with the names the kubelet gives its container or pod."""
    got = index.get(w.container_id or "") or index.get(w.pod_uid or "")
    if not got:
        return w
    return w.model_copy(update={k: v for k, v in got.items() if v})


def name_gpus(gpus: list[Gpu], index: dict[str, dict[str, str]]) -> list[Gpu]:
    """Every GPU process's workload named from the kubelet's index."""

    def procs(ps: list[GpuProcess]) -> list[GpuProcess]:
        return [
            p.model_copy(update={"workload": named(p.workload, index)}) if p.workload else p
            for p in ps
        ]

    out = []
    for g in gpus:
        update: dict[str, Any] = {"processes": procs(g.processes)}
        if g.mig is not None:
            devices = [
                d.model_copy(update={"processes": procs(d.processes)}) for d in g.mig.devices
            ]
            update["mig"] = g.mig.model_copy(update={"devices": devices})
        out.append(g.model_copy(update=update))
    return out
