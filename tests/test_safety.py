"""Safe on every surface: canary secrets searched everywhere, exit codes that gate, the terminal
restored on signals, one sentence for every bad path or file."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from console.read.poller import EngineTarget, unique_names
from console.read.recording import RecordingError, read
from console.read.replay import ReplaySource
from console.read.scraper import without_credentials
from console.settings import EngineConfig
from console.sim.engine import MetricsServer
from tests.conftest import ROOT, fixture_text
from tests.test_terminal import drain, start

URL_PW = "CanaryUrlPw7731"
TOKEN_ENV = "CanaryEnvTok5512"
TOKEN_FILE = "CanaryFileTok9043"


def run(*args: str, env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_credentials_leave_the_url_where_it_enters():
    url, auth = without_credentials(f"http://admin:{URL_PW}@127.0.0.1:8000/metrics")
    assert url == "http://127.0.0.1:8000/metrics" and auth["Authorization"].startswith("Basic ")
    e = EngineConfig(url=f"http://u:{URL_PW}@h:1/metrics")
    assert URL_PW not in e.url and URL_PW not in repr(e) and URL_PW not in e.model_dump_json()


@pytest.fixture
def canary_setup(tmp_path):
    server = MetricsServer(lambda: fixture_text("vllm-live.prom")).start()
    host = server.url.split("//", 1)[1]
    token_file = tmp_path / "tok"
    token_file.write_text(TOKEN_FILE)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"engines:\n  - url: http://admin:{URL_PW}@{host}\n"
        f"  - name: e2\n    url: {server.url}\n    token_env: CANARY_TOKEN\n"
        f"  - name: e3\n    url: {server.url}\n    token_file: {token_file}\n"
    )
    yield cfg, f"http://admin:{URL_PW}@{host}", {"CANARY_TOKEN": TOKEN_ENV}
    server.stop()


@pytest.mark.slow
@pytest.mark.integration
def test_no_canary_secret_reaches_any_surface(canary_setup, tmp_path):
    cfg, pw_url, env = canary_setup
    outputs = []
    for args in (
        ["snapshot", "--config", str(cfg), "--no-gpu", "--wait", "0", "--engine", pw_url],
        ["snapshot", "--config", str(cfg), "--no-gpu", "--wait", "0", "--format", "md"],
        ["check", "--config", str(cfg), "--no-gpu"],
        [
            "snapshot",
            "--config",
            str(cfg),
            "--no-gpu",
            "--wait",
            "0",
            "--out",
            str(tmp_path / "b"),
            "--note",
            "INC-1",
        ],
        [
            "record",
            "--config",
            str(cfg),
            "--no-gpu",
            "--out",
            str(tmp_path / "rec"),
            "--duration",
            "2",
        ],
    ):
        res = run(*args, env=env)
        assert res.returncode in (0, 1, 2), res.stderr
        outputs += [res.stdout, res.stderr]
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name not in ("c.yaml", "tok")]
    assert any(p.name == "snapshot.md" for p in files) and any(
        p.name.endswith(".idrec.gz") for p in files
    )
    for p in files:
        data = p.read_bytes()
        outputs.append(gzip.decompress(data).decode() if p.name.endswith(".gz") else data.decode())
    header, samples = read(tmp_path / "rec")  # what replay derives from
    outputs.append(repr(header) + repr([s.engines for s in samples]))
    blob = "\n".join(outputs)
    assert "127.0.0.1" in blob  # the surfaces were written
    for secret in (URL_PW, TOKEN_ENV, TOKEN_FILE):
        assert secret not in blob, secret


@pytest.mark.slow
@pytest.mark.integration
def test_the_tui_screen_shows_no_url_password(canary_setup):
    _, pw_url, env = canary_setup
    proc, master = start(["--engine", pw_url])  # demo engines plus the canary one
    try:
        screen = drain(master, 5)
        assert b"GPUs" in screen and URL_PW.encode() not in screen
    finally:
        proc.kill()
        os.close(master)


@pytest.mark.slow
def test_exit_codes_gate(tmp_path):
    res = run("check", "--no-gpu", "--config", str(_empty_config(tmp_path)))
    assert res.returncode == 3 and res.stdout.startswith("INFERDECK UNKNOWN")
    big = tmp_path / "big.yaml"
    big.write_text(
        'node: {gpu_model: l40s, gpus: 1}\nservices:\n  - name: s\n    device: "0"\n'
        "    model: llama-3.1-70b\n    weight_bits: 16\n    tokens_per_sequence: 8192\n"
        "    concurrent_sequences: 8\n"
    )
    assert run("plan", "--config", str(big)).returncode == 1
    assert run("plan", "--demo").returncode == 0
    assert run("plan", "--config", str(tmp_path / "missing.yaml")).returncode == 2


def _empty_config(tmp_path: Path) -> Path:
    p = tmp_path / "empty.yaml"
    p.write_text("discover: false\n")
    return p


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "ctrl-c"])
def test_signals_and_ctrl_c_restore_the_terminal(how):
    proc, master = start()
    try:
        out = drain(master, 4)
        assert b"\x1b[?1049h" in out and b"GPUs" in out  # the alternate screen is on
        if how == "ctrl-c":
            os.write(master, b"\x03")
        else:
            proc.send_signal(getattr(signal, how))
        proc.wait(timeout=8)
        out += drain(master, 0.5)
        assert out.rfind(b"\x1b[?1049l") > out.rfind(b"\x1b[?1049h")  # and off again at the end
        assert out.rfind(b"\x1b[?1000l") > out.rfind(b"\x1b[?1000h")  # mouse tracking off
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


@pytest.mark.slow
def test_bad_paths_and_files_get_one_sentence(tmp_path):
    afile = tmp_path / "f"
    afile.write_text("x")
    res = run("snapshot", "--demo", "--wait", "0", "--out", str(afile))
    assert res.returncode == 2 and "is a file" in res.stderr and "Traceback" not in res.stderr
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() != 0:  # root writes anywhere
        res = run("snapshot", "--demo", "--wait", "0", "--out", str(locked / "x"))
        assert res.returncode == 2 and "not writable" in res.stderr
    res = run("record", "--demo", "--retention", "0", "--out", str(tmp_path / "r"))
    assert res.returncode == 2 and "--retention" in res.stderr
    res = run("snapshot", "--demo", "--wait", "0", "--note", "INC-1\n# injected")
    assert res.returncode == 2 and "one line" in res.stderr
    junk = tmp_path / "junk.idrec.gz"
    junk.write_bytes(os.urandom(256))
    res = run("replay", str(junk))
    assert (
        res.returncode == 2
        and "not an inferdeck recording" in res.stderr
        and "Traceback" not in res.stderr
    )


@pytest.mark.slow
def test_a_truncated_recording_says_where(tmp_path):
    res = run(
        "record", "--demo", "--out", str(tmp_path / "r.idrec.gz"), "--duration", "3", timeout=60
    )
    assert res.returncode == 0, res.stderr
    path = tmp_path / "r.idrec.gz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    header, samples = read(path)
    assert samples and "truncated after frame" in header["truncated"][0]
    with pytest.raises(RecordingError, match="not an inferdeck recording"):
        bad = tmp_path / "b.idrec.gz"
        bad.write_bytes(gzip.compress(b'{"hello": 1}\n'))
        read(bad)


@pytest.mark.slow
def test_replay_times_outside_or_impossible_are_answered(tmp_path):
    run("record", "--demo", "--out", str(tmp_path / "r.idrec.gz"), "--duration", "2", timeout=60)
    header, samples = read(tmp_path / "r.idrec.gz")
    src = ReplaySource(header, samples)
    assert "not a time of day" in src.seek_text("99:99")
    answer = src.seek_text("2001-01-01T00:00:00")
    assert answer is not None and "outside the recording" in answer and "spans" in answer


def test_engine_names_are_unique():
    ts = unique_names(
        [
            EngineTarget(url="http://h:1/metrics"),
            EngineTarget(url="http://h:1/b/metrics"),
            EngineTarget(url="http://h:1/metrics"),
        ]
    )
    assert len({t.label for t in ts}) == 3


@pytest.mark.slow
def test_mig_import_of_binary_and_the_round_trip_of_export(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 64)
    res = run("mig", "import", str(binary), "--config-label", "x", "--demo", env=env)
    assert res.returncode == 2 and "not a text file" in res.stderr and "Traceback" not in res.stderr
    exported = tmp_path / "mp.yaml"
    res = run("mig", "export", "--demo", env=env)
    exported.write_text(res.stdout)
    res = run(
        "mig", "import", str(exported), "--config-label", "current", "--demo", "--dry-run", env=env
    )
    assert "stays off: no change" in res.stdout and "BLOCKED" not in res.stdout, res.stdout
    assert res.returncode == 0
    assert not (
        tmp_path / "state" / "inferdeck" / "mig-audit.jsonl"
    ).exists()  # the demo never writes the node's


def test_dry_run_prints_runnable_commands_with_the_driver_s_gi_ids(tmp_path):
    res = run(
        "mig",
        "apply",
        "2",
        "2g.48gb@0,2g.48gb@6",
        "--demo",
        "--dry-run",
        env={"XDG_STATE_HOME": str(tmp_path)},
    )
    assert "<GI id" not in res.stdout
    assert "nvidia-smi mig -i 2 -dgi -gi 1" in res.stdout and "-cgi" in res.stdout


def test_a_malformed_mig_parted_config_names_file_and_line(tmp_path):
    bad = tmp_path / "mp.yaml"
    bad.write_text(
        "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n"
        "      mig-devices: {1g.24gb: many}\n"
    )
    res = run(
        "mig",
        "import",
        str(bad),
        "--config-label",
        "x",
        "--demo",
        "--dry-run",
        env={"XDG_STATE_HOME": str(tmp_path)},
    )
    assert res.returncode == 2 and f"{bad}:6" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
@pytest.mark.integration
def test_demo_mig_apply_writes_apart_marked_simulated_with_the_full_frame(tmp_path):
    import json

    res = run(
        "mig",
        "apply",
        "2",
        "2g.48gb@0,2g.48gb@6",
        "--demo",
        "--yes",
        env={"XDG_STATE_HOME": str(tmp_path)},
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    demo = tmp_path / "inferdeck" / "demo"
    assert not (tmp_path / "inferdeck" / "mig-audit.jsonl").exists()
    entries = [json.loads(line) for line in (demo / "mig-audit.jsonl").read_text().splitlines()]
    assert entries and all(e.get("simulated") for e in entries)
    bundles = sorted((demo / "snapshots").iterdir())
    assert [b.name.endswith(("before-simulated", "after-simulated")) for b in bundles] == [
        True,
        True,
    ]
    for b in bundles:
        frame = json.loads((b / "frame.json").read_text())
        assert len(frame["engines"]) == 3 and len(frame["services"]) == 3


@pytest.mark.slow
def test_record_to_a_file_that_is_no_recording_or_cannot_be_written(tmp_path):
    junk = tmp_path / "x.idrec.gz"
    junk.write_bytes(os.urandom(300))
    res = run("record", "--demo", "--out", str(junk), "--duration", "1")
    assert (
        res.returncode == 2
        and "not an inferdeck recording" in res.stderr
        and "Traceback" not in res.stderr
    )
    res = run("record", "--demo", "--out", "/proc/nope/x.idrec.gz", "--duration", "1")
    assert res.returncode == 2 and "cannot write a recording there" in res.stderr


@pytest.mark.integration
def test_a_crashed_console_exits_non_zero(tmp_path):
    """A bug inside the app (here planted: mounting raises) ends the process with a non-zero code."""
    import pty

    cfg = _empty_config(tmp_path)
    code = (
        "import screens.app as a\n"
        "def boom(self): raise RuntimeError('planted')\n"
        "a.InferdeckApp.on_mount = boom\n"
        "from console.cli import main\n"
        f"raise SystemExit(main(['--no-gpu', '--config', {str(cfg)!r}]))\n"
    )
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TERM": "xterm-256color"},
        start_new_session=True,
    )
    os.close(slave)
    try:
        drain(master, 3)
        assert proc.wait(timeout=20) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
