"""The reader through every simulated GPU model and every fault."""

import time

import pynvml
import pytest

from console.gpucatalog import catalog
from console.read.nvml import LOST, NvmlReader
from console.sim.nvml import DeviceLoad, SimNvml

GIB = 1024**3


def node(*models, load=0.5):
    sim = SimNvml(load=lambda g, m: DeviceLoad(load, 8 * GIB))
    for m in models:
        sim.add_gpu(*m) if isinstance(m, tuple) else sim.add_gpu(m)
    return sim


@pytest.mark.parametrize("key", sorted(catalog()))
def test_every_model_reads_completely(key):
    sim = node(key)
    source, (g,) = NvmlReader(sim, simulated=True).read()
    model = catalog()[key]
    assert g.name == model.name and g.pci_bus_id.startswith("00000000:")
    assert g.memory_total_bytes == model.memory_total_mib * 1024**2
    assert (
        g.power_limit_w == model.power_limit_w
        and g.temperature_slowdown_c == model.temperature_slowdown_c
    )
    assert g.clock_sm_max_mhz == model.sm_clock_max_mhz and g.architecture == model.architecture
    assert g.utilization_gpu_pct == 50.0 and g.clock_events == []
    assert g.fan_pct is None and g.unavailable["fan_pct"] == "not supported"  # passive server cards
    assert (g.mig is None) == (model.mig is None)
    if model.architecture == "ada":
        assert g.retired_pages == 0 and g.remapped_rows is None
    else:
        assert g.remapped_rows is not None and g.unavailable["retired_pages"].startswith("replaced")
    assert source.cuda_driver_version == "13.0"


@pytest.mark.parametrize("key", [k for k, m in sorted(catalog().items()) if m.mig])
def test_every_mig_profile_reads_back(key):
    model = catalog()[key]
    for prof in model.mig.profiles:
        sim = node((key, [(prof.name, prof.starts[-1])]))
        _, (g,) = NvmlReader(sim, simulated=True).read()
        (gi,) = g.mig.instances
        assert (gi.profile, gi.placement_start, gi.placement_size) == (
            prof.name,
            prof.starts[-1],
            prof.size,
        )
        (dev,) = g.mig.devices
        assert dev.profile == prof.name and dev.memory_total_bytes == prof.memory_mib * 1024**2
        assert gi.compute_instances[0].profile == prof.name


def test_h100_mixed_layout_and_utilisation_na():
    sim = node(("h100-80gb", [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)]))
    _, (g,) = NvmlReader(sim, simulated=True).read()
    assert [(d.profile, d.placement_start) for d in g.mig.devices] == [
        ("2g.20gb", 0),
        ("1g.10gb", 2),
        ("1g.10gb", 3),
        ("3g.40gb", 4),
    ]
    assert g.utilization_gpu_pct is None and g.unavailable["utilization_gpu_pct"] == "n/a under MIG"
    assert g.mig.note == "MIG mode is lost on driver reload"


def test_pending_mode_badge_on_ampere():
    sim = node("a100-80gb")
    reader = NvmlReader(sim, simulated=True)
    reader.read()
    assert sim.nvmlDeviceSetMigMode(sim.nvmlDeviceGetHandleByIndex(0), 1) == pynvml.NVML_SUCCESS
    _, (g,) = reader.read()
    assert g.mig.current is False and g.mig.pending is True
    assert g.mig.note == "MIG enable pending — needs a GPU reset or reboot"
    sim.reset_gpu(0)
    _, (g,) = reader.read()
    assert g.mig.current is True and g.mig.note is None


def test_hopper_mode_change_is_immediate():
    sim = node("h200-141gb")
    sim.nvmlInit()
    sim.nvmlDeviceSetMigMode(sim.nvmlDeviceGetHandleByIndex(0), 1)
    _, (g,) = NvmlReader(sim, simulated=True).read()
    assert g.mig.current is True and g.mig.pending is True


def test_not_root_keeps_the_rest():
    sim = node(("rtx-pro-6000-se", [("2g.48gb", 0), ("1g.24gb", 6), ("1g.24gb", 9)]))
    sim.root = False
    _, (g,) = NvmlReader(sim, simulated=True).read()
    assert g.memory_used_bytes is not None and g.power_w is not None
    assert g.mig.instances == [] and "needs root" in g.mig.unavailable["instances"]
    # MIG device handles still answer: profiles from their memory, placement unknown
    assert [d.profile for d in g.mig.devices] == ["2g.48gb", "1g.24gb", "1g.24gb"]
    assert all(
        d.placement_start is None and "needs root" in d.unavailable["placement_start"]
        for d in g.mig.devices
    )


@pytest.mark.parametrize(
    "code, fn, field, reason",
    [
        (pynvml.NVML_ERROR_NOT_SUPPORTED, "nvmlDeviceGetPowerUsage", "power_w", "not supported"),
        (
            pynvml.NVML_ERROR_NO_PERMISSION,
            "nvmlDeviceGetEnforcedPowerLimit",
            "power_limit_w",
            "needs root",
        ),
        (
            pynvml.NVML_ERROR_NOT_SUPPORTED,
            "nvmlDeviceGetTotalEccErrors",
            "ecc_corrected_volatile",
            "not supported",
        ),
        (
            pynvml.NVML_ERROR_TIMEOUT,
            "nvmlDeviceGetClockInfo",
            "clock_sm_mhz",
            "the driver timed out",
        ),
    ],
)
def test_per_field_faults_are_na_with_reason(code, fn, field, reason):
    sim = node("h100-80gb", "l40s")
    sim.inject(code, gpu=0, function=fn)
    _, gpus = NvmlReader(sim, simulated=True).read()
    assert getattr(gpus[0], field) is None and gpus[0].unavailable[field] == reason
    assert getattr(gpus[1], field) is not None  # the other GPU is untouched
    assert gpus[0].fault is None


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN])
def test_lost_gpu_at_a_chosen_time_stops_polling_it(code):
    sim = node("h100-80gb", ("rtx-pro-6000-se", [("4g.96gb", 0)]), "l40s")
    reader = NvmlReader(sim, simulated=True)
    reader.read()
    sim.inject(code, gpu=1, after=time.monotonic() + 0.05)
    _, gpus = reader.read()
    assert gpus[1].fault is None
    time.sleep(0.06)
    _, gpus = reader.read()
    assert gpus[1].fault == LOST and gpus[1].name  # identity kept from before
    before = sum(sim.calls.values())
    _, gpus = reader.read()
    touched = [k for k, v in sim.calls.items() if v]
    assert gpus[1].fault == LOST and gpus[0].power_w is not None and gpus[2].power_w is not None
    assert sum(sim.calls.values()) > before and "nvmlDeviceGetHandleByIndex" in touched


def test_missing_newer_functions_fall_back_once():
    sim = node("h100-80gb")
    sim.missing = {"nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons"}
    reader = NvmlReader(sim, simulated=True)
    _, (g,) = reader.read()
    assert g.temperature_c is not None and g.clock_events == []
    tries = sim.calls["nvmlDeviceGetTemperatureV"]
    reader.read()
    reader.read()
    assert sim.calls["nvmlDeviceGetTemperatureV"] == tries  # probed once, then the older call
    assert sim.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] >= 3


def test_library_mismatch_is_caught():
    sim = node("l40s")

    def mismatch(*a):
        raise pynvml.NVMLLibraryMismatchError(
            "unversioned function called and the pynvml version does not match"
        )

    sim.nvmlDeviceGetComputeRunningProcesses = mismatch
    _, (g,) = NvmlReader(sim, simulated=True).read()
    assert g.processes == [] and g.unavailable["processes"] == "driver too old for this call"


@pytest.mark.parametrize(
    "code, start",
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "The NVIDIA driver is not loaded"),
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "No NVIDIA driver found"),
        (
            pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
            "The NVIDIA driver and library versions differ",
        ),
        (pynvml.NVML_ERROR_NO_PERMISSION, "NVML refused access"),
    ],
)
def test_start_failures_are_one_sentence(code, start):
    sim = node("l40s")

    def fail():
        raise pynvml.NVMLError(code)

    sim.nvmlInit = fail
    source, gpus = NvmlReader(sim, simulated=True).read()
    assert (
        gpus == []
        and source.kind == "none"
        and source.error.startswith(start)
        and "\n" not in source.error
    )


def test_processes_with_users_commands_and_mig_ids():
    import os

    sim = node(("rtx-pro-6000-se", [("2g.48gb", 0), ("2g.48gb", 6)]), "l40s")
    sim.add_process(0, 1, os.getpid(), 3 * GIB)
    sim.add_process(1, None, os.getpid(), 5 * GIB)
    _, gpus = NvmlReader(sim).read()  # not "simulated": /proc is read for these real pids
    (p,) = gpus[0].mig.devices[1].processes
    assert p.pid == os.getpid() and p.used_memory_bytes == 3 * GIB and p.command and p.user
    assert gpus[0].processes == []  # under MIG, processes are listed per MIG device
    assert gpus[1].processes[0].used_memory_bytes == 5 * GIB
