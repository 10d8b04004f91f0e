"""Bad pages give a clear per-engine error or a partial parse; never a crash."""

import asyncio
import os

import pytest

from console.read.live import LiveSource
from console.read.poller import EngineTarget
from console.sim.engine import MetricsServer
from tests.conftest import fixture_text

pytestmark = pytest.mark.integration

LIVE = fixture_text("vllm-live.prom")


def poll_once(body, kind=None):
    server = MetricsServer(lambda: body).start()
    try:

        async def go():
            live = LiveSource.reading([EngineTarget(url=server.url, kind=kind)], nvml=None)
            try:
                return await live.poll()
            finally:
                await live.aclose()

        return asyncio.run(go()).engines[0]
    finally:
        server.stop()


def test_random_bytes_is_a_clear_error():
    e = poll_once(os.urandom(20_000))
    assert not e.up and (
        "no Prometheus samples" in e.error or "no series of a known engine" in e.error
    )


def test_truncated_page_parses_partially():
    e = poll_once(LIVE[: len(LIVE) // 2])
    assert e.up and e.kind == "vllm"
    assert e.requests_running == 0  # the head of the page survived


def test_a_duplicated_series_is_na_with_a_reason():
    """Prometheus rejects a scrape holding one series twice; the last value won here. Which of
    the two is true cannot be known: the figure is n/a and says why; the rest of the page stands."""
    body = LIVE + '\nvllm:num_requests_running{engine="0",model_name="smollm2"} 7.0\n'
    e = poll_once(body)
    assert e.up and e.requests_running is None
    assert "appears twice with the same labels" in e.unavailable["requests_running"]
    assert e.kv_cache_usage is not None


def test_escaped_labels_and_windows_nan():
    body = (
        'vllm:num_requests_running{engine="0",model_name="a \\"quoted\\"\\nname"} 3\n'
        'vllm:num_requests_waiting{engine="0",model_name="x"} -nan(ind)\n'
    )
    e = poll_once(body, kind="vllm")
    assert e.up and e.requests_running == 3 and e.model == 'a "quoted"\nname'
    assert e.requests_waiting is None and e.unavailable["requests_waiting"] == "engine reported NaN"


def test_fifty_megabyte_page_is_refused_with_a_message():
    big = ("# filler " + "x" * 1000 + "\n") * 50_000
    assert len(big) > 50_000_000
    e = poll_once(big.encode())
    assert not e.up and "over the 16,777,216-byte limit" in e.error
