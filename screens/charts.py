"""Charts of the last 15 minutes in the detail screens, drawn by plotext (textual-plotext) from
the console's key-series history: x is minutes before now, limits and SLOs dashed."""

from __future__ import annotations

import time

from textual.app import RenderResult
from textual.containers import Horizontal
from textual_plotext import PlotextPlot

from console.frame import Frame
from console.keyseries import KeySeries

MAX_POINTS = 240  # per series: two braille dots per column at 120 columns


class ChartRow(Horizontal):
    """Charts side by side, each as tall as a chart."""

    DEFAULT_CSS = "ChartRow { height: 12; }"


class SeriesChart(PlotextPlot):
    """A plotext chart built once per draw (and per size or theme): plotext's widget rebuilds the
    whole figure each time Textual repaints it, which the dashboard does every poll."""

    DEFAULT_CSS = "SeriesChart { height: 12; width: 1fr; min-width: 30; }"

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self._drawn = 0  # draws so far
        self._built: tuple[tuple[object, ...], RenderResult] | None = None

    def render(self) -> RenderResult:
        key = (self._drawn, self.size, self.app.theme, self.theme)
        if self._built is None or self._built[0] != key:
            self._built = (key, super().render())
        return self._built[1]

    def draw(
        self,
        keys: KeySeries,
        title: str,
        series: list[tuple[str, str, float]],  # (label, key-series name, factor)
        lines: list[tuple[str, float]] | None = None,  # (label, value) in chart units
    ) -> None:
        self._drawn += 1
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(title)
        newest = keys.points[-1][0] if keys.points else 0.0
        # a braille cell holds 2 points across: more than ~2 per column is drawn over itself
        most = min(MAX_POINTS, 2 * self.size.width) if self.size.width else MAX_POINTS
        points = list(keys.points)[:: max(1, len(keys.points) // most)]
        if keys.points and points[-1] is not keys.points[-1]:
            points.append(keys.points[-1])  # the newest figure is always drawn
        drawn = False
        top = max([v for _, v in lines or []], default=0.0)
        oldest = (points[0][0] - newest) / 60.0 if points else 0.0
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
                top = max(top, *ys)
        for label, value in lines or []:
            plt.hline(value, "red")
            # ends at the newest point: never cut off, clear of the legend at the top left
            plt.text(label, x=0.0, y=value, color="red", alignment="right")
        plt.xlim(min(-1.0, oldest), 0.0)  # at least a minute, the newest figure at the right edge
        # every charted figure is a count, a share, a time, watts or °C: from zero, so an idle
        # line lies at the foot
        plt.ylim(0, top * 1.05 if top > 0 else 1.0)
        plt.xlabel("minutes ago")
        if not drawn:
            plt.title(f"{title} — no figures yet")
        self.refresh()


class ChartStrip(Horizontal):
    """The dashboard's chart strip: the space the panes leave, when it is tall enough and the node
    runs few engines, shows their TTFT p95, waiting requests and KV use over the last 15 minutes
    (one line per engine). Redrawn every STEP_S seconds and at most 14 rows tall: building a chart
    costs ~100 sparklines, and grows with its area."""

    DEFAULT_CSS = """
    ChartStrip { height: 1fr; }
    ChartStrip SeriesChart { height: 1fr; max-height: 14; min-width: 26; }
    """
    MIN_HEIGHT = 10  # below this a chart has no room for its axes
    MAX_ENGINES = 4  # more lines than this in one chart cannot be told apart
    STEP_S = 10.0

    def __init__(self) -> None:
        super().__init__(id="strip")
        self.keys: KeySeries | None = None
        self._drawn_at = 0.0
        self._frame: Frame | None = None
        self.shown: set[str] = set()  # the engine table's row keys

    def names(self, frame: Frame) -> list[str]:
        """The engines charted: those up and shown in the engine table (its filter applies)."""
        return [e.name for e in frame.engines if e.up and f"eng:{e.url}" in self.shown]

    def room(self, frame: Frame) -> bool:
        return (
            self.size.height >= self.MIN_HEIGHT and 0 < len(self.names(frame)) <= self.MAX_ENGINES
        )

    def on_resize(self) -> None:
        if self._frame is not None:
            self._drawn_at = 0.0
            self.show(self._frame)

    def show(self, frame: Frame, shown: set[str] | None = None) -> None:
        if shown is not None and shown != self.shown:
            self.shown, self._drawn_at = shown, 0.0
        self._frame = frame
        if self.keys is None or not self.room(frame):
            if self.children:
                self.remove_children()
            return
        if not self.children:
            self.mount_all([SeriesChart(id=f"strip-{n}") for n in ("ttft", "wait", "kv")])
            self.call_after_refresh(self.redraw)
            return
        if time.monotonic() - self._drawn_at >= self.STEP_S:
            self.redraw()

    def redraw(self) -> None:
        frame, keys = self._frame, self.keys
        if frame is None or keys is None or not self.children:
            return
        self._drawn_at = time.monotonic()
        names = self.names(frame)
        slos = sorted(
            {
                s.slo.targets["ttft_s"].target_s * 1000
                for s in frame.services
                if s.engine in names and s.slo is not None and "ttft_s" in s.slo.targets
            }
        )
        self.query_one("#strip-ttft", SeriesChart).draw(
            keys,
            "TTFT p95 (ms)",
            [(n, f"{n}.ttft_p95_s", 1000.0) for n in names],
            [("SLO", v) for v in slos],
        )
        self.query_one("#strip-wait", SeriesChart).draw(
            keys, "waiting requests", [(n, f"{n}.requests_waiting", 1.0) for n in names]
        )
        self.query_one("#strip-kv", SeriesChart).draw(
            keys, "KV cache use (%)", [(n, f"{n}.kv_cache_usage", 100.0) for n in names]
        )
