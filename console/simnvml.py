"""A simulated ``pynvml``: same function names, return shapes (pynvml's own ctypes structs) and
``pynvml.NVMLError_*`` classes, for a node built from config/gpus.yaml.

It stands in at the outermost edge only: the NVML reader runs unchanged against it. Load
(utilisation, memory held) comes from a callback, so GPUs follow the simulated engines.
"""

from __future__ import annotations

import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

from console.gpucatalog import MIB, GpuModel, MigProfile, catalog


@dataclass(frozen=True, slots=True)
class DeviceLoad:
    utilization: float  # 0..1
    memory_used_bytes: int


LoadFn = Callable[[int, int | None], DeviceLoad]  # (gpu index, MIG device index or None)


@dataclass
class SimInstance:
    gi_id: int
    ci_id: int
    profile: MigProfile
    start: int
    uuid: str


@dataclass
class SimGpu:
    model: GpuModel
    index: int
    uuid: str
    mig_current: bool = False
    mig_pending: bool = False
    instances: list[SimInstance] = field(default_factory=list)
    temperature_c: float = 32.0
    energy_mj: float = 0.0
    last_t: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class _Handle:
    gpu: int
    mig: int | None = None  # index into the GPU's instance list


@dataclass(frozen=True)
class _GiHandle:
    gpu: int
    gi_id: int


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def _uuid(prefix: str, *parts: object) -> str:
    return f"{prefix}-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, '/'.join(map(str, parts)))}"


class SimNvml:
    """Module-like object exposing the pynvml functions inferdeck's reader calls."""

    # pynvml's own error classes, so callers catch exactly what they would catch from pynvml
    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError

    def __init__(self, load: LoadFn | None = None, driver_version: str = "580.95.05") -> None:
        self.gpus: list[SimGpu] = []
        self.load = load
        self.driver_version = driver_version
        self.initialized = False
        self.lost: set[int] = set()
        self.processes: dict[tuple[int, int | None], list[tuple[int, int]]] = {}
        self._lock = threading.RLock()
        for name in dir(pynvml):  # constants and error classes, as `import pynvml` gives them
            if name.startswith(("NVML_", "NVMLError")) and not hasattr(self, name):
                setattr(self, name, getattr(pynvml, name))

    # --- building the node -------------------------------------------------------------
    def add_gpu(self, model_key: str, mig: list[tuple[str, int]] | None = None) -> SimGpu:
        model = catalog()[model_key]
        gpu = SimGpu(model=model, index=len(self.gpus), uuid=_uuid("GPU", model_key, len(self.gpus)))
        if mig is not None:
            if model.mig is None:
                raise ValueError(f"{model.name} has no MIG")
            gpu.mig_current = gpu.mig_pending = True
            for profile_name, start in mig:
                self._create(gpu, model.mig.profile(profile_name), start)
        self.gpus.append(gpu)
        return gpu

    def _create(self, gpu: SimGpu, profile: MigProfile, start: int) -> SimInstance:
        if start not in profile.starts:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        lo, hi = start, start + profile.size
        for inst in gpu.instances:
            s, e = inst.start, inst.start + inst.profile.size
            if lo < e and s < hi:
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        same = sum(1 for i in gpu.instances if i.profile.id == profile.id)
        if same >= profile.max:
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi_id = 1 + max((i.gi_id for i in gpu.instances), default=0)
        inst = SimInstance(gi_id, 0, profile, start, _uuid("MIG", gpu.uuid, gi_id, start, profile.id))
        gpu.instances.append(inst)
        gpu.instances.sort(key=lambda i: i.start)
        return inst

    def add_process(self, gpu: int, mig: int | None, pid: int, used_bytes: int) -> None:
        """A compute process on a GPU (mig None) or on one of its MIG devices."""
        self.processes.setdefault((gpu, mig), []).append((pid, used_bytes))

    def lose_gpu(self, index: int) -> None:
        """Fault injection: the GPU fell off the bus; every call on it raises GPU_IS_LOST."""
        self.lost.add(index)

    # --- helpers -------------------------------------------------------------------------
    def _gpu(self, handle: object) -> SimGpu:
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        if not isinstance(handle, _Handle | _GiHandle) or handle.gpu >= len(self.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if handle.gpu in self.lost:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self.gpus[handle.gpu]

    def _inst(self, handle: _Handle) -> SimInstance:
        gpu = self._gpu(handle)
        if handle.mig is None or handle.mig >= len(gpu.instances):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.instances[handle.mig]

    def _load(self, gpu: int, mig: int | None) -> DeviceLoad:
        if self.load is None:
            return DeviceLoad(0.0, 0)
        return self.load(gpu, mig)

    def _gpu_load(self, gpu: SimGpu) -> tuple[float, int]:
        if gpu.mig_current and gpu.instances:
            loads = [self._load(gpu.index, i) for i in range(len(gpu.instances))]
            util = sum(ld.utilization * i.profile.slices for ld, i in zip(loads, gpu.instances, strict=True))
            util /= max(p.slices for p in gpu.model.mig.profiles)  # type: ignore[union-attr]
            return min(util, 1.0), sum(ld.memory_used_bytes for ld in loads)
        ld = self._load(gpu.index, None)
        return ld.utilization, ld.memory_used_bytes

    def _advance(self, gpu: SimGpu) -> tuple[float, float]:
        """Power (W) and temperature follow utilisation with a thermal lag."""
        util, _ = self._gpu_load(gpu)
        m = gpu.model
        power = m.power_idle_w + (m.power_limit_w * 0.92 - m.power_idle_w) * util
        now = time.monotonic()
        dt = max(0.0, now - gpu.last_t)
        gpu.last_t = now
        target = 30.0 + 48.0 * util
        k = min(1.0, dt / 20.0)
        gpu.temperature_c += (target - gpu.temperature_c) * k
        gpu.energy_mj += power * dt * 1000.0
        return power, gpu.temperature_c

    # --- pynvml API --------------------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self.initialized = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802
        handle = _Handle(index)
        self._gpu(handle)
        return handle

    def nvmlDeviceGetName(self, handle: _Handle) -> str:  # noqa: N802
        gpu = self._gpu(handle)
        if handle.mig is not None:
            return f"{gpu.model.name} MIG {self._inst(handle).profile.name}"
        return gpu.model.name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:  # noqa: N802
        if handle.mig is not None:
            return self._inst(handle).uuid
        return self._gpu(handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None):  # noqa: N802
        gpu = self._gpu(handle)
        with self._lock:
            if handle.mig is not None:
                inst = self._inst(handle)
                total = inst.profile.memory_mib * MIB
                used = min(total, self._load(gpu.index, handle.mig).memory_used_bytes)
            else:
                total = gpu.model.memory_total_mib * MIB
                used = min(total, self._gpu_load(gpu)[1])
        reserved = 0 if handle.mig is not None else 512 * MIB
        if version == pynvml.nvmlMemory_v2:
            mem = pynvml.c_nvmlMemory_v2_t()
            mem.version, mem.total, mem.reserved = version, total, reserved
            mem.used, mem.free = used + reserved, total - used - reserved
            return mem
        mem = pynvml.c_nvmlMemory_t()
        mem.total, mem.used, mem.free = total, used, total - used
        return mem

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle):  # noqa: N802
        gpu = self._gpu(handle)
        if gpu.mig_current or handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        util = pynvml.c_nvmlUtilization_t()
        load = self._gpu_load(gpu)[0]
        util.gpu = round(load * 100)
        util.memory = round(load * 55)
        return util

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        if handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            return round(self._advance(gpu)[0] * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        if handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return round(gpu.model.power_limit_w * 1000)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        if handle.mig is not None or sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            return round(self._advance(gpu)[1])

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:  # noqa: N802
        gpu = self._gpu(handle)
        if gpu.model.mig is None or handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [int(gpu.mig_current), int(gpu.mig_pending)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        if gpu.model.mig is None or not gpu.mig_current:
            return 0
        return gpu.model.mig.max_instances

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:  # noqa: N802
        gpu = self._gpu(handle)
        if not gpu.mig_current:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.instances):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return _Handle(handle.gpu, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:  # noqa: N802
        return self._inst(handle).gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle: _Handle) -> int:  # noqa: N802
        return self._inst(handle).ci_id

    def nvmlDeviceGetGpuInstanceById(self, handle: _Handle, gi_id: int) -> _GiHandle:  # noqa: N802
        gpu = self._gpu(handle)
        if not gpu.mig_current:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not any(i.gi_id == gi_id for i in gpu.instances):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return _GiHandle(handle.gpu, gi_id)

    def nvmlGpuInstanceGetInfo(self, gi: _GiHandle):  # noqa: N802
        gpu = self._gpu(gi)
        for inst in gpu.instances:
            if inst.gi_id == gi.gi_id:
                info = pynvml.c_nvmlGpuInstanceInfo_t()
                info.id, info.profileId = inst.gi_id, inst.profile.id
                info.placement.start, info.placement.size = inst.start, inst.profile.size
                return info
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: _Handle, profile: int, version: int = 2):  # noqa: N802
        gpu = self._gpu(handle)
        if profile < 0 or profile >= pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if gpu.model.mig is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        for p in gpu.model.mig.profiles:
            if p.index == profile:
                info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
                info.id, info.sliceCount, info.instanceCount = p.id, p.slices, p.max
                info.memorySizeMB = p.memory_mib
                info.name = f"MIG {p.name}".encode()
                return info
        raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list:  # noqa: N802
        gpu = self._gpu(handle)
        keys = [(handle.gpu, handle.mig)] if handle.mig is not None or not gpu.mig_current else \
            [(handle.gpu, i) for i in range(len(gpu.instances))]
        out = []
        for key in keys:
            inst = gpu.instances[key[1]] if key[1] is not None else None
            for pid, used in self.processes.get(key, []):
                out.append(SimpleNamespace(pid=pid, usedGpuMemory=used,
                                           gpuInstanceId=inst.gi_id if inst else 0xFFFFFFFF,
                                           computeInstanceId=inst.ci_id if inst else 0xFFFFFFFF))
        return out
