"""What a chart costs per draw: laying out one braille chart of 15 minutes of history (900 points,
4 series, an SLO line; thinned to 2 points a column as SeriesChart.draw does) at 40 and 80
columns, beside the dashboard's sparklines of the same series measured in the same run.

    python bench/chart_cost.py
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.figures.textchart import text_chart  # noqa: E402
from screens.widgets import spark  # noqa: E402

SERIES = [(0.2, 0.05, 30), (0.6, 0.2, 40), (0.05, 0.0, 1), (0.04, 0.01, 10)]


def main() -> None:
    xs = [(i - 899) / 60 for i in range(900)]
    series = [
        (f"s{k}", xs, [1000 * (a + b * math.sin(i / p)) for i in range(900)], "#3b8eea")
        for k, (a, b, p) in enumerate(SERIES)
    ]
    for width in (40, 80):
        step = max(1, len(xs) // (2 * width))
        thinned = [(label, x[::step], y[::step], c) for label, x, y, c in series]
        runs = 50
        t = time.perf_counter()
        for _ in range(runs):
            text_chart(
                width, 12, "latency (ms)", thinned, [("SLO", 1000.0, "red")], (-15, 0), (0, 1100)
            )
        per_chart = (time.perf_counter() - t) / runs
        t = time.perf_counter()
        for _ in range(runs):
            for _, _, ys, _ in series:
                spark(ys, 16)
        per_spark = (time.perf_counter() - t) / runs
        print(
            f"chart {width}x12, 900 points x 4 series: {per_chart * 1000:.2f} ms per draw; "
            f"the same series as 4 sparklines: {per_spark * 1000:.2f} ms — "
            f"{per_chart / per_spark:.1f}x"
        )


if __name__ == "__main__":
    main()
