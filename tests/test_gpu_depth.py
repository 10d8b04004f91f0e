"""Inside MIG: GPM activity per GPU instance against the simulator's truth, reseeding across a
re-layout, samples freed; the pod behind a process (cgroup v1/v2, containerd, CRI-O, Docker, a
kubelet stand-in); driver facts in the Frame."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from console.frame import GpmActivity
from console.mig.layouts import parse_layout
from console.mig.manager import MigManager
from console.read.gpm import NO_GPM, GpmSampler
from console.read.live import LiveSource
from console.read.nvml import NvmlReader
from console.read.poller import KubeletTarget
from console.read.workload import kubelet_index, parse_cgroup, workload_of
from console.sim.engine import MetricsServer
from console.sim.nvml import DeviceLoad, SimNvml

ROOT = Path(__file__).resolve().parent.parent


class Node:
    """A simulated node on a test clock; each (gpu, MIG index) runs at the load set for it."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.loads: dict[tuple[int, int | None], float] = {}
        self.sim = SimNvml(load=self.load, clock=lambda: self.t)

    def load(self, gpu: int, mig: int | None) -> DeviceLoad:
        return DeviceLoad(self.loads.get((gpu, mig), 0.0), 2**30)

    def reader(self, **kw) -> NvmlReader:
        return NvmlReader(self.sim, simulated=True, clock=lambda: self.t, **kw)


MIG_NODES = [
    ("h100-80gb", [("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)]),
    ("h200-141gb", [("3g.71gb", 0), ("3g.71gb", 4)]),
    ("rtx-pro-6000-se", [("2g.48gb", 0), ("1g.24gb", 6), ("1g.24gb", 9)]),
]


@pytest.mark.parametrize("model,layout", MIG_NODES)
def test_instance_activity_equals_the_simulators_truth(model, layout):
    node = Node()
    node.sim.add_gpu(model, mig=layout)
    node.sim.add_gpu(model)
    reader = node.reader()
    _, gpus = reader.read()
    assert all(d.activity is None for d in gpus[0].mig.devices)  # one sample: nothing yet
    assert "next poll" in gpus[0].mig.devices[0].unavailable["activity"]
    for step, shares in enumerate(([0.2, 0.55, 0.9], [0.75, 0.1, 0.33], [0.0, 1.0, 0.5])):
        for i, share in enumerate(shares[: len(layout)]):
            node.loads[(0, i)] = share
        node.loads[(1, None)] = shares[0]
        node.t += 1.0 + step  # 1 s, 2 s, 3 s between polls
        _, gpus = reader.read()
        for i, d in enumerate(gpus[0].mig.devices):
            truth = shares[i]
            assert d.activity.graphics_pct == pytest.approx(100 * truth, abs=1.0)
            assert d.activity.sm_pct == pytest.approx(90 * truth, abs=1.0)
            assert d.activity.interval_s == pytest.approx(1.0 + step)
        whole = gpus[1].activity
        assert whole.graphics_pct == pytest.approx(100 * shares[0], abs=1.0)
        assert whole.tensor_pct == pytest.approx(70 * shares[0], abs=1.0)
        assert gpus[0].activity is None  # MIG on: the GPU's figures are its instances'
    reader.close()
    assert node.sim.gpm_samples == {}  # every sample freed


@pytest.mark.parametrize("model", ["a100-80gb", "l40s"])
def test_gpus_without_gpm_say_why(model):
    node = Node()
    node.sim.add_gpu(model)
    reader = node.reader()
    for _ in range(2):
        _, gpus = reader.read()
        node.t += 1
    assert gpus[0].activity is None
    assert gpus[0].unavailable["activity"] == NO_GPM
    assert node.sim.gpm_samples == {}


def test_relayout_reseeds_instances_no_spike_no_negative(tmp_path):
    node = Node()
    node.sim.add_gpu("h100-80gb", mig=[("3g.40gb", 0), ("3g.40gb", 4)])
    reader = node.reader()
    reader.read()
    mm = MigManager(node.sim, audit_path=tmp_path / "a.jsonl", user="t")
    model = mm.read(0).model
    seen: list[float] = []

    def poll(load: float) -> list:
        node.loads.update({(0, 0): load, (0, 1): load})
        node.t += 1.0
        _, gpus = reader.read()
        acts = [d.activity for d in gpus[0].mig.devices]
        seen.extend(a.graphics_pct for a in acts if a is not None)
        return acts

    poll(0.9)
    for _ in range(5):
        poll(0.9)  # long-lived instances: a large activity integral
    # re-layout to the same shape: new instances under the same GI ids
    for layout, count in (("7g.80gb@0", 1), ("3g.40gb@0,3g.40gb@4", 2)):
        mm.apply(0, parse_layout(layout, model))
        reader.forget_mig(0)
        assert poll(0.2) == [None] * count  # new instances (GI 1 again): reseeded, not differenced
        assert [round(a.graphics_pct) for a in poll(0.2)] == [20] * count
    assert all(0 <= v <= 100 for v in seen)
    assert len(node.sim.gpm_samples) == 2 * 2  # two instances, two samples each


def test_without_the_identity_check_a_relayout_gives_garbage():
    """The mechanism the reader relies on: sampling a re-created instance against the old one's
    sample (the same GI id) gives a figure no GPU can have."""
    node = Node()
    node.sim.add_gpu("h100-80gb", mig=[("7g.80gb", 0)])
    sampler = GpmSampler(node.sim, clock=lambda: node.t)
    node.sim.nvmlInit()
    h = node.sim.nvmlDeviceGetHandleByIndex(0)
    node.loads[(0, 0)] = 1.0
    sampler.read(0, h, 1, "same")
    node.t += 100.0
    sampler.read(0, h, 1, "same")
    gpu = node.sim.gpus[0]
    gpu.gis.clear()
    gi = node.sim._create_gi(gpu, gpu.model.mig.profile("7g.80gb"), 0)
    node.sim._create_ci(gpu, gi)
    node.t += 1.0
    act, _ = sampler.read(0, h, 1, "same")  # an identity that did not change: differenced
    assert act.graphics_pct < 0
    act, why = sampler.read(0, h, 1, "new")
    assert act is None and "next poll" in why
    sampler.close()


def test_gpm_guards_short_and_long_gaps():
    node = Node()
    node.sim.add_gpu("h100-80gb")
    reader = node.reader()
    node.loads[(0, None)] = 0.5
    reader.read()
    node.t += 1.0
    first = reader.read()[1][0].activity
    node.t += 0.1  # too soon: the previous figure stands
    assert reader.read()[1][0].activity == first
    node.t += 120.0  # too long: reseeded, no stale average
    g = reader.read()[1][0]
    assert g.activity is None and "reseeded after 120 s" in g.unavailable["activity"]
    node.t += 1.0
    assert reader.read()[1][0].activity.graphics_pct == pytest.approx(50, abs=1)


def test_lost_gpu_frees_its_samples():
    node = Node()
    node.sim.add_gpu("h100-80gb")
    node.sim.add_gpu("h100-80gb")
    reader = node.reader()
    reader.read()
    assert len(node.sim.gpm_samples) == 4
    node.sim.lose_gpu(1)
    node.t += 1
    _, gpus = reader.read()
    assert gpus[1].fault and len(node.sim.gpm_samples) == 2


# --- the workload behind a process --------------------------------------------------------------

CTR = "3f9c2a1b7d04" + "a" * 52
CRIO = "9e8d7c6b5a41" + "b" * 52
DOCKER = "0123456789ab" + "c" * 52
POD = "5b2e3c1d-7a8f-4e6b-9c0d-1e2f3a4b5c6d"
CGROUPS = {
    # cgroup v2, systemd driver, containerd
    101: f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD.replace('-', '_')}"
    f".slice/cri-containerd-{CTR}.scope\n",
    # cgroup v1, CRI-O
    102: "12:memory:/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice/"
    f"crio-{CRIO}.scope\n"
    "11:cpu,cpuacct:/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice/"
    f"crio-{CRIO}.scope\n1:name=systemd:/system.slice\n",
    # Docker, cgroupfs driver (no Kubernetes)
    103: f"0::/docker/{DOCKER}\n",
    # a process on the host
    104: "0::/user.slice/user-1000.slice/session-3.scope\n",
}


def fake_proc(root: Path) -> Path:
    for pid, text in CGROUPS.items():
        d = root / str(pid)
        d.mkdir(parents=True)
        (d / "cgroup").write_text(text)
        (d / "cmdline").write_bytes(b"python3\0-m\0vllm.entrypoints.openai.api_server\0")
    env = root / "101" / "environ"
    env.write_bytes(b"PATH=/usr/bin\0HOSTNAME=llama-8b-7d9f5c-x2x4q\0")
    ns = root / "101" / "root" / "var/run/secrets/kubernetes.io/serviceaccount"
    ns.mkdir(parents=True)
    (ns / "namespace").write_text("serving\n")
    return root


def test_cgroup_lines_map_to_container_and_pod(tmp_path):
    proc = fake_proc(tmp_path)
    a = workload_of(101, proc)
    assert (a.runtime, a.container_id, a.pod_uid) == ("containerd", CTR, POD)
    assert (a.pod, a.namespace) == ("llama-8b-7d9f5c-x2x4q", "serving")  # from the process
    b = workload_of(102, proc)
    assert (b.runtime, b.container_id) == ("cri-o", CRIO)
    assert b.pod_uid == "11111111-2222-3333-4444-555555555555" and b.pod is None
    c = workload_of(103, proc)
    assert (c.runtime, c.container_id, c.pod_uid) == ("docker", DOCKER, None)
    assert workload_of(104, proc) is None
    assert workload_of(999, proc) is None  # gone or not ours to read
    cgroupfs = parse_cgroup(f"0::/kubepods/burstable/pod{POD}/{CTR}\n")
    assert (cgroupfs.pod_uid, cgroupfs.container_id, cgroupfs.runtime) == (POD, CTR, None)


def _pods() -> str:
    return json.dumps(
        {
            "kind": "PodList",
            "items": [
                {
                    "metadata": {
                        "name": "qwen-prefill-0",
                        "namespace": "llm",
                        "uid": "11111111-2222-3333-4444-555555555555",
                    },
                    "status": {
                        "containerStatuses": [{"name": "sglang", "containerID": f"cri-o://{CRIO}"}]
                    },
                },
                {
                    "metadata": {
                        "name": "llama-8b-7d9f5c-x2x4q",
                        "namespace": "serving",
                        "uid": POD,
                    },
                    "status": {
                        "containerStatuses": [
                            {"name": "vllm", "containerID": f"containerd://{CTR}"}
                        ]
                    },
                },
            ],
        }
    )


def test_kubelet_pods_name_the_processes(tmp_path):
    proc = fake_proc(tmp_path / "proc")
    node = Node()
    node.sim.add_gpu("h100-80gb", mig=[("3g.40gb", 0), ("3g.40gb", 4)])
    node.sim.add_gpu("h100-80gb")
    node.sim.add_process(0, 0, 101, 20 * 2**30)
    node.sim.add_process(0, 1, 102, 20 * 2**30)
    node.sim.add_process(1, None, 103, 30 * 2**30)
    token = tmp_path / "token"
    token.write_text("sa-token\n")
    kubelet = MetricsServer(_pods, content_type="application/json", path="/pods").start()
    try:
        live = LiveSource.reading([], node.reader(proc=proc))
        live.poller.kubelet = KubeletTarget(url=kubelet.url, token_file=str(token))
        frame = asyncio.run(_poll(live))
    finally:
        kubelet.stop()
    d0, d1 = frame.gpus[0].mig.devices
    w = d0.processes[0].workload
    assert (w.namespace, w.pod, w.container) == ("serving", "llama-8b-7d9f5c-x2x4q", "vllm")
    w = d1.processes[0].workload
    assert (w.namespace, w.pod, w.container, w.runtime) == (
        "llm",
        "qwen-prefill-0",
        "sglang",
        "cri-o",
    )
    w = frame.gpus[1].processes[0].workload
    assert w.runtime == "docker" and w.pod is None  # not a pod: its container stays
    assert "kubelet" not in (frame.gpu_source.note or "")


def test_unreachable_kubelet_says_so_and_keeps_the_ids(tmp_path):
    proc = fake_proc(tmp_path / "proc")
    node = Node()
    node.sim.add_gpu("h100-80gb")
    node.sim.add_process(0, None, 102, 2**30)
    live = LiveSource.reading([], node.reader(proc=proc))
    live.poller.kubelet = KubeletTarget(url="http://127.0.0.1:9/pods", timeout_s=0.5)
    frame = asyncio.run(_poll(live))
    assert "kubelet http://127.0.0.1:9/pods" in frame.gpu_source.note
    assert frame.gpus[0].processes[0].workload.container_id == CRIO


def test_kubelet_index_rejects_other_answers():
    with pytest.raises(ValueError):
        kubelet_index("[]")
    assert kubelet_index(_pods())[CTR]["container"] == "vllm"


async def _poll(live: LiveSource):
    frame = await live.poll()
    await live.aclose()
    return frame


# --- driver facts, end to end -------------------------------------------------------------------


@pytest.mark.slow
def test_demo_snapshot_json_carries_driver_facts_and_instance_activity(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "console", "snapshot", "--demo", "--wait", "3", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)},
    )
    assert out.returncode in (0, 1), out.stderr
    frame = json.loads(out.stdout)
    src = frame["gpu_source"]
    assert src["driver_version"] and src["cuda_driver_version"] and src["nvml_version"]
    devices = [d for g in frame["gpus"] if g.get("mig") for d in g["mig"]["devices"]]
    assert devices and all(GpmActivity.model_validate(d["activity"]) for d in devices)
    busy = [d["activity"]["graphics_pct"] for d in devices if d["processes"]]
    assert busy and all(0 < v <= 100 for v in busy)
    assert all(g["persistence_mode"] is True for g in frame["gpus"])


def test_mode_change_notes_name_what_blocks_a_reset(tmp_path):
    node = Node()
    node.sim.add_gpu("h100-80gb")
    NvmlReader(node.sim, simulated=True).read()
    mm = MigManager(node.sim, audit_path=tmp_path / "a.jsonl", user="t")
    g = mm.read(0)
    modules = tmp_path / "modules"
    modules.write_text(
        "nvidia_uvm 1 0 - Live 0x0\nnvidia_drm 126976 4 - Live 0x0\nnvidia 1 2 nvidia_drm, Live 0x0\n"
    )
    notes = mm.reset_notes(g, "enable", modules)
    assert "needs a reset (nvidia-smi -r -i 0)" in notes[0]
    assert "nvidia_drm module is loaded" in notes[1]
    modules.write_text("nvidia 1 0 - Live 0x0\n")
    assert len(mm.reset_notes(g, "enable", modules)) == 1
    assert mm.reset_notes(g, [], modules) == []  # a layout change needs no reset
