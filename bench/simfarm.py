"""Serve N simulated engines from one process (so a benchmark does not count their CPU).

    python bench/simfarm.py N [--kinds vllm,sglang,...]

Prints one URL per line, then serves until killed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.sim.engine import TrafficSpec, start_engine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--kinds", default="vllm")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    engines = [
        start_engine(kinds[i % len(kinds)], TrafficSpec(seed=i, warmup_s=30)) for i in range(args.n)
    ]
    for e in engines:
        print(e.url, flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
