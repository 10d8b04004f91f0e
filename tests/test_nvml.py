import pynvml
import pytest

from console.gpucatalog import catalog, mig_profile_name
from console.read.nvml import NvmlReader
from console.sim.demo import start_demo
from console.sim.nvml import DeviceLoad, SimNvml

GIB = 1024**3


def test_mig_profile_names_follow_mig_parted():
    for model in catalog().values():
        if model.mig is None:
            continue
        total = model.memory_total_mib * 1024 * 1024
        for p in model.mig.profiles:
            assert mig_profile_name(p.slices, p.memory_mib, total, p.index) == p.name


def test_mixed_mig_layout_reads_back_exactly():
    sim = SimNvml(load=lambda g, m: DeviceLoad(0.5, 10 * GIB))
    sim.add_gpu("rtx-pro-6000-se", mig=[("2g.48gb", 0), ("1g.24gb", 6), ("1g.24gb", 9)])
    source, gpus = NvmlReader(sim, simulated=True).read()
    assert source.kind == "simulated" and source.driver_version
    (g,) = gpus
    assert g.mig.current is True and g.mig.pending is True
    got = [
        (d.profile, d.placement_start, d.placement_size, d.memory_total_bytes)
        for d in g.mig.devices
    ]
    assert got == [
        ("2g.48gb", 0, 6, 48512 * 1024**2),
        ("1g.24gb", 6, 3, 24192 * 1024**2),
        ("1g.24gb", 9, 3, 24192 * 1024**2),
    ]
    assert round(g.mig.devices[1].memory_total_bytes / GIB, 2) == 23.62  # the lgip figure
    assert g.utilization_gpu_pct is None and g.unavailable["utilization_gpu_pct"] == "n/a under MIG"
    assert g.memory_used_bytes == 30 * GIB  # three slices x 10 GiB each


def test_overlapping_instance_is_refused():
    sim = SimNvml()
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        sim.add_gpu("rtx-pro-6000-se", mig=[("2g.48gb", 0), ("1g.24gb", 3)])


def test_demo_node_reads_four_gpus_with_expected_layouts():
    node = start_demo()
    try:
        _, gpus = NvmlReader(node.nvml, simulated=True).read()
    finally:
        node.stop()
    assert len(gpus) == 4
    assert [d.profile for d in gpus[1].mig.devices] == ["2g.48gb", "2g.48gb"]
    assert [d.profile for d in gpus[2].mig.devices] == ["1g.24gb"] * 4
    assert gpus[0].mig.current is False and gpus[0].utilization_gpu_pct is not None
    assert gpus[0].memory_used_bytes > 0 and gpus[0].power_w > 0
    assert gpus[1].mig.devices[0].memory_used_bytes > 0  # the 8B engine holds its slice
    assert gpus[3].utilization_gpu_pct == 0.0


def test_lost_gpu_is_marked_and_others_keep_updating():
    loads = {"util": 0.2}
    sim = SimNvml(load=lambda g, m: DeviceLoad(loads["util"], GIB))
    sim.add_gpu("rtx-pro-6000-se")
    sim.add_gpu("l40s")
    reader = NvmlReader(sim, simulated=True)
    reader.read()
    sim.lose_gpu(0)
    loads["util"] = 0.7
    _, gpus = reader.read()
    assert gpus[0].fault and "lost" in gpus[0].fault and gpus[0].name  # identity kept
    assert gpus[1].utilization_gpu_pct == 70.0
    calls = []
    orig = sim.nvmlDeviceGetHandleByIndex
    sim.nvmlDeviceGetHandleByIndex = lambda i: calls.append(i) or orig(i)
    _, gpus = reader.read()
    assert 0 not in calls  # never touched again
    assert gpus[0].fault and gpus[1].fault is None


def test_no_library_gives_one_sentence():
    class NoLib:
        NVMLError = pynvml.NVMLError
        NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError

        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    source, gpus = NvmlReader(NoLib()).read()
    assert gpus == [] and source.kind == "none"
    assert source.error.startswith("No NVIDIA driver found") and "\n" not in source.error


def test_real_pynvml_without_driver_does_not_raise():
    source, gpus = NvmlReader().read()  # this machine has no GPU: a sentence, not a traceback
    if source.kind == "none":
        assert gpus == [] and source.error


def test_mig_instance_ids_are_read_once_a_walk_and_again_for_a_new_device(tmp_path, monkeypatch):
    """A MIG device's GPU and compute instance ids are fixed for its life: read with its UUID's
    first sight and with every instance walk (5 s), not every poll; a device re-created by a tool
    outside the console (new UUID) is read at once."""
    from console.mig.layouts import parse_layout
    from console.mig.manager import MigManager
    from console.read import nvml

    now = [100.0]
    monkeypatch.setattr(nvml.time, "monotonic", lambda: now[0])
    sim = SimNvml(load=lambda g, m: DeviceLoad(0.5, GIB))
    sim.add_gpu("h100-80gb", mig=[("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)])
    reader = NvmlReader(sim, simulated=True)

    def poll() -> int:
        """How many devices' ids the poll asked NVML for (the ids checked against the truth)."""
        before = sim.calls["nvmlDeviceGetGpuInstanceId"]
        now[0] += 1.0
        _, (gpu,) = reader.read()
        truth = [(gi.gi_id, ci.ci_id) for gi, ci in sim.gpus[0].mig_devices()]
        assert [(d.gpu_instance_id, d.compute_instance_id) for d in gpu.mig.devices] == truth
        return sim.calls["nvmlDeviceGetGpuInstanceId"] - before

    assert poll() == 3
    assert [poll() for _ in range(3)] == [0, 0, 0]  # known by UUID
    MigManager(sim, audit_path=tmp_path / "a.jsonl", user="t").apply(
        0, parse_layout("1g.10gb@0,1g.10gb@1,3g.40gb@4", sim.gpus[0].model)
    )
    assert poll() == 3  # mig-parted elsewhere: three new devices, their ids read at once
    assert poll() == 0
    now[0] += nvml.SLOW_TTL_S
    assert poll() == 3  # read again with the instance walk
    assert poll() == 0
