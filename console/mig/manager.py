"""MIG re-layout: the only writes inferdeck makes. Plan, pre-check, apply, verify, roll back, log.

A layout is a set of GPU instances (profile name, placement start), each with one full-size
compute instance. Applying converges the GPU from its current layout to the target: instances
that stay the same are left alone (a kept one that lost its compute instance gets it back), the
others are destroyed (compute instances first, then the GPU instance), the new ones created largest
first at explicit placements, then the GPU is read back and verified: every instance of the layout
at its placement with its compute instance and a MIG device. If any step fails, or anything at all
is raised, the same convergence runs back to the previous layout, so the GPU ends in the old
layout or the new one. inferdeck never resets a GPU or reboots.

Around it (console.mig.guard, console.mig.journal): the GPU's lock is held from the pre-checks to
the end record, so one writer changes a GPU at a time; every step is in the journal before it is
taken; SIGINT, SIGTERM and SIGHUP wait until the re-cut is done or undone. An apply that was killed
is found on the next start and read back (``recoveries``). Every NVML call goes through the one
choke point (console.read.nvml.nvml_call), so its errors read as the dashboard's do.
"""

from __future__ import annotations

import ctypes
import getpass
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pynvml
from pydantic import BaseModel, ConfigDict, Field

from console.gpucatalog import GpuModel, MigProfile, MigSpec, catalog, mig_profile_name
from console.mig.guard import gpu_lock, lock_dir, signals_held, this_command
from console.mig.journal import (
    Journal,
    JournalError,
    OpenApply,
    completing_target,
    describe_open,
    judge,
    unfinished,
)
from console.mig.layouts import Instance, MigError, diff, layout_text, placements
from console.paths import mig_audit_log
from console.read.nvml import NvmlFailure, nvml_call
from console.records import Record

CI_INDEX = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}


class MigCallError(MigError):
    """An NVML call of a re-cut failed; ``reason`` is worded as the dashboard words it."""

    def __init__(self, what: str, failure: NvmlFailure) -> None:
        super().__init__(f"{what}: {failure.reason}")
        self.reason = failure.reason
        self.code = failure.code


class MigStep(Record):
    """One NVML call of an apply, as the report keeps it (the journal has it too)."""

    t: str
    step: str
    result: str
    status: int | None = None  # nvmlDeviceSetMigMode's answer


class ApplyReport(BaseModel):
    """What one apply did. Filled in as it goes (each assignment checked); ``to_json`` holds the
    fields that were set."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    gpu: int
    uuid: str | None
    before: str
    steps: list[MigStep]
    result: str | None
    user: str
    apply_id: str | None = None  # its records in the journal
    after: str | None = None
    verified: str | None = None  # what the read-back checked
    error: str | None = None
    rollback_error: str | None = None
    next: str | None = None  # what the operator does next (a reset for a pending mode change)
    snapshot_before: str | None = None
    snapshot_after: str | None = None
    notes: list[str] = Field(default_factory=list)  # what else the operator should know

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


@dataclass
class Recovery:
    """An interrupted apply found in the journal, with the state it left its GPU in."""

    open: OpenApply
    index: int | None  # the GPU's index now (None: no GPU with that uuid)
    state: str  # new, old, neither, unknown
    target: str  # what ``mig apply`` brings it to a recorded state with
    sentence: str

    @property
    def command(self) -> str:
        return f"inferdeck mig apply {self.index} {self.target}"


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
    devices: dict[Instance, list[str]] = field(default_factory=dict)  # MIG device UUIDs on each

    @property
    def bare(self) -> list[Instance]:
        """GPU instances with no MIG device: no compute instance for a workload to run on."""
        return [i for i in self.layout if not self.devices.get(i)]


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
        locks: Path | None = None,
    ) -> None:
        self.lib = lib
        self.simulated = simulated  # the demo's GPUs: every journal entry says so
        self.audit_path = audit_path or mig_audit_log()  # the journal
        # /run/inferdeck for real GPUs (read through the pynvml module); a simulator's are apart
        self.locks = locks or lock_dir(simulated or lib is not pynvml)
        self.user = user or getpass.getuser()
        self.command = this_command()
        self.snapshot = snapshot  # called with "before"/"after": writes a bundle, returns its path
        self.applying = threading.Event()  # set while an apply runs: the console waits to quit

    def _nv(self, fn: str, *args: Any, what: str | None = None) -> Any:
        """Every NVML call of this module: errors raised as MigCallError, worded as the dashboard's."""
        try:
            return nvml_call(self.lib, fn, *args)
        except NvmlFailure as f:
            raise MigCallError(what or fn, f) from None

    def count(self) -> int:
        """How many GPUs NVML sees."""
        return int(self._nv("nvmlDeviceGetCount", what="counting GPUs"))

    def read(self, index: int) -> GpuMig:
        h = self._nv("nvmlDeviceGetHandleByIndex", index, what=f"opening GPU {index}")
        uuid = self._nv("nvmlDeviceGetUUID", h)
        name = self._nv("nvmlDeviceGetName", h)
        total = int(self._nv("nvmlDeviceGetMemoryInfo", h).total)
        model = model_for(name, total)
        try:
            cur, pend = self._nv("nvmlDeviceGetMigMode", h)
        except MigCallError as exc:
            raise MigError(f"GPU {index} ({name}) does not support MIG ({exc.reason}).") from None
        ids, slices, live = self._profiles(h, total)
        layout: list[Instance] = []
        gi_ids: dict[Instance, int] = {}
        processes: dict[Instance, list[int]] = {}
        devices: dict[Instance, list[str]] = {}
        if cur:
            by_id = {v: k for k, v in ids.items()}
            layout, gi_ids = self._instances(h, ids, by_id, index)
            devices, processes = self._mig_devices(h, by_id)
        else:
            pids = [int(p.pid) for p in self._nv("nvmlDeviceGetComputeRunningProcesses", h)]
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
            devices,
        )

    def _profiles(
        self, h: Any, total: int
    ) -> tuple[dict[str, int], dict[str, int], list[MigProfile]]:
        """The GPU instance profiles the driver knows: each one's id and slice count by name,
        and those with a placement on this GPU as MigProfiles."""
        ids: dict[str, int] = {}
        slices: dict[str, int] = {}
        live: list[MigProfile] = []
        for p in range(self.lib.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = self._nv("nvmlDeviceGetGpuInstanceProfileInfo", h, p)
            except MigCallError:
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
        return ids, slices, live

    def _instances(
        self, h: Any, ids: dict[str, int], by_id: dict[int, str], index: int
    ) -> tuple[list[Instance], dict[Instance, int]]:
        """The GPU instances there are, by placement, with each one's NVML id."""
        layout: list[Instance] = []
        gi_ids: dict[Instance, int] = {}
        for pid in ids.values():
            for gi in self._gis(h, pid, index):
                info = self._nv("nvmlGpuInstanceGetInfo", gi)
                inst = (by_id[int(info.profileId)], int(info.placement.start))
                layout.append(inst)
                gi_ids[inst] = int(info.id)
        layout.sort(key=lambda x: x[1])
        return layout, gi_ids

    def _mig_devices(
        self, h: Any, by_id: dict[int, str]
    ) -> tuple[dict[Instance, list[str]], dict[Instance, list[int]]]:
        """MIG devices (one per compute instance) and their processes, mapped to their
        instance (an instance without processes left out of the second)."""
        devices: dict[Instance, list[str]] = {}
        on_instance: dict[Instance, list[int]] = {}
        for i in range(self._nv("nvmlDeviceGetMaxMigDeviceCount", h)):
            try:
                mh = self._nv("nvmlDeviceGetMigDeviceHandleByIndex", h, i)
            except MigCallError:
                continue
            gi_id = self._nv("nvmlDeviceGetGpuInstanceId", mh)
            gi = self._nv(
                "nvmlGpuInstanceGetInfo", self._nv("nvmlDeviceGetGpuInstanceById", h, gi_id)
            )
            key = (by_id[int(gi.profileId)], int(gi.placement.start))
            devices.setdefault(key, []).append(str(self._nv("nvmlDeviceGetUUID", mh)))
            on_instance.setdefault(key, []).extend(
                int(p.pid) for p in self._nv("nvmlDeviceGetComputeRunningProcesses", mh)
            )
        return devices, {k: v for k, v in on_instance.items() if v}

    def _gis(self, h: Any, profile_id: int, index: int | None = None) -> list[Any]:
        """The GPU instances of one profile (mig-parted's walk; needs root)."""
        arr = (pynvml.c_nvmlGpuInstance_t * 8)()
        n = ctypes.c_uint(8)
        try:
            self._nv("nvmlDeviceGetGpuInstances", h, profile_id, arr, ctypes.byref(n))
        except MigCallError as exc:
            if exc.code == self.lib.NVML_ERROR_NO_PERMISSION:
                raise MigError(
                    f"reading GPU {index}'s MIG instances needs root (or the mig/config "
                    "capability); run inferdeck as root to change MIG layouts."
                ) from None
            raise
        return list(arr[: n.value])

    def _placements(self, h: Any, profile_id: int) -> tuple[list[int], int]:
        """Possible placements of a profile from the driver ([] when it cannot say: not root)."""
        arr = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
        n = ctypes.c_uint(16)
        try:
            self._nv(
                "nvmlDeviceGetGpuInstancePossiblePlacements", h, profile_id, arr, ctypes.byref(n)
            )
        except MigCallError:
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
        """Change the layout (or mode). Returns a report; raises MigError on a blocked change
        (another writer, a failed pre-check, no room for the journal: nothing changed then)."""
        say = progress or (lambda _msg: None)
        self.applying.set()  # from the first read: the console waits for it before quitting
        try:
            return self._apply(index, target, say, read_only, commands)
        finally:
            self.applying.clear()

    def _apply(
        self,
        index: int,
        target: list[Instance] | str,
        say: Callable[[str], None],
        read_only: bool,
        commands: dict[int, str] | None,
    ) -> ApplyReport:
        uuid = str(self._nv("nvmlDeviceGetUUID", self._nv("nvmlDeviceGetHandleByIndex", index)))
        with gpu_lock(self.locks, uuid, index, self.user, self.command) as lock_note:
            g = self.read(index)
            problems = self.precheck(g, target, read_only, commands)
            if problems:
                raise MigError(" ".join(problems))
            report = ApplyReport(
                gpu=index,
                uuid=g.uuid,
                before=placements(g.layout),
                steps=[],
                result=None,
                user=self.user,
            )
            if lock_note:
                report.notes = [lock_note]
            journal = Journal(self.audit_path, self.simulated)
            with signals_held(say) as held:
                journal.begin(
                    gpu=index,
                    uuid=g.uuid,
                    before=layout_text(g.layout),
                    target=layout_text(target),
                    user=self.user,
                    pid=os.getpid(),
                    command=self.command,
                )
                report.apply_id = journal.apply_id
                self._bundle(report, "before", journal)
                interrupted = (
                    self._mode(g, target, report, journal, say)
                    if isinstance(target, str)
                    else self._layout(g, target, report, journal, say)
                )
                try:
                    journal.end(**self._end_fields(report))
                except JournalError as exc:
                    self._note(report, f"{exc}: this report is the only record of the end")
                self._bundle(report, "after", journal)
                if held:
                    say(
                        f"{report.result}: GPU {index} is now "
                        f"{report.after or 'no MIG instances'}; quitting as asked"
                    )
                if interrupted is not None:
                    raise interrupted
        return report

    @staticmethod
    def _end_fields(report: ApplyReport) -> dict[str, Any]:
        keep = ("result", "after", "verified", "error", "rollback_error", "next", "notes")
        return {k: v for k, v in report.to_json().items() if k in keep and v not in (None, [])}

    def _note(self, report: ApplyReport, text: str) -> None:
        report.notes = [*report.notes, text]

    def _bundle(self, report: ApplyReport, when: str, journal: Journal) -> None:
        """The automatic snapshot; one that cannot be written is a note, never a failure (after
        the change: the change was made, and the report says so)."""
        if self.snapshot is None:
            return
        try:
            path = self.snapshot(when)
        except Exception as exc:  # noqa: BLE001 - a bundle is never worth an exception here
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            made = "; the change was made" if when == "after" and report.result == "applied" else ""
            said = f"the {when}-snapshot could not be written ({why}){made}"
            self._note(report, said)
            journal.note(said)
            return
        if path is not None:
            setattr(report, f"snapshot_{when}", str(path))
            journal.note(f"snapshot {when}: {path}")

    def _layout(
        self,
        g: GpuMig,
        target: list[Instance],
        report: ApplyReport,
        journal: Journal,
        say: Callable[[str], None],
    ) -> BaseException | None:
        """Converge, verify; on anything raised, converge back. Returns what interrupted it
        (raised again once the end record is written), if anything did."""
        before = list(g.layout)
        interrupted: BaseException | None = None
        try:
            self._converge(g.index, target, report, journal, say)
            ok, said, after = self._verify(g.index, target)
            report.after = placements(after)
            if not ok:
                raise MigError(f"verification failed: {said}")
            report.verified = said
            report.result = "applied"
        except BaseException as exc:  # noqa: BLE001 - anything at all rolls back
            if not isinstance(exc, Exception):
                interrupted = exc
            report.error = str(exc) if isinstance(exc, MigError) else f"{type(exc).__name__}: {exc}"
            say(
                f"failed: {report.error}; rolling back to {placements(before) or 'no MIG instances'}"
            )
            try:
                self._converge(g.index, before, report, journal, say, rollback=True)
                ok, said, after = self._verify(g.index, before)
                report.after = placements(after)
                report.verified = said
                report.result = "rolled back" if ok else "rollback FAILED"
            except BaseException as exc2:  # noqa: BLE001
                if not isinstance(exc2, Exception) and interrupted is None:
                    interrupted = exc2
                report.result = "rollback FAILED"
                report.rollback_error = (
                    str(exc2) if isinstance(exc2, MigError) else f"{type(exc2).__name__}: {exc2}"
                )
                try:
                    report.after = placements(self.read(g.index).layout)
                except Exception:  # noqa: BLE001 - the report goes out with what it has
                    pass
        return interrupted

    def _verify(self, index: int, target: list[Instance]) -> tuple[bool, str, list[Instance]]:
        """What a workload needs: each instance of the layout at its placement, each with its
        compute instance and a MIG device UUID. (ok, what was verified or found, layout read)."""
        g = self.read(index)
        if sorted(g.layout) != sorted(target):
            return False, f"the GPU reads back {placements(g.layout) or 'no instances'}", g.layout
        if g.bare:
            return (
                False,
                f"{placements(g.bare)} has no compute instance (no MIG device)",
                g.layout,
            )
        if not target:
            return True, "no GPU instance left, as intended", g.layout
        return (
            True,
            f"{len(target)} GPU instance(s) at their placements ({placements(target)}), each with "
            "its compute instance and a MIG device UUID",
            g.layout,
        )

    def _mode(
        self,
        g: GpuMig,
        target: str,
        report: ApplyReport,
        journal: Journal,
        say: Callable[[str], None],
    ) -> BaseException | None:
        want = target == "enable"
        interrupted: BaseException | None = None
        try:
            if not want and g.layout:
                self._converge(g.index, [], report, journal, say)
            h = self._nv("nvmlDeviceGetHandleByIndex", g.index)
            status = self._step(
                report,
                journal,
                say,
                f"set MIG mode {'on' if want else 'off'}",
                "nvmlDeviceSetMigMode",
                h,
                1 if want else 0,
            )
            cur, pend = self._nv("nvmlDeviceGetMigMode", h)
            report.after = (
                f"mode current {'on' if cur else 'off'}, pending {'on' if pend else 'off'}"
            )
            if status == self.lib.NVML_ERROR_IN_USE:
                report.result = "pending: the GPU is in use"
                report.next = (
                    "the mode change could not take effect because the GPU is busy: stop every process "
                    "on it, then reset the GPU (nvidia-smi -r) or reboot."
                )
            elif status == self.lib.NVML_ERROR_RESET_REQUIRED or bool(cur) != want:
                report.result = "pending: needs a GPU reset"
                report.next = (
                    f"reset the GPU (nvidia-smi -r -i {g.index}) or reboot; inferdeck never does."
                )
            else:
                report.result = "applied"
                report.next = (
                    "MIG is on: choose a layout to create instances." if want else "MIG is off."
                )
        except BaseException as exc:  # noqa: BLE001 - anything at all rolls back
            if not isinstance(exc, Exception):
                interrupted = exc
            report.result = "failed"
            report.error = str(exc) if isinstance(exc, MigError) else f"{type(exc).__name__}: {exc}"
            if g.layout and not want:
                try:
                    self._converge(g.index, g.layout, report, journal, say, rollback=True)
                    ok, said, after = self._verify(g.index, g.layout)
                    report.after, report.verified = placements(after), said
                    report.result = "rolled back" if ok else "rollback FAILED"
                except BaseException as exc2:  # noqa: BLE001
                    if not isinstance(exc2, Exception) and interrupted is None:
                        interrupted = exc2
                    report.rollback_error = (
                        str(exc2)
                        if isinstance(exc2, MigError)
                        else f"{type(exc2).__name__}: {exc2}"
                    )
                    report.result = "rollback FAILED"
        return interrupted

    def _step(
        self,
        report: ApplyReport,
        journal: Journal,
        say: Callable[[str], None],
        what: str,
        fn: str,
        *args: Any,
    ) -> Any:
        """One mutating NVML call: in the journal before it is made, its outcome after. Forward,
        a step whose record cannot be written is not taken; rolling back, it is taken anyway (the
        old layout matters more than its record) and the report says the journal stopped."""
        n = len(report.steps) + 1
        rollback = what.startswith("rollback")
        try:
            journal.step(n, what)
        except JournalError as exc:
            if not rollback:
                raise
            if not any("journal" in x for x in report.notes):
                self._note(report, f"{exc} from step {n} on: this report is the only record")
        say(what)
        stamp = datetime.now(tz=UTC).isoformat()
        try:
            result = self._nv(fn, *args, what=what)
        except MigCallError as exc:
            report.steps = [
                *report.steps,
                MigStep(t=stamp, step=what, result=f"failed: {exc.reason}"),
            ]
            try:
                journal.done(n, f"failed: {exc.reason}")
            except JournalError:
                pass  # the failure is raised either way
            raise
        status = int(result) if fn == "nvmlDeviceSetMigMode" else None
        step = MigStep(t=stamp, step=what, result="ok")
        report.steps = [
            *report.steps,
            step if status is None else step.model_copy(update={"status": status}),
        ]
        try:
            journal.done(n, "ok", status)
        except JournalError:
            if not rollback:
                raise
        return result

    def _converge(
        self,
        index: int,
        target: list[Instance],
        report: ApplyReport,
        journal: Journal,
        say: Callable[[str], None],
        rollback: bool = False,
    ) -> None:
        g = self.read(index)
        keep, destroy, create = diff(g.layout, target)
        h = self._nv("nvmlDeviceGetHandleByIndex", index)
        tag = "rollback: " if rollback else ""

        def step(what: str, fn: str, *args: Any) -> Any:
            return self._step(report, journal, say, f"{tag}{what}", fn, *args)

        def full_ci(gi: Any, what: str, name: str) -> None:  # one full-size compute instance
            info = self._nv(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, CI_INDEX[g.slices[name]], 0
            )
            step(what, "nvmlGpuInstanceCreateComputeInstance", gi, int(info.id))

        for name, start in destroy:
            gi = self._gi_at(h, g, name, start)
            for ci in self._cis(gi):
                step(f"destroy CI on {name}@{start}", "nvmlComputeInstanceDestroy", ci)
            step(f"destroy GI {name}@{start}", "nvmlGpuInstanceDestroy", gi)
        for name, start in keep:  # a kept instance that lost its compute instance gets it back
            if g.devices.get((name, start)):
                continue
            gi = self._gi_at(h, g, name, start)
            if not self._cis(gi):
                full_ci(gi, f"re-create CI on {name}@{start}", name)
        for name, start in sorted(
            create, key=lambda x: (-g.slices.get(x[0], 0), x[1])
        ):  # largest first
            place = pynvml.c_nvmlGpuInstancePlacement_t()
            place.start, place.size = start, self._size(g, name)
            gi = step(
                f"create GI {name}@{start}",
                "nvmlDeviceCreateGpuInstanceWithPlacement",
                h,
                g.profile_ids[name],
                ctypes.byref(place),
            )
            full_ci(gi, f"create CI on {name}@{start}", name)

    def _size(self, g: GpuMig, name: str) -> int:
        if g.spec is not None:
            return g.spec.profile(name).size
        arr = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
        n = ctypes.c_uint(16)
        h = self._nv("nvmlDeviceGetHandleByIndex", g.index)
        self._nv(
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            h,
            g.profile_ids[name],
            arr,
            ctypes.byref(n),
        )
        return int(arr[0].size)

    def _gi_at(self, h: Any, g: GpuMig, name: str, start: int) -> Any:
        for gi in self._gis(h, g.profile_ids[name], g.index):
            if int(self._nv("nvmlGpuInstanceGetInfo", gi).placement.start) == start:
                return gi
        raise MigError(f"no GPU instance {name}@{start} on GPU {g.index}")

    def _cis(self, gi: Any) -> list[Any]:
        out = []
        for c in range(getattr(self.lib, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 9)):
            try:
                info = self._nv("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, c, 0)
            except MigCallError:
                continue
            arr = (pynvml.c_nvmlComputeInstance_t * max(1, int(info.instanceCount)))()
            n = ctypes.c_uint(max(1, int(info.instanceCount)))
            self._nv("nvmlGpuInstanceGetComputeInstances", gi, int(info.id), arr, ctypes.byref(n))
            out += list(arr[: n.value])
        return out

    # --- recovery --------------------------------------------------------------------------------
    def recoveries(self) -> list[Recovery]:
        """Every apply the journal holds as begun and never ended, with the GPU read back: which
        layout it is in, and the apply that brings it to a recorded state."""
        found = unfinished(self.audit_path)
        if not found:
            return []
        by_uuid: dict[str, int] = {}
        for i in range(self.count()):
            try:
                by_uuid[
                    str(self._nv("nvmlDeviceGetUUID", self._nv("nvmlDeviceGetHandleByIndex", i)))
                ] = i
            except MigCallError:
                continue
        out = []
        for op in found:
            index = by_uuid.get(op.uuid)
            state = "unknown"
            if index is not None:
                try:
                    g = self.read(index)
                    state = judge(op, g.layout, g.bare, g.mode_current)
                except MigError:
                    pass
            target = completing_target(op)
            sentence = describe_open(op, state)
            if index is None:
                sentence += " No GPU with its uuid is on this node now."
            out.append(Recovery(op, index, state, target, sentence))
        return out
