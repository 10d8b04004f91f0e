"""The config file read again by a running console: the new plan in force from the next poll,
what changed on the timeline, a file that cannot be used said in one sentence while the plan
before stays, and a recording (replayed, jumped into) that follows the same plans."""

from __future__ import annotations

import os
from importlib import resources

import pytest

from console.figures.plan import plan_changes
from console.read.live import LiveSource
from console.read.nvml import NvmlReader
from console.read.recording import Recorder, Recording
from console.read.replay import ReplaySource
from console.settings import ConfigWatch, load_settings
from console.sim.demo import start_demo

DEMO = resources.files("config").joinpath("demo.yaml").read_text(encoding="utf-8")


def test_plan_changes_name_each_change_by_service():
    old = {
        "services": [{"name": "chat", "slo": {"ttft_s": 1.0}}, {"name": "old", "slo": None}],
        "alerts": {"kv_usage_critical": 0.9},
    }
    new = {
        "services": [{"name": "chat", "slo": {"ttft_s": 0.5}}, {"name": "batch", "slo": None}],
        "alerts": {"kv_usage_critical": 0.9},
    }
    assert plan_changes(old, new) == [
        "service batch added",
        "service old removed",
        "services.chat.slo.ttft_s 1 → 0.5",
    ]
    assert plan_changes(old, old) == []


def _save(path, text: str) -> None:
    """Written as an editor does (a new file renamed over the old one)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def test_the_watch_reads_a_settled_file_once_and_says_what_waits_for_a_restart(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(DEMO, encoding="utf-8")
    watch = ConfigWatch(load_settings(path))
    assert watch.check() is None
    _save(path, DEMO.replace("ttft_s: 2.0", "ttft_s: 1.5").replace("window: 1m", "window: 5m"))
    assert watch.check() is None  # just written: read once it stands for a poll
    change = watch.check()
    assert change is not None and change.error is None
    assert change.plan["services"][0]["slo"]["ttft_s"] == 1.5
    assert change.at_restart == ["window"]
    assert watch.check() is None  # read once
    _save(path, DEMO.replace("ttft_s: 2.0", "ttft_s: 1.5").replace("window: 1m", "window: 5m"))
    watch.check()
    assert watch.check() is None  # saved again unchanged: nothing to say
    _save(path, DEMO.replace("tpot_s: 0.080", "tpot_s: fast"))
    watch.check()
    bad = watch.check()
    assert bad is not None and bad.plan is None
    assert str(path) in bad.error and ":22" in bad.error  # file and line
    path.unlink()
    watch.check()
    gone = watch.check()
    assert gone is not None and "gone" in gone.error


@pytest.mark.parametrize("cut", [0, 1, 60, 400, len(DEMO) // 2, len(DEMO) - 1])
def test_a_file_caught_half_written_is_never_read(tmp_path, cut):
    """An editor's write seen at any byte (written in place, not renamed): the watch waits for
    the file to stand a poll, so it reads the whole file once, never the half and its error."""
    path = tmp_path / "config.yaml"
    path.write_text(DEMO, encoding="utf-8")
    watch = ConfigWatch(load_settings(path))
    whole = DEMO.replace("ttft_s: 2.0", "ttft_s: 0.5")
    with path.open("w", encoding="utf-8") as f:  # truncated, then written in two parts
        f.write(whole[:cut])
        f.flush()
        assert watch.check() is None  # caught mid-write
        f.write(whole[cut:])
    os.utime(path, ns=(1, path.stat().st_mtime_ns + 1_000_000))  # (a coarse clock: moved on)
    assert watch.check() is None  # changed again since: waits a poll more
    change = watch.check()
    assert change is not None and change.error is None
    assert change.plan["services"][0]["slo"]["ttft_s"] == 0.5
    # an editor that died mid-write leaves the half: read once it stands, said with its line
    path.write_text(whole[: len(whole) // 2] + "  - name: [", encoding="utf-8")
    watch.check()
    bad = watch.check()
    assert bad is not None and bad.plan is None and f"{path}:" in bad.error


class Clock:
    t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.slow
async def test_a_running_console_takes_the_new_plan_and_a_replay_follows_it(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(DEMO, encoding="utf-8")
    settings = load_settings(path)
    clock = Clock()
    node = start_demo(settings, clock=clock)
    live = LiveSource.reading(
        node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings, clock=clock
    )
    live.poller.config = ConfigWatch(settings)
    header = {"window_s": 60.0, "plan": settings.model_dump(mode="json", exclude={"engines"})}
    live.recorder = Recorder(tmp_path / "rec", "demo-node", header)
    frames = []

    async def polls(n: int) -> None:
        for _ in range(n):
            clock.t += 1.0
            frames.append(await live.poll())

    def target(frame) -> float:
        svc = next(s for s in frame.services if s.name == "llama-70b")
        return svc.slo.targets["ttft_s"].target_s

    try:
        await polls(5)
        assert target(frames[-1]) == 2.0
        _save(path, DEMO.replace("ttft_s: 2.0", "ttft_s: 0.25"))
        await polls(2)
        changed = frames[-1]
        assert target(changed) == 0.25 and target(frames[-2]) == 2.0
        said = [e for e in changed.timeline.events if e.kind == "config"]
        assert [e.text for e in said] == [
            "config read again: services.llama-70b.slo.ttft_s 2 → 0.25"
        ]
        assert said[0].start == changed.taken_at
        # a file that cannot be used: one sentence with its line, the plan before in force
        _save(path, DEMO.replace("ttft_s: 2.0", "ttft_s: [2"))
        await polls(2)
        bad = frames[-1]
        assert target(bad) == 0.25
        warn = [v for v in bad.verdict if v.rule == "config-invalid"]
        assert warn and f"{path}:" in warn[0].message and "stays in force" in warn[0].message
        assert [e.subject for e in bad.timeline.events if e.kind == "alert"] == ["config"]
        _save(path, DEMO.replace("ttft_s: 2.0", "ttft_s: 3"))
        await polls(3)
        assert target(frames[-1]) == 3.0
        assert not [v for v in frames[-1].verdict if v.rule == "config-invalid"]
        await polls(120)
    finally:
        await live.aclose()
        node.stop()
    rec = Recording(tmp_path / "rec")
    rec.done.wait()
    assert [plan["services"][0]["slo"]["ttft_s"] for _, plan in rec.config_log] == [0.25, 3]
    source = ReplaySource(rec.header, rec)
    assert target(source.last_frame()) == 3.0
    # a jump far into the recording derives from shortly before it, with the plan then
    source.seek(rec.times[-1])
    last = source._frame_at(source._index(rec.times[-1]))
    assert source.warmed_from is not None and target(last) == 3.0
    source.seek(rec.times[8])
    assert target(source._frame_at(8)) == 0.25
