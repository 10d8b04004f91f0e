"""Terminal hygiene over SSH: hangups, closed terminals, colour settings, mouse and read-only."""

import os
import pty
import select
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def start(args=(), env_extra=None):
    master, slave = pty.openpty()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COLORTERM", "NO_COLOR", "TEXTUAL_COLOR_SYSTEM")
    }
    env.update({"TERM": "xterm-256color", **(env_extra or {})})
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", "demo", *args],
        cwd=ROOT,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    return proc, master


def drain(master, seconds):
    out = b""
    end = time.time() + seconds
    while time.time() < end:
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                out += os.read(master, 65536)
            except OSError:
                break
    return out


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.mark.slow
def test_sighup_exits_within_5_s():
    proc, master = start()
    try:
        assert b"GPUs" in drain(master, 4)
        proc.send_signal(signal.SIGHUP)
        proc.wait(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


@pytest.mark.slow
def test_closed_terminal_exits_within_5_s_without_spinning():
    proc, master = start()
    assert b"GPUs" in drain(master, 4)
    os.close(master)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        before = cpu_ticks(proc.pid)
        time.sleep(1)
        spin = cpu_ticks(proc.pid) - before
        proc.kill()
        pytest.fail(
            f"still running 5 s after the terminal closed ({spin} CPU ticks in the last second)"
        )


@pytest.mark.slow
@pytest.mark.parametrize(
    "env, args",
    [
        ({}, ()),  # TERM=xterm-256color, no COLORTERM: 256 colours, as over SSH
        ({"NO_COLOR": "1"}, ()),
        ({"TEXTUAL_COLOR_SYSTEM": "standard"}, ()),
        ({}, ("--no-mouse", "--read-only")),
    ],
)
def test_runs_and_quits_cleanly_in_each_terminal_setting(env, args):
    proc, master = start(args, env)
    try:
        out = drain(master, 4)
        assert b"GPUs" in out and b"Engines" in out
        if "--read-only" in args:
            assert b"read-only" in out  # the MIG menu stays (it shows layouts, applies none)
        if "--no-mouse" not in args:
            assert b"\x1b[?1000h" in out  # mouse reporting requested
        else:
            assert b"\x1b[?1000h" not in out
        os.write(master, b"q")
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
