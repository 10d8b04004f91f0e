"""The one place that reaches into Textual's DataTable below its public API, and why.

DataTable keys its rendered-cell and rendered-row caches on one table-wide update count, so a
single changed cell re-renders every visible cell and row; and ``update_cell`` repaints the whole
table for each cell it sets. A dashboard that changes a few cells a second would redraw every
line of every table each poll. ``CachedDataTable`` keeps DataTable's look and behaviour and adds
three things:

- a row's line is kept until a cell of that row changes, a cell until it changes (its version),
  or until rows or columns are rebuilt (the generation);
- a one-line Text cell that fits its column is turned into segments directly (Rich's Padding
  and Styled split and crop every cell: most of a table's drawing time);
- ``set_cells`` sets a row's changed cells in place and repaints that row only, and empties the
  caches DataTable keyed on the count it moved.

Private names used, all of DataTable (Textual 8.x): ``_render_line_in_row``, ``_render_cell``,
``_get_row_renderables``, ``_get_styles_to_render_cell``, ``_row_locations``,
``_column_locations``, ``_header_row_key``, ``_data``, ``_update_count``,
``_show_hover_cursor``, ``_pseudo_class_state`` and the caches DataTable keys on its update count
(``_line_cache``, ``_row_render_cache``, ``_cell_render_cache``, ``_row_renderable_cache``: a
table whose cells change every poll moves the count every poll, and each of those LRU caches
would otherwise fill with up to 1,000-10,000 stale drawings). ``probe`` checks each of them
and the two render methods' parameters on the installed Textual; when one is missing or its
signature changed, the table falls back to DataTable's public behaviour (slower, same screen),
so a new Textual release cannot break the console, only slow its tables. tests/test_tableshim.py
draws every table both ways and compares the segments; tests/test_boundaries.py fails on a
private Textual name used anywhere else under screens/.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

ATTRIBUTES = (
    "_row_locations",
    "_column_locations",
    "_header_row_key",
    "_data",
    "_update_count",
    "_show_hover_cursor",
    "_pseudo_class_state",
    "_line_cache",
    "_row_render_cache",
    "_cell_render_cache",
    "_row_renderable_cache",
)
# DataTable's caches keyed on its update count: every entry is stale once the count moves
COUNTED_CACHES = ("_line_cache", "_row_render_cache", "_cell_render_cache", "_row_renderable_cache")
METHODS = {
    "_render_line_in_row": (
        "row_key",
        "line_no",
        "base_style",
        "cursor_location",
        "hover_location",
    ),
    "_render_cell": ("row_index", "column_index", "base_style", "width", "cursor", "hover"),
    "_get_row_renderables": ("row_index",),
    "_get_styles_to_render_cell": (
        "is_header_cell",
        "is_row_label_cell",
        "is_fixed_style_cell",
        "hover",
        "cursor",
        "show_cursor",
        "show_hover_cursor",
        "has_css_foreground_priority",
        "has_css_background_priority",
    ),
}


def probe(table: DataTable[Any]) -> list[str]:
    """What of the private names this shim uses the installed DataTable lacks (empty: all there)."""
    missing = [name for name in ATTRIBUTES if not hasattr(table, name)]
    for name, params in METHODS.items():
        method = getattr(DataTable, name, None)
        try:
            got = tuple(inspect.signature(method).parameters)[1:] if method else ()
        except (TypeError, ValueError):
            got = ()
        if got != params:
            missing.append(f"{name}{params}")
    return missing


def same_cell(old: object, new: object) -> bool:
    """Whether a cell shows the same: the same object (a shared cell), or equal with the same
    style (Rich's Text equality leaves out the text's own style, so a figure turning red or dim
    with the same digits compared equal and was never redrawn)."""
    if old is new:
        return True
    if isinstance(old, Text) and isinstance(new, Text):
        return old.style == new.style and old == new
    return old == new


class CachedDataTable(DataTable[Any]):
    """A DataTable that redraws only what changed (see the module's text); ``fast`` is False
    where the installed Textual lacks what the caches need."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fast = not probe(self)
        self._generation = 0
        self._versions: dict[tuple[object, object], int] = {}
        self._cells: dict[tuple[object, ...], tuple[tuple[object, ...], Any]] = {}

    def drop_caches(self) -> None:
        """Forget every kept line and cell (the next draw renders all of them)."""
        self._generation += 1
        self._versions.clear()
        self._cells.clear()
        lines = getattr(self, "_line_cache", None)  # DataTable's own, on the update count
        if lines is not None:
            lines.clear()
        self.refresh()

    def clear(self, columns: bool = False) -> CachedDataTable:
        self._generation += 1
        self._versions.clear()
        self._cells.clear()
        super().clear(columns)
        return self

    def add_column(self, *args: Any, **kwargs: Any) -> Any:
        self._generation += 1
        return super().add_column(*args, **kwargs)

    def add_row(self, *args: Any, **kwargs: Any) -> Any:
        self._generation += 1
        return super().add_row(*args, **kwargs)

    def update_cell(self, row_key: Any, column_key: Any, value: Any, **kwargs: Any) -> None:
        super().update_cell(row_key, column_key, value, **kwargs)
        self._changed(getattr(row_key, "value", row_key), getattr(column_key, "value", column_key))

    def _changed(self, row: object, column: object) -> None:
        self._versions[row, column] = self._versions.get((row, column), 0) + 1
        self._versions[row, None] = self._versions.get((row, None), 0) + 1  # its row

    def set_cells(self, rows: Sequence[tuple[str, Sequence[object]]]) -> None:
        """Rows already shown, in the same order: their changed cells set in place, only their
        rows repainted."""
        columns = list(self.columns)
        if not self.fast:
            for key, cells in rows:
                for col, value in zip(columns, cells, strict=False):
                    if not same_cell(self.get_cell(key, col), value):
                        self.update_cell(key, col, value)
            return
        changed = False
        for key, cells in rows:
            row_key = RowKey(key)
            data = self._data[row_key]
            row_changed = False
            for col, value in zip(columns, cells, strict=False):
                if not same_cell(data.get(col), value):
                    data[col] = value
                    self._changed(key, col.value)
                    row_changed = True
            if row_changed:
                changed = True
                self.refresh_row(self.get_row_index(row_key))
        if changed:
            self._update_count += 1  # DataTable's row renderables are cached on it
            for name in COUNTED_CACHES:  # what they hold was drawn at an older count
                getattr(self, name).clear()

    def _cached(
        self, slot: tuple[object, ...], key: tuple[object, ...], make: Callable[[], Any]
    ) -> Any:
        """The drawing of ``slot`` (a row's line, a cell) as of ``key`` (its version and looks):
        one kept per slot, so a changed cell replaces its old drawing instead of piling up
        beside it (stale drawings were kept until 4,096 had gathered: tens of thousands of
        objects the garbage collector walked at every full collection)."""
        kept = self._cells.get(slot)
        if kept is not None and kept[0] == key:
            return kept[1]
        if kept is None and len(self._cells) > 4096:  # rows come and go: their slots stay
            self._cells.clear()
        lines = make()
        self._cells[slot] = (key, lines)
        return lines

    def _render_line_in_row(
        self,
        row_key: Any,
        line_no: int,
        base_style: Any,
        cursor_location: Any,
        hover_location: Any,
    ) -> Any:
        draw = super()._render_line_in_row
        if not self.fast:
            return draw(row_key, line_no, base_style, cursor_location, hover_location)
        row = getattr(row_key, "value", None)
        key = (
            self._versions.get((row, None), 0),
            self._generation,
            base_style,
            cursor_location,
            hover_location,
            self.cursor_type,
            self.show_cursor,
            self._show_hover_cursor,
            self._pseudo_class_state,
        )
        return self._cached(
            ("row", row, line_no),
            key,
            lambda: draw(row_key, line_no, base_style, cursor_location, hover_location),
        )

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Any,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> Any:
        draw = super()._render_cell
        if not self.fast:
            return draw(row_index, column_index, base_style, width, cursor, hover)
        row = self._header_row_key if row_index == -1 else self._row_locations.get_key(row_index)
        column = self._column_locations.get_key(column_index)
        cell = (getattr(row, "value", None), getattr(column, "value", None))
        key = (
            self._versions.get(cell, 0),
            self._generation,
            row_index,
            column_index,
            base_style,
            width,
            self._show_hover_cursor,
            self._pseudo_class_state,
        )
        return self._cached(
            (cell, cursor, hover),  # the cursor's row keeps its look and its plain one
            key,
            lambda: (
                self._one_line_cell(row_index, column_index, base_style, width, cursor, hover)
                or draw(row_index, column_index, base_style, width, cursor, hover)
            ),
        )

    def _one_line_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool,
        hover: bool,
    ) -> list[list[Segment]] | None:
        """A one-line Text cell that fits its column, as the segments DataTable makes of it, or
        None for anything else, which DataTable renders."""
        if row_index < 0 or column_index < 0:
            return None
        row_key = self._row_locations.get_key(row_index)
        row = self.rows.get(row_key) if row_key is not None else None
        if row is None or row.height != 1:
            return None
        cells = self._get_row_renderables(row_index).cells
        cell = cells[column_index] if column_index < len(cells) else None
        pad = self.cell_padding
        if (
            not isinstance(cell, Text)
            or cell.justify not in (None, "default")
            or "\n" in cell.plain
            or "\t" in cell.plain
            or cell.cell_len > width - 2 * pad
        ):
            return None
        component, post = self._get_styles_to_render_cell(
            False,
            False,
            row_index < self.fixed_rows or column_index < self.fixed_columns,
            hover,
            cursor,
            self.show_cursor,
            self._show_hover_cursor,
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        pre = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component
        blank = Style()
        line = [Segment(" " * pad, blank)] if pad else []
        console = self.app.console
        if cell.spans:
            line += cell.render(console, end="")
        elif cell.plain:  # Text.render leaves out the text's own style when it has no spans
            line.append(Segment(cell.plain, console.get_style(cell.style, default=Style.null())))
        fill = width - pad - cell.cell_len
        if fill > 0:
            line.append(Segment(" " * fill, blank))
        return [list(Segment.apply_style(line, pre, post))]
