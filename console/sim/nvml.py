"""A simulated ``pynvml``: same function names, return shapes (pynvml's own ctypes structs,
pointer-typed GPU/compute-instance handles) and ``pynvml.NVMLError_*`` classes, for a node built
from config/gpus.yaml.

It stands in at the outermost edge only: the NVML reader and the MIG planner run unchanged
against it. Load (utilisation, memory held) comes from a callback, so GPUs follow the simulated
engines. Faults can be injected per GPU, per function, from a chosen time or on the k-th call;
MIG instance creation enforces placements, counts and overlap as the driver does.
"""

from __future__ import annotations

import ctypes
import threading
import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from console.gpucatalog import MIB, GpuModel, MigProfile, catalog

ARCH = {
    "ampere": pynvml.NVML_DEVICE_ARCH_AMPERE,
    "ada": pynvml.NVML_DEVICE_ARCH_ADA,
    "hopper": pynvml.NVML_DEVICE_ARCH_HOPPER,
    "blackwell": pynvml.NVML_DEVICE_ARCH_BLACKWELL,
}
CI_INDEX = {
    1: 0x0,
    2: 0x1,
    3: 0x2,
    4: 0x3,
    7: 0x4,
    8: 0x5,
    6: 0x6,
}  # compute slices -> CI profile index
NA_UINT = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class DeviceLoad:
    utilization: float  # 0..1
    memory_used_bytes: int


LoadFn = Callable[[int, int | None], DeviceLoad]  # (gpu index, MIG device index or None)


@dataclass
class SimCI:
    ci_id: int
    slices: int
    uuid: str


@dataclass
class SimGI:
    gi_id: int
    profile: MigProfile
    start: int
    cis: list[SimCI] = field(default_factory=list)
    serial: int = 0  # creation order on the node: a re-created instance is a new one
    activity: list[float] = field(default_factory=lambda: [0.0, -1.0])  # integral, last t


# GPM metrics the simulator answers: each is the entity's average utilisation (0..1) times this
GPM_TRUTH = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 100.0,
    pynvml.NVML_GPM_METRIC_SM_UTIL: 90.0,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 45.0,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 70.0,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 60.0,
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 1500.0,  # MiB/s
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 3000.0,
    **{getattr(pynvml, f"NVML_GPM_METRIC_NVDEC_{i}_UTIL"): 0.0 for i in range(8)},
}
GPM_ARCHS = ("hopper", "blackwell")


@dataclass
class SimGpu:
    model: GpuModel
    index: int
    uuid: str
    bus_id: str
    mig_current: bool = False
    mig_pending: bool = False
    gis: list[SimGI] = field(default_factory=list)
    temperature_c: float = 32.0
    energy_mj: float = 0.0
    last_t: float | None = None  # the simulator clock's time of the last power reading
    clock_reasons: int = 0
    # clock event reasons a test or the demo holds on (HW slowdown, power brake…), beside those
    # the power and thermal model sets itself
    forced_reasons: int = 0
    # an operator's lower power limit (nvidia-smi -pl); None: the board's default
    enforced_limit_w: float | None = None
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    retired_pages: int = 0
    persistence: bool = True
    activity: list[float] = field(default_factory=lambda: [0.0, -1.0])  # whole-GPU integral, last t

    def mig_devices(self) -> list[tuple[SimGI, SimCI]]:
        """MIG devices (one per compute instance) in NVML's index order."""
        return [(gi, ci) for gi in sorted(self.gis, key=lambda g: g.start) for ci in gi.cis]


@dataclass
class Fault:
    code: int
    gpu: int | None = None  # None: every GPU
    function: str | None = None  # None: every function that takes this GPU's handle
    after: float | None = None  # monotonic time from which it fires
    on_call: int | None = None  # fire on the k-th matching call only (1-based)
    seen: int = 0


@dataclass(frozen=True)
class _Handle:
    gpu: int
    mig: int | None = None  # MIG device index


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def _uuid(prefix: str, *parts: object) -> str:
    return f"{prefix}-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, '/'.join(map(str, parts)))}"


def _pointer(kind: type, key: int) -> Any:
    """A pointer-typed handle like pynvml's, carrying ``key`` as its address (never dereferenced)."""
    return ctypes.cast(ctypes.c_void_p(key), kind)


def _address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


# the event types a simulated GPU supports (NVML: MIG device handles support none)
EVENT_TYPES = (
    pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypeClock
    | pynvml.nvmlEventTypePState
)
EVENT_QUEUE = 64  # events a set holds unread; older ones are lost, as the driver's are


@dataclass
class _EventSet:
    """nvmlEventSet_t: the GPUs and types registered, and the events not yet waited for."""

    registered: dict[int, int] = field(default_factory=dict)  # GPU index -> event type mask
    queue: list[Any] = field(default_factory=list)
    ready: threading.Condition = field(default_factory=threading.Condition)
    freed: bool = False


class SimNvml:
    """Module-like object exposing the pynvml functions inferdeck calls."""

    # pynvml's own error classes, so callers catch exactly what they would catch from pynvml
    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError

    def __init__(
        self,
        load: LoadFn | None = None,
        driver_version: str = "580.95.05",
        cuda_driver_version: int = 13000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock  # thermal lag and energy follow this clock (a test's, or the wall's)
        self.gpus: list[SimGpu] = []
        self.load = load
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.initialized = False
        self.root = True
        self.missing: set[str] = set()  # functions this (older) driver lacks
        self.faults: list[Fault] = []
        self.calls: Counter[str] = Counter()
        self.processes: dict[
            str, list[tuple[int, int]]
        ] = {}  # GPU or MIG device uuid -> (pid, bytes)
        self.nvml_version = "13.580.95.05"
        self.gpm_samples: dict[int, tuple[int, int, float, float] | None] = {}  # key -> sample
        self._gpm_next = 1
        self._gi_serial = 0
        self._lock = threading.RLock()
        self.event_sets: list[_EventSet] = []
        for name in dir(pynvml):  # constants, as `import pynvml` gives them
            if name.startswith(
                ("NVML_", "NVMLError", "nvmlClocks", "nvmlMemory_v", "c_nvml", "nvmlEventType")
            ) and not hasattr(self, name):
                setattr(self, name, getattr(pynvml, name))
        for name in dir(type(self)):
            if name.startswith("nvml"):
                setattr(self, name, self._wrap(name, getattr(self, name)))

    # --- building the node and injecting faults ----------------------------------------
    def add_gpu(self, model_key: str, mig: list[tuple[str, int]] | None = None) -> SimGpu:
        model = catalog()[model_key]
        i = len(self.gpus)
        gpu = SimGpu(
            model=model,
            index=i,
            uuid=_uuid("GPU", model_key, i),
            bus_id=f"00000000:{0x18 + i * 0x10:02X}:00.0",
        )
        if mig is not None:
            if model.mig is None:
                raise ValueError(f"{model.name} has no MIG")
            gpu.mig_current = gpu.mig_pending = True
            for profile_name, start in mig:
                gi = self._create_gi(gpu, model.mig.profile(profile_name), start)
                self._create_ci(gpu, gi)
        self.gpus.append(gpu)
        return gpu

    def mig_state(self) -> list[dict[str, Any]]:
        """Each GPU's MIG mode and instances as plain data: what lives in the driver, not in a
        process, so a test can hand it to a process started after one that was killed."""
        return [
            {
                "current": g.mig_current,
                "pending": g.mig_pending,
                "serial": self._gi_serial,
                "gis": [
                    {
                        "id": gi.gi_id,
                        "profile": gi.profile.name,
                        "start": gi.start,
                        "serial": gi.serial,
                        "cis": [[ci.ci_id, ci.slices, ci.uuid] for ci in gi.cis],
                    }
                    for gi in g.gis
                ],
            }
            for g in self.gpus
        ]

    def restore_mig(self, state: list[dict[str, Any]]) -> None:
        """The MIG state ``mig_state`` gave, on GPUs added in the same order."""
        with self._lock:
            for g, st in zip(self.gpus, state, strict=True):
                assert g.model.mig is not None
                g.mig_current, g.mig_pending = st["current"], st["pending"]
                g.gis = [
                    SimGI(
                        d["id"],
                        g.model.mig.profile(d["profile"]),
                        d["start"],
                        [SimCI(*c) for c in d["cis"]],
                        serial=d["serial"],
                    )
                    for d in st["gis"]
                ]
                self._gi_serial = max(self._gi_serial, st["serial"])

    def add_process(self, gpu: int, mig: int | None, pid: int, used_bytes: int) -> None:
        """A compute process on a GPU (mig None) or on one of its MIG devices (by current index)."""
        g = self.gpus[gpu]
        key = g.uuid if mig is None else g.mig_devices()[mig][1].uuid
        self.processes.setdefault(key, []).append((pid, used_bytes))

    def _busy(self, uuid: str) -> bool:
        return bool(self.processes.get(uuid))

    def inject(
        self,
        code: int,
        gpu: int | None = None,
        function: str | None = None,
        after: float | None = None,
        on_call: int | None = None,
    ) -> Fault:
        fault = Fault(code, gpu, function, after, on_call)
        self.faults.append(fault)
        return fault

    def inject_xid(self, gpu: int, xid: int, gi: int = 0xFFFFFFFF, ci: int = 0xFFFFFFFF) -> None:
        """The driver reports XID ``xid`` on a GPU (on one MIG instance when ``gi``/``ci`` are
        given): every event set registered for XID events on it receives it."""
        self.inject_event(gpu, pynvml.nvmlEventTypeXidCriticalError, xid, gi, ci)

    def inject_event(
        self, gpu: int, event_type: int, data: int = 0, gi: int = 0xFFFFFFFF, ci: int = 0xFFFFFFFF
    ) -> None:
        for es in self.event_sets:
            if es.freed or not es.registered.get(gpu, 0) & event_type:
                continue
            event = SimpleNamespace(
                device=_Handle(gpu),
                eventType=event_type,
                eventData=data,
                gpuInstanceId=gi,
                computeInstanceId=ci,
            )
            with es.ready:
                es.queue.append(event)
                del es.queue[:-EVENT_QUEUE]
                es.ready.notify_all()

    def lose_gpu(self, index: int) -> None:
        """The GPU fell off the bus: every call on it raises GPU_IS_LOST from now on."""
        self.inject(pynvml.NVML_ERROR_GPU_IS_LOST, gpu=index)

    def reset_gpu(self, index: int) -> None:
        """A GPU reset: a pending MIG mode takes effect; MIG instances are gone."""
        gpu = self.gpus[index]
        if self._busy(gpu.uuid) or any(self._busy(ci.uuid) for _, ci in gpu.mig_devices()):
            raise _err(pynvml.NVML_ERROR_IN_USE)
        gpu.mig_current = gpu.mig_pending
        gpu.gis.clear()

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            self.calls[name] += 1
            if name in self.missing:
                raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            gpu = self._gpu_of(args[0]) if args else None
            now = time.monotonic()
            for f in self.faults:
                if f.function not in (None, name) or (f.gpu is not None and f.gpu != gpu):
                    continue
                if f.gpu is not None and gpu is None:
                    continue
                if f.after is not None and now < f.after:
                    continue
                f.seen += 1
                if f.on_call is None or f.seen == f.on_call:
                    raise _err(f.code)
            if name.startswith("nvmlEventSetWait"):  # blocks: other calls go on meanwhile
                return fn(*args, **kw)
            with self._lock:
                return fn(*args, **kw)

        call.__name__ = name
        return call

    def _gpu_of(self, handle: Any) -> int | None:
        if isinstance(handle, _Handle):
            return handle.gpu
        if isinstance(handle, ctypes._Pointer):
            return (_address(handle) >> 20) - 1
        return None

    # --- handle helpers --------------------------------------------------------------------
    def _gpu(self, handle: Any) -> SimGpu:
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        idx = self._gpu_of(handle)
        if idx is None or not 0 <= idx < len(self.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[idx]

    def _mig(self, handle: _Handle) -> tuple[SimGI, SimCI]:
        gpu = self._gpu(handle)
        devs = gpu.mig_devices()
        if handle.mig is None or handle.mig >= len(devs):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return devs[handle.mig]

    def _gi(self, handle: Any) -> tuple[SimGpu, SimGI]:
        gpu = self._gpu(handle)
        gi_id = (_address(handle) >> 10) & 0x3FF
        for gi in gpu.gis:
            if gi.gi_id == gi_id:
                return gpu, gi
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _gi_handle(self, gpu: SimGpu, gi: SimGI) -> Any:
        return _pointer(pynvml.c_nvmlGpuInstance_t, ((gpu.index + 1) << 20) | (gi.gi_id << 10))

    def _ci_handle(self, gpu: SimGpu, gi: SimGI, ci: SimCI) -> Any:
        return _pointer(
            pynvml.c_nvmlComputeInstance_t,
            ((gpu.index + 1) << 20) | (gi.gi_id << 10) | (ci.ci_id + 1),
        )

    def _need_root(self) -> None:
        if not self.root:
            raise _err(pynvml.NVML_ERROR_NO_PERMISSION)

    def _need_mig(self, gpu: SimGpu) -> MigProfile | None:
        if gpu.model.mig is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not gpu.mig_current:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return None

    def _load(self, gpu: int, mig: int | None) -> DeviceLoad:
        return self.load(gpu, mig) if self.load is not None else DeviceLoad(0.0, 0)

    def _gpu_load(self, gpu: SimGpu) -> tuple[float, int]:
        if gpu.mig_current:
            devs = gpu.mig_devices()
            loads = [self._load(gpu.index, i) for i in range(len(devs))]
            assert gpu.model.mig is not None
            full = max(p.slices for p in gpu.model.mig.profiles)
            util = (
                sum(
                    ld.utilization * gi.profile.slices
                    for ld, (gi, _) in zip(loads, devs, strict=True)
                )
                / full
            )
            return min(util, 1.0), sum(ld.memory_used_bytes for ld in loads)
        ld = self._load(gpu.index, None)
        return ld.utilization, ld.memory_used_bytes

    def _advance(self, gpu: SimGpu) -> tuple[float, float]:
        """Power (W) and temperature follow utilisation with a thermal lag; clock events follow."""
        util, _ = self._gpu_load(gpu)
        m = gpu.model
        power = m.power_idle_w + (m.power_limit_w * 0.92 - m.power_idle_w) * util
        limit = gpu.enforced_limit_w or m.power_limit_w
        capped = power >= limit * 0.97
        power = min(power, limit)  # the board holds its clocks back at the enforced limit
        now = self.clock()
        dt = max(0.0, now - gpu.last_t) if gpu.last_t is not None else 0.0
        gpu.last_t = now
        target = 30.0 + 48.0 * util
        gpu.temperature_c += (target - gpu.temperature_c) * min(1.0, dt / 20.0)
        gpu.energy_mj += power * dt * 1000.0
        reasons = pynvml.nvmlClocksEventReasonGpuIdle if util < 0.02 else 0
        if capped:
            reasons |= pynvml.nvmlClocksEventReasonSwPowerCap
        if gpu.temperature_c >= m.temperature_slowdown_c:
            reasons |= pynvml.nvmlClocksEventReasonSwThermalSlowdown
        gpu.clock_reasons = reasons | gpu.forced_reasons
        return power, gpu.temperature_c

    # --- system ------------------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self.initialized = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        return self.cuda_driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:  # noqa: N802
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        return self.nvml_version

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        return len(self.gpus)

    # --- identity and telemetry ----------------------------------------------------------
    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802
        handle = _Handle(index)
        self._gpu(handle)
        return handle

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:  # noqa: N802
        if handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpu(handle).index

    # --- events ---------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> _EventSet:  # noqa: N802
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        es = _EventSet()
        self.event_sets.append(es)
        return es

    def nvmlDeviceGetSupportedEventTypes(self, handle: _Handle) -> int:  # noqa: N802
        self._gpu(handle)
        if handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(EVENT_TYPES)

    def nvmlDeviceRegisterEvents(self, handle: _Handle, types: int, event_set: _EventSet) -> None:  # noqa: N802
        """NVML: NOT_SUPPORTED when the device does not support one of the types asked for (ask
        for the supported ones only); a MIG device handle supports none."""
        supported = self.nvmlDeviceGetSupportedEventTypes(handle)
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if types & ~supported:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        event_set.registered[handle.gpu] = event_set.registered.get(handle.gpu, 0) | types

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeout_ms: int) -> Any:  # noqa: N802
        """The next event, waiting up to ``timeout_ms``; NVML_ERROR_TIMEOUT when none came."""
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with event_set.ready:
            if not event_set.queue and timeout_ms > 0:
                event_set.ready.wait(timeout_ms / 1000)
            if not event_set.queue:
                raise _err(pynvml.NVML_ERROR_TIMEOUT)
            return event_set.queue.pop(0)

    def nvmlEventSetWait(self, event_set: _EventSet, timeout_ms: int) -> Any:  # noqa: N802
        return self.nvmlEventSetWait_v2(event_set, timeout_ms)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:  # noqa: N802
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        event_set.freed = True
        self.event_sets.remove(event_set)

    def nvmlDeviceGetName(self, handle: _Handle) -> str:  # noqa: N802
        gpu = self._gpu(handle)
        if handle.mig is not None:
            return f"{gpu.model.name} MIG {self._mig(handle)[0].profile.name}"
        return gpu.model.name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:  # noqa: N802
        if handle.mig is not None:
            return self._mig(handle)[1].uuid
        return self._gpu(handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:  # noqa: N802
        gpu = self._gpu(handle)
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.bus_id.encode()
        info.pciDeviceId = int(gpu.model.pci_device_id, 16)
        return info

    def nvmlDeviceGetArchitecture(self, handle: _Handle) -> int:  # noqa: N802
        return int(ARCH[self._gpu(handle).model.architecture])

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:  # noqa: N802
        gpu = self._gpu(handle)
        if handle.mig is not None:
            gi, _ = self._mig(handle)
            total = gi.profile.memory_mib * MIB
            used = min(total, self._load(gpu.index, handle.mig).memory_used_bytes)
            reserved = 0
        else:
            total = gpu.model.memory_total_mib * MIB
            used = min(total, self._gpu_load(gpu)[1])
            reserved = 0 if gpu.mig_current else 512 * MIB
        if version:
            mem = pynvml.c_nvmlMemory_v2_t()
            mem.version, mem.total, mem.reserved = version, total, reserved
            mem.used, mem.free = used + reserved, total - used - reserved
            return mem
        mem = pynvml.c_nvmlMemory_t()
        mem.total, mem.used, mem.free = total, used, total - used
        return mem

    def nvmlDeviceGetBAR1MemoryInfo(self, handle: _Handle) -> Any:  # noqa: N802
        self._gpu(handle)
        bar = pynvml.c_nvmlBAR1Memory_t()
        bar.bar1Total, bar.bar1Used = 128 * 1024 * MIB, 40 * MIB
        bar.bar1Free = bar.bar1Total - bar.bar1Used
        return bar

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:  # noqa: N802
        gpu = self._gpu(handle)
        if gpu.mig_current or handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        util = pynvml.c_nvmlUtilization_t()
        load = self._gpu_load(gpu)[0]
        util.gpu, util.memory = round(load * 100), round(load * 55)
        return util

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        util = self._gpu_load(gpu)[0]
        if clock == pynvml.NVML_CLOCK_MEM:
            return gpu.model.mem_clock_max_mhz if util > 0 else 405
        return (
            round(gpu.model.sm_clock_max_mhz * (0.35 + 0.6 * min(1.0, util * 3)))
            if util > 0
            else 345
        )

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, clock: int) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        return (
            gpu.model.mem_clock_max_mhz
            if clock == pynvml.NVML_CLOCK_MEM
            else gpu.model.sm_clock_max_mhz
        )

    def nvmlDeviceGetPerformanceState(self, handle: _Handle) -> int:  # noqa: N802
        return 0 if self._gpu_load(self._gpu(handle))[0] > 0 else 8

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        if handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return round(self._advance(gpu)[0] * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        if handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return round((gpu.enforced_limit_w or gpu.model.power_limit_w) * 1000)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: _Handle) -> int:  # noqa: N802
        return round(self._gpu(handle).model.power_limit_w * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        self._advance(gpu)
        return round(gpu.energy_mj)

    def nvmlDeviceGetTemperatureV(self, handle: _Handle, sensor: int, version: int = 0) -> int:  # noqa: N802
        return self._temperature(handle, sensor)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:  # noqa: N802 - deprecated name
        return self._temperature(handle, sensor)

    def _temperature(self, handle: _Handle, sensor: int) -> int:
        gpu = self._gpu(handle)
        if handle.mig is not None or sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return round(self._advance(gpu)[1])

    def nvmlDeviceGetTemperatureThreshold(self, handle: _Handle, threshold: int) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return round(gpu.model.temperature_slowdown_c)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return round(gpu.model.temperature_shutdown_c)
        raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetFanSpeed(self, handle: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        if not gpu.model.fan:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return round(30 + gpu.temperature_c / 2)

    def _clock_reasons(self, handle: _Handle) -> int:
        gpu = self._gpu(handle)
        self._advance(gpu)
        return gpu.clock_reasons

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:  # noqa: N802
        return self._clock_reasons(handle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> int:  # noqa: N802 - the older name
        return self._clock_reasons(handle)

    def nvmlDeviceGetEccMode(self, handle: _Handle) -> list[int]:  # noqa: N802
        gpu = self._gpu(handle)
        if not gpu.model.ecc:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter: int) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        if not gpu.model.ecc:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if gpu.mig_current and counter == pynvml.NVML_VOLATILE_ECC:
            raise _err(
                pynvml.NVML_ERROR_NOT_SUPPORTED
            )  # "volatile errors via device handles not supported"
        return (
            gpu.ecc_corrected
            if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            else gpu.ecc_uncorrected
        )

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:  # noqa: N802
        gpu = self._gpu(handle)
        if gpu.model.architecture == "ada":
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.remapped

    def nvmlDeviceGetRetiredPages(self, handle: _Handle, cause: int) -> list[int]:  # noqa: N802
        gpu = self._gpu(handle)
        if gpu.model.architecture != "ada":
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)  # row remapping replaced page retirement
        return [0x1000 * i for i in range(gpu.retired_pages)]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[Any]:  # noqa: N802
        gpu = self._gpu(handle)
        devs = gpu.mig_devices()
        if handle.mig is not None:
            targets = [devs[handle.mig]]
        elif gpu.mig_current:
            targets = devs
        else:
            targets = [(None, None)]  # type: ignore[list-item]  # the whole GPU: no GI/CI
        out = []
        for gi, ci in targets:
            for pid, used in self.processes.get(ci.uuid if ci else gpu.uuid, []):
                out.append(
                    SimpleNamespace(
                        pid=pid,
                        usedGpuMemory=used,
                        gpuInstanceId=gi.gi_id if gi else NA_UINT,
                        computeInstanceId=ci.ci_id if ci else NA_UINT,
                    )
                )
        return out

    # --- MIG mode and devices --------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:  # noqa: N802
        gpu = self._gpu(handle)
        if gpu.model.mig is None or handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [int(gpu.mig_current), int(gpu.mig_pending)]

    def nvmlDeviceSetMigMode(self, handle: _Handle, mode: int) -> int:  # noqa: N802
        """Returns the activation status as pynvml does: SUCCESS, or IN_USE when the GPU is busy."""
        gpu = self._gpu(handle)
        if gpu.model.mig is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._need_root()
        if gpu.gis:
            raise _err(pynvml.NVML_ERROR_IN_USE)
        gpu.mig_pending = bool(mode)
        if self._busy(gpu.uuid):
            return int(pynvml.NVML_ERROR_IN_USE)  # could not reset: the caller must idle the GPU
        if gpu.model.mig_mode_immediate:
            gpu.mig_current = gpu.mig_pending
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        if gpu.model.mig is None or not gpu.mig_current:
            return 0
        return gpu.model.mig.max_instances

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:  # noqa: N802
        gpu = self._gpu(handle)
        if not gpu.mig_current:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.mig_devices()):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return _Handle(handle.gpu, index)

    def nvmlDeviceIsMigDeviceHandle(self, handle: _Handle) -> ctypes.c_uint:  # noqa: N802
        self._gpu(handle)
        return ctypes.c_uint(int(handle.mig is not None))

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: _Handle) -> _Handle:  # noqa: N802
        self._mig(handle)
        return _Handle(handle.gpu)

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:  # noqa: N802
        return self._mig(handle)[0].gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle: _Handle) -> int:  # noqa: N802
        return self._mig(handle)[1].ci_id

    # --- GPU instances ---------------------------------------------------------------------------
    def _profile_by_id(self, gpu: SimGpu, profile_id: int) -> MigProfile:
        assert gpu.model.mig is not None
        for p in gpu.model.mig.profiles:
            if p.id == profile_id:
                return p
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: _Handle, profile: int, version: int = 2
    ) -> Any:  # noqa: N802
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

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self,
        handle: _Handle,
        profile_id: int,
        placements: Any,  # noqa: N802
        count: Any,
    ) -> int:
        gpu = self._gpu(handle)
        if gpu.model.mig is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._need_root()
        p = self._profile_by_id(gpu, profile_id)
        n = ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents
        if placements is None:
            n.value = len(p.starts)
            return int(pynvml.NVML_SUCCESS)
        if n.value < len(p.starts):
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, start in enumerate(p.starts):
            placements[i].start, placements[i].size = start, p.size
        n.value = len(p.starts)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle: _Handle, profile_id: int) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        self._need_mig(gpu)
        self._need_root()
        p = self._profile_by_id(gpu, profile_id)
        left = 0
        for start in p.starts:
            try:
                self._check_fits(gpu, p, start)
                left += 1
            except pynvml.NVMLError:
                pass
        return min(left, p.max - sum(1 for gi in gpu.gis if gi.profile.id == p.id))

    def _check_fits(self, gpu: SimGpu, p: MigProfile, start: int) -> None:
        if start not in p.starts:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        lo, hi = start, start + p.size
        for gi in gpu.gis:
            if lo < gi.start + gi.profile.size and gi.start < hi:
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        if sum(1 for gi in gpu.gis if gi.profile.id == p.id) >= p.max:
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        assert gpu.model.mig is not None
        if len(gpu.gis) >= gpu.model.mig.max_instances:
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        if "+me" in p.name and any("+me" in gi.profile.name for gi in gpu.gis):
            raise _err(
                pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
            )  # one instance owns the media engines

    def _create_gi(self, gpu: SimGpu, p: MigProfile, start: int) -> SimGI:
        self._check_fits(gpu, p, start)
        gi_id = next(i for i in range(1, 1024) if all(g.gi_id != i for g in gpu.gis))
        self._gi_serial += 1
        gi = SimGI(gi_id, p, start, serial=self._gi_serial)
        gpu.gis.append(gi)
        return gi

    def _create_ci(self, gpu: SimGpu, gi: SimGI) -> SimCI:
        if gi.cis:
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ci = SimCI(
            0,
            gi.profile.slices,
            _uuid("MIG", gpu.uuid, gi.gi_id, gi.start, gi.profile.id, len(gpu.gis), gi.serial),
        )
        gi.cis.append(ci)
        return ci

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: _Handle, profile_id: int, placement: Any
    ) -> Any:  # noqa: N802
        gpu = self._gpu(handle)
        self._need_mig(gpu)
        self._need_root()
        p = self._profile_by_id(gpu, profile_id)
        place = ctypes.cast(placement, ctypes.POINTER(pynvml.c_nvmlGpuInstancePlacement_t)).contents
        if place.size != p.size:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gi_handle(gpu, self._create_gi(gpu, p, place.start))

    def nvmlDeviceGetGpuInstances(
        self, handle: _Handle, profile_id: int, instances: Any, count: Any
    ) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        self._need_mig(gpu)
        self._need_root()
        found = [gi for gi in gpu.gis if gi.profile.id == profile_id]
        n = ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents
        if n.value < len(found):
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, gi in enumerate(sorted(found, key=lambda g: g.start)):
            instances[i] = self._gi_handle(gpu, gi)
        n.value = len(found)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceById(self, handle: _Handle, gi_id: int) -> Any:  # noqa: N802
        gpu = self._gpu(handle)
        self._need_mig(gpu)
        self._need_root()
        for gi in gpu.gis:
            if gi.gi_id == gi_id:
                return self._gi_handle(gpu, gi)
        raise _err(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, handle: Any) -> Any:  # noqa: N802
        gpu, gi = self._gi(handle)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id, info.profileId = gi.gi_id, gi.profile.id
        info.placement.start, info.placement.size = gi.start, gi.profile.size
        return info

    def nvmlGpuInstanceDestroy(self, handle: Any) -> None:  # noqa: N802
        gpu, gi = self._gi(handle)
        self._need_root()
        if gi.cis:
            raise _err(pynvml.NVML_ERROR_IN_USE)
        gpu.gis.remove(gi)

    # --- compute instances ----------------------------------------------------------------------
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self,
        handle: Any,
        profile: int,
        eng: int,  # noqa: N802
        version: int = 2,
    ) -> Any:
        gpu, gi = self._gi(handle)
        slices = {v: k for k, v in CI_INDEX.items()}.get(profile)
        if slices is None or slices > gi.profile.slices or eng != 0:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
        info.id, info.sliceCount = profile, slices
        info.instanceCount = gi.profile.slices // slices
        info.name = f"MIG {slices}c.{gi.profile.name}".encode()
        return info

    def nvmlGpuInstanceCreateComputeInstance(self, handle: Any, profile_id: int) -> Any:  # noqa: N802
        gpu, gi = self._gi(handle)
        self._need_root()
        if CI_INDEX.get(gi.profile.slices) != profile_id:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)  # inferdeck creates full-size CIs only
        ci = self._create_ci(gpu, gi)
        return self._ci_handle(gpu, gi, ci)

    def nvmlGpuInstanceGetComputeInstances(
        self, handle: Any, profile_id: int, instances: Any, count: Any
    ) -> int:  # noqa: N802
        gpu, gi = self._gi(handle)
        self._need_root()
        found = [ci for ci in gi.cis if CI_INDEX.get(ci.slices) == profile_id]
        n = ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents
        if n.value < len(found):
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, ci in enumerate(found):
            instances[i] = self._ci_handle(gpu, gi, ci)
        n.value = len(found)
        return int(pynvml.NVML_SUCCESS)

    def _ci(self, handle: Any) -> tuple[SimGpu, SimGI, SimCI]:
        gpu, gi = self._gi(handle)
        ci_id = (_address(handle) & 0x3FF) - 1
        for ci in gi.cis:
            if ci.ci_id == ci_id:
                return gpu, gi, ci
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlComputeInstanceGetInfo(self, handle: Any) -> Any:  # noqa: N802
        gpu, gi, ci = self._ci(handle)
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        info.id, info.profileId = ci.ci_id, CI_INDEX[ci.slices]
        info.placement.start, info.placement.size = 0, ci.slices
        return info

    def nvmlComputeInstanceDestroy(self, handle: Any) -> None:  # noqa: N802
        gpu, gi, ci = self._ci(handle)
        self._need_root()
        if self._busy(ci.uuid):
            raise _err(pynvml.NVML_ERROR_IN_USE)
        gi.cis.remove(ci)

    # --- GPU Performance Monitoring -----------------------------------------------------------
    def nvmlDeviceGetPersistenceMode(self, handle: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(handle)
        return int(pynvml.NVML_FEATURE_ENABLED if gpu.persistence else pynvml.NVML_FEATURE_DISABLED)

    def _integrate(self, acc: list[float], util: float) -> float:
        """The entity's activity integral (utilisation x seconds) up to now; the utilisation read
        now is held back over the time since the last reading."""
        now = self.clock()
        if acc[1] >= 0:
            acc[0] += util * max(0.0, now - acc[1])
        acc[1] = now
        return acc[0]

    def nvmlGpmQueryDeviceSupport(self, handle: _Handle) -> Any:  # noqa: N802
        gpu = self._gpu(handle)
        out = pynvml.c_nvmlGpmSupport_t()
        out.version = pynvml.NVML_GPM_SUPPORT_VERSION
        out.isSupportedDevice = int(gpu.model.architecture in GPM_ARCHS)
        return out

    def nvmlGpmSampleAlloc(self) -> Any:  # noqa: N802
        key = self._gpm_next
        self._gpm_next += 1
        self.gpm_samples[key] = None
        return _pointer(pynvml.c_nvmlGpmSample_t, key << 4)

    def nvmlGpmSampleFree(self, sample: Any) -> None:  # noqa: N802
        if self.gpm_samples.pop(_address(sample) >> 4, 0) == 0:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _gpm_store(self, sample: Any, value: tuple[int, int, float, float]) -> None:
        key = _address(sample) >> 4
        if key not in self.gpm_samples:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.gpm_samples[key] = value

    def nvmlGpmSampleGet(self, handle: _Handle, sample: Any) -> Any:  # noqa: N802
        gpu = self._gpu(handle)
        if gpu.model.architecture not in GPM_ARCHS:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        util, _ = self._gpu_load(gpu)
        self._gpm_store(sample, (gpu.index, 0, self.clock(), self._integrate(gpu.activity, util)))
        return sample

    def nvmlGpmMigSampleGet(self, handle: _Handle, gi_id: int, sample: Any) -> Any:  # noqa: N802
        gpu = self._gpu(handle)
        if gpu.model.architecture not in GPM_ARCHS or not gpu.mig_current:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        devs = gpu.mig_devices()
        for i, (gi, _) in enumerate(devs):
            if gi.gi_id == gi_id:
                util = min(1.0, self._load(gpu.index, i).utilization)
                integral = self._integrate(gi.activity, util)
                self._gpm_store(sample, (gpu.index, gi_id, self.clock(), integral))
                return sample
        raise _err(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpmMetricsGet(self, mg: Any) -> Any:  # noqa: N802
        """Each metric from the two samples' integrals. Samples of one GPU instance id are
        differenced even when the instance was re-created between them, as counters would be:
        telling instances apart is the caller's job."""
        if mg.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise _err(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        a = self.gpm_samples.get(_address(mg.sample1) >> 4)
        b = self.gpm_samples.get(_address(mg.sample2) >> 4)
        if a is None or b is None or a[:2] != b[:2] or b[2] <= a[2]:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        mean = (b[3] - a[3]) / (b[2] - a[2])
        metrics = mg.metrics
        for i in range(mg.numMetrics):
            m = metrics[i]
            share = GPM_TRUTH.get(m.metricId)
            if share is not None:
                m.value = mean * share
                m.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return mg
