"""The NVML reader: production code run against real ``pynvml`` or the simulator.

Rules (reference/gpu-mig.md §1.6, §3.10): NOT_SUPPORTED renders as n/a; NO_PERMISSION as
"needs root"; GPU_IS_LOST / UNKNOWN mark the GPU faulty and it is never touched again; a handle
that failed is never reused; MIG devices are listed on every read and the GPU-instance walk is
redone whenever they change, after any MIG error, and every few seconds. Optional symbols are
probed once and the older call is used where the driver lacks the newer one. Blocking: call
``read()`` from a thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import pwd
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console.frame import (
    ComputeInstance,
    Gpu,
    GpuInstance,
    GpuProcess,
    GpuSource,
    MigDevice,
    MigRecut,
    MigState,
    RemappedRows,
    Workload,
    XidEvent,
)
from console.gpucatalog import mig_profile_name
from console.mig.journal import OpenApply, completing_target, describe_open, judge, unfinished
from console.read.gpm import GpmLost, GpmSampler
from console.read.workload import workload_of

_UNINIT_RETRY_S = 30.0
SLOW_TTL_S = 5.0
LOST = "GPU is lost (fell off the bus or hung): not polled again until inferdeck restarts"
NEEDS_ROOT = "needs root (the mig/config capability)"

CLOCK_EVENTS = (  # bit, name
    (0x1, "idle"),
    (0x2, "applications clocks"),
    (0x4, "power cap"),
    (0x8, "HW slowdown"),
    (0x10, "sync boost"),
    (0x20, "thermal (SW)"),
    (0x40, "thermal (HW)"),
    (0x80, "power brake (HW)"),
    (0x100, "display clocks"),
)
ARCH_NAMES = {7: "ampere", 8: "ada", 9: "hopper", 10: "blackwell"}


MAX_EVENTS_A_READ = 256  # events drained a read (a storm is read over the next reads)
ALL_INSTANCES = 0xFFFFFFFF  # an event's GPU/compute instance id when not tied to one instance


def _unavailable(g: Gpu, key: str, why: str) -> Gpu:
    return g.model_copy(update={"unavailable": {**g.unavailable, key: why}})


class _Lost(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Profile:
    """A GPU-instance profile as the driver describes it (static per GPU)."""

    index: int
    id: int
    slices: int
    name: str
    count: int
    memory_mib: int


def _load_pynvml() -> Any:
    import pynvml  # loaded on first use: a console watching engines only never needs it

    return pynvml


def proc_info(pid: int, proc: Path = Path("/proc")) -> tuple[str | None, str | None]:
    """(user, command line) of a process as this machine sees it; (None, None) if not visible."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
        uid = (proc / str(pid)).stat().st_uid
    except OSError:
        return None, None
    command = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a) or None
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return user, command


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


class NvmlFailure(Exception):
    """An NVML call that failed, with the reason every surface words the same way."""

    def __init__(self, fn: str, code: int | None, reason: str, lost: bool = False) -> None:
        super().__init__(reason)
        self.fn, self.code, self.reason, self.lost = fn, code, reason, lost


# what each NVML return code means to an operator (pynvml's own strings need the library loaded)
_REASONS = {
    "NVML_ERROR_NOT_SUPPORTED": "not supported",
    "NVML_ERROR_NO_PERMISSION": "needs root",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "driver too old for this call",
    "NVML_ERROR_IN_USE": "in use by another client",
    "NVML_ERROR_INSUFFICIENT_RESOURCES": "insufficient resources",
    "NVML_ERROR_INVALID_ARGUMENT": "invalid argument",
    "NVML_ERROR_NOT_FOUND": "not found",
    "NVML_ERROR_RESET_REQUIRED": "a GPU reset is required",
    "NVML_ERROR_GPU_IS_LOST": "GPU is lost",
    "NVML_ERROR_UNKNOWN": "unknown error in the driver",
    "NVML_ERROR_UNINITIALIZED": "NVML is not initialised",
    "NVML_ERROR_TIMEOUT": "the driver timed out",
    "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA driver is not loaded",
}


def nvml_reason(lib: Any, exc: BaseException) -> str:
    """The one wording of an NVML error, for the dashboard's n/a reasons and MIG changes alike."""
    if isinstance(exc, lib.NVMLLibraryMismatchError):
        return "driver too old for this call"
    code = getattr(exc, "value", None)
    for name, reason in _REASONS.items():
        if code is not None and code == getattr(lib, name, None):
            return reason
    return _text(exc)


def nvml_call(lib: Any, fn: str, *args: Any) -> Any:
    """The NVML choke point: call ``fn``; any NVML error is raised as NvmlFailure with its reason
    (``lost`` for GPU_IS_LOST and UNKNOWN, after which the device is not to be touched again)."""
    func = getattr(lib, fn, None)
    if func is None:
        raise NvmlFailure(fn, None, f"not in this nvidia-ml-py ({fn})")
    try:
        return func(*args)
    except lib.NVMLLibraryMismatchError as exc:
        raise NvmlFailure(fn, None, nvml_reason(lib, exc)) from None
    except lib.NVMLError as exc:
        code = getattr(exc, "value", None)
        lost = code in (lib.NVML_ERROR_GPU_IS_LOST, lib.NVML_ERROR_UNKNOWN)
        raise NvmlFailure(fn, code, nvml_reason(lib, exc), lost) from None


class NvmlReader:
    def __init__(
        self,
        lib: Any | None = None,
        simulated: bool = False,
        proc: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        journal: Path | None = None,
    ) -> None:
        self._lib: Any = lib  # pynvml or the simulator: untyped either way
        # the MIG journal: a re-cut begun and never ended is shown on its GPU
        self._journal = journal
        self._journal_key: tuple[int, int] | None = None
        self._open: list[OpenApply] = []
        self._simulated = simulated
        # where process command lines and cgroups are read (a simulated node has none, unless a
        # test gives a /proc tree of its own)
        self._proc = proc if proc is not None else None if simulated else Path("/proc")
        self._clock = clock
        self._gpm: GpmSampler | None = None
        self._nvml: str | None = None
        self._reading = threading.Lock()  # close() never frees samples a read is using
        self._workloads: dict[int, Workload | None] = {}  # pid -> its container and pod
        self._pids_now: set[int] = set()
        self._started = False
        self._error: str | None = None
        self._next_try = 0.0
        self._driver: str | None = None
        self._cuda: str | None = None
        self._lost: dict[int, tuple[str | None, str | None]] = {}  # index -> uuid, name
        self._slow: dict[int, tuple[float, dict[str, Any], dict[str, str]]] = {}
        self._profiles: dict[int, list[_Profile]] = {}
        self._walk: dict[int, tuple[float, tuple[str, ...], MigState]] = {}
        # per GPU, each MIG device's GPU and compute instance ids by its UUID, kept while the
        # instance walk is (ids are fixed for a MIG device's life; a new device has a new UUID)
        self._mig_ids: dict[int, dict[str, tuple[int, int]]] = {}
        self._variant: dict[str, str | None] = {}
        self._pids_seen = self._pids_visible = 0
        # NVML's event API: one set, each GPU registered for XID errors once (or why not)
        self._events: Any = None
        self._events_on: dict[int, str | None] = {}  # GPU index: None (registered), or why not

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
        self._gpm = GpmSampler(self._lib, self._clock)
        try:
            self._nvml = _text(self._lib.nvmlSystemGetNVMLVersion())
        except Exception:  # noqa: BLE001
            self._nvml = None
        try:
            self._driver = _text(self._lib.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001
            self._driver = None
        try:
            v = int(self._lib.nvmlSystemGetCudaDriverVersion())
            self._cuda = f"{v // 1000}.{v % 1000 // 10}"
        except Exception:  # noqa: BLE001
            self._cuda = None
        return True

    @staticmethod
    def _describe_start(exc: Exception) -> str:
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
        return GpuSource(
            kind="simulated" if self._simulated else "nvml",
            driver_version=self._driver,
            cuda_driver_version=self._cuda,
            nvml_version=self._nvml,
        )

    @property
    def lib(self) -> Any:
        """The NVML module in use (pynvml or the simulator); None before start."""
        return self._lib if self._started else None

    def forget_mig(self, index: int) -> None:
        """Drop cached MIG state for a GPU (after a re-layout): the next read walks it again."""
        self._walk.pop(index, None)

    def close(self) -> None:
        """Free what NVML holds for us (GPM samples, the event set). A read hung in the driver is
        not waited for long: the process's exit frees them then."""
        if self._gpm is not None and self._reading.acquire(timeout=2.0):
            try:
                self._gpm.close()
                if self._events is not None:
                    with contextlib.suppress(Exception):
                        self._lib.nvmlEventSetFree(self._events)
                    self._events = None
            finally:
                self._reading.release()

    # --- reading -----------------------------------------------------------------------
    def read(self) -> tuple[GpuSource, list[Gpu]]:
        with self._reading:
            self._pids_now = set()
            out = self._read()
            for gone in self._workloads.keys() - self._pids_now:
                del self._workloads[gone]  # a pid that went may come back as another process
            return out

    def _read(self) -> tuple[GpuSource, list[Gpu]]:
        if not self._start():
            return self.source(), []
        lib = self._lib
        try:
            count = int(lib.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001
            return GpuSource(
                kind="none", error=f"NVML could not count GPUs ({type(exc).__name__}: {exc})."
            ), []
        gpus = []
        self._pids_seen = self._pids_visible = 0
        for i in range(count):
            try:
                gpus.append(self._read_gpu(i))
            except Exception as exc:  # noqa: BLE001 - one unreadable GPU never hides the others
                gpus.append(
                    Gpu(index=i, unavailable={"gpu": f"reader error: {type(exc).__name__}: {exc}"})
                )
        gpus = self._recuts(self._with_xids(gpus))
        source = self.source()
        if self._pids_seen and not self._pids_visible and not self._simulated:
            source = source.model_copy(
                update={
                    "note": "GPU process IDs are the host's and none is visible here: "
                    "running in a container without the host PID namespace?"
                }
            )
        return source, gpus

    def _with_xids(self, gpus: list[Gpu]) -> list[Gpu]:
        """The XID errors NVML delivered since the last read, on their GPUs. Each GPU is
        registered once for the XID events it supports (nvmlDeviceGetSupportedEventTypes: asking
        for one it lacks is NOT_SUPPORTED); the set is drained without waiting (timeout 0), on
        the reader's thread, never the console's loop. Where a GPU cannot be registered, its
        ``unavailable`` says why."""
        lib = self._lib
        xid_type = lib.nvmlEventTypeXidCriticalError
        if self._events is None:
            try:
                self._events = lib.nvmlEventSetCreate()
            except Exception as exc:  # noqa: BLE001
                why = f"no NVML event set: {nvml_reason(lib, exc)}"
                return [_unavailable(g, "xids", why) for g in gpus]
        for g in gpus:
            if g.index in self._events_on or g.fault:
                continue
            try:
                h = lib.nvmlDeviceGetHandleByIndex(g.index)
                if not int(lib.nvmlDeviceGetSupportedEventTypes(h)) & xid_type:
                    self._events_on[g.index] = "this GPU reports no XID events"
                    continue
                lib.nvmlDeviceRegisterEvents(h, xid_type, self._events)
                self._events_on[g.index] = None
            except Exception as exc:  # noqa: BLE001
                self._events_on[g.index] = f"XID events: {nvml_reason(lib, exc)}"
        got: dict[int, list[XidEvent]] = {}
        for _ in range(MAX_EVENTS_A_READ):
            try:
                data = lib.nvmlEventSetWait_v2(self._events, 0)
            except lib.NVMLError as exc:
                if getattr(exc, "value", None) != lib.NVML_ERROR_TIMEOUT:  # timeout: none left
                    self._events_on = {
                        i: f"XID events: {nvml_reason(lib, exc)}" for i in self._events_on
                    }
                break
            if not int(data.eventType) & xid_type:
                continue
            try:
                index = int(lib.nvmlDeviceGetIndex(data.device))
            except Exception:  # noqa: BLE001 - a GPU gone since: the event has nowhere to go
                continue
            gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
            got.setdefault(index, []).append(
                XidEvent(
                    xid=int(data.eventData),
                    gpu_instance=None if gi == ALL_INSTANCES else gi,
                    compute_instance=None if ci == ALL_INSTANCES else ci,
                )
            )
        out = []
        for g in gpus:
            off = self._events_on.get(g.index)
            if off:
                g = _unavailable(g, "xids", off)
            if g.index in got:
                g = g.model_copy(update={"xids": got[g.index]})
            out.append(g)
        return out

    def _recuts(self, gpus: list[Gpu]) -> list[Gpu]:
        """Each GPU that an unfinished re-cut in the MIG journal was changing, with the layout
        it is in now (the journal is read again only when it changes)."""
        if self._journal is None:
            return gpus
        try:
            st = self._journal.stat()
        except OSError:
            return gpus
        if (st.st_mtime_ns, st.st_size) != self._journal_key:
            self._journal_key = (st.st_mtime_ns, st.st_size)
            self._open = unfinished(self._journal)
        if not self._open:
            return gpus
        out = []
        for g in gpus:
            op = next((a for a in reversed(self._open) if a.uuid == g.uuid), None)
            if op is None or g.mig is None:
                out.append(g)
                continue
            mig = g.mig
            readable = "instances" not in mig.unavailable and not (
                mig.current and mig.devices and not mig.instances
            )
            layout = [(i.profile or "?", i.placement_start or 0) for i in mig.instances]
            bare = [
                (i.profile or "?", i.placement_start or 0)
                for i in mig.instances
                if not i.compute_instances
            ]
            state = judge(op, layout if readable else None, bare, mig.current)
            recut = MigRecut(
                apply_id=op.apply_id,
                begun=op.t,
                user=op.user or None,
                pid=op.pid,
                before=op.before,
                target=op.target,
                state=state,  # type: ignore[arg-type]
                message=describe_open(op, state),
                action=f"inferdeck mig apply {g.index} {completing_target(op)}",
            )
            out.append(g.model_copy(update={"mig": mig.model_copy(update={"recut": recut})}))
        return out

    def _call(self, fn: str, *args: Any, field: str, na: dict[str, str]) -> Any:
        """Call an NVML function; n/a reasons go to ``na``; device faults raise _Lost."""
        try:
            return nvml_call(self._lib, fn, *args)
        except NvmlFailure as f:
            if f.lost:
                raise _Lost() from None
            na[field] = f.reason
        return None

    def _probe(
        self,
        key: str,
        variants: Sequence[tuple[str, Callable[[Any], Any]]],
        field: str,
        na: dict[str, str],
    ) -> Any:
        """Call the first variant this driver has; remember it (probe once, fall back to older)."""
        lib = self._lib
        chosen = self._variant.get(key)
        for name, call in variants:
            if chosen is not None and name != chosen:
                continue
            func = getattr(lib, name, None)
            if func is None:
                continue
            try:
                value = call(func)
            except lib.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code in (lib.NVML_ERROR_GPU_IS_LOST, lib.NVML_ERROR_UNKNOWN):
                    raise _Lost() from None
                if chosen is None and code in (
                    lib.NVML_ERROR_FUNCTION_NOT_FOUND,
                    getattr(lib, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", -1),
                ):
                    continue  # older driver: try the older call
                na[field] = nvml_reason(lib, exc)
                return None
            except lib.NVMLLibraryMismatchError:
                if chosen is None:
                    continue
                na[field] = "driver too old for this call"
                return None
            self._variant[key] = name
            return value
        na[field] = "driver too old for this call"
        return None

    def _read_gpu(self, index: int) -> Gpu:
        if index in self._lost:
            uuid, name = self._lost[index]
            return Gpu(index=index, uuid=uuid, name=name, fault=LOST)
        na: dict[str, str] = {}
        slow: dict[str, Any] = {}
        try:
            handle = self._call("nvmlDeviceGetHandleByIndex", index, field="handle", na=na)
            if handle is None:
                return Gpu(index=index, fault=f"cannot open GPU {index}: {na.get('handle')}")
            slow, slow_na = self._slow_fields(index, handle)
            na.update(slow_na)
            fast = self._fast_fields(handle, na)
            mig = self._read_mig(index, handle, fast.get("memory_total_bytes"))
            if mig is None or not mig.current:
                fast["activity"] = self._activity(index, handle, None, slow.get("uuid"), na)
            if mig is not None and mig.current:
                fast["utilization_gpu_pct"] = fast["utilization_memory_pct"] = None
                na["utilization_gpu_pct"] = na["utilization_memory_pct"] = "n/a under MIG"
                na.pop("ecc_corrected_volatile", None)
                if fast.get("ecc_corrected_volatile") is None:
                    na["ecc_corrected_volatile"] = na["ecc_uncorrected_volatile"] = (
                        "n/a under MIG (per device)"
                    )
                procs: list[GpuProcess] = []
            else:
                procs = self._processes(handle, na)
        except (_Lost, GpmLost):
            if self._gpm is not None:
                self._gpm.forget_gpu(index)
            self._lost[index] = (slow.get("uuid"), slow.get("name"))
            self._slow.pop(index, None)
            self._walk.pop(index, None)
            return Gpu(index=index, uuid=slow.get("uuid"), name=slow.get("name"), fault=LOST)
        return Gpu(index=index, mig=mig, processes=procs, unavailable=na, **slow, **fast)

    def _slow_fields(self, index: int, h: Any) -> tuple[dict[str, Any], dict[str, str]]:
        cached = self._slow.get(index)
        if cached is not None and time.monotonic() - cached[0] < SLOW_TTL_S:
            return cached[1], cached[2]
        lib = self._lib
        na: dict[str, str] = {}
        f: dict[str, Any] = {}
        f["uuid"] = self._call("nvmlDeviceGetUUID", h, field="uuid", na=na)
        f["name"] = self._call("nvmlDeviceGetName", h, field="name", na=na)
        pci = self._call("nvmlDeviceGetPciInfo", h, field="pci_bus_id", na=na)
        f["pci_bus_id"] = _text(pci.busId) if pci is not None else None
        arch = self._call("nvmlDeviceGetArchitecture", h, field="architecture", na=na)
        f["architecture"] = (
            ARCH_NAMES.get(int(arch), f"arch {int(arch)}") if arch is not None else None
        )
        f["clock_sm_max_mhz"] = self._call(
            "nvmlDeviceGetMaxClockInfo", h, lib.NVML_CLOCK_SM, field="clock_sm_max_mhz", na=na
        )
        f["clock_mem_max_mhz"] = self._call(
            "nvmlDeviceGetMaxClockInfo", h, lib.NVML_CLOCK_MEM, field="clock_mem_max_mhz", na=na
        )
        limit = self._call(
            "nvmlDeviceGetPowerManagementDefaultLimit", h, field="power_default_limit_w", na=na
        )
        f["power_default_limit_w"] = limit / 1000.0 if limit is not None else None
        for fld, which in (
            ("temperature_slowdown_c", lib.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
            ("temperature_shutdown_c", lib.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        ):
            v = self._call("nvmlDeviceGetTemperatureThreshold", h, which, field=fld, na=na)
            f[fld] = float(v) if v is not None else None
        ecc = self._call("nvmlDeviceGetEccMode", h, field="ecc_enabled", na=na)
        f["ecc_enabled"], f["ecc_pending"] = (
            (bool(ecc[0]), bool(ecc[1])) if ecc is not None else (None, None)
        )
        if ecc is None:
            na["ecc_pending"] = na["ecc_enabled"]
        rows = self._call("nvmlDeviceGetRemappedRows", h, field="remapped_rows", na=na)
        f["remapped_rows"] = (
            RemappedRows(
                correctable=int(rows[0]),
                uncorrectable=int(rows[1]),
                pending=bool(rows[2]),
                failure=bool(rows[3]),
            )
            if rows is not None
            else None
        )
        pages = None
        if rows is None:
            cause = getattr(lib, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)
            got = self._call("nvmlDeviceGetRetiredPages", h, cause, field="retired_pages", na=na)
            pages = len(got) if got is not None else None
        else:
            na["retired_pages"] = "replaced by row remapping on this GPU"
        f["retired_pages"] = pages
        mode = self._call("nvmlDeviceGetPersistenceMode", h, field="persistence_mode", na=na)
        f["persistence_mode"] = bool(mode) if mode is not None else None
        self._slow[index] = (time.monotonic(), f, na)
        return f, dict(na)

    def _fast_fields(self, h: Any, na: dict[str, str]) -> dict[str, Any]:
        lib = self._lib
        f: dict[str, Any] = {}
        v2 = getattr(lib, "nvmlMemory_v2", None)
        mem = self._probe(
            "memory",
            [
                ("nvmlDeviceGetMemoryInfo", lambda fn: fn(h, version=v2) if v2 else fn(h)),
                ("nvmlDeviceGetMemoryInfo", lambda fn: fn(h)),
            ],
            "memory_used_bytes",
            na,
        )
        if mem is not None:
            f["memory_total_bytes"], f["memory_used_bytes"] = int(mem.total), int(mem.used)
            f["memory_reserved_bytes"] = int(mem.reserved) if hasattr(mem, "reserved") else None
            if not hasattr(mem, "reserved"):
                na["memory_reserved_bytes"] = "needs the v2 memory call (newer driver)"
        else:
            na["memory_total_bytes"] = na["memory_reserved_bytes"] = na["memory_used_bytes"]
        bar = self._call("nvmlDeviceGetBAR1MemoryInfo", h, field="bar1_used_bytes", na=na)
        if bar is not None:
            f["bar1_total_bytes"], f["bar1_used_bytes"] = int(bar.bar1Total), int(bar.bar1Used)
        rates = self._call("nvmlDeviceGetUtilizationRates", h, field="utilization_gpu_pct", na=na)
        if rates is not None:
            f["utilization_gpu_pct"], f["utilization_memory_pct"] = (
                float(rates.gpu),
                float(rates.memory),
            )
        else:
            na["utilization_memory_pct"] = na["utilization_gpu_pct"]
        f["clock_sm_mhz"] = self._call(
            "nvmlDeviceGetClockInfo", h, lib.NVML_CLOCK_SM, field="clock_sm_mhz", na=na
        )
        f["clock_mem_mhz"] = self._call(
            "nvmlDeviceGetClockInfo", h, lib.NVML_CLOCK_MEM, field="clock_mem_mhz", na=na
        )
        f["pstate"] = self._call("nvmlDeviceGetPerformanceState", h, field="pstate", na=na)
        power = self._call("nvmlDeviceGetPowerUsage", h, field="power_w", na=na)
        f["power_w"] = power / 1000.0 if power is not None else None
        limit = self._call("nvmlDeviceGetEnforcedPowerLimit", h, field="power_limit_w", na=na)
        f["power_limit_w"] = limit / 1000.0 if limit is not None else None
        energy = self._call("nvmlDeviceGetTotalEnergyConsumption", h, field="energy_j", na=na)
        f["energy_j"] = energy / 1000.0 if energy is not None else None
        gpu_sensor = lib.NVML_TEMPERATURE_GPU
        temp = self._probe(
            "temperature",
            [
                ("nvmlDeviceGetTemperatureV", lambda fn: fn(h, gpu_sensor)),
                ("nvmlDeviceGetTemperature", lambda fn: fn(h, gpu_sensor)),
            ],
            "temperature_c",
            na,
        )
        f["temperature_c"] = float(temp) if temp is not None else None
        fan = self._call("nvmlDeviceGetFanSpeed", h, field="fan_pct", na=na)
        f["fan_pct"] = float(fan) if fan is not None else None
        reasons = self._probe(
            "clock_events",
            [
                ("nvmlDeviceGetCurrentClocksEventReasons", lambda fn: fn(h)),
                ("nvmlDeviceGetCurrentClocksThrottleReasons", lambda fn: fn(h)),
            ],
            "clock_events",
            na,
        )
        f["clock_events"] = (
            [name for bit, name in CLOCK_EVENTS if int(reasons) & bit]
            if reasons is not None
            else None
        )
        for fld, kind in (
            ("ecc_corrected_volatile", lib.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("ecc_uncorrected_volatile", lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            v = self._call(
                "nvmlDeviceGetTotalEccErrors", h, kind, lib.NVML_VOLATILE_ECC, field=fld, na=na
            )
            f[fld] = int(v) if v is not None else None
        return f

    def _processes(self, handle: Any, na: dict[str, str]) -> list[GpuProcess]:
        rows = self._call("nvmlDeviceGetComputeRunningProcesses", handle, field="processes", na=na)
        out = []
        for p in rows or []:
            used = getattr(p, "usedGpuMemory", None)
            pid = int(p.pid)
            user, command = proc_info(pid, self._proc) if self._proc else (None, None)
            self._pids_seen += 1
            self._pids_visible += command is not None
            out.append(
                GpuProcess(
                    pid=pid,
                    used_memory_bytes=int(used) if used is not None else None,
                    user=user,
                    command=command,
                    workload=self._workload(pid),
                )
            )
        return out

    def _workload(self, pid: int) -> Workload | None:
        """A process's container and pod, read once per pid (a pid's cgroup does not change)."""
        self._pids_now.add(pid)
        if self._proc is None:
            return None
        if pid not in self._workloads:
            self._workloads[pid] = workload_of(pid, self._proc)
        return self._workloads[pid]

    # --- MIG -------------------------------------------------------------------------------
    def _read_mig(self, index: int, handle: Any, total: int | None) -> MigState | None:
        na: dict[str, str] = {}
        mode = self._call("nvmlDeviceGetMigMode", handle, field="mig", na=na)
        if mode is None:
            return None  # not MIG-capable (NOT_SUPPORTED) or unreadable
        current, pending = bool(mode[0]), bool(mode[1])
        note = None
        if current != pending:
            note = f"MIG {'enable' if pending else 'disable'} pending — needs a GPU reset or reboot"
        elif current and (
            self._slow.get(index, (0, {}, {}))[1].get("architecture") in ("hopper", "blackwell")
        ):
            note = "MIG mode is lost on driver reload"
        if not current:
            self._walk.pop(index, None)
            if self._gpm is not None:
                self._gpm.retain(index, {None})
            return MigState(current=current, pending=pending, note=note)
        profiles = self._profile_list(index, handle, total)
        count = self._call("nvmlDeviceGetMaxMigDeviceCount", handle, field="devices", na=na) or 0
        devices: list[MigDevice] = []
        uuids: list[str] = []
        walked = self._walk.get(index)
        fresh = walked is not None and time.monotonic() - walked[0] <= SLOW_TTL_S
        ids = self._mig_ids.get(index, {}) if fresh else {}  # all read again with the walk
        for i in range(int(count)):
            dev_na: dict[str, str] = {}
            mh = self._call(
                "nvmlDeviceGetMigDeviceHandleByIndex", handle, i, field="handle", na=dev_na
            )
            if mh is None:
                continue  # NOT_FOUND: no MIG device at this index (indices can be sparse)
            devices.append(self._read_mig_device(i, mh, dev_na, ids))
            uuids.append(devices[-1].uuid or f"#{i}")
        self._mig_ids[index] = {
            d.uuid: (d.gpu_instance_id, d.compute_instance_id)
            for d in devices
            if d.uuid and d.gpu_instance_id is not None and d.compute_instance_id is not None
        }
        key = tuple(uuids)
        errors = any(d.unavailable.get("handle") for d in devices)
        if (
            walked is None
            or walked[1] != key
            or errors
            or time.monotonic() - walked[0] > SLOW_TTL_S
        ):
            instances, walk_na = self._walk_instances(handle, profiles)
            self._walk[index] = (
                time.monotonic(),
                key,
                MigState(instances=instances, unavailable=walk_na),
            )
        instances = self._walk[index][2].instances
        na.update(self._walk[index][2].unavailable)
        devices = [self._place(d, instances, profiles) for d in devices]
        devices = self._instance_activity(index, handle, devices)
        return MigState(
            current=current,
            pending=pending,
            note=note,
            instances=instances,
            devices=devices,
            unavailable=na,
        )

    def _activity(
        self, index: int, handle: Any, gi_id: int | None, identity: Any, na: dict[str, str]
    ) -> Any:
        """GPM activity of the GPU or one of its GPU instances; the reason in ``na`` when none."""
        if self._gpm is None:
            return None
        activity, why = self._gpm.read(index, handle, gi_id, identity)
        if why is not None:
            na["activity"] = why
        return activity

    def _instance_activity(
        self, index: int, handle: Any, devices: list[MigDevice]
    ) -> list[MigDevice]:
        """Each GPU instance's activity on its MIG devices. An instance is known by its id and its
        compute instances' UUIDs, so one re-created under the same id starts afresh."""
        by_gi: dict[int, list[str]] = {}
        for d in devices:
            if d.gpu_instance_id is not None:
                by_gi.setdefault(d.gpu_instance_id, []).append(d.uuid or "")
        if self._gpm is None:
            return devices
        self._gpm.retain(index, set(by_gi))
        found: dict[int, tuple[Any, dict[str, str]]] = {}
        for gi_id, uuids in by_gi.items():
            na: dict[str, str] = {}
            found[gi_id] = (
                self._activity(index, handle, gi_id, (gi_id, tuple(sorted(uuids))), na),
                na,
            )
        out = []
        for d in devices:
            if d.gpu_instance_id not in found:
                out.append(d)
                continue
            activity, na = found[d.gpu_instance_id]
            out.append(
                d.model_copy(update={"activity": activity, "unavailable": {**d.unavailable, **na}})
            )
        return out

    def _profile_list(self, index: int, handle: Any, total: int | None) -> list[_Profile]:
        """The GPU's GI profiles (the profile-info loop mig-parted uses): static, read once."""
        cached = self._profiles.get(index)
        if cached is not None:
            return cached
        lib, out = self._lib, []
        for p in range(lib.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, p)
            except lib.NVMLError as exc:
                if getattr(exc, "value", None) in (
                    lib.NVML_ERROR_GPU_IS_LOST,
                    lib.NVML_ERROR_UNKNOWN,
                ):
                    raise _Lost() from None
                continue
            if total:
                name = mig_profile_name(int(info.sliceCount), int(info.memorySizeMB), total, p)
                out.append(
                    _Profile(
                        p,
                        int(info.id),
                        int(info.sliceCount),
                        name,
                        int(info.instanceCount),
                        int(info.memorySizeMB),
                    )
                )
        if out:
            self._profiles[index] = out
        return out

    def _walk_instances(
        self, handle: Any, profiles: list[_Profile]
    ) -> tuple[list[GpuInstance], dict[str, str]]:
        """GPU instances and their compute instances (mig-parted's walk). Needs root."""
        na: dict[str, str] = {}
        out: list[GpuInstance] = []
        for prof in profiles:
            pid, slices, name, count = prof.id, prof.slices, prof.name, max(1, prof.count)
            arr = (self._lib.c_nvmlGpuInstance_t * count)()
            n = ctypes.c_uint(count)
            got = self._call(
                "nvmlDeviceGetGpuInstances",
                handle,
                pid,
                arr,
                ctypes.byref(n),
                field="instances",
                na=na,
            )
            if got is None and "instances" in na:
                if na["instances"] == "needs root":
                    na["instances"] = f"GPU-instance list {NEEDS_ROOT}"
                return [], na
            for gi in arr[: n.value]:
                info = self._call("nvmlGpuInstanceGetInfo", gi, field="instances", na=na)
                if info is None:
                    continue
                out.append(
                    GpuInstance(
                        id=int(info.id),
                        profile=name,
                        profile_id=pid,
                        placement_start=int(info.placement.start),
                        placement_size=int(info.placement.size),
                        compute_instances=self._walk_cis(gi, name, slices),
                    )
                )
        out.sort(key=lambda g: (g.placement_start or 0, g.id))
        return out, na

    def _walk_cis(self, gi: Any, gi_name: str, gi_slices: int) -> list[ComputeInstance]:
        lib = self._lib
        out = []
        for c in range(getattr(lib, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 9)):
            dummy: dict[str, str] = {}
            info = self._call(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, c, 0, field="ci", na=dummy
            )
            if info is None:
                continue
            count = max(1, int(info.instanceCount))
            arr = (self._lib.c_nvmlComputeInstance_t * count)()
            n = ctypes.c_uint(count)
            if (
                self._call(
                    "nvmlGpuInstanceGetComputeInstances",
                    gi,
                    int(info.id),
                    arr,
                    ctypes.byref(n),
                    field="ci",
                    na=dummy,
                )
                is None
            ):
                continue
            slices = int(info.sliceCount)
            name = gi_name if slices == gi_slices else f"{slices}c.{gi_name}"
            for ci in arr[: n.value]:
                ci_info = self._call("nvmlComputeInstanceGetInfo", ci, field="ci", na=dummy)
                if ci_info is not None:
                    out.append(ComputeInstance(id=int(ci_info.id), profile=name, slices=slices))
        return out

    def _read_mig_device(
        self, i: int, mh: Any, na: dict[str, str], ids: dict[str, tuple[int, int]]
    ) -> MigDevice:
        uuid = self._call("nvmlDeviceGetUUID", mh, field="uuid", na=na)
        known = ids.get(uuid) if uuid is not None else None
        if known is not None:
            gi_id, ci_id = known
        else:
            gi_id = self._call("nvmlDeviceGetGpuInstanceId", mh, field="gpu_instance_id", na=na)
            ci_id = self._call(
                "nvmlDeviceGetComputeInstanceId", mh, field="compute_instance_id", na=na
            )
        mem = self._call("nvmlDeviceGetMemoryInfo", mh, field="memory_used_bytes", na=na)
        procs = self._processes(mh, na)
        return MigDevice(
            index=i,
            uuid=uuid,
            processes=procs,
            gpu_instance_id=int(gi_id) if gi_id is not None else None,
            compute_instance_id=int(ci_id) if ci_id is not None else None,
            memory_total_bytes=int(mem.total) if mem is not None else None,
            memory_used_bytes=int(mem.used) if mem is not None else None,
            unavailable=na,
        )

    @staticmethod
    def _place(d: MigDevice, instances: list[GpuInstance], profiles: list[_Profile]) -> MigDevice:
        """Profile and placement of a MIG device from the GI walk (or, without root, its memory)."""
        gi = next((g for g in instances if g.id == d.gpu_instance_id), None)
        if gi is not None:
            ci = next((c for c in gi.compute_instances if c.id == d.compute_instance_id), None)
            return d.model_copy(
                update={
                    "profile": ci.profile if ci else gi.profile,
                    "placement_start": gi.placement_start,
                    "placement_size": gi.placement_size,
                }
            )
        # without the GI walk: the plain profile whose memory matches; placement unknown
        na = dict(d.unavailable)
        mib = (d.memory_total_bytes or 0) // (1024 * 1024)
        profile = next(
            (
                p.name
                for p in profiles
                if p.memory_mib == mib and not any(c in p.name for c in "+-")
            ),
            None,
        )
        na["placement_start"] = na["placement_size"] = f"GPU-instance list {NEEDS_ROOT}"
        if profile is None:
            na["profile"] = f"GPU-instance list {NEEDS_ROOT}"
        return d.model_copy(update={"profile": profile, "unavailable": na})
