"""Charts of the last 15 minutes in the detail screens and the dashboard strip, drawn in braille
(console.figures.textchart) from the console's key-series history: x is minutes before now, limits and
SLOs dashed."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import RenderResult
from textual.containers import Horizontal
from textual.widget import Widget

from console.figures.keyseries import KeySeries
from console.figures.textchart import text_chart
from console.frame import Frame
from screens.widgets import theme_colors

MAX_POINTS = 240  # per series: two braille dots per column at 120 columns


class ChartRow(Horizontal):
    """Charts side by side, each as tall as a chart."""

    DEFAULT_CSS = "ChartRow { height: 12; }"


class SeriesChart(Widget):
    """A line chart of key series (console.figures.textchart), built once per draw and size: the
    dashboard repaints every poll, a chart changes only when drawn."""

    DEFAULT_CSS = "SeriesChart { height: 12; width: 1fr; min-width: 30; }"
    # one per line, told apart on dark and light themes; limits take the theme's error colour
    COLORS = ("#3b8eea", "#e8912d", "#23a55a", "#b05fd6", "#1fb5c9", "#c8b400", "#e4578c")

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self._drawn = 0  # draws so far
        self._chart: tuple[str, list[tuple[str, list[float], list[float]]], list[tuple[str, float]]]
        self._chart = ("", [], [])
        self._limits = ((-1.0, 0.0), (0.0, 1.0))
        self._built: tuple[tuple[object, ...], Text] | None = None

    def render(self) -> RenderResult:
        key = (self._drawn, self.size, self.app.theme)
        if self._built is None or self._built[0] != key:
            self._built = (key, self._draw())
        return self._built[1]

    def _draw(self) -> Text:
        colors, red = self.COLORS, theme_colors(self.app.theme_variables)["error"]
        title, series, lines = self._chart
        xlim, ylim = self._limits
        rows = text_chart(
            self.size.width,
            self.size.height,
            title,
            [(label, xs, ys, colors[i % len(colors)]) for i, (label, xs, ys) in enumerate(series)],
            [(label, value, red) for label, value in lines],
            xlim,
            ylim,
            "minutes ago",
        )
        out = Text(no_wrap=True, overflow="crop", end="")
        for i, row in enumerate(rows):
            if i:
                out.append("\n")
            for text, color in row:
                out.append(text, color)
        return out

    def draw(
        self,
        keys: KeySeries,
        title: str,
        series: list[tuple[str, str, float]],  # (label, key-series name, factor)
        lines: list[tuple[str, float]] | None = None,  # (label, value) in chart units
    ) -> None:
        newest = keys.points[-1][0] if keys.points else 0.0
        # a braille cell holds 2 points across: more than ~2 per column is drawn over itself
        most = min(MAX_POINTS, 2 * self.size.width) if self.size.width else MAX_POINTS
        points = list(keys.points)[:: max(1, len(keys.points) // most)]
        if keys.points and points[-1] is not keys.points[-1]:
            points.append(keys.points[-1])  # the newest figure is always drawn
        drawn: list[tuple[str, list[float], list[float]]] = []
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
                drawn.append((label, xs, ys))
                top = max(top, *ys)
        # at least a minute, the newest figure at the right edge; every charted figure is a count,
        # a share, a time, watts or °C: from zero, so an idle line lies at the foot
        self._limits = ((min(-1.0, oldest), 0.0), (0.0, top * 1.05 if top > 0 else 1.0))
        self._chart = (title if drawn else f"{title} — no figures yet", drawn, list(lines or []))
        self._drawn += 1
        self.refresh()


class ChartStrip(Horizontal):
    """The dashboard's chart strip: the space the panes leave, when it is tall enough and the node
    runs few engines, shows their TTFT p95, waiting requests and KV use over the last 15 minutes
    (one line per engine). Redrawn every STEP_S seconds, at most 14 rows tall."""

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
        self._drawn_t: float | None = None  # the frame time of the last drawing
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
        back = self._drawn_t is not None and frame.taken_at.timestamp() < self._drawn_t
        if back or time.monotonic() - self._drawn_at >= self.STEP_S:
            self.redraw()  # a replay sought back: its charts must not keep the later minutes

    def redraw(self) -> None:
        frame, keys = self._frame, self.keys
        if frame is None or keys is None or not self.children:
            return
        self._drawn_at = time.monotonic()
        self._drawn_t = frame.taken_at.timestamp()
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
