"""Snapshot bundles, recordings that survive SIGKILL, replay that re-derives live alerts, and
redaction of secrets everywhere."""

import asyncio
import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from console.out.bundle import list_bundles, write_bundle
from console.read.live import LiveSource
from console.read.nvml import NvmlReader
from console.read.poller import EngineTarget
from console.read.recording import Recorder, read
from console.read.replay import ReplaySource
from console.settings import demo_settings
from console.sim.demo import start_demo
from tests.conftest import ROOT
from tests.frames import node_frame
from tests.waits import until


class Clock:
    def __init__(self):
        self.t = 1_800_000_000.0

    def __call__(self):
        return self.t


def test_bundle_files_modes_and_markdown(tmp_path):
    frame = node_frame(lost_gpu=True)
    path = write_bundle(
        tmp_path / "snaps", frame, "INC-42 high TTFT", {"t": [1.0], "series": {}}, svg="<svg/>"
    )
    assert path.name.endswith("-node-a-inc-42-high-ttft") and path.name.startswith(
        "20261129T120000Z"
    )
    assert sorted(p.name for p in path.iterdir()) == ["frame.json", "screen.svg", "snapshot.md"]
    assert (path.stat().st_mode & 0o777) == 0o700 and (path.parent.stat().st_mode & 0o777) == 0o700
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in path.iterdir())
    md = (path / "snapshot.md").read_text()
    assert md.splitlines()[0] == "# inferdeck snapshot — node-a — INC-42 high TTFT"
    for alert in frame.alerts:
        assert alert.message in md
    assert (
        md.index("## Active alerts")
        < md.index("## GPUs")
        < md.index("## Engines")
        < md.index("## SLO compliance")
    )
    doc = json.loads((path / "frame.json").read_text())
    assert (
        doc["schema"] == "inferdeck.frame/1"
        and doc["note"] == "INC-42 high TTFT"
        and "history" in doc
    )
    (b,) = list_bundles(tmp_path / "snaps")
    assert b["note"] == "INC-42 high TTFT" and b["alerts"] == 2
    assert b["host"] == "node-a" and b["taken_at"].startswith("2026-11-29T12:00:00")
    # frame.json is read back by pydantic: a damaged one is listed with why, not skipped
    doc["gpus"][0]["index"] = "first"
    broken = tmp_path / "snaps" / "20261129T130000Z-node-a-x"
    broken.mkdir()
    (broken / "frame.json").write_text(json.dumps(doc))
    torn = tmp_path / "snaps" / "20261129T140000Z-node-a-y"
    torn.mkdir()
    (torn / "frame.json").write_text('{"schema": "inferdeck.fr')
    t, x, ok = list_bundles(tmp_path / "snaps")
    assert ok == b and x["path"] == broken and t["path"] == torn
    assert x["note"].startswith("unreadable frame.json: gpus.0.index: "), x["note"]
    assert t["note"].startswith("unreadable frame.json: "), t["note"]


def run_poller(seconds, clock, node, live, profile_at=None):
    frames = []

    async def go():
        try:
            for i in range(seconds):
                if profile_at and i in profile_at:
                    node.engines["llama-8b-a"].model.set_profile(profile_at[i])
                clock.t += 1.0
                frames.append(await live.poll())
        finally:
            await live.aclose()

    asyncio.run(go())
    return frames


@pytest.mark.slow
def test_replay_raises_the_same_alerts_at_the_same_recorded_times(tmp_path):
    clock = Clock()
    settings = demo_settings()
    node = start_demo(settings, clock=clock)
    live = LiveSource.reading(
        node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings, clock=clock
    )
    live.recorder = Recorder(
        tmp_path / "rec", "demo-node", {"window_s": 60.0, "plan": settings.model_dump(mode="json")}
    )
    try:
        frames = run_poller(200, clock, node, live, {60: "overload", 170: "steady"})
    finally:
        node.stop()

    def raises(frames):
        seen, out = set(), {}
        for f in frames:
            for a in f.alerts:
                if a.state == "active" and a.key not in seen:
                    seen.add(a.key)
                    out[a.key] = (a.since, f.taken_at, a.severity, a.message)
        return out

    header, samples = read(tmp_path / "rec")
    assert header["schema"] == "inferdeck.recording/1" and len(samples) == 200
    replay = ReplaySource(header, samples)
    replayed = [replay._frame_at(i) for i in range(len(samples))]
    live_raises, replay_raises = raises(frames), raises(replayed)
    assert "queue:llama-8b-a" in live_raises and "kv:llama-8b-a" in live_raises
    assert replay_raises == live_raises
    # seeking backwards re-derives the same frame
    again = replay._frame_at(130)
    assert again.model_dump() == replayed[130].model_dump()
    # ... and its charts hold the history up to it, none of the later frames (the key series
    # after a seek back used to keep the minutes that follow, or start at the checkpoint)
    times = [t for t, _ in replay.history.points]
    assert times == [s.t for s in samples[: 130 + 1]][-len(times) :] and len(times) == 131
    # going to a typed time lands on the frame nearest it, not the one a poll before
    from datetime import UTC, datetime

    t = samples[50].t + 0.6 * (samples[51].t - samples[50].t)
    assert replay.seek_text(datetime.fromtimestamp(t, tz=UTC).isoformat()) is None
    assert replay.cursor == samples[51].t
    assert [e.requests_waiting for e in replay._frame_at(199).engines] == [
        e.requests_waiting for e in frames[199].engines
    ]
    # read lazily (as `inferdeck replay` does): the same frames, member by member, the same
    # alerts at the same recorded times
    from console.read.recording import Recording
    from console.sample import sample_to_json

    lazy = Recording(tmp_path / "rec")
    lazy.done.wait(10)
    assert lazy.progress() == 1.0 and lazy.times == [x.t for x in samples]
    for i in (0, 59, 60, 61, 130, 199):
        assert sample_to_json(lazy[i]) == sample_to_json(samples[i])
    streamed = ReplaySource(lazy.header, lazy)
    assert raises([streamed._frame_at(i) for i in range(len(lazy))]) == live_raises
    # a far seek derives from a window and 30 s before the frame, not from the start: its
    # windowed figures are those of the whole derivation
    far = ReplaySource(lazy.header, lazy)
    got = far._frame_at(190)
    assert far.warmed_from == samples[100].t
    want = replayed[190]
    for a, b in zip(got.engines, want.engines, strict=True):
        assert (a.generation_tokens_per_s, a.ttft_s, a.requests_waiting) == (
            b.generation_tokens_per_s,
            b.ttft_s,
            b.requests_waiting,
        ), a.name


def test_a_folder_of_two_recorders_replays_one_and_names_the_other(tmp_path):
    """Two recorders' files in one folder were replayed as one stream whose engine set flipped
    14 times in 16 frames; now the newest recorder is replayed, the other named, and
    --recorder chooses."""
    import os
    import shutil

    from console.frame import GpuSource
    from console.read.recording import Recording, RecordingError
    from console.sample import EngineSample, Sample

    for host, t0 in (("node-a", 1_800_000_000.0), ("node-b", 1_800_000_000.5)):
        rec = Recorder(tmp_path / "recs", host, {"window_s": 60.0})
        for k in range(16):
            t = t0 + k
            engine = EngineSample(label=f"{host}-engine", url="http://h:1/metrics", t=t)
            rec.write(Sample(t=t, source=GpuSource(kind="none"), engines=[engine]))
        rec.close()
        assert rec.path is not None
        os.utime(rec.path, (t0 + 100, t0 + 100))
    newest = Recording(tmp_path / "recs")
    assert newest.recorder == "node-b" and newest.others == ["node-a"]
    newest.done.wait(10)
    assert len(newest) == 16
    assert {newest[i].engines[0].label for i in range(16)} == {"node-b-engine"}
    chosen = Recording(tmp_path / "recs", "node-a")
    chosen.done.wait(10)
    assert {chosen[i].engines[0].label for i in range(len(chosen))} == {"node-a-engine"}
    with pytest.raises(RecordingError, match="no recorder 'node-c' here; it holds node-a, node-b"):
        Recording(tmp_path / "recs", "node-c")
    shutil.rmtree(tmp_path / "recs")


RECORD = [sys.executable, "-m", "console", "record", "--demo", "--interval", "0.05"]


@pytest.mark.slow
def _samples(path) -> int:
    """How many whole samples a recording being written holds now (0 before its first)."""
    try:
        return len(read(path)[1]) if path.exists() else 0
    except (OSError, EOFError, ValueError):
        return 0


def _recorded(proc, path, more_than: int, old: frozenset = frozenset()) -> None:
    """Wait (on the recording, not the clock) until it holds more than ``more_than`` samples: a
    recorder starting beside a loaded machine may take seconds to write its first. ``path``: the
    file, or the folder where the recorder starts a new one (not among ``old``)."""
    end = time.monotonic() + 60.0
    while True:
        new = sorted(set(path.glob("*.idrec.gz")) - old) if path.is_dir() else [path]
        if new and _samples(new[0]) > more_than:
            return
        assert proc.poll() is None and time.monotonic() < end, "the recorder never recorded"
        time.sleep(0.05)


def test_sigkill_mid_write_leaves_readable_recordings(tmp_path):
    out = tmp_path / "rec"
    for i in range(6):
        old = frozenset(out.glob("*.idrec.gz"))
        proc = subprocess.Popen(RECORD + ["--out", str(out)], cwd=ROOT, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 60.0
        while not out.is_dir():  # (the recorder makes the folder)
            assert proc.poll() is None and time.monotonic() < end, "no recording folder"
            time.sleep(0.05)
        _recorded(proc, out, 5, old)  # then killed mid-write, at a different point each time
        time.sleep(0.37 * i)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    files = sorted(out.glob("*.idrec.gz"))
    assert len(files) == 6
    total = 0
    for f in files:
        header, samples = read(f)
        assert header["schema"] == "inferdeck.recording/1"
        assert samples, f
        total += len(samples)
        replay = ReplaySource(header, samples)
        frame = replay._frame_at(len(samples) - 1)
        assert len(frame.engines) == 3 and len(frame.gpus) == 4
        with pytest.raises((EOFError, OSError)):
            gzip.decompress(f.read_bytes())  # the stream really was cut mid-way ...
    assert total > 30  # ... and everything complete before the cut is there
    # a single-file recording killed and restarted keeps appending readable frames
    single = tmp_path / "one.idrec.gz"
    for _ in range(2):
        held = _samples(single)
        proc = subprocess.Popen(
            RECORD + ["--out", str(single)], cwd=ROOT, stderr=subprocess.DEVNULL
        )
        _recorded(proc, single, held + 3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    header, samples = read(single)
    assert len(samples) > 5


@pytest.mark.slow
def test_recording_an_hour_stays_under_20_mb(tmp_path):
    clock = Clock()
    settings = demo_settings()
    node = start_demo(settings, clock=clock)
    live = LiveSource.reading(
        node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings, clock=clock
    )
    live.recorder = rec = Recorder(tmp_path / "rec", "demo-node", {})
    try:
        run_poller(300, clock, node, live)
    finally:
        node.stop()
    size = rec.path.stat().st_size
    per_hour = size / 300 * 3600
    assert per_hour < 20 * 1024 * 1024, per_hour
    # the line `inferdeck record` keeps up to date on a terminal
    from console.commands.record import record_progress

    line = record_progress(rec, 300.4)
    assert line.startswith(f"recording: 300 frames, {size / 1024:.0f} KiB, 5:00 → ")
    assert line.endswith(str(rec.path))


def test_no_secret_survives_in_bundles_or_recordings(tmp_path, monkeypatch):
    token = "tok-VERY-secret-4711"
    api_key = "sk-proc-arg-0815"
    monkeypatch.setenv("ENGINE_TOKEN", token)
    from console.sim.engine import start_engine

    eng = start_engine("vllm")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        textwrap.dedent(f"""\
        engines:
          - name: secure
            url: http://admin:hunter2pass@127.0.0.1:{eng.server.port}/metrics
            token_env: ENGINE_TOKEN
        """)
    )
    # an engine process whose command line carries --api-key, as NVML and /proc would show it
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(60)",
            "vllm",
            "serve",
            "m",
            "--api-key",
            api_key,
            "--port",
            str(eng.server.port),
        ]
    )
    try:
        from console.sim.nvml import SimNvml

        sim = SimNvml()
        sim.add_gpu("l40s")
        sim.add_process(0, None, proc.pid, 1 << 30)
        time.sleep(0.5)
        from console.compose import open_recorder, secrets_of
        from console.settings import load_settings, token_headers

        settings = load_settings(cfg)
        e = settings.engines[0]
        live = LiveSource.reading(
            [EngineTarget(url=e.url, name=e.name, headers=token_headers(e))],
            NvmlReader(sim),
            plan=settings,
        )
        live.recorder = open_recorder(str(tmp_path / "rec"), live, settings)

        async def go():
            try:
                frames = [await live.poll() for _ in range(3)]
            finally:
                await live.aclose()
            return frames

        frames = asyncio.run(go())
        assert (
            frames[-1].gpus[0].processes[0].command
            and api_key in frames[-1].gpus[0].processes[0].command
        )
        write_bundle(
            tmp_path / "snaps",
            frames[-1],
            "redaction",
            {},
            svg=f"<svg>{api_key} {token}</svg>",
            secrets=secrets_of(live.poller),
        )
    finally:
        proc.kill()
        eng.stop()
    blobs = [p.read_bytes() for p in (tmp_path / "snaps").rglob("*") if p.is_file()]
    blobs += [
        gzip.GzipFile(fileobj=open(p, "rb")).read() for p in (tmp_path / "rec").glob("*.idrec.gz")
    ]
    assert len(blobs) >= 4
    for blob in blobs:
        for secret in (token, api_key, "hunter2pass"):
            assert secret.encode() not in blob
    assert any(b"--api-key ***" in b for b in blobs)


@pytest.mark.slow
async def test_pressing_s_saves_a_bundle_with_the_note(tmp_path):
    from screens.app import InferdeckApp
    from tests.frames import StaticSource

    app = InferdeckApp(StaticSource(node_frame()), snapshot_dir=tmp_path / "snaps")
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.frame is not None)
        await pilot.press("s")
        await until(pilot, lambda: app.screen is not app.screen_stack[0])  # the note's prompt
        await pilot.press(*"INC 7", "enter")
        snaps = tmp_path / "snaps"
        await until(pilot, lambda: snaps.is_dir() and any(
            (b / "snapshot.md").exists() and (b / "screen.svg").exists() and (b / "frame.json").exists()
            for b in snaps.iterdir()))  # fmt: skip
        await pilot.pause()
    (bundle,) = (tmp_path / "snaps").iterdir()
    assert bundle.name.endswith("-inc-7")
    # (charts/ too once the app holds history: on a loaded machine polls run ahead of the key)
    names = {p.name for p in bundle.iterdir()} - {"charts"}
    assert sorted(names) == ["frame.json", "screen.svg", "snapshot.md"]
    md = (bundle / "snapshot.md").read_text()
    assert "INC 7" in md.splitlines()[0]
    screen_alerts = [a.message for a in node_frame().alerts if a.state == "active"]
    assert screen_alerts and all(m in md for m in screen_alerts)
    assert "<svg" in (bundle / "screen.svg").read_text()
    assert os.stat(bundle / "frame.json").st_mode & 0o777 == 0o600


async def test_the_replay_bar_drives_the_replay():
    """The replay's controls (their own widget): pause, step, jump, speed, and the bar shows them."""
    from console.engines import Extract
    from console.read.replay import ReplaySource
    from screens.app import InferdeckApp
    from screens.replaybar import ReplayBar
    from tests.frames import engine_sample

    samples = []
    for k in range(300):
        t = 8000.0 + k
        ex = Extract(t=t, counters={"generation_tokens": {(("engine", "0"),): (float(10 * k),)}})
        samples.append(engine_sample(ex))
    src = ReplaySource({"window_s": 60}, samples)
    app = InferdeckApp(src, interval_s=0.05, read_only=True, replay=src)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("p")  # pause
        assert not src.playing
        # it may have played a fraction of a second: a step goes to the next recorded frame
        start = float(int(src.cursor))
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: src.cursor == start + 1)
        await pilot.press("full_stop")  # +1 minute
        await until(pilot, lambda: src.cursor == start + 61)
        await pilot.press("2")
        await until(pilot, lambda: "10x" in str(app.query_one(ReplayBar).render()))
        bar = str(app.query_one(ReplayBar).render())
        assert "10x" in bar and "⏸" in bar
        await until(
            pilot,
            lambda: app.frame is not None and app.frame.taken_at.timestamp() == start + 61,
        )
