"""The NVML reader: production code run against real ``pynvml`` or the simulator.

Rules (reference/gpu-mig.md §1.6, §3.10): NOT_SUPPORTED renders as n/a; NO_PERMISSION as
"needs root"; GPU_IS_LOST / UNKNOWN mark the GPU faulty and it is never touched again; a handle
that failed is never reused; MIG devices are re-enumerated on every read. Blocking: call
``read()`` from a thread.
"""

from __future__ import annotations

import time
from typing import Any

from console.frame import Gpu, GpuProcess, GpuSource, MigDevice, MigState
from console.gpucatalog import mig_profile_name

_UNINIT_RETRY_S = 30.0


class _Lost(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _load_pynvml() -> Any:
    import pynvml

    return pynvml


class NvmlReader:
    def __init__(self, lib: Any | None = None, simulated: bool = False) -> None:
        self._lib = lib
        self._simulated = simulated
        self._started = False
        self._error: str | None = None
        self._next_try = 0.0
        self._driver: str | None = None
        self._lost: dict[int, tuple[str, str | None, str | None]] = {}  # index -> reason, uuid, name
        self._profile_names: dict[int, dict[int, str]] = {}  # gpu -> profile id -> name
        self._ident: dict[int, tuple[str | None, str | None]] = {}

    # --- start-up ------------------------------------------------------------------------
    def _start(self) -> bool:
        if self._started:
            return True
        if time.monotonic() < self._next_try:
            return False
        self._next_try = time.monotonic() + _UNINIT_RETRY_S
        try:
            if self._lib is None:
                self._lib = _load_pynvml()
            self._lib.nvmlInit()
        except ImportError:
            self._error = "the nvidia-ml-py package is not installed, so no GPU can be read; pip install nvidia-ml-py."
            return False
        except Exception as exc:  # noqa: BLE001 - every start failure becomes one sentence
            self._error = self._describe_start(exc)
            return False
        self._started = True
        self._error = None
        try:
            self._driver = str(self._lib.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001
            self._driver = None
        return True

    def _describe_start(self, exc: Exception) -> str:
        name = type(exc).__name__
        if name == "NVMLError_LibraryNotFound":
            return "No NVIDIA driver found (libnvidia-ml.so.1 is missing): GPU telemetry is off; engines are still watched."
        if name == "NVMLError_DriverNotLoaded":
            return "The NVIDIA driver is not loaded (nvidia kernel module missing): GPU telemetry is off; engines are still watched."
        if name == "NVMLError_NoPermission":
            return "NVML refused access (needs permission on /dev/nvidia*): GPU telemetry is off; engines are still watched."
        if name == "NVMLError_LibRmVersionMismatch":
            return "The NVIDIA driver and library versions differ (reboot after a driver upgrade): GPU telemetry is off."
        return f"NVML could not start ({name}: {exc}): GPU telemetry is off; engines are still watched."

    def source(self) -> GpuSource:
        if not self._started:
            return GpuSource(kind="none", error=self._error)
        return GpuSource(kind="simulated" if self._simulated else "nvml", driver_version=self._driver)

    # --- reading -----------------------------------------------------------------------
    def read(self) -> tuple[GpuSource, list[Gpu]]:
        if not self._start():
            return self.source(), []
        lib = self._lib
        try:
            count = int(lib.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001
            return GpuSource(kind="none", error=f"NVML could not count GPUs ({type(exc).__name__}: {exc})."), []
        gpus = []
        for i in range(count):
            try:
                gpus.append(self._read_gpu(i))
            except Exception as exc:  # noqa: BLE001 - one unreadable GPU never hides the others
                gpus.append(Gpu(index=i, unavailable={"gpu": f"reader error: {type(exc).__name__}: {exc}"}))
        return self.source(), gpus

    def _call(self, fn: str, *args: Any, field: str, na: dict[str, str]) -> Any:
        """Call an NVML function; n/a reasons go to ``na``; device faults raise _Lost."""
        lib = self._lib
        func = getattr(lib, fn, None)
        if func is None:
            na[field] = f"not in this nvidia-ml-py ({fn})"
            return None
        try:
            return func(*args)
        except lib.NVMLLibraryMismatchError:
            na[field] = "driver too old for this call"
        except lib.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (lib.NVML_ERROR_GPU_IS_LOST, lib.NVML_ERROR_UNKNOWN):
                raise _Lost("GPU is lost (fell off the bus or hung): not polled again until restart") from None
            if code == lib.NVML_ERROR_NOT_SUPPORTED:
                na[field] = "not supported"
            elif code == lib.NVML_ERROR_NO_PERMISSION:
                na[field] = "needs root"
            elif code == lib.NVML_ERROR_FUNCTION_NOT_FOUND:
                na[field] = "driver too old for this call"
            else:
                na[field] = str(exc)
        return None

    def _read_gpu(self, index: int) -> Gpu:
        if index in self._lost:
            reason, uuid, name = self._lost[index]
            return Gpu(index=index, uuid=uuid, name=name, fault=reason)
        na: dict[str, str] = {}
        try:
            handle = self._call("nvmlDeviceGetHandleByIndex", index, field="handle", na=na)
            if handle is None:
                return Gpu(index=index, fault=f"cannot open GPU {index}: {na.get('handle')}")
            uuid, name = self._ident.get(index, (None, None))
            if uuid is None:
                uuid = self._call("nvmlDeviceGetUUID", handle, field="uuid", na=na)
                name = self._call("nvmlDeviceGetName", handle, field="name", na=na)
                self._ident[index] = (uuid, name)
            mem = self._call("nvmlDeviceGetMemoryInfo", handle, field="memory_used_bytes", na=na)
            mig = self._read_mig(index, handle, mem)
            if mig is not None and mig.current:
                util = None
                na["utilization_gpu_pct"] = "n/a under MIG"
            else:
                rates = self._call("nvmlDeviceGetUtilizationRates", handle, field="utilization_gpu_pct", na=na)
                util = float(rates.gpu) if rates is not None else None
            power = self._call("nvmlDeviceGetPowerUsage", handle, field="power_w", na=na)
            limit = self._call("nvmlDeviceGetEnforcedPowerLimit", handle, field="power_limit_w", na=na)
            temp = self._call("nvmlDeviceGetTemperature", handle, self._lib.NVML_TEMPERATURE_GPU,
                              field="temperature_c", na=na)
        except _Lost as lost:
            uuid, name = self._ident.get(index, (None, None))
            self._lost[index] = (lost.reason, uuid, name)
            return Gpu(index=index, uuid=uuid, name=name, fault=lost.reason)
        procs = [] if (mig is not None and mig.current) else self._processes(handle, na)
        if mem is None:
            na.setdefault("memory_total_bytes", na.get("memory_used_bytes", "unreadable"))
        return Gpu(
            index=index,
            uuid=uuid,
            name=name,
            memory_total_bytes=int(mem.total) if mem is not None else None,
            memory_used_bytes=int(mem.used) if mem is not None else None,
            utilization_gpu_pct=util,
            power_w=power / 1000.0 if power is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            mig=mig,
            processes=procs,
            unavailable=na,
        )

    def _processes(self, handle: Any, na: dict[str, str]) -> list[GpuProcess]:
        rows = self._call("nvmlDeviceGetComputeRunningProcesses", handle, field="processes", na=na)
        out = []
        for p in rows or []:
            used = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(pid=int(p.pid), used_memory_bytes=int(used) if used is not None else None))
        return out

    def _read_mig(self, index: int, handle: Any, mem: Any) -> MigState | None:
        na: dict[str, str] = {}
        mode = self._call("nvmlDeviceGetMigMode", handle, field="mig", na=na)
        if mode is None:
            return None  # not MIG-capable (NOT_SUPPORTED) or unreadable
        current, pending = bool(mode[0]), bool(mode[1])
        devices: list[MigDevice] = []
        if current:
            count = self._call("nvmlDeviceGetMaxMigDeviceCount", handle, field="mig", na=na) or 0
            names = self._profiles(index, handle, mem)
            for i in range(int(count)):
                dev_na: dict[str, str] = {}
                mh = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle, i, field="handle", na=dev_na)
                if mh is None:
                    continue  # NOT_FOUND: no MIG device at this index (indices can be sparse)
                devices.append(self._read_mig_device(i, handle, mh, names))
        return MigState(current=current, pending=pending, devices=devices)

    def _profiles(self, index: int, handle: Any, mem: Any) -> dict[int, str]:
        """Profile id -> mig-parted-style name, from the profile-info loop (static, cached)."""
        cached = self._profile_names.get(index)
        if cached is not None:
            return cached
        names: dict[int, str] = {}
        lib = self._lib
        total = int(mem.total) if mem is not None else 0
        for p in range(lib.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, p)
            except lib.NVMLError as exc:
                if getattr(exc, "value", None) in (lib.NVML_ERROR_GPU_IS_LOST, lib.NVML_ERROR_UNKNOWN):
                    raise _Lost("GPU is lost (fell off the bus or hung): not polled again until restart") from None
                continue
            if total:
                names[int(info.id)] = mig_profile_name(int(info.sliceCount), int(info.memorySizeMB), total, p)
        if names:
            self._profile_names[index] = names
        return names

    def _read_mig_device(self, i: int, parent: Any, mh: Any, names: dict[int, str]) -> MigDevice:
        na: dict[str, str] = {}
        uuid = self._call("nvmlDeviceGetUUID", mh, field="uuid", na=na)
        gi_id = self._call("nvmlDeviceGetGpuInstanceId", mh, field="gpu_instance_id", na=na)
        ci_id = self._call("nvmlDeviceGetComputeInstanceId", mh, field="compute_instance_id", na=na)
        mem = self._call("nvmlDeviceGetMemoryInfo", mh, field="memory_used_bytes", na=na)
        profile = start = size = None
        if gi_id is not None:
            gi = self._call("nvmlDeviceGetGpuInstanceById", parent, gi_id, field="profile", na=na)
            info = self._call("nvmlGpuInstanceGetInfo", gi, field="profile", na=na) if gi is not None else None
            if info is not None:
                profile = names.get(int(info.profileId))
                start, size = int(info.placement.start), int(info.placement.size)
                if profile is None:
                    na["profile"] = f"unknown profile id {int(info.profileId)}"
        if profile is None and "profile" in na:
            na["placement_start"] = na["placement_size"] = na["profile"]
        procs = self._processes(mh, na)
        return MigDevice(
            index=i,
            processes=procs,
            uuid=uuid,
            profile=profile,
            gpu_instance_id=int(gi_id) if gi_id is not None else None,
            compute_instance_id=int(ci_id) if ci_id is not None else None,
            placement_start=start,
            placement_size=size,
            memory_total_bytes=int(mem.total) if mem is not None else None,
            memory_used_bytes=int(mem.used) if mem is not None else None,
            unavailable=na,
        )
