"""MIG re-layout against the simulator: every layout from every other, faults at every step,
process blocks, mode changes, the menu, and mig-parted round trips."""

import json
import os
import random

import pynvml
import pytest

from console.gpucatalog import catalog
from console.mig.layouts import MigError, parse_layout, valid_layouts
from console.mig.manager import MigManager
from console.mig.parted import export_mig_parted, import_mig_parted
from console.sim.nvml import SimNvml
from tests.waits import until

MIG_MODELS = [k for k, m in sorted(catalog().items()) if m.mig]


def manager(tmp_path, model, mig=()):
    """A one-GPU simulated node; mig=None leaves MIG off, () turns it on with no instances."""
    sim = SimNvml()
    sim.add_gpu(model, mig=list(mig) if mig is not None else None)
    sim.nvmlInit()
    return sim, MigManager(sim, audit_path=tmp_path / "audit.jsonl", user="tester")


@pytest.fixture
def ram_dir(tmp_path):
    """A folder in memory when the machine has one (fsync costs nothing there): the tours make
    thousands of applies, each with its journal records flushed."""
    import shutil
    import tempfile
    from pathlib import Path

    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="inferdeck-test-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def euler_tour(n):
    """Every ordered pair (a, b), a != b, once: a closed walk over the complete digraph."""
    out = {v: [w for w in range(n) if w != v] for v in range(n)}
    stack, tour = [0], []
    while stack:
        v = stack[-1]
        if out[v]:
            stack.append(out[v].pop())
        else:
            tour.append(stack.pop())
    return tour[::-1]


@pytest.mark.slow
@pytest.mark.parametrize("model", MIG_MODELS)
def test_every_layout_applies_from_every_other(ram_dir, model):
    layouts = valid_layouts(catalog()[model])
    assert layouts
    sim, mm = manager(ram_dir, model)
    tour = euler_tour(len(layouts))
    assert len(tour) == len(layouts) * (len(layouts) - 1) + 1
    for i in tour:
        report = mm.apply(0, layouts[i])
        assert report.result == "applied", (model, layouts[i], report)
        assert sorted(mm.read(0).layout) == sorted(layouts[i])


@pytest.mark.parametrize("model", MIG_MODELS)
def test_a_seeded_sample_of_the_tour_applies(ram_dir, model):
    """The default run's share of the exhaustive tour (``-m slow`` runs all of it): 60 steps of it
    from a seed drawn per model, each one layout changed into another, as the tour does."""
    layouts = valid_layouts(catalog()[model])
    sim, mm = manager(ram_dir, model)
    tour = euler_tour(len(layouts))
    start = random.Random(f"tour:{model}").randrange(max(1, len(tour) - 60))
    for i in tour[start : start + 60]:
        report = mm.apply(0, layouts[i])
        assert report.result == "applied", (model, layouts[i], report)
        assert sorted(mm.read(0).layout) == sorted(layouts[i])


def test_catalogue_matches_the_reference():
    rtx = {frozenset(x) for x in valid_layouts(catalog()["rtx-pro-6000-se"])}
    for expect in (
        ["4g.96gb@0"],
        ["2g.48gb@0", "2g.48gb@6"],
        ["2g.48gb@0", "1g.24gb@6", "1g.24gb@9"],
        ["1g.24gb@0", "1g.24gb@3", "1g.24gb@6", "1g.24gb@9"],
    ):
        assert frozenset((p.split("@")[0], int(p.split("@")[1])) for p in expect) in rtx
    h100 = valid_layouts(catalog()["h100-80gb"])
    plain = {
        tuple(sorted(n for n, _ in L))
        for L in h100
        if all("+" not in n and "-" not in n for n, _ in L)
    }
    assert ("3g.40gb", "4g.40gb") in plain and ("1g.10gb",) * 7 in plain and ("7g.80gb",) in plain
    # an invalid layout is never offered: the simulator (NVML's rules) accepts every one of them
    for model in MIG_MODELS:
        for L in valid_layouts(catalog()[model]):
            sim = SimNvml()
            sim.add_gpu(model, mig=L)


@pytest.mark.parametrize("model", ["rtx-pro-6000-se", "h100-80gb"])
def test_a_fault_at_every_step_ends_old_or_new_with_rollback_and_audit(tmp_path, model):
    layouts = valid_layouts(catalog()[model])
    before, after = layouts[1], layouts[-1]
    sim, mm = manager(tmp_path, model, mig=before)
    sim.calls.clear()
    mm.apply(0, after)
    total_calls = sum(sim.calls.values())
    mm.apply(0, before)
    outcomes = set()
    for k in range(1, total_calls + 1):
        sim.faults.clear()
        sim.inject(
            pynvml.NVML_ERROR_UNKNOWN if k % 2 else pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES,
            gpu=0,
            on_call=k,
        )
        try:
            report = mm.apply(0, after)
        except Exception as exc:  # the read before any change failed: nothing changed
            sim.faults.clear()
            assert sorted(mm.read(0).layout) == sorted(before), (k, exc)
            outcomes.add("refused")
            continue
        sim.faults.clear()
        now = sorted(mm.read(0).layout)
        assert now in (sorted(before), sorted(after)), (k, report)
        if report.result == "applied":
            assert now == sorted(after)
            mm.apply(0, before)
        else:
            assert (
                report.result == "rolled back"
                and report.error is not None
                and now == sorted(before)
            ), report
        outcomes.add(report.result)
    assert "rolled back" in outcomes
    entries = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    rolled = {e["apply"] for e in entries if e["record"] == "end" and e["result"] == "rolled back"}
    begins = {e["apply"]: e for e in entries if e["record"] == "begin"}
    assert rolled and all(
        begins[a]["uuid"] and begins[a]["user"] == "tester" and begins[a]["before"] for a in rolled
    )
    assert all(e["after"] for e in entries if e["record"] == "end" and e["result"] == "rolled back")
    assert any(
        e["step"].startswith("rollback:") for e in entries if e["record"] == "step"
    ) or not any(e["step"].startswith("create") for e in entries if e["apply"] in rolled)
    assert (tmp_path / "audit.jsonl").stat().st_mode & 0o777 == 0o600


def test_processes_block_only_affected_instances(tmp_path):
    sim, mm = manager(
        tmp_path, "rtx-pro-6000-se", mig=[("2g.48gb", 0), ("1g.24gb", 6), ("1g.24gb", 9)]
    )
    sim.add_process(0, 2, 4242, 1 << 30)  # on 1g.24gb@9
    target_keep_9 = parse_layout("2g.48gb@0,1g.24gb@6,1g.24gb@9", catalog()["rtx-pro-6000-se"])
    # replacing the 2g.48gb with two 1g.24gb keeps @9: allowed
    report = mm.apply(
        0, parse_layout("1g.24gb@0,1g.24gb@3,1g.24gb@6,1g.24gb@9", catalog()["rtx-pro-6000-se"])
    )
    assert report.result == "applied"
    with pytest.raises(
        MigError, match=r"process 4242 \(vllm serve m; engine big\) runs on 1g.24gb@9"
    ):
        mm.apply(
            0,
            parse_layout("2g.48gb@0,2g.48gb@6", catalog()["rtx-pro-6000-se"]),
            commands={4242: "vllm serve m; engine big"},
        )
    assert sorted(mm.read(0).layout) != sorted(target_keep_9)
    with pytest.raises(MigError, match="4242"):
        mm.apply(0, "disable")


def test_read_only_and_pending_mode_block(tmp_path):
    sim, mm = manager(tmp_path, "a100-80gb", mig=None)
    with pytest.raises(MigError, match="read-only"):
        mm.apply(0, "enable", read_only=True)
    report = mm.apply(0, "enable")
    assert report.result == "pending: needs a GPU reset" and "reset the GPU" in report.next
    with pytest.raises(MigError, match="mode change pending"):
        mm.apply(0, "disable")
    sim.reset_gpu(0)
    assert mm.apply(0, parse_layout("3g.40gb+4g.40gb", catalog()["a100-80gb"])).result == "applied"


def test_a_layout_on_a_mig_off_gpu_is_blocked_and_a_rollback_to_nothing_says_so(tmp_path):
    """A layout on a GPU whose MIG mode is off cannot be made: blocked at once with the step that
    comes first, where the apply used to start creating and fail. A failed apply on a GPU that
    held no instances rolls back to "no MIG instances" (the sentence used to stop at "to ")."""
    from console.mig.cli import report_lines

    model = catalog()["h100-80gb"]
    sim, mm = manager(tmp_path, "h100-80gb", mig=None)
    layout = parse_layout("7g.80gb", model)
    with pytest.raises(MigError, match=r"MIG mode off: enable it first \(inferdeck mig apply 0"):
        mm.apply(0, layout)
    assert mm.apply(0, "enable").result == "applied"  # Hopper: at once
    said: list[str] = []
    sim.inject(
        pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, function="nvmlGpuInstanceCreateComputeInstance"
    )
    report = mm.apply(0, layout, progress=said.append)
    sim.faults.clear()
    assert report.result == "rolled back", report
    assert any(m.endswith("rolling back to no MIG instances") for m in said), said
    lines = report_lines(report, tmp_path / "audit.jsonl")
    assert lines[0] == "rolled back: GPU 0 was no MIG instances, now no MIG instances."
    assert lines[1] == "verified: no GPU instance left, as intended"
    assert lines[2].startswith("error: ") and str(tmp_path / "audit.jsonl") in lines[-1]


def test_hopper_mode_change_applies_at_once_and_in_use_is_reported(tmp_path):
    sim, mm = manager(tmp_path, "h100-80gb", mig=None)
    assert mm.apply(0, "enable").result == "applied"
    assert mm.apply(0, "disable").result == "applied"
    sim.add_process(0, None, 777, 1 << 30)
    with pytest.raises(MigError, match="process 777"):
        mm.apply(0, "enable")


def test_not_root_is_blocked_with_a_sentence(tmp_path, monkeypatch):
    sim, mm = manager(tmp_path, "rtx-pro-6000-se", mig=[("4g.96gb", 0)])
    sim.root = False
    with pytest.raises(MigError, match="needs root"):
        mm.read(0)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    sim.root = True
    monkeypatch.setattr(MigManager, "_has_capability", staticmethod(lambda: False))
    with pytest.raises(MigError, match="changing MIG needs root"):
        mm.apply(0, parse_layout("2g.48gb*2", catalog()["rtx-pro-6000-se"]))


REFERENCE_EXAMPLE = """\
version: v1
mig-configs:
  all-balanced:
    - device-filter: ["0x233010DE", "0x233110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
  all-disabled:
    - devices: all
      mig-enabled: false
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
"""


def test_mig_parted_round_trip_and_reference_examples(tmp_path):
    sim = SimNvml()
    sim.add_gpu("h100-80gb", mig=[("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)])
    sim.add_gpu("rtx-pro-6000-se", mig=[("2g.48gb", 0), ("1g.24gb", 6), ("1g.24gb", 9)])
    sim.add_gpu("l40s")
    sim.nvmlInit()
    mm = MigManager(sim, audit_path=tmp_path / "a.jsonl")
    gpus = [mm.read(i) for i in range(2)]
    text = export_mig_parted(gpus, "snap")
    assert "version: v1" in text and "'0x233010DE'" in text
    # wipe both GPUs, then import the exported label: the same layouts come back
    for i in range(2):
        mm.apply(i, "disable")
        mm.apply(i, "enable")
    targets = import_mig_parted(text, "snap", [mm.read(i) for i in range(2)])
    for i, target in targets.items():
        assert mm.apply(i, target).result == "applied"
    for i in range(2):
        from collections import Counter

        assert Counter(n for n, _ in mm.read(i).layout) == Counter(n for n, _ in gpus[i].layout)
    # the reference's own examples parse and select the right GPUs
    h100 = [mm.read(0)]
    balanced = import_mig_parted(REFERENCE_EXAMPLE, "all-balanced", h100)
    assert sorted(n for n, _ in balanced[0]) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert import_mig_parted(REFERENCE_EXAMPLE, "all-disabled", h100) == {0: "disable"}
    assert import_mig_parted(REFERENCE_EXAMPLE, "all-enabled", h100) == {0: "enable"}
    assert (
        import_mig_parted(REFERENCE_EXAMPLE, "all-balanced", [mm.read(1)]) == {}
    )  # device-filter excludes it
    with pytest.raises(MigError, match="no config labelled"):
        import_mig_parted(REFERENCE_EXAMPLE, "nope", h100)


@pytest.mark.slow
async def test_menu_walk_preview_cancel_then_apply(tmp_path):
    from console.read.live import LiveSource
    from console.read.nvml import NvmlReader
    from console.settings import demo_settings
    from console.sim.demo import start_demo
    from screens.app import InferdeckApp
    from screens.mig import ConfirmApply, MigScreen
    from screens.widgets import KeyedTable

    settings = demo_settings()
    node = start_demo(settings)
    reader = NvmlReader(node.nvml, simulated=True)
    live = LiveSource.reading(node.targets(), reader, plan=settings)
    app = InferdeckApp(
        live, interval_s=0.2, mig=MigManager(node.nvml, audit_path=tmp_path / "a.jsonl")
    )
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await until(pilot, lambda: app.frame is not None)
            await pilot.press("m")
            await until(pilot, lambda: isinstance(app.screen, MigScreen))
            await pilot.pause()
            await pilot.press("down", "down", "enter")  # GPU 2: 4 x 1g.24gb
            await pilot.pause()
            await pilot.press("down", "down", "enter")  # 2g.48gb + 1g.24gb x2 (2g at 6)
            shown = lambda: str(app.screen.query_one("#mig-preview").render())  # noqa: E731
            await until(pilot, lambda: "create   2g.48gb@6" in shown())
            preview = shown()
            assert "destroy  1g.24gb@6,1g.24gb@9" in preview and "create   2g.48gb@6" in preview
            assert "nvidia-smi mig -i 2 -cgi 5:6 -C" in preview
            await pilot.press("c")  # the commands for a change ticket (OSC 52)
            assert "nvidia-smi mig -i 2 -cgi 5:6 -C\n" in app.clipboard
            await pilot.press("a")
            await until(pilot, lambda: isinstance(app.screen, ConfirmApply))
            await pilot.press("enter")  # empty: Cancel is the default
            await until(pilot, lambda: isinstance(app.screen, MigScreen))
            assert len(node.nvml.gpus[2].gis) == 4  # nothing changed
            await pilot.press("a")
            await until(pilot, lambda: isinstance(app.screen, ConfirmApply))
            await pilot.press("2", "enter")
            await until(pilot, lambda: "applied" in str(app.screen.query_one("#mig-log").render()))
            gpus = app.screen.query_one("#mig-gpus")
            await until(pilot, lambda: "2g.48gb" in str(gpus.get_cell("2", "layout")))
            # the menu's own GPU list says what GPU 2 holds now (it used to keep 1g.24gb x4)
            gpus = app.screen.query_one("#mig-gpus")
            assert "2g.48gb" in str(gpus.get_cell("2", "layout")), gpus.get_cell("2", "layout")
            await pilot.press("escape")
            table = app.query_one("#gpu-table", KeyedTable)
            await until(pilot, lambda: "mig:2:3" not in [str(r.value) for r in table.rows])
            keys = [str(r.value) for r in table.rows]
            assert "mig:2:2" in keys and "mig:2:3" not in keys  # the GPU pane shows the new layout
            assert str(table.get_cell("mig:2:2", "device")).startswith("└ 2g.48gb@6")
    finally:
        node.stop()


def test_layouts_come_from_the_driver_with_the_catalogue_as_fallback(tmp_path):
    sim, mm = manager(tmp_path, "h200-141gb")
    g = mm.read(0)
    assert g.spec_source == "driver"
    assert sorted(map(tuple, valid_layouts(g.spec))) == sorted(
        map(tuple, valid_layouts(catalog()["h200-141gb"]))
    )
    sim.missing = {"nvmlDeviceGetGpuInstancePossiblePlacements"}  # an older driver, or not root
    g = mm.read(0)
    assert g.spec_source == "catalogue" and len(valid_layouts(g.spec)) == len(
        valid_layouts(catalog()["h200-141gb"])
    )


def test_preview_says_where_planned_services_land(tmp_path):
    from console.figures.plan import Node, Plan, Service
    from console.mig.preview import landing

    sim, mm = manager(tmp_path, "rtx-pro-6000-se", mig=[("1g.24gb", s) for s in (0, 3, 6, 9)])
    plan = Plan(
        node=Node(gpus=1, gpu_model="rtx-pro-6000-se"),
        services=[
            Service(
                name="small",
                device="0:1g.24gb@0",
                model="llama-3.1-8b",
                weight_bits=16,
                tokens_per_sequence=4096,
                concurrent_sequences=2,
            ),
            Service(
                name="moved",
                device="0:1g.24gb@6",
                model="llama-3.1-8b",
                weight_bits=16,
                tokens_per_sequence=4096,
                concurrent_sequences=2,
            ),
        ],
    )
    g = mm.read(0)
    target = parse_layout("1g.24gb@0,1g.24gb@3,2g.48gb@6", catalog()["rtx-pro-6000-se"])
    small, moved = landing(plan, g, target)
    assert (
        small["lands_on"] == "1g.24gb@0"
        and small["fits"]
        and round(small["capacity_gib"], 2) == 23.62
    )
    assert moved["lands_on"] is None and "loses its planned device 0:1g.24gb@6" in moved["warning"]


def test_the_preview_scales_each_service_s_measured_capacity_to_its_new_slice(tmp_path):
    """A service measured at 3 req/s (TPOT binds) on a 1g slice of a 4-slice card lands on a 2g:
    twice the compute, ~6 req/s, said to be a scaling; a KV-bound one scales by memory."""
    from console.figures.plan import Node, Plan, Service
    from console.frame import CapacityReport
    from console.mig.preview import capacity_there, landing

    sim, mm = manager(tmp_path, "rtx-pro-6000-se", mig=[("1g.24gb", s) for s in (0, 3, 6, 9)])
    svc = dict(model="llama-3.1-8b", weight_bits=16, tokens_per_sequence=4096)
    plan = Plan(
        node=Node(gpus=1, gpu_model="rtx-pro-6000-se"),
        services=[
            Service(name="tpot", device="0:2g.48gb@0", concurrent_sequences=2, **svc),
            Service(name="kv", device="0:2g.48gb@6", concurrent_sequences=2, **svc),
        ],
    )
    g = mm.read(0)
    target = parse_layout("2g.48gb@0,2g.48gb@6", catalog()["rtx-pro-6000-se"])
    cap = CapacityReport(requests_per_s=3.0, binding="tpot", limit="tpot")
    kv = cap.model_copy(update={"binding": "ttft", "limit": "kv"})
    fast, roomy = landing(plan, g, target, {"tpot": (cap, "1g.24gb"), "kv": (kv, "1g.24gb")})
    assert fast["capacity"]["predicted_rps"] == pytest.approx(6.0)
    assert fast["capacity"]["scaled_by"] == "compute"
    mem = g.model.mig.profile("2g.48gb").memory_mib / g.model.mig.profile("1g.24gb").memory_mib
    assert roomy["capacity"]["predicted_rps"] == pytest.approx(3.0 * mem)
    assert roomy["capacity"]["scaled_by"] == "memory"
    assert capacity_there(fast["capacity"]) == (
        "~6.0 req/s before TPOT p95 breaks (measured 3.0 now, x2.00 by compute: a scaling, not a "
        "measurement)"
    )
    (unmeasured, _) = landing(plan, g, target)
    assert unmeasured["capacity"] is None and capacity_there(None).startswith("unknown")
