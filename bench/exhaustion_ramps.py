"""How near the time to a full KV pool (console/figures/capacity.py's ``estimate``: its
``kv_full_in_s``, the arrivals counted, their trend run to the load law's rate at a full pool)
comes to when the simulator's pool fills, on ramps of arrivals; beside it, in the same run, the
readings' own trend alone (``kv_full_in``), the forecast before the law.

    python bench/exhaustion_ramps.py [--scale 10] [--seeds 7 8 9] [--oracle 10]

Each ramp runs the simulator's engine model (read through its /metrics page every second, as a
real engine) from 1 req/s (× scale) until its pool's 30-s average use reaches 95 % — the truth.
The estimate is read once that average first passes 30, 50 and 70 %, and scored within ±25 % of
the time left. --scale multiplies the pool and the arrivals: at 1 the pool holds ~100 sequences
and one-second readings swing by ±10 points (when it "fills" is itself a noisy first passage); at
10 (400,000 tokens, ~700 sequences, an H100's vLLM) the swing is a third of that.

Beside them, the noise floor: what a forecaster that knew the ramp and the engine model exactly,
but not the requests still to come, would score — the mean fill time of --oracle other seeds, less
the time gone at the reading. Where it misses, the pool's own randomness is larger than ±25 %.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.engines import extract, profiles  # noqa: E402
from console.figures.capacity import CAPACITY_WINDOW_S, estimate, kv_full_in  # noqa: E402
from console.figures.windowed import EngineHistory  # noqa: E402
from console.promtext import parse  # noqa: E402
from console.sim.engine import page_for  # noqa: E402
from console.sim.traffic import TrafficModel, TrafficSpec  # noqa: E402

LEVELS = (0.3, 0.5, 0.7)


def ramps(k: float) -> dict[str, Callable[[int], float]]:
    out: dict[str, Callable[[int], float]] = {
        f"linear +{a:g}/s²": (lambda s, a=a: k * (1.0 + a * s)) for a in (0.01, 0.02, 0.03, 0.04)
    }
    out["accelerating t²"] = lambda s: k * (1.0 + 0.00004 * s * s)
    out["accelerating t^2.5"] = lambda s: k * (1.0 + 0.000003 * s**2.5)
    return out


START = 1_000_000.0  # the simulated clock at the ramp's start


def run(
    rate: Callable[[int], float], seed: int, k: float, forecast: bool = True
) -> list[tuple[float, float, float | None, float | None, float, float]]:
    """(level, seconds left until the 30-s average reaches 95 %, seconds said, seconds the
    readings' trend alone said, seconds left until a one-second reading first reaches 99 %,
    seconds from the ramp's start to the reading) at each reading of one ramp; without
    ``forecast`` nothing is said (the fill alone, for the noise floor)."""
    spec = {
        "itl_base_s": 0.018,
        "itl_per_seq_s": 0.00005 / k,
        "max_num_seqs": 100_000,
        "kv_capacity_tokens": 40_000 * k,
        "prompt_tokens": 300,
        "output_tokens": 200,
    }
    clock = [START]
    model = TrafficModel(TrafficSpec(**spec, rate_rps=k, seed=seed), clock=lambda: clock[0])
    hist = EngineHistory(keep_s=CAPACITY_WINDOW_S + 30)
    used: list[float] = []
    said: dict[float, tuple[float, float | None, float | None]] = {}
    touched: float | None = None  # when a one-second reading first reached 99 %
    for s in range(3600):
        model.spec.rate_rps = rate(s)
        clock[0] += 1.0
        hist.add(extract(parse(page_for("vllm", model)), profiles()["vllm"], clock[0]))
        used.append(model.kv_used_tokens() / spec["kv_capacity_tokens"])
        level = sum(used[-30:]) / len(used[-30:])
        if touched is None and used[-1] >= 0.99:
            touched = clock[0]
        for lv in LEVELS:
            if lv in said or s < 60 or level <= lv:
                continue
            said[lv] = (clock[0], None, None)
            if forecast:
                pts = hist.points
                got = estimate(
                    pts, CAPACITY_WINDOW_S, ttft_limit_s=None, tpot_limit_s=None,
                    kv_capacity_tokens=spec["kv_capacity_tokens"],
                )  # fmt: skip
                said[lv] = (clock[0], got.kv_full_in_s, kv_full_in(pts, CAPACITY_WINDOW_S))
        if level >= 0.95:
            first = touched if touched is not None else clock[0]
            return [
                (lv, clock[0] - t, p, q, first - t, t - START)
                for lv, (t, p, q) in sorted(said.items())
            ]
    raise SystemExit("the pool never filled")


def fill_times(rate: Callable[[int], float], seeds: list[int], k: float) -> list[float]:
    """Seconds from the ramp's start until the pool's 30-s average reaches 95 %, per seed."""
    out = []
    for seed in seeds:
        lv, left, *_, at = run(rate, seed, k, forecast=False)[0]
        out.append(at + left)
    return out


def _score(said: list[tuple[float, float | None]]) -> tuple[int, list[float], int]:
    """(within ±25 %, the ratios said / truth sorted, readings without a figure)."""
    held = sum(p is not None and abs(p - truth) <= 0.25 * truth for truth, p in said)
    ratios = sorted(p / truth for truth, p in said if p is not None)
    return held, ratios, sum(p is None for _, p in said)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=10.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[7, 8, 9])
    ap.add_argument(
        "--oracle", type=int, default=10,
        help="seeds more per ramp for the noise floor (0: none)",
    )  # fmt: skip
    args = ap.parse_args()
    law: list[tuple[float, float | None]] = []
    alone: list[tuple[float, float | None]] = []
    oracle: list[tuple[float, float | None]] = []
    touched = 0
    for name, rate in ramps(args.scale).items():
        # the noise floor: a forecaster that knows the ramp and the engine exactly, but not the
        # requests to come, says the mean fill time over other seeds less the time already gone
        others = fill_times(rate, [1000 + i for i in range(args.oracle)], args.scale)
        for seed in args.seeds:
            cells = []
            for lv, truth, p, q, first, at in run(rate, seed, args.scale):
                ok = p is not None and abs(p - truth) <= 0.25 * truth
                touched += p is not None and first > 0 and abs(p - first) <= 0.25 * first
                law.append((truth, p))
                alone.append((truth, q))
                if others:
                    oracle.append((truth, sum(others) / len(others) - at))
                said = "  none" if p is None else f"{p:4.0f} ({p / truth:4.2f}{'' if ok else ' ✗'})"
                cells.append(f"{lv:.0%}: {truth:4.0f} s, said {said}")
            print(f"{name:20} seed {seed}  " + " | ".join(cells))
    print()
    rows = [("estimate (the law)", law), ("the readings' trend alone", alone)]
    if oracle:
        rows.append((f"noise floor ({args.oracle} seeds)", oracle))
    for label, said in rows:
        held, ratios, none = _score(said)
        mid = f"{ratios[len(ratios) // 2]:.2f}, {ratios[0]:.2f}–{ratios[-1]:.2f}" if ratios else "-"
        print(
            f"{label:26} {held} of {len(said)} readings within ±25 % of the time left "
            f"(scale {args.scale:g}); said/truth median {mid}; {none} without a figure"
        )
    print(
        f"{touched} of {len(law)} of the estimate's within ±25 % of when a one-second reading "
        "first reached 99 % (a single reading's first touch: earlier, and noisier)"
    )


if __name__ == "__main__":
    main()
