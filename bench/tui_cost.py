"""Steady-state CPU (% of one core, from /proc utime+stime), RSS and time to first frame of the
console under tmux at 1 s refresh, next to a minimal Textual app measured the same way.

    python bench/tui_cost.py [--seconds 20]

Scenarios: (a) one simulated vLLM engine, no GPU; (b) the demo node's 4 GPUs (simulated NVML,
in-process like a driver) with 3 engines; (c) 32 engines and 8 GPUs x 7 MIG devices. The
simulated engines run in a separate process (bench/simfarm.py), so their CPU is not counted.
Every run starts from bytecode, as after a pip install (``compiled``).
Targets (issue "lean"): (b) <= 2% of a core; (c) <= 6% of a core with every pane refreshing at
1 Hz. Scenario (a) against the peer is bench/peer_cost.py.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")


def farm(n: int) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen(
        [PY, str(ROOT / "bench" / "simfarm.py"), str(n)], stdout=subprocess.PIPE, text=True
    )
    urls = [proc.stdout.readline().strip() for _ in range(n)]
    return proc, urls


def compiled() -> None:
    """Byte-compile the project as pip does when it installs a package. With
    PYTHONDONTWRITEBYTECODE set (this VM sets it) every start would otherwise compile ~70 modules
    from source, about 50 ms, while Textual and the peer start from the bytecode pip wrote."""
    for d in ("console", "screens"):
        compileall.compile_dir(ROOT / d, quiet=1)


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True).stdout


def pane_pid(session: str) -> int:
    return int(tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())


def cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(name: str, cmd: list[str], marker: str, seconds: float) -> dict:
    session = f"bench-{os.getpid()}-{re.sub(r'[^a-z0-9]+', '-', name.lower())}"
    tmux("kill-session", "-t", session)
    start = time.monotonic()
    tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "48", "exec " + " ".join(cmd))
    tmux("set-option", "-t", session, "remain-on-exit", "on")  # a crash leaves its words
    first = None
    while time.monotonic() - start < 30:
        if re.search(marker, tmux("capture-pane", "-p", "-t", session)):
            first = time.monotonic() - start
            break
        time.sleep(0.02)
    if tmux("display-message", "-p", "-t", session, "#{pane_dead}").strip() != "0":
        screen = tmux("capture-pane", "-p", "-t", session).strip()
        tmux("kill-session", "-t", session)
        raise SystemExit(f"{name}: the command exited before its first frame:\n{screen}")
    pid = pane_pid(session)
    time.sleep(5)  # warm up
    c0, t0 = cpu_s(pid), time.monotonic()
    stamps = set()
    while time.monotonic() - t0 < seconds:
        line = tmux("capture-pane", "-p", "-t", session).splitlines()[:1]
        stamps.update(re.findall(r"\d\d:\d\d:\d\dZ", line[0] if line else ""))
        time.sleep(0.25)
    c1, t1 = cpu_s(pid), time.monotonic()
    out = {
        "scenario": name,
        "first_frame_s": first,
        "cpu_pct": 100 * (c1 - c0) / (t1 - t0),
        "rss_mb": rss_mb(pid),
        "refreshes_per_s": len(stamps) / (t1 - t0),
    }
    tmux("send-keys", "-t", session, "q")
    time.sleep(0.5)
    tmux("kill-session", "-t", session)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--only", default="abc", help="the scenarios to run, e.g. c (default abc)")
    args = ap.parse_args()
    compiled()
    base = [PY, "-m", "console"]
    rows = [
        measure(
            "baseline",
            [PY, str(ROOT / "bench" / "baseline_app.py")],
            "baseline ready",
            args.seconds,
        )
    ]
    scenarios = [
        ("a", "a: 1 engine, no GPU", 1, ["--no-gpu"], r"Engines.*\n.*\n.*\d"),
        ("b", "b: demo node", 3, ["--simulate-gpus", "demo"], r"RTX PRO"),
        ("c", "c: 32 engines, 8x7 MIG", 32, ["--simulate-gpus", "big"], r"H100"),
    ]
    for letter, name, n, gpus, marker in scenarios:
        if letter not in args.only:
            continue
        proc, urls = farm(n)
        try:
            engines = [a for u in urls for a in ("--engine", u)]
            rows.append(
                measure(name, base + engines + gpus + ["--no-discover"], marker, args.seconds)
            )
        finally:
            proc.kill()
    b = rows[0]
    print(
        f"{'scenario':<26}{'first frame':>12}{'CPU % core':>12}{'x baseline':>11}{'RSS MB':>9}{'x baseline':>11}"
        f"{'refresh/s':>11}"
    )
    for r in rows:
        ff = f"{r['first_frame_s']:.2f} s" if r["first_frame_s"] is not None else "n/a"
        print(
            f"{r['scenario']:<26}{ff:>12}{r['cpu_pct']:>11.2f}%{r['cpu_pct'] / max(b['cpu_pct'], 0.01):>10.1f}x"
            f"{r['rss_mb']:>9.1f}{r['rss_mb'] / b['rss_mb']:>10.1f}x{r['refreshes_per_s']:>11.2f}"
        )


if __name__ == "__main__":
    main()
