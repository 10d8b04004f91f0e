"""MIG re-layout: the only writes inferdeck makes. Plan, pre-check, apply, verify, roll back, log.

A layout is a set of GPU instances (profile name, placement start), each with one full-size
compute instance. Applying converges the GPU from its current layout to the target: instances
that stay the same are left alone, the others are destroyed (compute instances first, then the
GPU instance), the new ones created largest first at explicit placements, then the GPU is read
back and compared. If any step fails, the same convergence runs back to the previous layout, so
the GPU ends in the old layout or the new one. inferdeck never resets a GPU or reboots.
"""

from __future__ import annotations

import ctypes
import getpass
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pynvml
from pydantic import BaseModel, ConfigDict

from console.gpucatalog import GpuModel, MigProfile, MigSpec, catalog, mig_profile_name
from console.mig.layouts import Instance, MigError, diff, placements
from console.paths import mig_audit_log
from console.records import Record

CI_INDEX = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}


class MigStep(Record):
    """One NVML call of an apply, as the audit log keeps it."""

    t: str
    step: str
    result: str
    status: int | None = None  # nvmlDeviceSetMigMode's answer


class ApplyReport(BaseModel):
    """What one apply did. Filled in as it goes (each assignment checked); the audit log and
    ``to_json`` hold the fields that were set."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    gpu: int
    uuid: str | None
    before: str
    steps: list[MigStep]
    result: str | None
    user: str
    after: str | None = None
    error: str | None = None
    rollback_error: str | None = None
    next: str | None = None  # what the operator does next (a reset for a pending mode change)
    snapshot_before: str | None = None
    snapshot_after: str | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


@dataclass
class GpuMig:
    index: int
    uuid: str
    model: GpuModel | None
    mode_current: bool
    mode_pending: bool
    layout: list[Instance]
    profile_ids: dict[str, int]
    slices: dict[str, int]
    processes: dict[Instance, list[int]] = field(default_factory=dict)  # on each instance
    spec: MigSpec | None = None  # profiles and placements: from the driver, else the GPU catalogue
    spec_source: str = "none"
    gi_ids: dict[Instance, int] = field(
        default_factory=dict
    )  # the driver's GPU instance id of each


def model_for(name: str, total_bytes: int) -> GpuModel | None:
    for m in catalog().values():
        if m.name == name or m.memory_total_mib * 1024 * 1024 == total_bytes:
            return m
    return None


class MigManager:
    """Reads and changes one node's MIG layout through an NVML module (pynvml or the simulator)."""

    def __init__(
        self,
        lib: Any,
        audit_path: Path | None = None,
        user: str | None = None,
        snapshot: Callable[[str], Path | None] | None = None,
        simulated: bool = False,
    ) -> None:
        self.lib = lib
        self.simulated = simulated  # the demo's GPUs: every audit entry says so
        self.audit_path = audit_path or mig_audit_log()
        self.user = user or getpass.getuser()
        self.snapshot = snapshot  # called with "before"/"after": writes a bundle, returns its path

    def _err(self, exc: Exception) -> str:
        return f"{type(exc).__name__.removeprefix('NVMLError_')}"

    def read(self, index: int) -> GpuMig:
        lib = self.lib
        h = lib.nvmlDeviceGetHandleByIndex(index)
        uuid = lib.nvmlDeviceGetUUID(h)
        name = lib.nvmlDeviceGetName(h)
        total = int(lib.nvmlDeviceGetMemoryInfo(h).total)
        model = model_for(name, total)
        try:
            cur, pend = lib.nvmlDeviceGetMigMode(h)
        except lib.NVMLError as exc:
            raise MigError(
                f"GPU {index} ({name}) does not support MIG ({self._err(exc)})."
            ) from None
        ids: dict[str, int] = {}
        slices: dict[str, int] = {}
        live: list[MigProfile] = []
        for p in range(lib.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = lib.nvmlDeviceGetGpuInstanceProfileInfo(h, p)
            except lib.NVMLError:
                continue
            pname = mig_profile_name(int(info.sliceCount), int(info.memorySizeMB), total, p)
            ids[pname] = int(info.id)
            slices[pname] = int(info.sliceCount)
            starts, size = self._placements(h, int(info.id))
            if starts:
                live.append(
                    MigProfile(
                        name=pname,
                        id=int(info.id),
                        index=p,
                        slices=int(info.sliceCount),
                        memory_mib=int(info.memorySizeMB),
                        max=int(info.instanceCount),
                        size=size,
                        starts=starts,
                    )
                )
        layout: list[Instance] = []
        gi_ids: dict[Instance, int] = {}
        processes: dict[Instance, list[int]] = {}
        if cur:
            by_id = {v: k for k, v in ids.items()}
            for _pname, pid in ids.items():
                count = 8
                arr = (pynvml.c_nvmlGpuInstance_t * count)()
                n = ctypes.c_uint(count)
                try:
                    lib.nvmlDeviceGetGpuInstances(h, pid, arr, ctypes.byref(n))
                except lib.NVMLError as exc:
                    if getattr(exc, "value", None) == lib.NVML_ERROR_NO_PERMISSION:
                        raise MigError(
                            f"reading GPU {index}'s MIG instances needs root (or the mig/config "
                            "capability); run inferdeck as root to change MIG layouts."
                        ) from None
                    raise
                for gi in arr[: n.value]:
                    info = lib.nvmlGpuInstanceGetInfo(gi)
                    inst = (by_id[int(info.profileId)], int(info.placement.start))
                    layout.append(inst)
                    gi_ids[inst] = int(info.id)
            layout.sort(key=lambda x: x[1])
            # processes per MIG device, mapped to their instance
            on_instance: dict[Instance, list[int]] = {}
            for i in range(lib.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    mh = lib.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                except lib.NVMLError:
                    continue
                gi_id = lib.nvmlDeviceGetGpuInstanceId(mh)
                gi = lib.nvmlGpuInstanceGetInfo(lib.nvmlDeviceGetGpuInstanceById(h, gi_id))
                key = (by_id[int(gi.profileId)], int(gi.placement.start))
                on_instance[key] = [
                    int(p.pid) for p in lib.nvmlDeviceGetComputeRunningProcesses(mh)
                ]
            processes = {k: v for k, v in on_instance.items() if v}
        else:
            pids = [int(p.pid) for p in lib.nvmlDeviceGetComputeRunningProcesses(h)]
            if pids:
                processes[("whole GPU", 0)] = pids
        if live and len(live) == len(ids):
            most = max(p.max for p in live if p.slices == min(q.slices for q in live))
            spec, source = MigSpec(max_instances=most, profiles=live), "driver"
        elif model is not None and model.mig is not None:
            spec, source = model.mig, "catalogue"
        else:
            spec, source = None, "none"
        return GpuMig(
            index,
            uuid,
            model,
            bool(cur),
            bool(pend),
            layout,
            ids,
            slices,
            processes,
            spec,
            source,
            gi_ids,
        )

    def _placements(self, h: Any, profile_id: int) -> tuple[list[int], int]:
        """Possible placements of a profile from the driver ([] when it cannot say: not root)."""
        lib = self.lib
        arr = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
        n = ctypes.c_uint(16)
        try:
            lib.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, arr, ctypes.byref(n))
        except (lib.NVMLError, AttributeError):
            return [], 0
        got = [(int(arr[i].start), int(arr[i].size)) for i in range(n.value)]
        return sorted(st for st, _ in got), (got[0][1] if got else 0)

    # --- planning ---------------------------------------------------------------------------------
    def precheck(
        self,
        g: GpuMig,
        target: list[Instance] | str,
        read_only: bool = False,
        commands: dict[int, str] | None = None,
    ) -> list[str]:
        """Reasons the change must not go ahead (empty: it may)."""
        reasons = []
        if read_only:
            reasons.append("inferdeck runs read-only (--read-only or a replay): no change is made.")
        if g.mode_current != g.mode_pending:
            reasons.append(
                f"GPU {g.index} has a MIG mode change pending: reset the GPU or reboot first "
                "(inferdeck never does either)."
            )
        if not isinstance(target, str) and target and not g.mode_current:
            reasons.append(
                f"GPU {g.index} has MIG mode off: enable it first (inferdeck mig apply {g.index} "
                "enable; a GPU reset may follow), then apply this layout."
            )
        if os.geteuid() != 0 and not self._has_capability():
            reasons.append(
                "changing MIG needs root (or read access to /proc/driver/nvidia/capabilities/mig/config)."
            )
        if isinstance(target, str):
            affected = list(g.processes)
        else:
            _, destroy, _ = diff(g.layout, target)
            affected = [k for k in g.processes if k in destroy]
        for key in affected:
            for pid in g.processes[key]:
                cmd = (commands or {}).get(pid, "command not visible")
                reasons.append(
                    f"process {pid} ({cmd}) runs on {key[0]}@{key[1]}, which would be destroyed: "
                    "stop it first."
                )
        return reasons

    @staticmethod
    def reset_notes(
        g: GpuMig, target: list[Instance] | str, modules: Path = Path("/proc/modules")
    ) -> list[str]:
        """For a MIG mode change: what a GPU reset needs, and what on this node would block one
        (a mode change that stays pending needs a reset; inferdeck never resets)."""
        if not isinstance(target, str):
            return []
        notes = [
            f"if the mode stays pending, GPU {g.index} needs a reset (nvidia-smi -r -i {g.index}) "
            "or a reboot; inferdeck never does either."
        ]
        try:
            loaded = {line.split(" ", 1)[0] for line in modules.read_text().splitlines()}
        except OSError:
            loaded = set()
        if "nvidia_drm" in loaded:
            notes.append(
                "the nvidia_drm module is loaded: a GPU reset fails while it holds the GPU "
                "(stop the display manager and unload it: modprobe -r nvidia_drm, or reboot)."
            )
        return notes

    @staticmethod
    def _has_capability() -> bool:
        return os.access("/proc/driver/nvidia/capabilities/mig/config", os.R_OK)

    # --- applying ------------------------------------------------------------------------------
    def apply(
        self,
        index: int,
        target: list[Instance] | str,
        progress: Callable[[str], None] | None = None,
        read_only: bool = False,
        commands: dict[int, str] | None = None,
    ) -> ApplyReport:
        """Change the layout (or mode). Returns a report; raises MigError on a blocked change."""
        say = progress or (lambda _msg: None)
        g = self.read(index)
        problems = self.precheck(g, target, read_only, commands)
        if problems:
            raise MigError(" ".join(problems))
        before = list(g.layout)
        report = ApplyReport(
            gpu=index,
            uuid=g.uuid,
            before=placements(before),
            steps=[],
            result=None,
            user=self.user,
        )
        if self.snapshot:
            report.snapshot_before = str(self.snapshot("before") or "")
        if isinstance(target, str):
            return self._mode(g, target, report, say)
        steps = report.steps
        try:
            self._converge(index, target, steps, say)
            after = self.read(index).layout
            if sorted(after) != sorted(target):
                raise MigError(f"verification failed: the GPU reads back {placements(after)}")
            report.result = "applied"
            report.after = placements(after)
        except Exception as exc:  # noqa: BLE001 - any failure rolls back
            report.error = f"{type(exc).__name__}: {exc}"
            say(
                f"failed: {report.error}; rolling back to "
                f"{placements(before) or 'no MIG instances'}"
            )
            try:
                self._converge(index, before, steps, say, rollback=True)
                after = self.read(index).layout
                ok = sorted(after) == sorted(before)
                report.result = "rolled back" if ok else "rollback FAILED"
                report.after = placements(after)
            except Exception as exc2:  # noqa: BLE001
                report.result = "rollback FAILED"
                report.rollback_error = f"{type(exc2).__name__}: {exc2}"
        self._finish(report)
        return report

    def _finish(self, report: ApplyReport) -> None:
        if self.snapshot:
            report.snapshot_after = str(self.snapshot("after") or "")
        self.audit(report)

    def _mode(
        self, g: GpuMig, target: str, report: ApplyReport, say: Callable[[str], None]
    ) -> ApplyReport:
        lib = self.lib
        want = target == "enable"
        steps = report.steps
        try:
            if not want and g.layout:
                self._converge(g.index, [], steps, say)
            h = lib.nvmlDeviceGetHandleByIndex(g.index)
            status = lib.nvmlDeviceSetMigMode(h, 1 if want else 0)
            steps.append(
                self._step(f"set MIG mode {'on' if want else 'off'}", "ok", status=int(status))
            )
            cur, pend = lib.nvmlDeviceGetMigMode(h)
            report.after = (
                f"mode current {'on' if cur else 'off'}, pending {'on' if pend else 'off'}"
            )
            if status == lib.NVML_ERROR_IN_USE:
                report.result = "pending: the GPU is in use"
                report.next = (
                    "the mode change could not take effect because the GPU is busy: stop every process "
                    "on it, then reset the GPU (nvidia-smi -r) or reboot."
                )
            elif status == lib.NVML_ERROR_RESET_REQUIRED or bool(cur) != want:
                report.result = "pending: needs a GPU reset"
                report.next = (
                    f"reset the GPU (nvidia-smi -r -i {g.index}) or reboot; inferdeck never does."
                )
            else:
                report.result = "applied"
                report.next = (
                    "MIG is on: choose a layout to create instances." if want else "MIG is off."
                )
        except Exception as exc:  # noqa: BLE001
            report.result = "failed"
            report.error = f"{type(exc).__name__}: {exc}"
            if g.layout and not want:
                try:
                    self._converge(g.index, g.layout, steps, say, rollback=True)
                    report.result = "rolled back"
                except Exception as exc2:  # noqa: BLE001
                    report.rollback_error = f"{type(exc2).__name__}: {exc2}"
                    report.result = "rollback FAILED"
        self._finish(report)
        return report

    def _step(self, what: str, result: str, status: int | None = None) -> MigStep:
        step = MigStep(t=datetime.now(tz=UTC).isoformat(), step=what, result=result)
        return step if status is None else step.model_copy(update={"status": status})

    def _converge(
        self,
        index: int,
        target: list[Instance],
        steps: list[MigStep],
        say: Callable[[str], None],
        rollback: bool = False,
    ) -> None:
        lib = self.lib
        g = self.read(index)
        _, destroy, create = diff(g.layout, target)
        h = lib.nvmlDeviceGetHandleByIndex(index)
        tag = "rollback: " if rollback else ""
        for name, start in destroy:
            gi = self._gi_at(h, g, name, start)
            for ci in self._cis(gi):
                say(f"{tag}destroy compute instance on {name}@{start}")
                lib.nvmlComputeInstanceDestroy(ci)
                steps.append(self._step(f"{tag}destroy CI on {name}@{start}", "ok"))
            say(f"{tag}destroy GPU instance {name}@{start}")
            lib.nvmlGpuInstanceDestroy(gi)
            steps.append(self._step(f"{tag}destroy GI {name}@{start}", "ok"))
        for name, start in sorted(
            create, key=lambda x: (-g.slices.get(x[0], 0), x[1])
        ):  # largest first
            say(f"{tag}create GPU instance {name}@{start}")
            pid = g.profile_ids[name]
            size = self._size(g, name)
            place = pynvml.c_nvmlGpuInstancePlacement_t()
            place.start, place.size = start, size
            gi = lib.nvmlDeviceCreateGpuInstanceWithPlacement(h, pid, ctypes.byref(place))
            steps.append(self._step(f"{tag}create GI {name}@{start}", "ok"))
            slices = g.slices[name]
            info = lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, CI_INDEX[slices], 0)
            say(f"{tag}create compute instance on {name}@{start}")
            lib.nvmlGpuInstanceCreateComputeInstance(gi, int(info.id))
            steps.append(self._step(f"{tag}create CI on {name}@{start}", "ok"))

    def _size(self, g: GpuMig, name: str) -> int:
        if g.spec is not None:
            return g.spec.profile(name).size
        arr = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
        n = ctypes.c_uint(16)
        h = self.lib.nvmlDeviceGetHandleByIndex(g.index)
        self.lib.nvmlDeviceGetGpuInstancePossiblePlacements(
            h, g.profile_ids[name], arr, ctypes.byref(n)
        )
        return int(arr[0].size)

    def _gi_at(self, h: Any, g: GpuMig, name: str, start: int) -> Any:
        lib = self.lib
        arr = (pynvml.c_nvmlGpuInstance_t * 8)()
        n = ctypes.c_uint(8)
        lib.nvmlDeviceGetGpuInstances(h, g.profile_ids[name], arr, ctypes.byref(n))
        for gi in arr[: n.value]:
            if int(lib.nvmlGpuInstanceGetInfo(gi).placement.start) == start:
                return gi
        raise MigError(f"no GPU instance {name}@{start} to destroy")

    def _cis(self, gi: Any) -> list[Any]:
        lib = self.lib
        out = []
        for c in range(getattr(lib, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 9)):
            try:
                info = lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, c, 0)
            except lib.NVMLError:
                continue
            arr = (pynvml.c_nvmlComputeInstance_t * max(1, int(info.instanceCount)))()
            n = ctypes.c_uint(max(1, int(info.instanceCount)))
            lib.nvmlGpuInstanceGetComputeInstances(gi, int(info.id), arr, ctypes.byref(n))
            out += list(arr[: n.value])
        return out

    def audit(self, report: ApplyReport) -> None:
        self.audit_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        entry = {
            "t": datetime.now(tz=UTC).isoformat(),
            **report.to_json(),
            **({"simulated": True} if self.simulated else {}),
        }
        fd = os.open(self.audit_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
