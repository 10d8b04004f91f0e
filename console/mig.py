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
import yaml

from console.gpucatalog import GpuModel, MigProfile, MigSpec, catalog, mig_profile_name
from console.recording import state_dir
from console.yamlfile import ConfigError, load_yaml

CI_INDEX = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}

Instance = tuple[str, int]  # (profile name, placement start)


class MigError(Exception):
    """A re-layout cannot go ahead, or failed; the message is one sentence."""


# --- the catalogue of valid layouts -------------------------------------------------------------

def _base(name: str) -> str:
    return name.split("+")[0].split("-")[0]


def _fits(layout: list[Instance], p: MigProfile, start: int, profiles: dict[str, MigProfile], max_instances: int
          ) -> bool:
    if start not in p.starts or len(layout) >= max_instances:
        return False
    if sum(1 for n, _ in layout if n == p.name) >= p.max:
        return False
    if "+me" in p.name and any("+me" in n for n, _ in layout):
        return False
    lo, hi = start, start + p.size
    return all(not (lo < s + profiles[n].size and s < hi) for n, s in layout)


def _spec(model: GpuModel | MigSpec) -> MigSpec:
    spec = model.mig if isinstance(model, GpuModel) else model
    if spec is None:
        raise MigError(f"{model.name if isinstance(model, GpuModel) else 'this GPU'} has no MIG.")
    return spec


def valid_layouts(model: GpuModel | MigSpec) -> list[list[Instance]]:
    """Every maximal layout of the plain profiles, then the same layouts with each size class
    switched, as a whole, to one attribute variant (+gfx, -me, +me.all, +me) within its counts."""
    spec = _spec(model)
    profiles = {p.name: p for p in spec.profiles}
    plain = [p for p in spec.profiles if "+" not in p.name and "-" not in p.name]
    grid = max(s + p.size for p in spec.profiles for s in p.starts)
    found: set[tuple[Instance, ...]] = set()

    def search(pos: int, layout: list[Instance]) -> None:
        if pos >= grid:
            found.add(tuple(sorted(layout, key=lambda x: (x[1], x[0]))))
            return
        for p in plain:
            if _fits(layout, p, pos, profiles, spec.max_instances):
                search(pos + p.size, layout + [(p.name, pos)])
        search(pos + 1, layout)

    search(0, [])

    def maximal(layout: tuple[Instance, ...]) -> bool:
        return not any(_fits(list(layout), p, s, profiles, spec.max_instances) for p in plain for s in p.starts)

    base = sorted((list(x) for x in found if x and maximal(x)), key=lambda L: (-max(profiles[n].slices for n, _ in L),
                                                                                 len(L), L))
    out = [list(b) for b in base]
    seen = {tuple(b) for b in base}
    for layout in base:
        for variant in spec.profiles:
            if variant.name in (p.name for p in plain):
                continue
            base_name = _base(variant.name)
            if not any(n == base_name for n, _ in layout):
                continue
            if variant.name.endswith("+me") or variant.name.endswith("+me.all"):
                # one instance owns the media engines: swap only the first of that size
                idx = next(i for i, (n, _) in enumerate(layout) if n == base_name)
                cand = list(layout)
                cand[idx] = (variant.name, cand[idx][1])
            else:
                cand = [(variant.name if n == base_name else n, s) for n, s in layout]
            if sum(1 for n, _ in cand if n == variant.name) > variant.max:
                continue
            key = tuple(sorted(cand, key=lambda x: (x[1], x[0])))
            if key not in seen:
                seen.add(key)
                out.append(list(key))
    return out


def describe(layout: list[Instance]) -> str:
    """'2g.48gb + 1g.24gb x2' (counts, largest first)."""
    if not layout:
        return "no instances"
    counts: dict[str, int] = {}
    for n, _ in layout:
        counts[n] = counts.get(n, 0) + 1
    parts = sorted(counts.items(), key=lambda kv: (-int(kv[0].split("g.")[0]), kv[0]))
    return " + ".join(n if c == 1 else f"{n} x{c}" for n, c in parts)


def placements(layout: list[Instance]) -> str:
    return ",".join(f"{n}@{s}" for n, s in sorted(layout, key=lambda x: x[1]))


def parse_layout(text: str, model: GpuModel | MigSpec) -> list[Instance] | str:
    """'2g.48gb@0,1g.24gb@6,1g.24gb@9' (explicit), '2g.48gb+1g.24gb*2' (counts: the catalogue's first
    layout with them), or 'disable' / 'enable'. Returns the layout, or the mode word."""
    t = text.strip().lower()
    if t in ("disable", "enable"):
        return t
    layouts = valid_layouts(model)
    if "@" in t:
        inst = []
        for part in t.split(","):
            name, _, start = part.strip().partition("@")
            if not start.isdigit():
                raise MigError(f"{part!r}: give each instance as profile@start, e.g. 1g.24gb@6.")
            inst.append((name, int(start)))
        key = sorted(inst, key=lambda x: (x[1], x[0]))
        if key not in [sorted(L, key=lambda x: (x[1], x[0])) for L in layouts] and not _valid_partial(key, model):
            raise MigError(f"{text!r} is not a valid layout for this GPU; see `inferdeck mig layouts`.")
        return key
    want: dict[str, int] = {}
    for part in t.replace(" ", "").split("+"):
        name, _, count = part.partition("*")
        name = name.removesuffix("x")
        want[name] = want.get(name, 0) + (int(count) if count.isdigit() else 1)
    for L in layouts:
        got: dict[str, int] = {}
        for n, _ in L:
            got[n] = got.get(n, 0) + 1
        if got == want:
            return L
    raise MigError(f"{text!r} is not a valid layout for this GPU; see `inferdeck mig layouts`.")


def _valid_partial(layout: list[Instance], model: GpuModel | MigSpec) -> bool:
    spec = _spec(model)
    profiles = {p.name: p for p in spec.profiles}
    acc: list[Instance] = []
    for n, s in layout:
        p = profiles.get(n)
        if p is None or not _fits(acc, p, s, profiles, spec.max_instances):
            return False
        acc.append((n, s))
    return True


# --- reading and writing NVML -------------------------------------------------------------------

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
    gi_ids: dict[Instance, int] = field(default_factory=dict)  # the driver's GPU instance id of each


def model_for(name: str, total_bytes: int) -> GpuModel | None:
    for m in catalog().values():
        if m.name == name or m.memory_total_mib * 1024 * 1024 == total_bytes:
            return m
    return None


class MigManager:
    """Reads and changes one node's MIG layout through an NVML module (pynvml or the simulator)."""

    def __init__(self, lib: Any, audit_path: Path | None = None, user: str | None = None,
                 snapshot: Callable[[str], Path | None] | None = None, simulated: bool = False) -> None:
        self.lib = lib
        self.simulated = simulated  # the demo's GPUs: every audit entry says so
        self.audit_path = audit_path or state_dir() / "mig-audit.jsonl"
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
            raise MigError(f"GPU {index} ({name}) does not support MIG ({self._err(exc)}).") from None
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
                live.append(MigProfile(name=pname, id=int(info.id), index=p, slices=int(info.sliceCount),
                                       memory_mib=int(info.memorySizeMB), max=int(info.instanceCount), size=size,
                                       starts=starts))
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
                        raise MigError(f"reading GPU {index}'s MIG instances needs root (or the mig/config "
                                       "capability); run inferdeck as root to change MIG layouts.") from None
                    raise
                for gi in arr[: n.value]:
                    info = lib.nvmlGpuInstanceGetInfo(gi)
                    inst = (by_id[int(info.profileId)], int(info.placement.start))
                    layout.append(inst)
                    gi_ids[inst] = int(info.id)
            layout.sort(key=lambda x: x[1])
            # processes per MIG device, mapped to their instance
            starts = {}
            for i in range(lib.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    mh = lib.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                except lib.NVMLError:
                    continue
                gi_id = lib.nvmlDeviceGetGpuInstanceId(mh)
                gi = lib.nvmlGpuInstanceGetInfo(lib.nvmlDeviceGetGpuInstanceById(h, gi_id))
                key = (by_id[int(gi.profileId)], int(gi.placement.start))
                starts[key] = [int(p.pid) for p in lib.nvmlDeviceGetComputeRunningProcesses(mh)]
            processes = {k: v for k, v in starts.items() if v}
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
        return GpuMig(index, uuid, model, bool(cur), bool(pend), layout, ids, slices, processes, spec, source, gi_ids)

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
    @staticmethod
    def diff(current: list[Instance], target: list[Instance]) -> tuple[list[Instance], list[Instance], list[Instance]]:
        """(keep, destroy, create)."""
        cur, tgt = set(current), set(target)
        return sorted(cur & tgt, key=lambda x: x[1]), sorted(cur - tgt, key=lambda x: x[1]), \
            sorted(tgt - cur, key=lambda x: x[1])

    def precheck(self, g: GpuMig, target: list[Instance] | str, read_only: bool = False,
                 commands: dict[int, str] | None = None) -> list[str]:
        """Reasons the change must not go ahead (empty: it may)."""
        reasons = []
        if read_only:
            reasons.append("inferdeck runs read-only (--read-only or a replay): no change is made.")
        if g.mode_current != g.mode_pending:
            reasons.append(f"GPU {g.index} has a MIG mode change pending: reset the GPU or reboot first "
                           "(inferdeck never does either).")
        if os.geteuid() != 0 and not self._has_capability():
            reasons.append("changing MIG needs root (or read access to /proc/driver/nvidia/capabilities/mig/config).")
        if isinstance(target, str):
            affected = list(g.processes)
        else:
            _, destroy, _ = self.diff(g.layout, target)
            affected = [k for k in g.processes if k in destroy]
        for key in affected:
            for pid in g.processes[key]:
                cmd = (commands or {}).get(pid, "command not visible")
                reasons.append(f"process {pid} ({cmd}) runs on {key[0]}@{key[1]}, which would be destroyed: "
                               "stop it first.")
        return reasons

    @staticmethod
    def _has_capability() -> bool:
        return os.access("/proc/driver/nvidia/capabilities/mig/config", os.R_OK)

    # --- applying ------------------------------------------------------------------------------
    def apply(self, index: int, target: list[Instance] | str, progress: Callable[[str], None] | None = None,
              read_only: bool = False, commands: dict[int, str] | None = None) -> dict:
        """Change the layout (or mode). Returns a report; raises MigError on a blocked change."""
        say = progress or (lambda _msg: None)
        g = self.read(index)
        problems = self.precheck(g, target, read_only, commands)
        if problems:
            raise MigError(" ".join(problems))
        before = list(g.layout)
        report: dict[str, Any] = {"gpu": index, "uuid": g.uuid, "before": placements(before), "steps": [],
                                  "result": None, "user": self.user}
        if self.snapshot:
            report["snapshot_before"] = str(self.snapshot("before") or "")
        if isinstance(target, str):
            return self._mode(g, target, report, say)
        steps: list[dict] = report["steps"]
        try:
            self._converge(index, target, steps, say)
            after = self.read(index).layout
            if sorted(after) != sorted(target):
                raise MigError(f"verification failed: the GPU reads back {placements(after)}")
            report["result"] = "applied"
            report["after"] = placements(after)
        except Exception as exc:  # noqa: BLE001 - any failure rolls back
            report["error"] = f"{type(exc).__name__}: {exc}"
            say(f"failed: {report['error']}; rolling back to {placements(before)}")
            try:
                self._converge(index, before, steps, say, rollback=True)
                after = self.read(index).layout
                ok = sorted(after) == sorted(before)
                report["result"] = "rolled back" if ok else "rollback FAILED"
                report["after"] = placements(after)
            except Exception as exc2:  # noqa: BLE001
                report["result"] = "rollback FAILED"
                report["rollback_error"] = f"{type(exc2).__name__}: {exc2}"
        self._finish(report)
        return report

    def _finish(self, report: dict) -> None:
        if self.snapshot:
            report["snapshot_after"] = str(self.snapshot("after") or "")
        self.audit(report)

    def _mode(self, g: GpuMig, target: str, report: dict, say: Callable[[str], None]) -> dict:
        lib = self.lib
        want = target == "enable"
        steps = report["steps"]
        try:
            if not want and g.layout:
                self._converge(g.index, [], steps, say)
            h = lib.nvmlDeviceGetHandleByIndex(g.index)
            status = lib.nvmlDeviceSetMigMode(h, 1 if want else 0)
            steps.append(self._step(f"set MIG mode {'on' if want else 'off'}", "ok", status=int(status)))
            cur, pend = lib.nvmlDeviceGetMigMode(h)
            report["after"] = f"mode current {'on' if cur else 'off'}, pending {'on' if pend else 'off'}"
            if status == lib.NVML_ERROR_IN_USE:
                report["result"] = "pending: the GPU is in use"
                report["next"] = ("the mode change could not take effect because the GPU is busy: stop every process "
                                  "on it, then reset the GPU (nvidia-smi -r) or reboot.")
            elif status == lib.NVML_ERROR_RESET_REQUIRED or bool(cur) != want:
                report["result"] = "pending: needs a GPU reset"
                report["next"] = f"reset the GPU (nvidia-smi -r -i {g.index}) or reboot; inferdeck never does."
            else:
                report["result"] = "applied"
                report["next"] = ("MIG is on: choose a layout to create instances." if want else "MIG is off.")
        except Exception as exc:  # noqa: BLE001
            report["result"] = "failed"
            report["error"] = f"{type(exc).__name__}: {exc}"
            if g.layout and not want:
                try:
                    self._converge(g.index, g.layout, steps, say, rollback=True)
                    report["result"] = "rolled back"
                except Exception as exc2:  # noqa: BLE001
                    report["rollback_error"] = f"{type(exc2).__name__}: {exc2}"
                    report["result"] = "rollback FAILED"
        self._finish(report)
        return report

    def _step(self, what: str, result: str, **extra: Any) -> dict:
        return {"t": datetime.now(tz=UTC).isoformat(), "step": what, "result": result, **extra}

    def _converge(self, index: int, target: list[Instance], steps: list[dict], say: Callable[[str], None],
                  rollback: bool = False) -> None:
        lib = self.lib
        g = self.read(index)
        _, destroy, create = self.diff(g.layout, target)
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
        for name, start in sorted(create, key=lambda x: (-g.slices.get(x[0], 0), x[1])):  # largest first
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
        self.lib.nvmlDeviceGetGpuInstancePossiblePlacements(h, g.profile_ids[name], arr, ctypes.byref(n))
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

    def audit(self, report: dict) -> None:
        self.audit_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        entry = {"t": datetime.now(tz=UTC).isoformat(), **report, **({"simulated": True} if self.simulated else {})}
        fd = os.open(self.audit_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def nvidia_smi(index: int, current: list[Instance], target: list[Instance] | str, ids: dict[str, int],
               gi_ids: dict[Instance, int] | None = None) -> list[str]:
    """The equivalent nvidia-smi commands, runnable as printed: instances to destroy by their GPU
    instance ids (as the driver reported them), new ones by profile id and placement."""
    if target == "disable":
        return [f"nvidia-smi mig -i {index} -dci", f"nvidia-smi mig -i {index} -dgi", f"nvidia-smi -i {index} -mig 0"]
    if target == "enable":
        return [f"nvidia-smi -i {index} -mig 1"]
    _, destroy, create = MigManager.diff(current, target)
    cmds = []
    for name, start in destroy:
        gi = (gi_ids or {}).get((name, start))
        ref = str(gi) if gi is not None else f"<GI id of {name}@{start}>"
        cmds.append(f"nvidia-smi mig -i {index} -dci -gi {ref}")
        cmds.append(f"nvidia-smi mig -i {index} -dgi -gi {ref}")
    for name, start in create:
        cmds.append(f"nvidia-smi mig -i {index} -cgi {ids.get(name, name)}:{start} -C")
    return cmds


# --- mig-parted config ---------------------------------------------------------------------------

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


def import_mig_parted(text: str, label: str, gpus: list[GpuMig], source: str = "mig-parted config"
                      ) -> dict[int, list[Instance] | str]:
    """Per GPU index, the layout (or mode word) a mig-parted config label asks for. Errors are one
    sentence naming ``source`` and the line."""
    try:
        doc, where = load_yaml(text, source)
    except ConfigError as exc:
        raise MigError(str(exc)) from None
    if not isinstance(doc, dict) or doc.get("version") != "v1" or not isinstance(doc.get("mig-configs"), dict):
        raise MigError(f"{source}: not a mig-parted config: expected `version: v1` and a `mig-configs:` mapping.")
    configs = doc["mig-configs"]
    if label not in configs:
        raise MigError(f"{source}: no config labelled {label!r}; labels: {', '.join(map(str, configs))}.")
    if not isinstance(configs[label], list):
        raise MigError(f"{where(('mig-configs', label))}: {label} should be a list of device specs.")
    out: dict[int, list[Instance] | str] = {}
    for i, spec in enumerate(configs[label]):
        at = where(("mig-configs", label, i))
        if not isinstance(spec, dict):
            raise MigError(f"{at}: each entry of {label} should be a mapping (devices, mig-enabled, mig-devices).")
        unknown = set(spec) - {"device-filter", "devices", "mig-enabled", "mig-devices"}
        if unknown:
            raise MigError(f"{at}: unknown field {sorted(unknown)[0]!r} in {label}.")
        filters = spec.get("device-filter")
        filters = [filters] if isinstance(filters, str) else (filters or [])
        devices = spec.get("devices")
        if devices != "all" and not (isinstance(devices, list) and all(isinstance(d, int) for d in devices)):
            raise MigError(f"{where(('mig-configs', label, i, 'devices'))}: devices should be `all` or a list of "
                           "GPU indexes.")
        counts = spec.get("mig-devices") or {}
        if not isinstance(counts, dict) or not all(isinstance(c, int) and c >= 0 for c in counts.values()):
            raise MigError(f"{where(('mig-configs', label, i, 'mig-devices'))}: mig-devices should map profile "
                           "names to counts (e.g. 1g.24gb: 4).")
        for g in gpus:
            if devices != "all" and g.index not in devices:
                continue
            if filters and (g.model is None or g.model.pci_device_id.lower() not in [f.lower() for f in filters]):
                continue
            if not spec.get("mig-enabled"):
                out[g.index] = "disable"
                continue
            if not counts:
                out[g.index] = "enable"
                continue
            if g.spec is None:
                raise MigError(f"GPU {g.index}'s MIG profiles are unknown (not in the catalogue, driver silent).")
            layout = parse_layout("+".join(f"{n}*{c}" for n, c in counts.items() if c), g.spec)
            if isinstance(layout, str):
                raise MigError(f"{where(('mig-configs', label, i, 'mig-devices'))}: GPU {g.index}: {layout}")
            out[g.index] = layout
    return out
