"""What the capacity estimator (console/figures/capacity.py) costs per engine per poll, beside the rest of
the engine's derivation (enginestats.derive) measured in the same run.

    python bench/capacity_cost.py [--polls 600]

An engine is scraped every second for ten minutes of varied load (the simulator's engine model,
read through its /metrics page as from a real engine). Each poll: derive the engine's figures, and
ask the Deriver's capacity (estimated again once the history holds 5 s more, as live).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.engines import extract, profiles  # noqa: E402
from console.figures.capacity import CAPACITY_WINDOW_S, RENEW_S, estimate  # noqa: E402
from console.figures.enginestats import derive  # noqa: E402
from console.figures.windowed import EngineHistory  # noqa: E402
from console.promtext import parse  # noqa: E402
from console.sim.engine import page_for  # noqa: E402
from console.sim.traffic import TrafficModel, TrafficSpec  # noqa: E402


def _estimate(hist: EngineHistory, kv: float | None) -> None:
    estimate(
        hist.points, CAPACITY_WINDOW_S, ttft_limit_s=1.0, tpot_limit_s=0.05, kv_capacity_tokens=kv
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--polls", type=int, default=600)
    polls = ap.parse_args().polls
    clock = [1_000_000.0]
    model = TrafficModel(TrafficSpec(rate_rps=2.0, max_num_seqs=512), clock=lambda: clock[0])
    prof = profiles()["vllm"]
    hist = EngineHistory()
    derive_s = capacity_s = every_s = 0.0
    last_t = None
    for i in range(polls):
        model.spec.rate_rps = 2.0 + 3.0 * ((i // 60) % 3)  # a step every minute
        clock[0] += 1.0
        hist.add(extract(parse(page_for("vllm", model)), prof, clock[0]))
        t0 = time.perf_counter()
        d = derive(hist.points, prof, 60.0)
        t1 = time.perf_counter()
        kv = d.fields.get("kv_capacity_tokens")
        if last_t is None or clock[0] - last_t >= RENEW_S:  # as the Deriver renews it
            _estimate(hist, kv)
            last_t = clock[0]
        t2 = time.perf_counter()
        _estimate(hist, kv)
        t3 = time.perf_counter()
        derive_s += t1 - t0
        capacity_s += t2 - t1
        every_s += t3 - t2
    per = 1000 / polls
    print(f"{polls} polls of one engine at 1 s, {CAPACITY_WINDOW_S:.0f} s window")
    print(f"  enginestats.derive        {derive_s * per:6.3f} ms per poll")
    print(
        f"  capacity (as live, 5 s)   {capacity_s * per:6.3f} ms per poll "
        f"({capacity_s / derive_s:.2f}x derive)"
    )
    print(
        f"  capacity on every poll    {every_s * per:6.3f} ms per poll "
        f"({every_s / derive_s:.2f}x derive)"
    )


if __name__ == "__main__":
    main()
