"""The 60-second soak with chaos (bench/soak.py runs it longer by hand), and responsiveness while
an engine hangs and NVML is slow."""

import asyncio
import importlib.util
import time

import pytest

from tests.conftest import ROOT

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
    from console.nvml import NvmlReader
    from console.poller import EngineTarget, Poller
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
    poller = Poller(
        [
            EngineTarget(url=hung.url, name="hung", timeout_s=30.0),
            EngineTarget(url=fine.url, name="fine"),
        ],
        NvmlReader(sim, simulated=True),
    )
    poller.budget_s = 0.8
    app = InferdeckApp(poller, interval_s=1.0)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause(3.5)
            seen = app.frame.taken_at
            for key, screen in (("question_mark", HelpScreen), ("escape", None)):
                start = time.monotonic()
                await pilot.press(key)
                while (screen is None and isinstance(app.screen, HelpScreen)) or (
                    screen is not None and not isinstance(app.screen, screen)
                ):
                    await asyncio.sleep(0.005)
                    assert time.monotonic() - start < 0.1, f"{key} took over 100 ms"
            await pilot.pause(2.2)
            assert app.frame.taken_at > seen  # the other panes keep refreshing
            engines = {e.name: e for e in app.frame.engines}
            assert engines["fine"].up and engines["fine"].requests_running is not None
            assert not engines["hung"].up  # still waiting on its answer: shown, not blocking
            assert app.frame.gpus and app.frame.gpus[0].power_w is not None
    finally:
        hung.server.delay_s = 0
        hung.stop()
        fine.stop()
