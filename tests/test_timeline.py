"""The incident timeline: events from successive Frames and from NVML's event API, in order, folded,
the first sign marked; on page one of the bundle, identical live and from the recording.

Scenarios run on the scenario harness (simulated engines and NVML on a clock the test moves,
polled at 1 s, everything between production code)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pynvml
import pytest

from console.figures.timeline import Replayed, flags_diff, lines
from console.frame import Frame
from console.out.snapshot import to_markdown
from console.read.nvml import NvmlReader
from console.read.recording import Recorder, Recording, RecordingError
from console.read.replay import ReplaySource
from console.sample import Sample
from console.sim.nvml import SimNvml
from console.xids import catalog, describe
from tests.test_jsondocs import valid
from tests.test_scenarios import STEADY, Node

OVERLOAD = dict(rate_rps=6.0, max_num_seqs=64, kv_capacity_tokens=20_000, prompt_tokens=900,
                output_tokens=400)  # fmt: skip


def page_one(frame: Frame) -> list[str]:
    """The timeline as snapshot.md opens with it (its section's lines)."""
    md = to_markdown(frame).splitlines()
    start = next(i for i, x in enumerate(md) if x.startswith("## Timeline since "))
    end = next(i for i in range(start + 1, len(md)) if md[i].startswith("## "))
    return [x for x in md[start + 1 : end] if x.startswith("- ")]


def at(frame: Frame, t: float) -> str:
    return f"{datetime.fromtimestamp(t, tz=UTC):%H:%M:%S}Z"


def sim_of(node: Node) -> SimNvml:
    return node.nvml._lib


# --- NVML's event API, as the simulator speaks it and the reader uses it ------------------------
def test_the_simulated_event_api_keeps_nvml_semantics():
    sim = SimNvml()
    sim.add_gpu("h100-80gb")
    sim.add_gpu("a100-80gb", mig=[("3g.40gb", 0)])
    sim.nvmlInit()
    es = sim.nvmlEventSetCreate()
    h = sim.nvmlDeviceGetHandleByIndex(0)
    supported = sim.nvmlDeviceGetSupportedEventTypes(h)
    assert supported & pynvml.nvmlEventTypeXidCriticalError
    with pytest.raises(pynvml.NVMLError) as no:  # asking for a type it lacks
        sim.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventMigConfigChange, es)
    assert no.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(sim.nvmlDeviceGetHandleByIndex(1), 0)
    with pytest.raises(pynvml.NVMLError):  # a MIG device handle takes no registration
        sim.nvmlDeviceRegisterEvents(mig, pynvml.nvmlEventTypeXidCriticalError, es)
    sim.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlEventSetWait_v2(es, 0)
    sim.inject_xid(1, 31)  # a GPU the set is not registered on: not delivered
    sim.inject_xid(0, 79)
    data = sim.nvmlEventSetWait_v2(es, 10)
    assert (data.eventType, data.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 79)
    assert sim.nvmlDeviceGetIndex(data.device) == 0
    assert data.gpuInstanceId == data.computeInstanceId == 0xFFFFFFFF
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlEventSetWait_v2(es, 0)
    sim.nvmlEventSetFree(es)
    with pytest.raises(pynvml.NVMLError):
        sim.nvmlEventSetWait_v2(es, 0)


def test_the_reader_delivers_xids_on_their_gpu_and_mig_instance_once():
    sim = SimNvml()
    sim.add_gpu("h100-80gb")
    sim.add_gpu("a100-80gb", mig=[("3g.40gb", 0), ("3g.40gb", 4)])
    reader = NvmlReader(sim, simulated=True)
    _, gpus = reader.read()
    assert all(g.xids == [] and "xids" not in g.unavailable for g in gpus)
    sim.inject_xid(0, 48)
    gi = sim.gpus[1].gis[1].gi_id
    sim.inject_xid(1, 13, gi=gi, ci=0)
    _, gpus = reader.read()
    assert [x.xid for x in gpus[0].xids] == [48] and gpus[0].xids[0].gpu_instance is None
    assert [(x.xid, x.gpu_instance, x.compute_instance) for x in gpus[1].xids] == [(13, gi, 0)]
    _, gpus = reader.read()
    assert all(g.xids == [] for g in gpus)  # delivered once
    reader.close()
    assert sim.event_sets == []


def test_a_driver_without_xid_events_says_so_per_gpu():
    sim = SimNvml()
    sim.add_gpu("h100-80gb")
    sim.missing.add("nvmlDeviceRegisterEvents")
    _, gpus = NvmlReader(sim, simulated=True).read()
    assert "driver too old" in gpus[0].unavailable["xids"]


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_application_xids_are_never_labelled_hardware(xid):
    severity, text = describe(xid)
    assert catalog()[xid].cause == "application"
    assert severity == "warning" and "application fault" in text and "hardware" not in text


def test_hardware_xids_are_critical_and_unknown_ones_point_to_the_catalog():
    for xid in (48, 79, 95):
        assert describe(xid)[0] == "critical" and "hardware fault" in describe(xid)[1]
    severity, text = describe(9999)
    assert severity == "warning" and "Xid catalog" in text


def test_flags_diff_names_what_changed():
    old = "vllm serve m --max-num-seqs 256 --gpu-memory-utilization=0.9 --enforce-eager"
    new = "vllm serve m --max-num-seqs 128 --gpu-memory-utilization=0.9 --kv-cache-dtype fp8"
    assert flags_diff(old, new) == (
        "flags --max-num-seqs 256 → 128, + --kv-cache-dtype fp8, − --enforce-eager"
    )
    assert flags_diff(old, old) == "same flags"


# --- the scenario matrix: each injected event on page one within one poll -----------------------
def _overload(node: Node) -> None:
    for k, v in OVERLOAD.items():
        setattr(node.models["chat"].spec, k, v)


def _power_cap(node: Node) -> None:
    sim_of(node).gpus[0].enforced_limit_w = 200.0


def _restart(node: Node) -> None:
    node.models["chat"].restart()


def _xid(n: int):
    return lambda node: sim_of(node).inject_xid(0, n)


def _kill(node: Node) -> None:
    node.down.add("chat")


def _errors(node: Node) -> None:
    node.models["chat"].spec.error_share = 0.3


MATRIX = {
    # injected -> (the entry's words on page one, polls it may take: holds the condition needs)
    "restart": (_restart, "chat: restarted", 1),
    "queue onset": (_overload, "chat: queue:", 12),
    "preemption storm": (_overload, "chat: preemptions", 20),
    "KV saturation": (_overload, "chat: KV cache ≥ 90 %", 20),
    "power cap": (_power_cap, "GPU 0: clocks slowed: power cap", 1),
    "XID 79": (_xid(79), "GPU 0: XID 79, hardware fault: GPU has fallen off the bus", 1),
    "XID 48": (_xid(48), "GPU 0: XID 48, hardware fault", 1),
    "XID 13": (_xid(13), "GPU 0: XID 13, application fault", 1),
    "engine down": (_kill, "chat: down: connection refused", 1),
    "alert fires": (_errors, "fired", 320),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MATRIX))
def test_each_injected_event_is_on_page_one_in_time(case):
    inject, words, polls = MATRIX[case]
    node = Node({"chat": STEADY})
    node.run(90)
    assert page_one(node.frame) == [f"- nothing happened since {at(node.frame, 1_900_000_001.0)}"]
    inject(node)
    t = node.t + 1.0
    for _ in range(polls):
        node.poll()
        if any(words in x for x in page_one(node.frame)):
            break
    said = page_one(node.frame)
    hit = [x for x in said if words in x]
    assert hit, said
    if polls == 1:  # an edge: dated at the poll that saw it
        assert at(node.frame, t) in hit[0], (hit, at(node.frame, t))


def test_a_mig_recut_is_on_page_one_at_its_poll():
    """A slice re-cut under the console (as `inferdeck mig apply` or nvidia-smi would): the
    layout change, before and after, at the poll that read it."""
    node = Node({"chat": STEADY, "batch": STEADY}, mig=True)
    node.run(30)
    sim = sim_of(node)
    gpu = sim.gpus[0]
    gpu.gis.remove(gpu.gis[1])
    sim._create_ci(gpu, sim._create_gi(gpu, gpu.model.mig.profile("2g.20gb"), 4))
    node.nvml.forget_mig(0)  # as the MIG menu does after an apply
    node.poll()
    hit = [x for x in page_one(node.frame) if "MIG layout changed" in x]
    assert hit and at(node.frame, node.t) in hit[0], page_one(node.frame)
    assert "3g.40gb@0,3g.40gb@4 -> 3g.40gb@0,2g.20gb@4" in hit[0]


@pytest.mark.slow
def test_an_alert_fires_and_resolves_as_one_range():
    node = Node({"chat": STEADY})
    node.run(60)
    node.models["chat"].spec.error_share = 0.3
    node.run(330)
    node.models["chat"].spec.error_share = 0.0
    node.run(900)
    alerts = [e for e in node.frame.timeline.events if "fired" in event_words(e)]
    assert alerts and all(e.range and e.end is not None for e in alerts), alerts


def event_words(e) -> str:
    return f"{e.text} {e.evidence}"


@pytest.mark.slow
def test_a_thirty_minute_steady_soak_has_no_event():
    node = Node({"chat": STEADY})
    node.run(1800)
    assert node.frame.timeline.events == [], lines(node.frame.timeline)


# --- first sign: the injected root of a multi-step incident --------------------------------------
def _then_overload(node: Node, first) -> None:
    first(node)
    node.run(30)
    _overload(node)


def _ecc(node: Node) -> None:
    sim_of(node).gpus[0].ecc_uncorrected += 3


def _power_brake(node: Node) -> None:
    sim_of(node).gpus[0].forced_reasons |= 0x80  # power brake (HW): the board's own signal


def _thermal(node: Node) -> None:
    sim_of(node).gpus[0].forced_reasons |= 0x40  # thermal (HW)


def _hw_slowdown(node: Node) -> None:
    sim_of(node).gpus[0].forced_reasons |= 0x8


INCIDENTS = {  # ten multi-step incidents: a root, 30 s later the load that pages
    "power cap, then load": (_power_cap, "clocks power cap"),
    "XID 13, then load": (_xid(13), "xid 13"),
    "XID 48, then load": (_xid(48), "xid 48"),
    "XID 79, then load": (_xid(79), "xid 79"),
    "XID 31, then load": (_xid(31), "xid 31"),
    "restart, then load": (_restart, "restart"),
    "uncorrectable ECC, then load": (_ecc, "ecc-u"),
    "power brake, then load": (_power_brake, "clocks power brake (HW)"),
    "thermal slowdown, then load": (_thermal, "clocks thermal (HW)"),
    "HW slowdown, then load": (_hw_slowdown, "clocks HW slowdown"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(INCIDENTS))
def test_the_first_sign_is_the_injected_root(case):
    root, kind = INCIDENTS[case]
    node = Node({"chat": STEADY})
    node.run(90)
    _then_overload(node, root)
    node.run(120)
    signs = [e for e in node.frame.timeline.events if e.first_sign]
    assert len(signs) == 1, lines(node.frame.timeline)
    assert signs[0].kind == kind, lines(node.frame.timeline)
    assert any("← first sign" in x for x in page_one(node.frame))


def test_what_was_over_before_the_incident_is_no_first_sign():
    """A wave's peak before a power cap that led to the page: a memory margin touched for
    seconds (its alert pending, never fired, over) and a finding that held 5 s and cleared
    47 s before the cap began. The power cap is the first sign. The same alert held until it
    fired and still on when the cap began would be, and so would the finding over 4 s before
    it; a point (an XID) within five minutes of the page is."""
    from console.figures.timeline import _Range, first_sign
    from console.frame import Engine

    t0 = datetime(2027, 1, 15, 8, 7, 11, tzinfo=UTC)

    def at_s(s: float) -> datetime:
        return t0 + timedelta(seconds=s)

    frame = Frame.model_construct(
        engines=[Engine.model_construct(name="chat", device="GPU 0")], services=[]
    )
    margin = _Range("alert", "chat", "engine", "info", at_s(0), "memory headroom 3.1 GiB",
                    {"rule": "memory"}, end=at_s(35))  # fmt: skip
    cap = _Range("clocks power cap", "GPU 0", "gpu", "warning", at_s(170), "clocks slowed")
    page = _Range("alert", "chat", "engine", "critical", at_s(230), "queue",
                  {"rule": "queue", "fired": "08:11:01Z"})  # fmt: skip
    queueing = _Range("finding", "chat", "engine", "warning", at_s(118), "TTFT is mostly queueing",
                      {"rule": "ttft_split"}, end=at_s(123))  # fmt: skip
    assert first_sign([margin, queueing, cap, page], frame) is cap
    fired = replace(margin, severity="warning", evidence={"rule": "memory", "fired": "x"})
    fired = replace(fired, end=at_s(175))  # fired, and on when the cap began
    assert first_sign([fired, queueing, cap, page], frame) is fired
    assert first_sign([replace(fired, end=at_s(120)), cap, page], frame) is cap
    just = replace(queueing, end=at_s(170 - 4))
    assert first_sign([margin, just, cap, page], frame) is just
    xid = _Range("xid 13", "GPU 0", "gpu", "warning", at_s(40), "XID 13", {"point": 1})
    assert first_sign([margin, xid, cap, page], frame) is xid  # a point: within 5 min of the page


@pytest.mark.slow
def test_the_first_sign_on_the_demo_node_is_the_root_and_its_wave_raises_nothing():
    """The demo node under its own wave of load, 9 minutes in: an XID 13 on GPU 0, 30 s later
    llama-70b overloaded. The first sign is the XID, and nothing stood on the timeline before
    it: the wave's peaks stay short of every line (they once touched llama-70b's memory margin
    and made its TTFT mostly queueing for seconds, 47 s before the root; a state over before
    the chain went on is no sign either: test_what_was_over_before_the_incident_is_no_first_sign)."""
    import asyncio

    from tests.demo_node import demo_on

    clock = [1_800_000_000.0]
    node, live = demo_on(clock)

    async def scenario() -> Frame:
        try:
            for k in range(740):
                clock[0] += 1.0
                if k == 540:
                    node.nvml.inject_xid(0, 13)
                if k == 570:
                    spec = node.engines["llama-70b"].model.spec
                    spec.rate_rps, spec.max_num_seqs = spec.rate_rps * 8, 32
                frame = await live.poll()
            return frame
        finally:
            await live.aclose()

    try:
        frame = asyncio.run(scenario())
    finally:
        node.stop()
    assert frame.timeline is not None
    signs = [e for e in frame.timeline.events if e.first_sign]
    assert [e.kind for e in signs] == ["xid 13"], lines(frame.timeline)
    assert frame.timeline.events[0] is signs[0], lines(frame.timeline)


# --- one timeline on every surface ----------------------------------------------------------------
class _Tape:
    """The harness's deriver, taped: every sample it derives is also recorded."""

    def __init__(self, deriver, recorder: Recorder) -> None:
        self.inner, self.recorder = deriver, recorder
        self.seen: list[tuple[float, object]] = []  # (time, the live timeline then)

    def frame(self, sample: Sample) -> Frame:
        self.recorder.write(sample)
        frame = self.inner.frame(sample)
        self.recorder.write_timeline(self.inner.events, sample.t)  # as the live source does
        self.seen.append((sample.t, frame.timeline))
        return frame


@pytest.mark.slow
def test_live_replay_and_the_bundle_give_one_timeline(tmp_path):
    node = Node({"chat": STEADY})
    header = {"window_s": 60.0, "plan": node.plan.model_dump(mode="json"), "host": "node"}
    rec = Recorder(tmp_path / "rec", "node", header)
    node.deriver = _Tape(node.deriver, rec)
    node.run(60)
    _xid(79)(node)
    _overload(node)
    node.run(120)
    node.down.add("chat")
    node.run(15)
    node.down.clear()
    node.models["chat"].restart()
    node.run(45)
    rec.close()
    live = node.frame.timeline
    assert live is not None and len(live.events) >= 5
    recording = Recording(tmp_path / "rec")
    recording.done.wait()
    source = ReplaySource(recording.header, recording)
    assert source.last_frame().timeline == live  # derived again from the samples
    assert recording.timeline_log  # and as recorded: the same at every poll, jumps included
    for t, then in [*node.deriver.seen[::7], *reversed(node.deriver.seen[::13])]:
        assert source.recorded.at(t) == then, t
        source.seek(t)
        assert source._frame_at(source._index(t)).timeline == then
    assert page_one(node.frame) == [f"- {x}" for x in lines(live, node.frame.taken_at, 40)]


@pytest.mark.slow
def test_a_fifteen_minute_incident_fits_forty_lines_with_fold_counts():
    node = Node({"chat": STEADY})
    node.run(60)
    for minute in range(15):  # load that swings every minute, an XID storm, restarts
        if minute % 2 == 0:
            _overload(node)
        else:
            node.models["chat"].spec = replace(STEADY)
        for _ in range(6):
            _xid(13)(node)
        if minute % 5 == 4:
            _restart(node)
        node.run(60)
    said = lines(node.frame.timeline, node.frame.taken_at, 40)
    assert len(said) <= 40
    assert any("×" in x for x in said), said  # repeats folded and counted
    total = len(node.frame.timeline.events)
    shown = sum(1 for x in said if x[:1] in "▶!·")
    folded = [x for x in said if x.startswith("… ") and "events folded" in x]
    assert shown == total or (folded and f"… {total - shown} events folded" in folded[0])


async def test_the_poller_records_the_timeline_beside_its_samples(tmp_path):
    """The live path: the console's live source with a recorder writes the timeline's changes after
    their frame, and `inferdeck timeline` reads them back without deriving."""
    from console.commands.timeline import timeline
    from console.read.live import LiveSource
    from console.settings import demo_settings
    from console.sim.demo import start_demo

    class Clock:
        t = 1_800_000_000.0

        def __call__(self) -> float:
            return self.t

    clock = Clock()
    settings = demo_settings()
    node = start_demo(settings, clock=clock)
    live = LiveSource.reading(
        node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings, clock=clock
    )
    header = {"window_s": 60.0, "plan": settings.model_dump(mode="json", exclude={"engines"})}
    live.recorder = Recorder(tmp_path / "rec", "demo-node", header)
    try:
        for k in range(6):
            clock.t += 1.0
            if k == 3:
                node.nvml.inject_xid(1, 48)
            frame = await live.poll()
    finally:
        await live.aclose()
        node.stop()
    rec = Recording(tmp_path / "rec")
    rec.done.wait()
    assert [doc["tl"] for _, doc in rec.timeline_log][0] == rec.times[0]  # since when, first
    assert Replayed(rec.timeline_log).at(rec.times[-1]) == frame.timeline
    assert any(e.kind == "xid 48" and e.subject == "GPU 1" for e in frame.timeline.events)
    out = io.StringIO()
    args = argparse.Namespace(path=str(tmp_path / "rec"), recorder=None, since=None, format="text")
    with contextlib.redirect_stdout(out):
        assert timeline(args) == 0
    assert "GPU 1: XID 48, hardware fault: double-bit ECC error" in out.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert timeline(argparse.Namespace(**{**vars(args), "format": "json"})) == 0
    doc = json.loads(out.getvalue())
    valid(doc, "timeline")
    assert any(e["kind"] == "xid 48" and e["subject"] == "GPU 1" for e in doc["events"])


@pytest.mark.slow
def test_a_recording_cut_anywhere_gives_back_the_timeline_up_to_its_last_whole_line(tmp_path):
    """A kill at any byte of the write (samples and timeline lines alike): the recording reads
    back, and its timeline is the live one as of the last timeline line that arrived whole."""
    node = Node({"chat": STEADY})
    header = {"window_s": 60.0, "plan": node.plan.model_dump(mode="json"), "host": "node"}
    rec = Recorder(tmp_path / "rec", "node", header)
    node.deriver = _Tape(node.deriver, rec)
    node.run(30)
    _xid(13)(node)
    _overload(node)
    node.run(60)
    node.down.add("chat")
    node.run(10)
    rec.close()
    live = dict(node.deriver.seen)
    whole = rec.path.read_bytes()
    for k in range(1, 24):
        cut = tmp_path / f"cut{k}" / rec.path.name
        cut.parent.mkdir()
        cut.write_bytes(whole[: len(whole) * k // 24])
        try:
            recording = Recording(cut)
        except RecordingError:
            continue  # cut inside the header: said as one sentence, nothing to read
        recording.done.wait()
        if not recording.timeline_log:
            continue
        last = recording.timeline_log[-1][0]
        assert Replayed(recording.timeline_log).at(recording.times[-1]) == live[last], k
        source = ReplaySource(recording.header, recording)
        source.seek(recording.times[-1])
        assert source._frame_at(len(recording) - 1).timeline == live[last], k


async def test_a_restart_with_changed_flags_reads_them_from_the_process_end_to_end(tmp_path):
    """The real path: a vLLM server (simulated, on loopback) whose GPU process the reader finds
    in /proc with its command line; it restarts as a new process with other flags. The
    timeline's restart point names the flags changed, at the poll that saw it."""
    from console.read.live import LiveSource
    from console.read.poller import EngineTarget
    from console.sim.engine import TrafficSpec, start_engine

    class Clock:
        t = 1_800_000_000.0

        def __call__(self) -> float:
            return self.t

    clock = Clock()
    engine = start_engine("vllm", TrafficSpec(rate_rps=4.0, warmup_s=120), clock=clock)
    port = engine.server.port
    proc = tmp_path / "proc"

    def process(pid: int, flags: str) -> None:
        (proc / str(pid)).mkdir(parents=True)
        cmd = f"vllm serve qwen --port {port} {flags}".split()
        (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmd) + b"\0")

    sim = SimNvml(clock=clock)
    sim.add_gpu("h100-80gb")
    process(4001, "--max-num-seqs 256 --enable-prefix-caching")
    sim.add_process(0, None, 4001, 40 * 2**30)
    reader = NvmlReader(sim, simulated=True, proc=proc)
    live = LiveSource.reading(
        [EngineTarget(url=engine.url, kind="vllm", name="qwen")], reader, clock=clock
    )
    try:
        for _ in range(5):
            clock.t += 1.0
            frame = await live.poll()
        assert frame.gpus[0].processes[0].engine == "qwen"  # linked through its --port
        assert not [e for e in frame.timeline.events if e.kind == "restart"]
        engine.model.restart()  # a new process, other flags
        sim.processes.clear()
        process(4002, "--max-num-seqs 128 --kv-cache-dtype fp8")
        sim.add_process(0, None, 4002, 40 * 2**30)
        clock.t += 1.0
        frame = await live.poll()
        for _ in range(3):
            clock.t += 1.0
            frame = await live.poll()
    finally:
        await live.aclose()
        engine.stop()
    restarts = [e for e in frame.timeline.events if e.kind == "restart"]
    assert len(restarts) == 1, frame.timeline.events
    said = lines(frame.timeline, frame.taken_at)
    hit = [x for x in said if "qwen: restarted" in x]
    assert hit and (
        "flags --max-num-seqs 256 → 128, + --kv-cache-dtype fp8, − --enable-prefix-caching"
        in hit[0]
    ), said
