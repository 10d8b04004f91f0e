import asyncio
import json
import subprocess
import sys
import textwrap

import pytest

from console.cmdline import classify
from console.read.discovery import from_processes, probe_ports, read_cmdline
from console.settings import ConfigError, config_path, load_settings, token_headers
from console.sim.engine import start_engine
from tests.conftest import ROOT


def write(tmp_path, text):
    p = tmp_path / "config.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_config_loads_engines_and_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_TOKEN", "s3cret")
    tok = tmp_path / "tok"
    tok.write_text("filetoken\n")
    p = write(
        tmp_path,
        f"""\
        window: 5m
        engines:
          - name: big
            kind: vllm
            url: http://127.0.0.1:8000/metrics
            token_env: VLLM_TOKEN
          - url: https://10.0.0.5:30000/metrics
            token_file: {tok}
            verify_tls: false
            timeout_s: 5
        """,
    )
    s = load_settings(p)
    assert s.window_s == 300
    assert token_headers(s.engines[0]) == {"Authorization": "Bearer s3cret"}
    assert token_headers(s.engines[1]) == {"Authorization": "Bearer filetoken"}
    assert s.engines[1].verify_tls is False and s.engines[1].kind is None


@pytest.mark.parametrize(
    "body, expect",
    [
        (
            "engines:\n  - url: http://x:1/metrics\n    tokn_env: A\n",
            r"config.yaml:3: engines.0: unknown key 'tokn_env'",
        ),
        (
            "engines:\n  - url: localhost:8000\n",
            r"config.yaml:2: engines.0.url: .*not an http\(s\) URL",
        ),
        (
            "engines:\n  - url: http://x:1/m\n    kind: ollama\n",
            r"config.yaml:3: engines.0.kind: unknown engine kind 'ollama'; use one of vllm",
        ),
        ("window: soon\n", r"config.yaml:1: window: .*use a duration"),
        (
            "engines:\n  - url: http://x:1/m\n    token_env: NOPE_NOT_SET\n",
            r"config.yaml:3: engines: environment variable NOPE_NOT_SET",
        ),
        ("engines: [\n", r"config.yaml:\d+: not valid YAML"),
        ("window: 1m\nwindow: 5m\n", r"config.yaml:2: key 'window' appears twice"),
    ],
)
def test_config_errors_are_one_sentence_with_line(tmp_path, body, expect, monkeypatch):
    monkeypatch.delenv("NOPE_NOT_SET", raising=False)
    with pytest.raises(ConfigError, match=expect) as info:
        load_settings(write(tmp_path, body))
    assert "\n" not in str(info.value)


def test_config_search_order_never_uses_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("window: 5m\n")
    monkeypatch.delenv("INFERDECK_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() in (None, __import__("pathlib").Path("/etc/inferdeck/config.yaml"))
    (tmp_path / "xdg" / "inferdeck").mkdir(parents=True)
    (tmp_path / "xdg" / "inferdeck" / "config.yaml").write_text("window: 15m\n")
    assert config_path() == tmp_path / "xdg" / "inferdeck" / "config.yaml"
    monkeypatch.setenv("INFERDECK_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="INFERDECK_CONFIG"):
        config_path()


def test_cli_bad_config_exits_2(tmp_path):
    p = write(tmp_path, "engines:\n  - url: http://x:1/metrics\n    colour: red\n")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "console",
            "snapshot",
            "--config",
            str(p),
            "--no-gpu",
            "--wait",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "config.yaml:3" in res.stderr


@pytest.mark.parametrize(
    "argv, expect",
    [
        (
            [
                "/usr/bin/python3",
                "/usr/local/bin/vllm",
                "serve",
                "meta-llama/Llama-3.1-8B",
                "--port",
                "8011",
            ],
            ("vllm", 8011),
        ),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], ("vllm", 8000)),
        (
            ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port=30123"],
            ("sglang", 30123),
        ),
        (["text-generation-launcher", "--model-id", "m", "--port", "3001"], ("tgi", 3001)),
        (
            [
                "/opt/tritonserver/bin/tritonserver",
                "--model-repository=/m",
                "--metrics-port",
                "8102",
            ],
            ("triton", 8102),
        ),
        (["./llama-server", "-m", "x.gguf", "--port", "8081", "--metrics"], ("llamacpp", 8081)),
        (["python", "train.py", "--port", "8000"], None),
        (["vim", "vllm"], None),
    ],
)
def test_classify_command_lines(argv, expect):
    assert classify(argv) == expect


def test_discovers_a_running_engine_process_and_probes_ports():
    eng = start_engine("sglang")
    code = "import time; time.sleep(30)"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "python3",
            "-m",
            "sglang.launch_server",
            "--port",
            str(eng.server.port),
            "--max-running-requests",
            "96",
        ]
    )
    try:
        import time

        deadline = time.monotonic() + 10
        while (
            "sglang.launch_server" not in (read_cmdline(proc.pid) or [])
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)  # right after fork the child still shows the parent's command line
        found = from_processes([proc.pid])
        assert [(f.kind, f.url, f.pid) for f in found] == [("sglang", eng.url, proc.pid)]
        assert found[0].max_running == 96  # SGLang's batch cap, by its profile's flag
        probed = asyncio.run(probe_ports([eng.server.port, 9]))
        assert [(f.kind, f.url, f.how) for f in probed] == [("sglang", eng.url, "port probe")]
    finally:
        proc.kill()
        eng.stop()


@pytest.mark.slow
def test_snapshot_discovers_when_nothing_is_configured(tmp_path):
    code = (
        "import sys, time; from console.sim.engine import start_engine; "
        "e = start_engine('vllm', port=int(sys.argv[-1])); time.sleep(60)"
    )
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "/usr/local/bin/vllm", "serve", "m", "--port", str(port)],
        cwd=ROOT,
    )
    try:
        import time

        time.sleep(1.5)
        env = {"XDG_CONFIG_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
        res = subprocess.run(
            [sys.executable, "-m", "console", "snapshot", "--no-gpu", "--wait", "0"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        engines = json.loads(res.stdout)["engines"]
        mine = [e for e in engines if e["url"] == f"http://127.0.0.1:{port}/metrics"]
        assert mine and mine[0]["kind"] == "vllm" and mine[0]["up"]
    finally:
        proc.kill()


@pytest.mark.slow
def test_an_operator_engines_file_adds_a_kind_without_editing_the_package(tmp_path):
    import json
    import subprocess
    import sys

    from console.sim.engine import MetricsServer
    from tests.conftest import ROOT

    (tmp_path / "mine.yaml").write_text(
        "myengine:\n  title: My engine\n  detect: [my_requests_running]\n  signals:\n"
        "    requests_running: {type: gauge, series: [my_requests_running]}\n"
    )
    server = MetricsServer(
        lambda: "# TYPE my_requests_running gauge\nmy_requests_running 7\n"
    ).start()
    try:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            f"engine_profiles: mine.yaml\nengines:\n  - name: m\n    kind: myengine\n    url: {server.url}\n"
        )
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "console",
                "snapshot",
                "--config",
                str(cfg),
                "--no-gpu",
                "--wait",
                "0",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.stop()
    assert res.returncode == 0, res.stderr
    eng = json.loads(res.stdout)["engines"][0]
    assert eng["kind"] == "myengine" and eng["requests_running"] == 7
    (tmp_path / "mine.yaml").write_text(
        "myengine:\n  title: x\n  detect: []\n  signals: {}\n  bogus: 1\n"
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "console",
            "snapshot",
            "--config",
            str(cfg),
            "--no-gpu",
            "--wait",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "mine.yaml:" in res.stderr and "Traceback" not in res.stderr
