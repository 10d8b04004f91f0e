"""The braille line chart of the detail screens and the dashboard strip (console.figures.textchart)."""

from console.figures.textchart import text_chart, ticks


def _rows(chart):
    return ["".join(t for t, _ in row) for row in chart]


def test_ticks_take_the_decimals_their_spacing_needs():
    assert ticks(0, 100, 5) == ["100", "75", "50", "25", "0"]
    assert ticks(0, 1, 5) == ["1.00", "0.75", "0.50", "0.25", "0.00"]
    assert ticks(0, 26.8, 5) == ["26.8", "20.1", "13.4", "6.7", "0.0"]
    assert ticks(0, 2100, 6) == ["2100", "1680", "1260", "840", "420", "0"]


def test_a_diagonal_a_limit_and_the_axes():
    # 20 x 10 cells: 5 plot rows of 15 columns (30 x 20 dots) behind "100┤"
    chart = text_chart(
        20,
        10,
        "load",
        [("a", [-1.0, 0.0], [100.0, 0.0], "blue")],
        [("SLO", 50.0, "red")],
        (-1.0, 0.0),
        (0.0, 100.0),
        "minutes ago",
    )
    rows = _rows(chart)
    assert len(rows) == 10 and all(len(r) <= 20 for r in rows)
    assert rows[0].strip() == "load"
    # the legend sits in the top border, outside the data: the series' glyph, its label
    assert rows[1] == "   ┌─● a " + "─" * 10 + "┐"
    assert [r[:4] for r in rows[2:7]] == ["100┤", " 75┤", " 50┤", " 25┤", "  0┤"]
    # the line starts in the top-left dot (bit 0x01 of the first cell) and ends in the
    # bottom-right cell, marked with the series' glyph (told apart without its colour)
    assert (ord(rows[2][4]) - 0x2800) & 0x01
    assert "a" not in rows[2]  # no legend over the data
    assert rows[6][18] == "●" and {c for t, c in chart[6] if "●" in t} == {"blue"}
    # y = 50 is dot row round(50 × 19 / 100) = 10: plot row 2, dot row 2 (bits 0x04, 0x20),
    # dashed two dots on, two off; its label ends one cell before the right border
    dashed = rows[4][4:19]
    assert (ord(dashed[0]) - 0x2800) & 0x24 == 0x24
    assert dashed[11:14] == "SLO"
    colours = {c for t, c in chart[4] if "SLO" in t}
    assert colours == {"red"}
    # x: one tick a minute over a minute of 15 columns, labelled as minutes ago
    assert rows[7] == "   └┬" + "─" * 13 + "┬┘"
    assert rows[8].split() == ["1", "0"]
    assert rows[9].strip() == "minutes ago"


def test_no_figures_and_no_room():
    rows = _rows(text_chart(30, 10, "KV — no figures yet", [], [], (-1, 0), (0, 1), "minutes ago"))
    assert not any(0x2800 <= ord(ch) <= 0x28FF for r in rows for ch in r)
    assert rows[2].startswith("1.00┤")
    assert _rows(text_chart(30, 4, "tiny", [], [])) == ["tiny"]
    # a title wider than the chart is cut, never wrapped
    long = _rows(text_chart(20, 10, "x" * 40, [], []))[0]
    assert len(long) == 20 and long.endswith("…")


def test_each_series_has_its_own_glyph_and_a_legend_that_fits_says_how_many_are_left_out():
    series = [(f"GI {i}", [-1.0, 0.0], [float(i), float(i)], f"c{i}") for i in range(7)]
    rows = _rows(text_chart(40, 16, "MIG", series, [], (-1.0, 0.0), (0.0, 7.0)))
    border = rows[1]
    assert border.startswith("   ┌─● GI 0 ■ GI 1 ▲ GI 2") and border.endswith("┐")
    assert len(border) == 40 and "+" in border  # the rest counted, never cut mid-word
    shown = border.count("GI ")
    assert border.split("+")[1].split()[0] == str(7 - shown)
    plot = "".join(rows[2:-3])
    assert all(g in plot for g in "●■▲◆✚★▼")  # every line ends in its own glyph
