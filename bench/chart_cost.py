"""What a detail-screen chart costs per refresh: building one plotext chart of 15 minutes of
history (900 points, 4 series) at 80 and 160 columns, beside the dashboard's sparkline of the same
series measured in the same run.

    python bench/chart_cost.py
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.keyseries import KeySeries  # noqa: E402
from screens.charts import SeriesChart  # noqa: E402
from screens.widgets import spark  # noqa: E402


class _Frame:  # the few fields KeySeries.add reads
    pass


def history(points: int = 900) -> KeySeries:
    keys = KeySeries()
    for i in range(points):
        keys.points.append(
            (
                1_780_000_000.0 + i,
                {
                    "e.ttft_p50_s": 0.2 + 0.05 * math.sin(i / 30),
                    "e.ttft_p95_s": 0.6 + 0.2 * math.sin(i / 40),
                    "e.tpot_p95_s": 0.05,
                    "e.itl_p95_s": 0.04 + 0.01 * math.sin(i / 10),
                },
            )
        )
    return keys


def main() -> None:
    keys = history()
    series = [
        ("TTFT p50", "e.ttft_p50_s", 1000.0),
        ("TTFT p95", "e.ttft_p95_s", 1000.0),
        ("TPOT p95", "e.tpot_p95_s", 1000.0),
        ("ITL p95", "e.itl_p95_s", 1000.0),
    ]
    for width in (40, 80):
        chart = SeriesChart()
        chart.refresh = lambda *a, **k: None  # type: ignore[method-assign]  # not mounted
        runs = 20
        t = time.perf_counter()
        for _ in range(runs):
            chart.draw(keys, "latency (ms)", series, [("SLO", 1000.0)])
            chart.plt.plotsize(width, 12)
            chart.plt.build()
        per_chart = (time.perf_counter() - t) / runs
        t = time.perf_counter()
        for _ in range(runs):
            for _, name, _ in series:
                spark(keys.trend(name, 16), 16)
        per_spark = (time.perf_counter() - t) / runs
        print(
            f"chart {width}x12, 900 points x 4 series: {per_chart * 1000:.1f} ms per refresh; "
            f"the same series as 4 sparklines: {per_spark * 1000:.2f} ms — "
            f"{per_chart / per_spark:.0f}x"
        )


if __name__ == "__main__":
    main()
