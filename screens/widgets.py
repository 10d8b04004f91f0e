"""Shared drawing pieces: fixed-scale bars, text sparklines, keyed tables, titled panes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual.color import Color
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable

from console.frame import Frame, Percentiles
from console.keyseries import KeySeries

if TYPE_CHECKING:  # the app imports these widgets
    from screens.app import InferdeckApp
from console.units import FEW, NA, quantile_text

BAR_FULL = "█"
BAR_EMPTY = "░"


def bar(
    frac: float | None, width: int, colors: dict[str, str], warn: float = 0.8, crit: float = 0.95
) -> Text:
    """A fixed-scale bar (0..1 always spans the same width), coloured by level."""
    if frac is None:
        return Text(" " * width)
    frac = min(max(frac, 0.0), 1.0)
    filled = round(frac * width)
    lvl = "error" if frac >= crit else "warning" if frac >= warn else "success"
    return Text.assemble(
        (BAR_FULL * filled, colors[lvl]), (BAR_EMPTY * (width - filled), colors["dim"])
    )


def short_gpu_name(name: str | None) -> str:
    if not name:
        return NA
    name = name.removeprefix("NVIDIA ")
    return name.replace("Blackwell Server Edition", "BSE").replace(" Blackwell", "")


class KeyedTable(DataTable[Any]):
    """A DataTable updated by row key: changed cells only; order changes rebuild once. The cursor
    shows only while the table has focus, so level colours stay visible on every row."""

    def on_mount(self) -> None:
        self.show_cursor = self.has_focus

    def on_focus(self) -> None:
        self.show_cursor = True

    def on_blur(self) -> None:
        self.show_cursor = False

    def sync(self, rows: Sequence[tuple[str, Sequence[object]]]) -> None:
        keys = [k for k, _ in rows]
        current = [str(r.value) for r in self.rows]
        if keys != current:
            selected = None
            if self.row_count and 0 <= self.cursor_row < self.row_count:
                selected = current[self.cursor_row]
            self.clear()
            for key, cells in rows:
                self.add_row(*cells, key=key)
            if selected in keys:
                self.move_cursor(row=keys.index(selected), animate=False)
            return
        columns = list(self.columns)
        for key, cells in rows:
            for col, value in zip(columns, cells, strict=False):
                if self.get_cell(key, col) != value:
                    self.update_cell(key, col, value)


class Pane(Vertical):
    """A titled section."""

    def __init__(self, title: str, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self.border_title = title

    def palette(self) -> dict[str, str]:
        """The theme's colours as Rich styles (DOMNode.colors is Textual's own)."""
        return theme_colors(self.app.theme_variables)


WIDE = 118  # pane width from which tables show their extra columns


class TablePane(Pane):
    """A pane around one KeyedTable whose columns depend on the width: narrow ones always, the
    wide-only ones from WIDE columns on. Redraws its last frame when the set changes."""

    def __init__(self, title: str, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(title, id=id)
        self.wide: bool | None = None
        self.frame: Frame | None = None
        self.history: KeySeries | None = None  # the app's time-based key series, for trends

    def columns(self, wide: bool) -> Sequence[tuple[str, str, int]]:
        raise NotImplementedError

    def on_mount(self) -> None:
        self._columns()

    def on_resize(self) -> None:
        if self._columns() and self.frame is not None:
            self.show(self.frame)

    def show(self, frame: Frame) -> None:
        raise NotImplementedError

    def trend(self, name: str, width: int) -> list[float]:
        return self.history.trend(name, width) if self.history is not None else []

    def _columns(self) -> bool:
        wide = self.size.width >= WIDE
        if wide == self.wide:
            return False
        self.wide = wide
        table = self.query_one(KeyedTable)
        table.clear(columns=True)
        for label, key, width in self.columns(wide):
            table.add_column(label, key=key, width=width)
        return True


def theme_colors(v: dict[str, str]) -> dict[str, str]:
    """Theme variables as opaque colours Rich can draw (some carry alpha, e.g. muted text)."""
    background = Color.parse(v.get("background", "black"))

    def solid(name: str, fallback: str) -> str:
        try:
            return (background + Color.parse(v.get(name, fallback))).hex6
        except Exception:  # noqa: BLE001 - a theme without the variable falls back
            return (background + Color.parse(fallback)).hex6

    return {
        "success": solid("success", "green"),
        "warning": solid("warning", "yellow"),
        "error": solid("error", "red"),
        "dim": solid("foreground-muted", "grey"),
    }


def pct_cell(p: Percentiles | None, name: str, dim: str = "dim") -> Text:
    """A percentile for a table cell with its marks (``quantile_text``), dimmed when fewer than
    FEW requests stand behind it."""
    text = quantile_text(p, name)
    few = p is None or getattr(p, name) is None or p.observations < FEW
    return Text(text, style=dim if few else "")


SPARK = "▁▂▃▄▅▆▇█"


def spark(values: Sequence[float], width: int) -> str:
    """A text sparkline of the last ``width`` values (auto-scaled: trend shape only)."""
    vals = list(values)[-width:]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    span = hi - lo
    if span <= 0:
        return SPARK[0 if hi == 0 else 3] * len(vals)
    return "".join(SPARK[min(7, int((v - lo) / span * 7.999))] for v in vals)


class DeckScreen(Screen[None]):
    """A screen of the console: ``deck`` is the app, typed (its frame, source and modes)."""

    @property
    def deck(self) -> InferdeckApp:
        return cast("InferdeckApp", self.app)
