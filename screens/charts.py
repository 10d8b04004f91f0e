"""Charts of the last 15 minutes in the detail screens, drawn by plotext (textual-plotext) from
the console's key-series history: x is minutes before now, limits and SLOs dashed."""

from __future__ import annotations

from textual.containers import Horizontal
from textual_plotext import PlotextPlot

from console.keyseries import KeySeries

MAX_POINTS = 240  # per series: two braille dots per column at 120 columns


class ChartRow(Horizontal):
    """Charts side by side, each as tall as a chart."""

    DEFAULT_CSS = "ChartRow { height: 12; }"


class SeriesChart(PlotextPlot):
    DEFAULT_CSS = "SeriesChart { height: 12; width: 1fr; min-width: 30; }"

    def draw(
        self,
        keys: KeySeries,
        title: str,
        series: list[tuple[str, str, float]],  # (label, key-series name, factor)
        lines: list[tuple[str, float]] | None = None,  # (label, value) in chart units
    ) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(title)
        newest = keys.points[-1][0] if keys.points else 0.0
        # a braille cell holds 2 points across: more than ~2 per column is drawn over itself
        points = list(keys.points)[:: max(1, len(keys.points) // MAX_POINTS)]
        if keys.points and points[-1] is not keys.points[-1]:
            points.append(keys.points[-1])  # the newest figure is always drawn
        drawn = False
        for label, name, factor in series:
            xs, ys = [], []
            for t, values in points:
                v = values.get(name)
                if v is not None:
                    xs.append((t - newest) / 60.0)
                    ys.append(v * factor)
            if xs:
                plt.plot(xs, ys, label=label, marker="braille")
                drawn = True
        for label, value in lines or []:
            plt.hline(value, "red")
            # ends at the newest point: never cut off, clear of the legend at the top left
            plt.text(label, x=0.0, y=value, color="red", alignment="right")
        plt.xlabel("minutes ago")
        if not drawn:
            plt.title(f"{title} — no figures yet")
        self.refresh()
