"""inferdeck beside vllmstat (the most complete Textual peer) on one simulated vLLM endpoint at
1 Hz: CPU (% of one core), RSS and time to first frame of each, one after the other, same warm-up
and window, two rounds; then the ratios.

    python bench/peer_cost.py [--seconds 40] [--rounds 2]

vllmstat is installed from PyPI into a venv of its own (.cache/peer-venv), so its pins never touch
ours. The simulated engine runs in a separate process (bench/simfarm.py): its CPU is not counted.
Targets (issue "lean"): CPU <= 0.35x vllmstat's, first frame <= 1.1x, RSS <= 1.25x.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tui_cost import PY, ROOT, compiled, farm, measure  # noqa: E402

PEER = "vllmstat==0.9.1"


def peer_venv() -> Path:
    venv = ROOT / ".cache" / "peer-venv"
    exe = venv / "bin" / "vllmstat"
    if not exe.exists():
        subprocess.run([PY, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", PEER], check=True)
    return exe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    peer = peer_venv()
    compiled()  # both start from bytecode, as pip installs them
    proc, (url,) = farm(1)
    base = url.removesuffix("/metrics")
    port = base.rsplit(":", 1)[1]
    runs: dict[str, list[dict]] = {"inferdeck": [], "vllmstat": []}
    try:
        for _ in range(args.rounds):
            runs["inferdeck"].append(
                measure(
                    "inferdeck",
                    [PY, "-m", "console", "--engine", url, "--no-gpu", "--no-discover"],
                    r"Engines.*\n.*\n.*\d",
                    args.seconds,
                )
            )
            runs["vllmstat"].append(
                measure("vllmstat", [str(peer), "-u", base, "--no-gpu"], port, args.seconds)
            )
    finally:
        proc.kill()
    print(f"one simulated vLLM at 1 Hz, {args.seconds:g} s window, {args.rounds} rounds each")
    print(f"{'':<12}{'CPU % core':>14}{'RSS MB':>10}{'first frame':>13}")
    med = {}
    for name, rows in runs.items():
        cpu = [r["cpu_pct"] for r in rows]
        rss = [r["rss_mb"] for r in rows]
        first = [r["first_frame_s"] or float("nan") for r in rows]
        med[name] = (statistics.median(cpu), statistics.median(rss), statistics.median(first))
        print(
            f"{name:<12}{min(cpu):>6.2f}–{max(cpu):<6.2f}{statistics.median(rss):>10.1f}"
            f"{min(first):>7.2f}–{max(first):.2f} s"
        )
    a, b = med["inferdeck"], med["vllmstat"]
    print(
        f"ratios inferdeck / vllmstat: CPU {a[0] / b[0]:.2f}x (target <= 0.35x), "
        f"RSS {a[1] / b[1]:.2f}x (<= 1.25x), first frame {a[2] / b[2]:.2f}x (<= 1.1x)"
    )


if __name__ == "__main__":
    main()
