"""The 60-second soak with chaos (bench/soak.py runs it longer by hand), and responsiveness while
an engine hangs and NVML is slow."""

import asyncio
import importlib.util
import time

import pytest

from tests.conftest import ROOT
from tests.waits import until

pytestmark = pytest.mark.integration


def load_soak():
    spec = importlib.util.spec_from_file_location("soak", ROOT / "bench" / "soak.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_sixty_second_soak_with_chaos():
    stats = asyncio.run(load_soak().soak(60))
    assert stats["worker_alive"], stats
    assert stats["frames"] >= 45, stats  # every pane kept refreshing at about 1 Hz
    assert stats["fresh_at_end"] < 3, stats
    assert stats["engine_rows"] == stats["engines_in_frame"] == 4 and stats["gpu_rows"] >= 4, stats
    assert stats["bad_figures"] == [], stats
    assert stats["rss_end_mb"] - stats["rss_start_mb"] < 40, stats
    assert stats["resizes"] >= 20 and stats["shuffles"] >= 12 and stats["nvml_faults"] >= 15, stats


@pytest.mark.slow
async def test_keys_answer_within_100_ms_while_an_engine_hangs_and_nvml_is_slow():
    from console.read.live import LiveSource
    from console.read.nvml import NvmlReader
    from console.read.poller import EngineTarget
    from console.sim.engine import start_engine
    from console.sim.nvml import SimNvml
    from screens.app import InferdeckApp
    from screens.help import HelpScreen

    hung, fine = start_engine("vllm"), start_engine("sglang")
    hung.server.delay_s = 30.0
    sim = SimNvml()
    sim.add_gpu("h100-80gb")
    slow_power = sim.nvmlDeviceGetPowerUsage

    def slow(h):
        time.sleep(0.6)
        return slow_power(h)

    sim.nvmlDeviceGetPowerUsage = slow
    live = LiveSource.reading(
        [
            EngineTarget(url=hung.url, name="hung", timeout_s=30.0),
            EngineTarget(url=fine.url, name="fine"),
        ],
        NvmlReader(sim, simulated=True),
    )
    live.poller.budget_s = 0.8
    app = InferdeckApp(live, interval_s=1.0)
    try:
        async with app.run_test(size=(100, 30)) as pilot:

            def read() -> bool:  # the fine engine's figures in, the hung one shown not up
                if app.frame is None:
                    return False
                engines = {e.name: e for e in app.frame.engines}
                return engines["fine"].requests_running is not None and not engines["hung"].up

            await until(pilot, read)
            seen = app.frame.taken_at
            for key, screen in (("question_mark", HelpScreen), ("escape", None)):
                start = time.monotonic()
                await pilot.press(key)
                while (screen is None and isinstance(app.screen, HelpScreen)) or (
                    screen is not None and not isinstance(app.screen, screen)
                ):
                    await asyncio.sleep(0.005)
                    assert time.monotonic() - start < 0.1, f"{key} took over 100 ms"
            await until(pilot, lambda: app.frame.taken_at > seen)  # the other panes keep refreshing
            engines = {e.name: e for e in app.frame.engines}
            assert engines["fine"].up and engines["fine"].requests_running is not None
            assert not engines["hung"].up  # still waiting on its answer: shown, not blocking
            assert app.frame.gpus and app.frame.gpus[0].power_w is not None
    finally:
        hung.server.delay_s = 0
        hung.stop()
        fine.stop()


def _counted(engine):
    """The engine's page, counting each answer."""
    served = {"n": 0}
    page = engine.server.page

    def counting():
        served["n"] += 1
        return page()

    engine.server.page = counting
    return served


async def test_check_keeps_the_healthy_engines_cadence_while_one_hangs_and_names_the_hung_one():
    """`check`/`snapshot`'s sample polls at its interval whatever one engine does: a hung engine's
    answer lands late (its timeout, named on the last poll) and the healthy engine is read on every
    poll, so its figures are over the sampled span, not its lifetime."""
    from console.compose import sample
    from console.read.live import LiveSource
    from console.read.poller import EngineTarget
    from console.sim.engine import start_engine

    hung, fine = start_engine("vllm"), start_engine("vllm")
    hung.server.delay_s = 30.0
    served = _counted(fine)
    live = LiveSource.reading(
        [
            EngineTarget(url=hung.url, name="hung", timeout_s=2.0),
            EngineTarget(url=fine.url, name="fine"),
        ],
        None,
    )
    try:
        begun = time.monotonic()
        frame = await sample(live, 4.0, 1.0)
        took = time.monotonic() - begun
    finally:
        hung.server.delay_s = 0
        hung.stop()
        fine.stop()
    engines = {e.name: e for e in frame.engines}
    assert served["n"] >= 5, served  # polls at 0, 1, 2, 3 and 4 s (two before this change)
    assert engines["fine"].up and engines["fine"].ttft_s.window != "since_start", engines["fine"]
    assert not engines["hung"].up and "2" in (engines["hung"].error or ""), engines["hung"]
    assert "timed out" in engines["hung"].error or "no answer" in engines["hung"].error
    assert took < 4.0 + 2.0 + 1.5, took  # the last poll waits at most the hung engine's timeout


@pytest.mark.slow
def test_record_keeps_every_healthy_frame_while_an_engine_hangs(tmp_path):
    """`inferdeck record` polls at its interval while an engine hangs: the healthy engine is fresh
    in about every frame (before, a hung engine halved them)."""
    import os
    import subprocess
    import sys
    import textwrap

    from console.read.recording import read
    from console.sim.engine import start_engine

    hung, fine = start_engine("vllm"), start_engine("vllm")
    hung.server.delay_s = 30.0
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        textwrap.dedent(f"""\
        interval_s: 1
        discover: false
        engines:
          - {{name: hung, url: "{hung.url}", timeout_s: 3}}
          - {{name: fine, url: "{fine.url}"}}
        """)
    )
    out = tmp_path / "rec"
    try:
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "console",
                "record",
                "--config",
                str(cfg),
                "--no-gpu",
                "--duration",
                "8",
                "--out",
                str(out),
            ],  # fmt: skip
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
        )
    finally:
        hung.server.delay_s = 0
        hung.stop()
        fine.stop()
    assert res.returncode == 0, res.stderr
    _, samples = read(out)
    fresh = [e.fresh and e.up for s in samples for e in s.engines if e.label == "fine"]
    assert len(samples) >= 7 and sum(fresh) >= 7, (len(samples), fresh)
    hung_errors = [e.error for s in samples for e in s.engines if e.label == "hung" and e.error]
    assert any("3" in x for x in hung_errors), hung_errors  # its timeout, named when it lands
