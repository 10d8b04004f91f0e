"""Shared drawing pieces: fixed-scale bars, text sparklines, keyed tables, titled panes."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

from rich.color import Color as RichColor
from rich.segment import Segment, Segments
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.color import Color
from textual.containers import Vertical, VerticalScroll
from textual.events import Click
from textual.markup import escape
from textual.screen import Screen
from textual.scrollbar import ScrollBarRender
from textual.widgets import DataTable, Static

from console.figures.keyseries import KeySeries
from console.frame import Frame
from console.units import NA
from screens.deck import Deck
from screens.tableshim import CachedDataTable

BAR_FULL = "█"
BAR_EMPTY = "░"


def bar(
    frac: float | None, width: int, colors: dict[str, str], warn: float = 0.8, crit: float = 0.95
) -> Text:
    """A fixed-scale bar (0..1 always spans the same width), coloured by level. Shared between
    calls (a table draws thousands a second): put it in a cell through Text.assemble, which
    copies, never change it."""
    if frac is None:
        return Text(" " * width)
    return _bar(*_fill(frac, width, colors, warn, crit))


def _fill(
    frac: float, width: int, colors: dict[str, str], warn: float, crit: float
) -> tuple[int, int, str, str]:
    """A bar's cells filled, its width and colours, by level."""
    frac = min(max(frac, 0.0), 1.0)
    lvl = "error" if frac >= crit else "warning" if frac >= warn else "success"
    return round(frac * width), width, colors[lvl], colors["dim"]


@functools.lru_cache(maxsize=512)
def _bar(filled: int, width: int, fill: str, empty: str) -> Text:
    return Text.assemble((BAR_FULL * filled, fill), (BAR_EMPTY * (width - filled), empty))


@functools.lru_cache(maxsize=8192)
def cell(plain: str, style: str = "") -> Text:
    """A one-line table cell, one shared Text per text and style: a large node's tables set a
    thousand cells a poll, most of them as they were (an idle slice's "0", every "n/a"), and a
    shared cell is made once and found unchanged by identity. Never change it (``_fit`` and
    Text.assemble copy)."""
    return Text(plain, style=style)


def bar_cell(
    frac: float | None,
    width: int,
    colors: dict[str, str],
    warn: float,
    crit: float,
    label: str,
    label_style: str = "",
) -> Text:
    """``bar`` followed by ``label``, shared as ``cell`` is (never change it)."""
    if frac is None:
        return _bar_cell(None, width, "", "", label, label_style)
    return _bar_cell(*_fill(frac, width, colors, warn, crit), label, label_style)


@functools.lru_cache(maxsize=4096)
def _bar_cell(
    filled: int | None, width: int, fill: str, empty: str, label: str, label_style: str
) -> Text:
    head = Text(" " * width) if filled is None else _bar(filled, width, fill, empty)
    return Text.assemble(head, (label, label_style))


def sort_value(text: str) -> tuple[int, float, str]:
    """A cell's text as a sort key: its first number in base units (ms, µs and s as seconds, K/M
    as thousands/millions), else its words; an empty or unread cell sorts last either way."""
    if not text.strip() or text.strip() in (NA, "-", "?"):
        return (2, 0.0, "")
    m = NUMBER.search(text)
    if m is None:
        return (1, 0.0, text.lower())
    value = float(m.group(1).replace(",", ""))
    return (0, value * SCALE.get(m.group(2), 1.0), "")


NUMBER = re.compile(r"([-+]?\d[\d,]*(?:\.\d+)?)\s*(ms|µs|us|s|K|M)?")
SCALE = {"ms": 1e-3, "µs": 1e-6, "us": 1e-6, "K": 1e3, "M": 1e6}


class KeyedTable(CachedDataTable):
    """A DataTable updated by row key: changed cells only; order changes rebuild once. The cursor
    shows only while the table has focus, so level colours stay visible on every row.

    The operator may filter its rows (``filter_text``: rows with that text in any cell, case
    ignored) and sort them by a column (biggest figure first, words A–Z; ``sort_reverse`` flips
    it). ``parent_of`` keeps child rows (MIG slices) under their parent: a group sorts by its
    parent's cell, and a match in one row keeps its whole group."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filter_text = ""
        self.sort_column: str | None = None
        self.sort_reverse = False
        self.filtered_out = 0
        self.parent_of: Callable[[str], str | None] = lambda key: None
        self._last: list[tuple[str, Sequence[object]]] = []

    def on_mount(self) -> None:
        self.show_cursor = self.has_focus

    def on_focus(self) -> None:
        self.show_cursor = True

    def on_blur(self) -> None:
        self.show_cursor = False

    def sort_label(self) -> str | None:
        if self.sort_column is None:
            return None
        for key, column in self.columns.items():
            if key.value == self.sort_column:
                return f"{column.label.plain} {'↑' if self.sort_reverse else '↓'}"
        return None

    def sort_by(self, column: str | None, reverse: bool = False) -> None:
        self.sort_column, self.sort_reverse = column, reverse
        self.resync()

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self.resync()

    def resync(self) -> None:
        """Show the last rows again (after the filter or the sort changed)."""
        self.sync(self._last)

    def cycle_sort(self, step: int = 1) -> None:
        """The next column (``step`` -1: the previous one), the natural order between the last
        column and the first; each column biggest first."""
        order: list[str | None] = [None, *(str(k.value) for k in self.columns)]
        at = order.index(self.sort_column) if self.sort_column in order else 0
        self.sort_by(order[(at + step) % len(order)])

    def reverse_sort(self) -> None:
        """The same column the other way round (smallest first); the first column when none."""
        if self.sort_column is None:
            self.cycle_sort()
        self.sort_by(self.sort_column, not self.sort_reverse)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a header sorts by it; a second click reverses."""
        column = str(event.column_key.value)
        self.sort_by(column, not self.sort_reverse if column == self.sort_column else False)

    def _arrange(
        self, rows: Sequence[tuple[str, Sequence[object]]]
    ) -> list[tuple[str, Sequence[object]]]:
        groups: list[list[tuple[str, Sequence[object]]]] = []
        for row in rows:
            if groups and self.parent_of(row[0]) == groups[-1][0][0]:
                groups[-1].append(row)
            else:
                groups.append([row])
        if self.filter_text:
            needle = self.filter_text.lower()
            groups = [
                g
                for g in groups
                if any(needle in " ".join(_plain(c) for c in cells).lower() for _, cells in g)
            ]
        keys = [str(k.value) for k in self.columns]
        if self.sort_column in keys:
            i = keys.index(self.sort_column)

            def key(g: list[tuple[str, Sequence[object]]]) -> tuple[int, float, str]:
                kind, value, words = sort_value(_plain(g[0][1][i]) if i < len(g[0][1]) else "")
                return (kind, -value, words)  # figures biggest first, words A-Z, unread last

            groups.sort(key=key)
            if self.sort_reverse:  # unread cells stay last
                groups = [
                    g for kind in (0, 1) for g in reversed([g for g in groups if key(g)[0] == kind])
                ] + [g for g in groups if key(g)[0] == 2]
        return [row for g in groups for row in g]

    def sync(self, rows: Sequence[tuple[str, Sequence[object]]]) -> None:
        widths = [c.width for c in self.columns.values()]
        rows = [
            (key, [_fit(v, w) for v, w in zip(cells, widths, strict=False)]) for key, cells in rows
        ]
        self._last = list(rows)
        shown = self._arrange(rows)
        self.filtered_out = len(rows) - len(shown)
        rows = shown
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
        self.set_cells(rows)

    def hidden_rows(self) -> tuple[int, int]:
        """Rows the table's height cuts off (it scrolls): (above the view, below it)."""
        if not self.display:
            return 0, 0
        visible = self.scrollable_content_region.height - (1 if self.show_header else 0)
        cut = max(0, self.row_count - max(0, visible))
        above = min(cut, round(self.scroll_y))  # one line a row
        return above, cut - above


def _plain(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


class Quiet(Static):
    """A Static that does nothing when given what it already shows: Static.update re-lays out the
    whole screen, and the console updates its lines every poll."""

    _shown: object = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)  # what it shows comes from engines and the operator
        super().__init__(*args, **kwargs)

    def update(self, content: Any = "", *, layout: bool = True) -> None:
        if content == self._shown:
            return
        self._shown = content
        super().update(content, layout=layout)


class Pane(Vertical):
    """A titled section."""

    def __init__(self, title: str, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self.title_text = title
        self.marks: list[str] = []
        self.border_title = escape(title)

    def set_title(self, title: str) -> None:
        self.title_text = title
        self._draw_title()

    def set_marks(self, marks: list[str]) -> None:
        """What the operator should know about the rows: sorted by, filtered out, cut off."""
        if marks != self.marks:
            self.marks = marks
            self._draw_title()

    def _draw_title(self) -> None:
        marks = f" ({', '.join(self.marks)})" if self.marks else ""
        # plain text (an operator's filter may hold "[/b]"): Textual reads titles as markup
        title = escape(self.title_text + marks)
        if self.border_title != title:  # setting it repaints the pane
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
        """The frame's rows, under columns set for the pane's width first: a frame shown before
        the pane was laid out (or as its width crosses WIDE) never meets the other set."""
        self._columns()
        self.fill(frame)

    def fill(self, frame: Frame) -> None:
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


def _fit(value: object, width: int) -> object:
    """A text cell longer than its column ends with '…' (the table would cut it silently)."""
    if not isinstance(value, Text) or width <= 0:
        return value
    plain = value.plain
    if plain.isascii() and plain.isprintable():  # one cell a character: no width to measure
        if len(plain) <= width:
            return value
    elif "\n" in plain or value.cell_len <= width:
        return value
    value = value.copy()
    value.truncate(width, overflow="ellipsis")
    return value


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


class Flashing:
    """An app whose messages (``notify``: a snapshot saved, the refresh rate changed, a MIG
    apply's outcome) show on the key bar's line for their timeout, never as toasts over the
    data; each is kept in ``said``, oldest first."""

    flash: tuple[str, str, float] | None = None  # the message, its severity, until (monotonic)
    said: list[tuple[str, str]]  # every message said (severity, text), for a test or a log

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: str = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        import time

        said = " ".join((f"{title}: {message}" if title else str(message)).split())
        shown = 5.0 if timeout is None else timeout
        self.flash = (said, severity, time.monotonic() + shown)
        if not hasattr(self, "said"):
            self.said = []
        self.said.append((severity, said))
        app = cast(Any, self)
        app.call_later(app.refresh_key_bars)
        app.set_timer(shown + 0.05, app.refresh_key_bars)

    def refresh_key_bars(self) -> None:
        """Redraws the key bars for a message said or over; nothing once the app has no screen
        left (the timer of a message said just before it exited fires as it tears down)."""
        app = cast(Any, self)
        if not app.screen_stack:
            return
        for bar in app.screen.query(KeyBar):
            bar.refresh()


class KeyBar(Static):
    """The keys of the view on one line, in place of Textual's footer: those the view shows first,
    then the rest, as many as the width holds; when some do not fit the line ends with
    '? all keys' (a key is never left out without a sign). While the app has a message to say
    (``Flashing``), the line says it instead, for its timeout."""

    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        width: 100%;
        height: 1;
        background: $footer-background;
        color: $footer-foreground;
        scrollbar-size: 0 0;
        overflow: hidden;
    }
    """
    MORE = "? all keys"
    SKIP = ("Focus Next", "Focus Previous")  # tab and shift+tab: every view has them
    # the bar's word for a binding (the help keeps the whole description)
    SHORT = {
        "Budget/SLO/Cost": "Pane",
        "Snapshot": "Snap",
        "Alerts in full": "Alerts",
        "Filter rows": "Filter",
        "Sort by next column": "Sort",
        "Sort by previous column": "Sort back",
        "Reverse the sort": "Reverse",
        "Copy for the ticket": "Copy",
        "Copy the commands": "Copy",
        "Clear filter": "Clear",
        "Findings": "Find",
        "palette": "Palette",
    }

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, lambda _screen: self.refresh())

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def entries(self) -> list[tuple[str, str]]:
        view_keys = getattr(self.app, "view_keys", None)
        if view_keys is None:
            return []
        keys = [(k, what, shown) for k, what, shown in view_keys() if what not in self.SKIP]
        # the keys the view asks to show first, then the rest: each by its first key only
        late = ("Sort by previous column", "Reverse the sort")  # o says sorting is there
        ordered = (
            [e for e in keys if e[2]]
            + [e for e in keys if not e[2] and e[1] not in late]
            + [e for e in keys if e[1] in late]
        )
        return [  # one key each (the help has them all), Back's esc/q apart
            (
                k.split("/")[-1]
                if what == "Quit"
                else k
                if what == "Back" or k == "/"
                else k.split("/")[0],
                self.SHORT.get(what, what),
            )
            for k, what, _ in ordered
        ]

    def line(self, width: int) -> tuple[Text, int]:
        """The bar at ``width`` and how many keys it leaves out. When some are left out, '? all
        keys' ends the line and Help is not listed besides (one '?')."""
        entries = self.entries()
        whole = sum(Text.assemble(f" {k}", f" {w} ").cell_len for k, w in entries)
        helped = whole > width and any(w == "Help" for _, w in entries)
        if helped:  # '? all keys' ends the line in its place, whatever else fits
            entries = [e for e in entries if e[1] != "Help"]
        out = Text(no_wrap=True)
        self._key_cells: list[tuple[int, int, str]] = []  # cells of each key's entry, its words
        drawn = 0
        for key, what in entries:
            piece = Text.assemble((f" {key}", "bold"), f" {what} ")
            more = drawn + 1 < len(entries) or helped  # '? all keys' may have to follow it
            if out.cell_len + piece.cell_len + (len(self.MORE) + 2 if more else 0) > width:
                break
            self._key_cells.append((out.cell_len, out.cell_len + piece.cell_len, what))
            out.append_text(piece)
            drawn += 1
        left = len(entries) - drawn + helped
        if left:
            start = out.cell_len
            out.append("  " + self.MORE, style="bold")
            self._key_cells.append((start, out.cell_len, "Help"))
        return out, left

    def render(self) -> Text:
        import time

        flash = getattr(self.app, "flash", None)
        if flash is not None and time.monotonic() < flash[2]:
            said, severity, _ = flash
            c = theme_colors(self.app.theme_variables)
            style = {"error": c["error"], "warning": c["warning"]}.get(severity, c["success"])
            return Text(f" {said}", style=f"bold {style}", no_wrap=True, overflow="ellipsis")
        return self.line(self.size.width)[0]

    async def on_click(self, event: Click) -> None:
        """A click on a key does what the key does (as Textual's footer did)."""
        what = next((w for a, b, w in getattr(self, "_key_cells", []) if a <= event.x < b), None)
        if what is None:
            return
        words = {v: k for k, v in self.SHORT.items()}
        for active in self.screen.active_bindings.values():
            if active.binding.description in (what, words.get(what)):
                await self.app.run_action(active.binding.action, active.node)
                return


class DeckScreen(Screen[None]):
    """A screen of the console: ``deck`` is the app as its screens read it (screens.deck.Deck)."""

    def on_screen_resume(self) -> None:
        self.deck.draw_status()  # the header at once, not at the next frame

    @property
    def deck(self) -> Deck:
        return cast("Deck", self.app)


class ReadingScreen(DeckScreen):
    """A view of one scrolling body drawn from each frame (findings, alerts, timeline): the
    header, the body (``BODY`` its id; ``show`` fills it), the key bar. PageDown, End and the
    arrows scroll it at once."""

    AUTO_FOCUS = "#detail"
    BODY = "body"

    def compose(self) -> ComposeResult:
        yield Quiet(id="status")  # the header, as on the dashboard
        with VerticalScroll(id="detail"):
            yield Quiet(id=self.BODY)
        yield KeyBar()

    def on_mount(self) -> None:
        if self.deck.frame is not None:
            self.show(self.deck.frame)

    def show(self, frame: Frame) -> None:
        raise NotImplementedError


_TRACK, _THUMB = RichColor.parse("#555555"), RichColor.parse("bright_magenta")  # Textual's


class CellScrollBar(ScrollBarRender):
    """Scrollbars in whole cells, read as scrollbars in any terminal and any capture: a thin
    track with the thumb drawn over it (Textual's eighth-cell thumb ends read as debris, '▂▂',
    where colours are lost). Installed with Textual's documented ``ScrollBar.renderer``."""

    VERTICAL_BARS: ClassVar[list[str]] = [" "] * 8  # no partial cells at the thumb's ends
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * 8

    @classmethod
    def render_bar(
        cls,
        size: int = 25,
        virtual_size: float = 50,
        window_size: float = 20,
        position: float = 0,
        thickness: int = 1,
        vertical: bool = True,
        back_color: RichColor = _TRACK,
        bar_color: RichColor = _THUMB,
    ) -> Segments:
        drawn = super().render_bar(
            size, virtual_size, window_size, position, thickness, vertical, back_color, bar_color
        )
        track, thumb = ("│", "┃") if vertical else ("─", "━")
        bar = bar_color
        out = []
        for seg in drawn.segments:
            if seg.text.strip() or not seg.text or seg.text == "\n" or seg.style is None:
                out.append(seg)
                continue
            on_thumb = bool(seg.style.reverse)
            glyph = (thumb if on_thumb else track) * len(seg.text)
            style = seg.style + Style(reverse=False, color=bar, dim=not on_thumb)
            out.append(Segment(glyph, style))
        return Segments(out, new_lines=drawn.new_lines)
