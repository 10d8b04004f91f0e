"""Line charts in terminal cells, as the detail screens and the dashboard strip draw them: braille
dots (2 across, 4 down a cell) in a box with y ticks at the left, x ticks and their labels below,
the legend in the top border (outside the data) and dashed limit lines with their label at the
right end; each series ends in its own glyph, which its legend entry shows, so lines are told
apart without their colours. Pure: numbers
in, rows of (text, colour) runs out; the screens turn them into styled text.

A chart is built once per draw (a second, or ten on the dashboard), so this is plain Python with no
per-dot objects: a chart of 900 points takes a fraction of a millisecond.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

Run = tuple[str, str | None]  # text and its colour (None: the widget's own)

# the bit of each dot in a braille cell, by dot row (0-3) and dot column (0-1)
DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
GLYPHS = ("●", "■", "▲", "◆", "✚", "★", "▼", "○", "□", "△")  # a series' end mark and legend key


def ticks(lo: float, hi: float, n: int) -> list[str]:
    """``n`` labels from ``hi`` down to ``lo``, with the decimals their spacing needs."""
    if n < 2:
        return [_fmt(hi, 0)]
    step = (hi - lo) / (n - 1)
    decimals = 0 if step <= 0 else max(0, min(3, 1 - math.floor(math.log10(step))))
    return [_fmt(hi - step * k, decimals) for k in range(n)]


def _fmt(v: float, decimals: int) -> str:
    text = f"{v:.{decimals}f}"
    return text.removeprefix("-") if text.strip("-0.") == "" else text  # no "-0.0"


def _x_step(span: float, most: int) -> float:
    """The smallest round step (minutes) giving at most ``most`` intervals over ``span``."""
    for step in (0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 240, 480, 1440):
        if span / step <= most:
            return float(step)
    return span


def _finite(
    s: tuple[str, Sequence[float], Sequence[float], str],
) -> tuple[str, Sequence[float], Sequence[float], str]:
    """A series without its non-finite points (drawn as a gap, never as arithmetic)."""
    label, xs, ys, colour = s
    if all(map(math.isfinite, ys)) and all(map(math.isfinite, xs)):
        return s
    kept = [(x, y) for x, y in zip(xs, ys, strict=False) if math.isfinite(x) and math.isfinite(y)]
    return label, [x for x, _ in kept], [y for _, y in kept], colour


def text_chart(
    width: int,
    height: int,
    title: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float], str]],
    lines: Sequence[tuple[str, float, str]] = (),
    xlim: tuple[float, float] = (-1.0, 0.0),
    ylim: tuple[float, float] = (0.0, 1.0),
    xlabel: str = "",
) -> list[list[Run]]:
    """``height`` rows of at most ``width`` cells. ``series``: (label, xs, ys, colour), drawn as
    lines through their points; ``lines``: (label, y, colour), dashed across the chart. x ticks
    read as ``-x`` (minutes ago when x is minutes before now)."""
    (x0, x1), (y0, y1) = _limits(xlim, ylim)
    series = [_finite(s) for s in series]
    lines = [(label, y, c) for label, y, c in lines if math.isfinite(y)]
    rows = height - 5  # title, top border, bottom border, x tick labels, x label
    n_ticks = max(1, min(rows, 6))
    at = {round(k * (rows - 1) / (n_ticks - 1)) if n_ticks > 1 else 0 for k in range(n_ticks)}
    labels = iter(ticks(y0, y1, n_ticks))
    ylabels = {r: next(labels) for r in sorted(at)}
    lw = max((len(v) for v in ylabels.values()), default=1)
    cols = width - lw - 2
    if rows < 1 or cols < 4:
        only: list[list[Run]] = [[(title[:width], None)]]
        return only[:height]
    canvas = _Canvas(cols, rows, (x0, x1), (y0, y1))
    canvas.draw(series, lines)
    out: list[list[Run]] = [_centred(title, lw + 1, cols)]
    out.append(_merge([(" " * lw + "┌", None), *_legend(series, cols), ("┐", None)]))
    out += canvas.runs(ylabels, lw)
    out += _x_axis(x0, x1, cols, lw, width)
    out.append(_centred(xlabel, lw + 1, cols))
    return out[:height]


def _limits(
    xlim: tuple[float, float], ylim: tuple[float, float]
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The scales to draw on: a non-finite limit (an engine's +Inf that got this far) is none,
    and an empty range is widened to one unit."""
    (x0, x1), (y0, y1) = xlim, ylim
    if not all(map(math.isfinite, (x0, x1))):
        x0, x1 = -1.0, 0.0
    if not all(map(math.isfinite, (y0, y1))):
        y0, y1 = 0.0, 1.0
    if x1 <= x0:
        x1 = x0 + 1.0
    if y1 <= y0:
        y1 = y0 + 1.0
    return (x0, x1), (y0, y1)


class _Canvas:
    """The plot area: braille dots (2x4 a cell) with a colour a cell, and text over them."""

    def __init__(
        self, cols: int, rows: int, xlim: tuple[float, float], ylim: tuple[float, float]
    ) -> None:
        self.cols, self.rows = cols, rows
        self.x0, self.y0, self.y1 = xlim[0], ylim[0], ylim[1]
        self.dots_x, self.dots_y = 2 * cols, 4 * rows
        self.mask = [[0] * cols for _ in range(rows)]
        self.color: list[list[str | None]] = [[None] * cols for _ in range(rows)]
        self.text: list[list[tuple[str, str | None] | None]] = [[None] * cols for _ in range(rows)]
        self.sx = (self.dots_x - 1) / (xlim[1] - xlim[0])
        self.sy = (self.dots_y - 1) / (ylim[1] - ylim[0])

    def dot(self, dx: int, dy: int, c: str) -> None:
        if 0 <= dx < self.dots_x and 0 <= dy < self.dots_y:
            r, col = dy >> 2, dx >> 1
            self.mask[r][col] |= DOTS[dy & 3][dx & 1]
            self.color[r][col] = c

    def ydot(self, y: float) -> int:
        return round((self.y1 - min(max(y, self.y0), self.y1)) * self.sy)

    def put(self, r: int, col: int, s: str, c: str | None) -> None:
        for i, ch in enumerate(s):
            if 0 <= r < self.rows and 0 <= col + i < self.cols:
                self.text[r][col + i] = (ch, c)

    def draw(
        self,
        series: Sequence[tuple[str, Sequence[float], Sequence[float], str]],
        lines: Sequence[tuple[str, float, str]],
    ) -> None:
        """The limits dashed across, the series as lines through their points; then the text
        over the dots: each series' glyph at its end, each limit's label at its right end."""
        for _, y, c in lines:
            if self.y0 <= y <= self.y1:
                dy = self.ydot(y)
                for dx in range(self.dots_x):
                    if dx % 4 < 2:  # dashed
                        self.dot(dx, dy, c)
        ends: list[tuple[int, int]] = []  # each series' last point, as a dot
        for _, xs, ys, c in series:
            prev: tuple[int, int] | None = None
            for x, y in zip(xs, ys, strict=False):
                p = (round((x - self.x0) * self.sx), self.ydot(y))
                if prev is None:
                    self.dot(*p, c)
                else:
                    _segment(prev, p, c, self.dot)
                prev = p
            ends.append(prev if prev is not None else (-1, -1))
        for label, y, c in lines:
            if self.y0 <= y <= self.y1:
                self.put(self.ydot(y) >> 2, self.cols - len(label) - 1, label, c)
        for i, ((dx, dy), (_, _, _, c)) in enumerate(zip(ends, series, strict=True)):
            if dx >= 0:
                self.put(dy >> 2, min(dx >> 1, self.cols - 1), GLYPHS[i % len(GLYPHS)], c)

    def runs(self, ylabels: dict[int, str], lw: int) -> list[list[Run]]:
        """A line a row: its y label or the axis, the cells, the right border."""
        out: list[list[Run]] = []
        for r in range(self.rows):
            cells: list[Run] = [(f"{ylabels[r]:>{lw}}┤" if r in ylabels else " " * lw + "│", None)]
            for col in range(self.cols):
                t = self.text[r][col]
                if t is not None:
                    cells.append(t)
                elif self.mask[r][col]:
                    cells.append((chr(0x2800 + self.mask[r][col]), self.color[r][col]))
                else:
                    cells.append((" ", None))
            cells.append(("│", None))
            out.append(_merge(cells))
        return out


def _x_axis(x0: float, x1: float, cols: int, lw: int, width: int) -> list[list[Run]]:
    """The bottom border with a tick at each step back from now, and the ticks' labels under
    it, right to left: the newest first, a label never over another."""
    step = _x_step(x1 - x0, max(1, cols // 8))
    marks: list[tuple[int, str]] = []
    k = 0
    while x1 - k * step >= x0 - 1e-9:
        x = x1 - k * step
        marks.append((round((x - x0) / (x1 - x0) * (cols - 1)), f"{abs(x):g}"))
        k += 1
    border = ["─"] * cols
    for col, _ in marks:
        border[col] = "┬"
    under = [" "] * (width + 8)
    taken = width + 8
    for col, label in marks:
        start = min(lw + 1 + col - len(label) // 2, width - len(label))
        if start < 0 or start + len(label) >= taken:
            continue
        under[start : start + len(label)] = label
        taken = start - 1
    return [
        [(" " * lw + "└" + "".join(border) + "┘", None)],
        [("".join(under[:width]).rstrip(), None)],
    ]


def _segment(
    a: tuple[int, int], b: tuple[int, int], c: str, put: Callable[[int, int, str], None]
) -> None:
    """The dots of a straight line from ``a`` to ``b`` (Bresenham's walk)."""
    (xa, ya), (xb, yb) = a, b
    dx, dy = abs(xb - xa), -abs(yb - ya)
    sx, sy = (1 if xb >= xa else -1), (1 if yb >= ya else -1)
    err = dx + dy
    while True:
        put(xa, ya, c)
        if xa == xb and ya == yb:
            return
        e2 = 2 * err
        if e2 >= dy:
            err += dy
            xa += sx
        if e2 <= dx:
            err += dx
            ya += sy


def _legend(
    series: Sequence[tuple[str, Sequence[float], Sequence[float], str]], cols: int
) -> list[Run]:
    """The top border with each series' glyph and label in its colour, as many as fit in
    ``cols`` cells (then "+N" for the rest), the border line around them."""
    runs: list[Run] = [("─", None)]
    used = 1
    for i, (label, _, _, c) in enumerate(series):
        entry = f"{GLYPHS[i % len(GLYPHS)]} {label} "
        rest = len(series) - i - 1
        more = f"+{rest} " if rest else ""
        if used + len(entry) + len(more) > cols:
            more = f"+{len(series) - i} "
            if used + len(more) <= cols:
                runs.append((more, None))
                used += len(more)
            break
        runs.append((entry, c))
        used += len(entry)
    runs.append(("─" * (cols - used), None))
    return runs


def _centred(s: str, offset: int, cols: int) -> list[Run]:
    """``s`` centred over the plot, moved left (then cut) when wider."""
    width = offset + cols + 1
    if len(s) > width:
        s = s[: width - 1] + "…"
    pad = min(offset + max(0, (cols - len(s)) // 2), width - len(s))
    return [(" " * pad + s, None)]


def _merge(cells: list[Run]) -> list[Run]:
    out: list[Run] = []
    for t, c in cells:
        if out and out[-1][1] == c:
            out[-1] = (out[-1][0] + t, c)
        else:
            out.append((t, c))
    return out


def fit_chart(
    observed: Sequence[tuple[float, float]],
    base: float,
    per: float,
    at_limit: float | None,
    width: int = 48,
    height: int = 7,
) -> list[str]:
    """The decode-step fit ``y = base + per·x`` drawn as ``·`` over the observed points ``●``,
    from no load to 1.5x the highest seen (the estimator's reach), a ``┆`` where the binding
    bound lies; y in milliseconds on the left, x (running sequences) below."""
    if not observed or width < 12 or height < 3:
        return []
    reach = 1.5 * max(x for x, _ in observed)
    top = max(max(y for _, y in observed), base + per * reach) * 1.05
    if reach <= 0 or top <= 0:
        return []
    grid = [[" "] * width for _ in range(height)]

    def cell(x: float, y: float) -> tuple[int, int] | None:
        col, row = round(x / reach * (width - 1)), height - 1 - round(y / top * (height - 1))
        return (row, col) if 0 <= col < width and 0 <= row < height else None

    if at_limit is not None and 0 <= at_limit <= reach:
        col = round(at_limit / reach * (width - 1))
        for row in grid:
            row[col] = "┆"
    for col in range(width):
        x = col / (width - 1) * reach
        rc = cell(x, base + per * x)
        if rc is not None:
            grid[rc[0]][rc[1]] = "·"
    for x, y in observed:
        rc = cell(x, y)
        if rc is not None:
            grid[rc[0]][rc[1]] = "●"
    label = 6
    out = []
    for i, row in enumerate(grid):
        y = top * (height - 1 - i) / (height - 1)
        tick = f"{y * 1000:.0f}" if i in (0, height - 1) or i == height // 2 else ""
        out.append(f"{tick:>{label}}┤" + "".join(row))
    out.append(" " * label + "└" + "─" * width)
    mid = f"{reach / 2:.0f}"
    ends = f"0{mid:^{width - 2 - len(f'{reach:.0f}')}}{reach:.0f}"
    out.append(" " * (label + 1) + ends[:width])
    return out
