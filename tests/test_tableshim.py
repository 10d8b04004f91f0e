"""The DataTable shim (screens/tableshim.py): its caches and direct cells draw what DataTable
draws, and a Textual without the private names it uses gets DataTable's own behaviour."""

import pytest
from rich.style import Style
from textual.widgets import DataTable

from console.read.live import LiveSource
from console.read.nvml import NvmlReader
from console.settings import demo_settings
from console.sim.demo import start_demo
from screens import tableshim
from screens.app import InferdeckApp
from screens.tableshim import CachedDataTable
from screens.widgets import KeyedTable
from tests.waits import until


def _demo_app() -> tuple[object, InferdeckApp]:
    settings = demo_settings()
    node = start_demo(settings)
    live = LiveSource.reading(node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings)
    return node, InferdeckApp(live, interval_s=0.5)


def _cells(lines):
    return [(ch, seg.style) for line in lines for seg in line for ch in seg.text]


def _screen_of(table: DataTable) -> list[list[tuple[str, object]]]:
    return [[(s.text, s.style) for s in table.render_line(y)] for y in range(table.size.height)]


def test_the_installed_textual_has_every_name_the_shim_uses():
    table = CachedDataTable()
    assert tableshim.probe(table) == []
    assert table.fast


def test_a_changed_private_signature_turns_the_caches_off(monkeypatch):
    monkeypatch.setitem(tableshim.METHODS, "_render_cell", ("row_index", "width"))
    table = CachedDataTable()
    assert table.fast is False
    assert tableshim.probe(table) == ["_render_cell('row_index', 'width')"]


@pytest.mark.slow
async def test_table_cells_drawn_directly_match_datatables_own():
    """A one-line cell that fits is drawn without Rich's Padding and Styled: character for
    character and style for style what DataTable draws, cursor row included, for every cell of
    every dashboard table of the demo node (and most cells take that way)."""
    node, app = _demo_app()
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: app.frame is not None and len(app.frame.engines) == 3)
            await until(pilot, lambda: all(t.row_count for t in app.query(KeyedTable)))
            await pilot.pause()
            direct = compared = 0
            for table in app.query(KeyedTable):
                for row in range(table.row_count):
                    for col, column in enumerate(table.ordered_columns):
                        for cursor in (False, True):
                            args = (
                                row,
                                col,
                                Style(bgcolor="black"),
                                column.get_render_width(table),
                            )
                            fast = table._one_line_cell(*args, cursor, False)
                            slow = DataTable._render_cell(table, *args, cursor, False)
                            compared += 1
                            if fast is not None:
                                direct += 1
                                assert _cells(fast) == _cells(slow), (table.id, row, col)
                                assert len(fast) == len(slow) == 1
            assert compared > 100 and direct >= 0.8 * compared, (direct, compared)
    finally:
        node.stop()


@pytest.mark.slow
async def test_every_table_draws_the_same_lines_with_the_caches_off():
    """Poll after poll (cells changing, the cursor moving, a sort), each dashboard table's lines
    with the caches on are the lines DataTable draws with them off."""
    node, app = _demo_app()
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            tables = list(app.query(KeyedTable))
            assert tables and all(t.fast for t in tables)
            for step in range(4):
                seen = app.frame
                await until(pilot, lambda seen=seen: app.frame is not seen)  # a poll drawn
                await pilot.pause()
                if step == 1:
                    tables[0].focus()
                    await pilot.press("down")
                if step == 2:
                    tables[-1].sort_by(str(tables[-1].ordered_columns[1].key.value))
                    await pilot.pause()
                for table in tables:
                    cached = _screen_of(table)
                    table.fast = False
                    table.drop_caches()
                    plain = _screen_of(table)
                    table.fast = True
                    table.drop_caches()
                    assert cached == plain, (table.id, step)
                    assert any(text.strip() for line in cached for text, _ in line), table.id
    finally:
        node.stop()


async def test_a_table_without_the_caches_still_updates_its_cells(monkeypatch):
    """With the private names absent (fast off), rows set again change only through DataTable's
    public update_cell and the table shows the new values."""
    from textual.app import App, ComposeResult

    monkeypatch.setitem(tableshim.METHODS, "_render_cell", ())

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield KeyedTable(id="t")

    app = One()
    async with app.run_test(size=(40, 6)) as pilot:
        table = app.query_one(KeyedTable)
        assert table.fast is False
        table.add_column("Name", key="name", width=8)
        table.add_column("Value", key="value", width=8)
        table.sync([("a", ["alpha", "1"]), ("b", ["beta", "2"])])
        await pilot.pause()
        table.sync([("a", ["alpha", "10"]), ("b", ["beta", "2"])])
        await pilot.pause()
        assert str(table.get_cell("a", "value")) == "10"
        lines = ["".join(t for t, _ in line) for line in _screen_of(table)]
        assert any("10" in line and "alpha" in line for line in lines), lines


@pytest.mark.parametrize("fast", [True, False], ids=["shim", "datatable"])
async def test_a_cell_that_only_changes_colour_is_redrawn(fast):
    """The same digits in another style (a figure turning red, or dim when few requests stand
    behind it) is a change: Rich's Text equality leaves the style out, so the cell kept its old
    colour until its digits changed."""
    from rich.text import Text
    from textual.app import App

    class One(App[None]):
        def compose(self):
            yield KeyedTable(id="t")

    app = One()
    async with app.run_test(size=(40, 5)) as pilot:
        table = app.query_one(KeyedTable)
        table.fast = fast
        table.show_cursor = False  # the cursor row's own colours would hide the cell's
        table.add_column("v", key="v", width=6)
        table.sync([("r", [Text("97.0", style="green")])])
        await pilot.pause()
        table.sync([("r", [Text("97.0", style="red")])])
        await pilot.pause()
        assert table.get_cell("r", "v").style == "red"
        drawn = {seg.style.color.name for seg in table.render_line(1) if seg.text.strip()}
        assert drawn == {"red"}


@pytest.mark.parametrize(
    ("text", "width", "shown"),
    [
        ("12.3 tok/s", 10, "12.3 tok/s"),  # fits exactly
        ("12.3 tok/s", 6, "12.3 …"),
        ("Llama-3.1-70B", 8, "Llama-3…"),
        ("模型名称", 8, "模型名称"),  # four wide characters: eight cells
        ("模型名称", 5, "模型…"),  # fewer characters than cells
        ("é" * 6, 6, "é" * 6),
        ("é" * 7, 6, "ééééé…"),
        ("two\nlines", 3, "two\nlines"),  # a multi-line cell is left to the table
    ],
)
def test_a_cell_longer_than_its_column_ends_with_an_ellipsis(text, width, shown):
    from rich.text import Text

    from screens.widgets import _fit

    assert _fit(Text(text), width).plain == shown
    assert _fit(text, width) == text  # plain strings are the table's to cut
