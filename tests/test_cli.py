"""The CLI end to end: real processes, real HTTP on 127.0.0.1."""

import argparse
import json
import socket
import subprocess
import sys

import pytest

from console.sim.engine import MetricsServer
from tests.conftest import ROOT, fixture_text

pytestmark = pytest.mark.integration


def run(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def fixture_server():
    server = MetricsServer(lambda: fixture_text("vllm-live.prom")).start()
    yield server
    server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_snapshot_demo_json_has_the_promised_shape():
    res = run("snapshot", "--demo", "--format", "json")  # default --wait 3
    assert res.returncode == 0, res.stderr
    frame = json.loads(res.stdout)
    assert frame["schema"] == "inferdeck.frame/1"
    for key in ("taken_at", "host", "gpus", "engines", "alerts"):
        assert key in frame
    assert frame["taken_at"].endswith("Z")
    gpus = frame["gpus"]
    assert len(gpus) == 4
    assert [d["profile"] for d in gpus[1]["mig"]["devices"]] == ["2g.48gb", "2g.48gb"]
    assert [d["profile"] for d in gpus[2]["mig"]["devices"]] == ["1g.24gb"] * 4
    assert gpus[1]["utilization_gpu_pct"] is None and gpus[1]["unavailable"]["utilization_gpu_pct"]
    engines = frame["engines"]
    assert len(engines) == 3
    for e in engines:
        assert e["up"] is True and e["kind"] == "vllm"
        assert e["requests_running"] is not None
        assert 0.0 <= e["kv_cache_usage"] <= 1.0
        for q in ("p50", "p95", "p99"):
            assert e["ttft_s"][q] is not None
        assert e["ttft_s"]["window"] in ("1m", "since_start")
        assert e["generation_tokens_per_s"] > 0


def test_snapshot_of_the_fixture_matches_histogram_quantile(fixture_server):
    res = run("snapshot", "--engine", f"vllm={fixture_server.url}", "--no-gpu", "--wait", "0")
    assert res.returncode == 0, res.stderr
    (engine,) = json.loads(res.stdout)["engines"]
    assert engine["up"] and engine["model"] == "smollm2"
    # histogram_quantile(0.95, ...) on the cumulative TTFT buckets: 0.08 + 0.02 * (5.7 - 3) / 3
    assert engine["ttft_s"]["p95"] == pytest.approx(0.098, abs=1e-12)
    assert engine["ttft_s"]["window"] == "since_start"
    assert engine["generation_tokens_per_s"] is None
    assert engine["unavailable"]["generation_tokens_per_s"] == "a rate needs two scrapes"


def test_kind_is_detected_when_omitted(fixture_server):
    res = run("snapshot", "--engine", fixture_server.url, "--no-gpu", "--wait", "0")
    (engine,) = json.loads(res.stdout)["engines"]
    assert engine["kind"] == "vllm" and engine["up"]


def test_unreachable_and_non_prometheus_urls_are_down_with_reason():
    port = free_port()
    html = MetricsServer(
        lambda: "<html><body>hello</body></html>", content_type="text/html"
    ).start()
    try:
        res = run(
            "snapshot",
            "--engine",
            f"http://127.0.0.1:{port}/metrics",
            "--engine",
            html.url,
            "--no-gpu",
            "--wait",
            "0",
        )
    finally:
        html.stop()
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    frame = json.loads(res.stdout)
    refused, junk = frame["engines"]
    assert refused["up"] is False and "connection refused" in refused["error"]
    assert junk["up"] is False and "no Prometheus samples" in junk["error"]
    assert {a["severity"] for a in frame["alerts"]} == {"critical"}


def test_wrong_kind_is_reported(fixture_server):
    res = run("snapshot", "--engine", f"tgi={fixture_server.url}", "--no-gpu", "--wait", "0")
    (engine,) = json.loads(res.stdout)["engines"]
    assert engine["up"] is False and "serves vllm metrics, not tgi" in engine["error"]


@pytest.mark.parametrize(
    "spec",
    [
        "localhost:8000",
        "ftp://x/metrics",
        "vllm=http://",
        "bogus=http://127.0.0.1:1/m",
        "http://127.0.0.1:99999/metrics",
    ],
)
def test_malformed_engine_exits_2_with_one_sentence(spec):
    res = run("snapshot", "--engine", spec, "--no-gpu", "--wait", "0")
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("inferdeck: ") and "Traceback" not in res.stderr


def test_markdown_snapshot(fixture_server):
    res = run(
        "snapshot", "--engine", fixture_server.url, "--no-gpu", "--wait", "0", "--format", "md"
    )
    assert res.returncode == 0
    assert res.stdout.startswith("# inferdeck snapshot")
    assert "| smollm2 |" not in res.stdout or "vllm" in res.stdout
    assert "98ms" in res.stdout  # TTFT p95


def test_version_and_help():
    assert run("--version").stdout.startswith("inferdeck ")
    assert "snapshot" in run("--help").stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "/cfg.yaml", "--window", "5m", "--no-gpu", "snapshot"],
        ["snapshot", "--config", "/cfg.yaml", "--window", "5m", "--no-gpu"],
        ["--config", "/cfg.yaml", "check", "--window", "5m", "--no-gpu"],
    ],
)
def test_common_options_count_before_or_after_the_command(argv):
    from console.cli import _parser

    args = _parser().parse_args(argv)
    assert (args.config, args.window, args.no_gpu) == ("/cfg.yaml", "5m", True)


def test_the_consoles_options_count_before_the_demo_and_defaults_stay():
    from console.cli import _parser

    assert _parser().parse_args(["--read-only", "demo"]).read_only is True
    plain = _parser().parse_args(["snapshot"])
    assert (plain.config, plain.engine, plain.no_gpu, plain.interval) == (None, [], False, None)


@pytest.mark.parametrize("command", ["check", "snapshot"])
def test_the_global_prometheus_option_reaches_the_command(command):
    from console.cli import _parser

    args = _parser().parse_args(["--prometheus", "http://prom:9090", command])
    assert args.prometheus == "http://prom:9090"
    args = _parser().parse_args([command, "--prometheus", "http://prom:9090"])
    assert args.prometheus == "http://prom:9090"
    assert _parser().parse_args([command]).prometheus is None


def test_every_option_of_a_command_that_is_also_global_keeps_the_global_value():
    from console.cli import _parser

    given = {
        "engine": ["--engine", "http://h:1/metrics"],
        "config": ["--config", "/x.yaml"],
        "simulate_gpus": ["--simulate-gpus", "big"],
        "interval": ["--interval", "2"],
        "window": ["--window", "5m"],
        "record": ["--record", "/r"],
        "prometheus": ["--prometheus", "http://p:9090"],
    }
    parser = _parser()
    top = {a.dest for a in parser._actions if a.option_strings}
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    shared = 0
    for name, child in sub.choices.items():
        for a in child._actions:
            if a.dest in top and a.option_strings and a.dest != "help":
                argv = given.get(a.dest, [a.option_strings[0]]) + [name]
                argv += {"mig": ["show"], "replay": ["f"]}.get(name, [])
                got = vars(parser.parse_args(argv))[a.dest]
                assert got not in (None, False, []), (name, a.dest)
                shared += 1
    assert shared >= 20


def test_demo_with_prometheus_is_refused_in_one_sentence():
    for argv in (
        ["check", "--demo", "--prometheus", "http://127.0.0.1:9"],
        ["--prometheus", "http://127.0.0.1:9", "snapshot", "--demo"],
        ["--prometheus", "http://127.0.0.1:9", "demo"],
    ):
        res = run(*argv)
        assert res.returncode == 2, argv
        assert res.stderr.count("\n") == 1 and "--demo and --prometheus" in res.stderr
        assert "Traceback" not in res.stderr


def test_rules_for_the_demo_and_the_example_config():
    res = run("rules", "--demo")
    assert res.returncode == 0 and "InferdeckMemoryHeadroomCritical" in res.stdout
    res = run("example-config")
    assert res.returncode == 0
    from console.yamlfile import load_yaml

    data, _ = load_yaml(res.stdout, "example")
    assert "services" in data and "engines" in data


@pytest.mark.slow
def test_a_url_without_a_path_finds_the_engines_metrics_path():
    """vllmstat takes http://host:8000; each engine's metrics path is tried and the one that
    answered becomes the engine's URL."""
    plain = MetricsServer(lambda: fixture_text("vllm-live.prom")).start()
    trt = MetricsServer(
        lambda: fixture_text("trtllm-serve-2025-written.prom"), path="/prometheus/metrics"
    ).start()
    dead = free_port()
    try:
        base = plain.url.removesuffix("/metrics")
        res = run(
            "snapshot", "--no-gpu", "--no-discover", "--wait", "0",
            "--engine", base, "--engine", trt.url.removesuffix("/prometheus/metrics") + "/",
            "--engine", f"http://127.0.0.1:{dead}",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        engines = {e["url"]: e for e in json.loads(res.stdout)["engines"]}
        assert engines[plain.url]["up"] and engines[plain.url]["kind"] == "vllm"
        assert engines[trt.url]["up"] and engines[trt.url]["kind"] == "trtllm"
        down = engines[f"http://127.0.0.1:{dead}"]
        assert not down["up"]
        assert "/metrics: connection refused" in down["error"]
        assert "/prometheus/metrics: connection refused" in down["error"]
    finally:
        plain.stop()
        trt.stop()


def _steady_page(rate: float, began: float) -> str:
    """vllm-live.prom whose generation counter grows ``rate`` tokens/s since ``began``."""
    import time

    text = fixture_text("vllm-live.prom")
    value = rate * (time.time() - began)
    return text.replace(
        'vllm:generation_tokens_total{engine="0",model_name="smollm2"} 258.0',
        f'vllm:generation_tokens_total{{engine="0",model_name="smollm2"}} {value:.3f}',
    )


@pytest.mark.slow
@pytest.mark.parametrize("window", ["1m", "5m", "15m"])
def test_an_engine_running_long_before_the_console_reads_its_rate_at_once(window):
    """1,000 tok/s for 10 minutes before the console starts: `snapshot --wait 3` reads it
    within 5 % whatever the window, and says the window covered about 3 s (it read 175 tok/s
    at 1m and 35 at 5m when the first scrape was taken as the series' beginning)."""
    import time

    began = time.time() - 600
    server = MetricsServer(lambda: _steady_page(1000.0, began)).start()
    try:
        res = run(
            "snapshot", "--no-gpu", "--no-discover", "--wait", "3", "--window", window,
            "--engine", server.url,
        )  # fmt: skip
    finally:
        server.stop()
    assert res.returncode == 0, res.stderr
    frame = json.loads(res.stdout)
    (engine,) = frame["engines"]
    assert engine["generation_tokens_per_s"] == pytest.approx(1000.0, rel=0.05)
    assert 2.0 <= engine["covered_s"] <= 4.0
    assert 2.0 <= frame["window_covered_s"] <= 4.0
