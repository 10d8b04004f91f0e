"""Pilot and snapshot tests of the dashboard."""

import re

import pytest
from rich.text import Text

from console.read.live import LiveSource
from console.read.nvml import NvmlReader
from console.read.poller import EngineTarget
from console.sim.demo import start_demo
from screens.app import InferdeckApp
from screens.charts import ChartStrip
from screens.engines import EngineDetailScreen
from screens.gpus import GpuDetailScreen
from screens.help import HelpScreen
from screens.services import ServiceDetailScreen
from screens.widgets import KeyBar, KeyedTable
from tests.frames import StaticSource, no_driver_frame, node_frame, whole_gpus_frame
from tests.waits import until as _until


def _planned_demo():
    """The demo node with its plan: its simulated engines and GPUs, and a live source over them."""
    from console.settings import demo_settings

    settings = demo_settings()
    node = start_demo(settings)
    return node, LiveSource.reading(
        node.targets(), NvmlReader(node.nvml, simulated=True), plan=settings
    )


def _marked(app) -> bool:
    """The first frame drawn and each pane's title marked after the layout: it says the rows
    the terminal cuts off exactly where the table has them (the 160x48 snapshot once caught
    the title before its "(1 more ↓, scroll)")."""
    return (
        app.frame is not None
        and bool(app._pane_tables)
        and all(
            any("scroll" in m for m in pane.marks) == any(table.hidden_rows())
            for pane, table in app._pane_tables
        )
    )


async def _settle(pilot):
    await _until(pilot, lambda: _marked(pilot.app))
    await pilot.pause()


SCENARIOS = {
    "whole": whole_gpus_frame,
    "mixed_mig": node_frame,
    "lost_gpu": lambda: node_frame(lost_gpu=True),
    "no_driver": no_driver_frame,
}


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_dashboard_snapshot(snap_compare, scenario, size):
    assert snap_compare(
        InferdeckApp(StaticSource(SCENARIOS[scenario]())), terminal_size=size, run_before=_settle
    )


@pytest.mark.slow
async def test_pilot_drives_the_demo_node():
    node = start_demo()
    live = LiveSource.reading(
        [EngineTarget(url=e.url, kind="vllm", name=n) for n, e in node.engines.items()],
        NvmlReader(node.nvml, simulated=True),
    )
    app = InferdeckApp(live, interval_s=0.2)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            gpu_table = app.query_one("#gpu-table", KeyedTable)
            engine_table = app.query_one("#engine-table", KeyedTable)
            big = "eng:" + node.engines["llama-70b"].url
            await _until(
                pilot,
                lambda: (
                    gpu_table.row_count == 4 + 2 + 4
                    and engine_table.row_count == 3
                    and str(engine_table.get_cell(big, "run")) != "n/a"
                ),
            )
            assert gpu_table.row_count == 4 + 2 + 4
            assert engine_table.row_count == 3
            assert (
                str(engine_table.get_cell("eng:" + node.engines["llama-70b"].url, "run")) != "n/a"
            )
            # p pauses drawing but not polling
            await pilot.press("p")
            frozen = app.query_one("#status").render()
            assert "PAUSED" in str(frozen)
            await pilot.press("p")
            assert "PAUSED" not in str(app.query_one("#status").render())
            # ? opens help, esc closes it
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
            # enter on an engine opens its detail screen, which follows new frames
            engine_table.focus()
            await pilot.press("enter")
            assert isinstance(app.screen, EngineDetailScreen)
            latency = app.screen.query_one("#detail-latency")
            await _until(pilot, lambda: latency.row_count == 5)
            await _until(pilot, lambda: "ms" in str(latency.get_cell("TTFT", "p95")))
            assert "ms" in str(latency.get_cell("TTFT", "p95"))
            body = str(app.screen.query_one("#detail-body").render())
            assert "vllm:time_to_first_token_seconds" in body and "completion rate" in body
            await pilot.press("escape")
            assert not isinstance(app.screen, EngineDetailScreen)
            # w cycles the window: 1m -> 5m
            await pilot.press("w")
            await _until(pilot, lambda: live.window_s == 300 and app.frame.window_s == 300)
            assert app.frame.engines[0].ttft_s.window in ("5m", "since_start")
            # an engine going away shows down with the reason, the app keeps running
            node.engines["llama-8b-b"].server.stop()
            gone = "eng:" + node.engines["llama-8b-b"].url
            await _until(pilot, lambda: "down" in str(engine_table.get_cell(gone, "run")))
            errors = str(app.query_one("#engine-errors").render())
            assert "llama-8b-b" in errors and "connection refused" in errors
            await pilot.press("q")
        assert app.return_code in (0, None)
    finally:
        node.stop()


async def test_poll_errors_are_counted_not_fatal():
    class Flaky(StaticSource):
        async def poll(self):
            self.polls += 1
            if self.polls % 2:
                raise RuntimeError("boom")
            return self.frame

    app = InferdeckApp(Flaky(node_frame()), interval_s=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: app.poll_errors >= 2 and app.frame is not None)
        await _until(pilot, lambda: "poll errors" in str(app.query_one("#status").render()))
        assert app.poll_errors >= 2
        assert app.frame is not None
        assert "poll errors" in str(app.query_one("#status").render())


@pytest.mark.slow
async def test_gpu_detail_screen_sorts_and_filters():
    node = start_demo()
    live = LiveSource.reading(node.targets(), NvmlReader(node.nvml, simulated=True))
    app = InferdeckApp(live, interval_s=0.2)
    try:
        async with app.run_test(size=(100, 40)) as pilot:
            table = app.query_one("#gpu-table", KeyedTable)
            await _until(pilot, lambda: table.row_count == 4 + 2 + 4)
            table.focus()
            table.move_cursor(row=1)  # GPU 1, cut into 2 x 2g.48gb
            await pilot.press("enter")
            assert isinstance(app.screen, GpuDetailScreen)
            detail = app.screen
            await _until(pilot, lambda: detail.query_one("#proc-table", KeyedTable).row_count == 2)
            mig = str(app.screen.query_one("#gpu-mig").render())
            assert (
                "GI 1" in mig
                and "2g.48gb" in mig
                and "placement 0:6" in mig
                and "placement 6:6" in mig
            )
            fields = str(app.screen.query_one("#gpu-fields").render())
            assert "SM clock" in fields and "remapped rows" in fields and "fan" in fields
            procs = app.screen.query_one("#proc-table", KeyedTable)
            assert procs.row_count == 2
            assert {str(procs.get_row_at(i)[5]) for i in range(2)} == {"llama-8b-a", "llama-8b-b"}
            await pilot.press("P")
            assert app.screen.sort == "pid"
            assert str(procs.get_row_at(0)[1]) < str(procs.get_row_at(1)[1])
            await pilot.press("slash")
            await pilot.press(*"8b-b")
            await _until(pilot, lambda: procs.row_count == 1)
            assert str(procs.get_row_at(0)[5]) == "llama-8b-b"
            await pilot.press("escape")  # clears the filter
            await _until(pilot, lambda: procs.row_count == 2)
            await pilot.press("escape")
            assert not isinstance(app.screen, GpuDetailScreen)
    finally:
        node.stop()


@pytest.mark.slow
async def test_service_detail_and_what_if():
    from screens.services import ServiceDetailScreen

    node, live = _planned_demo()
    app = InferdeckApp(live, interval_s=0.2)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            table = app.query_one("#slo-table", KeyedTable)
            await _until(pilot, lambda: table.row_count == 3)
            await pilot.press("v")  # budget -> SLO
            assert table.display and table.row_count == 3
            table.focus()
            await pilot.press("enter")
            assert isinstance(app.screen, ServiceDetailScreen)
            svc = app.screen
            await _until(pilot, lambda: "per million" in str(svc.query_one("#svc-body").render()))
            body = str(app.screen.query_one("#svc-body").render())
            assert (
                "SLO over 5m at p95" in body
                and "headroom against the plan" in body
                and "per million" in body
            )
            app.screen.query_one("#whatif").focus()
            await pilot.press(*"30000")
            await _until(
                pilot, lambda: "G_R / G_L" in str(svc.query_one("#whatif-result").render())
            )
            result = str(app.screen.query_one("#whatif-result").render())
            # $30,000 against this service's share of the node's $48,000, at equal busy shares
            got = re.search(
                r"this service's ([\d.]+)% of the node .* G_R / G_L > (\d+\.\d+)", result
            )
            assert got is not None, result
            share, need = float(got[1]) / 100, float(got[2])
            assert 0 < share < 1 and need == pytest.approx(30000 / (48000 * share), rel=2e-3)
            await pilot.press("escape")
    finally:
        node.stop()


@pytest.mark.slow
async def test_enter_works_at_once_and_the_new_keys():
    from screens.findings import FindingsScreen

    node = start_demo()
    live = LiveSource.reading(node.targets(), NvmlReader(node.nvml, simulated=True))
    app = InferdeckApp(live, interval_s=1.0)
    try:
        async with app.run_test(size=(100, 40)) as pilot:
            gpus = app.query_one("#gpu-table", KeyedTable)
            await _until(pilot, lambda: gpus.row_count > 0 and app.frame is not None)
            await pilot.press("enter")  # the GPU table has focus and its first row selected
            assert isinstance(app.screen, GpuDetailScreen)
            await pilot.press("escape")
            await pilot.press("plus")
            assert app.interval_s == 0.5
            await pilot.press("minus", "minus", "minus")
            assert app.interval_s == 5.0  # 0.5 -> 1 -> 2 -> 5
            await pilot.press("F")
            assert isinstance(app.screen, FindingsScreen)
            await _until(
                pilot, lambda: "Findings&#160;(" in app.export_screenshot()
            )  # SVG text: spaces as &#160;
            await pilot.press("escape")
            assert not isinstance(app.screen, FindingsScreen)
    finally:
        node.stop()


def _history(app: InferdeckApp) -> None:
    """Ten minutes of frames, one every 10 s, with load rising and a queue building: what the
    detail charts draw (the static source alone would give one instant)."""
    import math
    from datetime import timedelta

    base = node_frame()
    for i in range(60):
        k = i / 59
        engines = [
            e.model_copy(
                update={
                    "requests_running": (e.requests_running or 0) * (0.5 + 0.5 * k),
                    "requests_waiting": 3 * k * (1 + math.sin(i / 4)),
                    "kv_cache_usage": min(0.99, (e.kv_cache_usage or 0) * (0.6 + 0.4 * k)),
                    "generation_tokens_per_s": (e.generation_tokens_per_s or 0) * (0.7 + 0.3 * k),
                }
            )
            for e in base.engines
        ]
        gpus = [
            g.model_copy(update={"power_w": (g.power_w or 0) * (0.8 + 0.2 * k)}) for g in base.gpus
        ]
        when = base.taken_at - timedelta(seconds=10 * (59 - i))
        app.keys.add(base.model_copy(update={"taken_at": when, "engines": engines, "gpus": gpus}))


DETAILS = {
    "engine": lambda app: app.push_screen(EngineDetailScreen(app.frame.engines[0].url)),
    "gpu": lambda app: app.push_screen(GpuDetailScreen(1)),
    "service": lambda app: app.push_screen(ServiceDetailScreen(app.frame.services[0].name)),
    "dashboard": lambda app: app.query_one(ChartStrip).redraw(),  # the strip (tall terminals)
}


@pytest.mark.slow
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
@pytest.mark.parametrize("detail", list(DETAILS))
def test_detail_chart_snapshot(snap_compare, detail, size):
    async def open_detail(pilot):
        app = pilot.app
        await _until(pilot, lambda: _marked(app))
        app.paused = True  # no further frame lands in the history: the charts hold still
        app.keys.points.clear()
        _history(app)
        DETAILS[detail](app)
        await _until(pilot, lambda: detail == "dashboard" or app.screen is not app.screen_stack[0])
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(
        InferdeckApp(StaticSource(node_frame())), terminal_size=size, run_before=open_detail
    )


@pytest.mark.slow
async def test_every_key_in_the_dashboard_help_works(tmp_path):
    """The help lists the dashboard's keys from its bindings; each is pressed: a view it opens is
    closed again, and the console keeps running and drawing without a draw error."""
    import re

    names = {"^p": "ctrl+p", "+": "plus", "-": "minus", "⏎": "enter"}
    node = start_demo()
    live = LiveSource.reading(node.targets(), NvmlReader(node.nvml, simulated=True))
    app = InferdeckApp(live, interval_s=0.5, snapshot_dir=tmp_path)
    try:
        async with app.run_test(size=(100, 40)) as pilot:
            await _until(pilot, lambda: _marked(app))
            await pilot.press("question_mark")
            await _until(pilot, lambda: app.screen is not app.screen_stack[0])
            text = app.screen.text  # the lines the help draws
            await pilot.press("escape")
            listed = re.findall(r"^  (\S+)\s+(.+)$", text.split("Keys of this view")[1], re.M)
            assert {"Pause", "Window", "Snapshot", "Findings", "Faster"} <= {d for _, d in listed}
            for key, what in listed:
                if what in ("Quit", "Copy selected text"):
                    continue
                dashboard = app.screen_stack[0]
                await pilot.press(names.get(key, key))
                await pilot.pause()
                while app.screen is not dashboard:
                    await pilot.press("escape")
                    await pilot.pause()
                if what == "Pause":
                    await pilot.press("p")  # and back
                assert app.is_running, what
            assert not any("draw" in (app.last_poll_error or "") for _ in [0])
    finally:
        node.stop()


KEY_NAMES = {
    "^p": "ctrl+p",
    "+": "plus",
    "-": "minus",
    "⏎": "enter",
    "/": "slash",
    "esc": "escape",
    "<": "less_than_sign",
    ">": "greater_than_sign",
    "pgdn": "pagedown",
    "pgup": "pageup",
    "[": "left_square_bracket",
    "]": "right_square_bracket",
    ",": "comma",
    ".": "full_stop",
}


def _open_view(view):
    """How each view is reached from the dashboard (as an operator would, where a key does)."""

    async def engine(pilot):
        pilot.app.push_screen(EngineDetailScreen(pilot.app.frame.engines[0].url))

    async def gpu(pilot):
        pilot.app.push_screen(GpuDetailScreen(1))

    async def service(pilot):
        pilot.app.push_screen(ServiceDetailScreen(pilot.app.frame.services[0].name))

    async def key(pilot, k):
        await pilot.press(k)

    return {
        "engine": engine,
        "gpu": gpu,
        "service": service,
        "findings": lambda p: key(p, "F"),
        "saved": lambda p: key(p, "S"),
        "mig": lambda p: key(p, "m"),
    }[view]


@pytest.mark.slow
@pytest.mark.parametrize("view", ["engine", "gpu", "service", "findings"])
async def test_detail_views_scroll_on_open(view):
    """At 80x24 a detail view is taller than the terminal: PageDown, End and Home move it at
    once, with no Tab first."""
    from textual.containers import VerticalScroll

    node, live = _planned_demo()
    app = InferdeckApp(live, interval_s=0.5)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: _marked(app))
            await _open_view(view)(pilot)
            await _until(pilot, lambda: bool(app.screen.query("#detail")))
            app.paused = True  # the view holds still: a new frame may add a line
            await pilot.pause()
            box = app.screen.query_one("#detail", VerticalScroll)
            if view == "findings" and box.max_scroll_y == 0:
                pytest.skip("the demo's findings fit on one screen")
            await _until(pilot, lambda: box.max_scroll_y > 0 and app.screen.focused is box)
            await pilot.press("pagedown")
            await _until(pilot, lambda: box.scroll_y > 0)
            await pilot.press("end")
            await _until(pilot, lambda: box.scroll_y == box.max_scroll_y)
            await pilot.press("home")
            await _until(pilot, lambda: box.scroll_y == 0)
    finally:
        node.stop()


@pytest.mark.slow
@pytest.mark.parametrize("view", ["engine", "gpu", "service", "findings", "saved", "mig"])
async def test_every_key_in_each_views_help_works(tmp_path, view):
    """Each view's help lists its keys (its bindings and the app's that apply there); every one
    is pressed on that view, what it opens is closed, and the console keeps drawing."""
    import re

    from console.mig.manager import MigManager

    node, live = _planned_demo()
    mig = MigManager(node.nvml, audit_path=tmp_path / "audit.jsonl")
    app = InferdeckApp(live, interval_s=0.5, snapshot_dir=tmp_path, mig=mig)
    open_view = _open_view(view)
    try:
        async with app.run_test(size=(100, 40)) as pilot:
            await _until(pilot, lambda: _marked(app))
            await open_view(pilot)
            await _until(pilot, lambda: app.screen is not app.screen_stack[0])
            screen = app.screen
            await pilot.press("question_mark")
            await _until(pilot, lambda: app.screen is not screen)
            text = app.screen.text  # the lines the help draws
            await pilot.press("escape")
            listed = re.findall(r"^  (\S+)\s+(.+)$", text.split("Keys of this view")[1], re.M)
            assert "Back" in {d for _, d in listed} or "Cancel" in {d for _, d in listed}
            assert "Filter rows" not in {d for _, d in listed}  # a dashboard key, not this view's
            for keys, what in listed:
                if what in ("Quit", "Copy selected text"):
                    continue
                if app.screen is not screen:
                    await open_view(pilot)
                    await _until(pilot, lambda: app.screen is not app.screen_stack[0])
                    screen = app.screen
                first = keys if keys == "/" else keys.split("/")[0]
                await pilot.press(KEY_NAMES.get(first, first))
                await pilot.pause()
                if what in ("Back", "Cancel"):
                    await _until(pilot, lambda: app.screen is app.screen_stack[0])
                while app.screen not in (screen, app.screen_stack[0]):
                    await pilot.press("escape")  # a prompt or menu the key opened
                    await pilot.pause()
                if what == "Pause":
                    await pilot.press("p")
                assert app.is_running, what
            assert "draw" not in (app.last_poll_error or "")
    finally:
        node.stop()


@pytest.mark.slow
async def test_filter_sort_and_cut_rows_on_the_dashboard():
    """/ keeps the rows holding a text in every table, esc shows all again; o sorts the focused
    table (biggest first, MIG slices stay under their GPU); titles say so and count cut rows."""

    node, live = _planned_demo()
    app = InferdeckApp(live, interval_s=0.5)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            gpus = app.query_one("#gpu-table", KeyedTable)
            engines = app.query_one("#engine-table", KeyedTable)
            await _until(
                pilot, lambda: "more ↓, scroll" in str(app.query_one("#gpus").border_title)
            )
            await pilot.press("slash", *"8b-a", "enter")
            await _until(
                pilot, lambda: "'8b-a': 2 hidden" in str(app.query_one("#engines").border_title)
            )
            assert [str(r.value) for r in engines.rows] == [
                f"eng:{e.url}" for e in app.frame.engines if e.name == "llama-8b-a"
            ]
            await pilot.press("escape")
            await _until(pilot, lambda: "hidden" not in str(app.query_one("#engines").border_title))
            assert engines.row_count == len(app.frame.engines)
            # sort the GPU table by memory: GPUs biggest first, each GPU's slices under it
            assert app.focused is gpus
            await pilot.press("o", "o", "o")
            assert gpus.sort_column == "memory"
            await _until(pilot, lambda: "by Memory ↓" in str(app.query_one("#gpus").border_title))
            keys = [str(r.value) for r in gpus.rows]
            tops = [k for k in keys if k.startswith("gpu:")]
            used = {f"gpu:{g.index}": g.memory_used_bytes for g in app.frame.gpus}
            assert [used[k] for k in tops] == sorted(used.values(), reverse=True)
            above = ""
            for k in keys:  # every slice right under its GPU (or another slice of it)
                above = k if k.startswith("gpu:") else above
                assert k.startswith("gpu:") or above == f"gpu:{k.split(':')[1]}", keys
            assert "by Memory ↓" in str(app.query_one("#gpus").border_title)
            # O turns it round (the least used first); < steps back a column, > forward again
            await pilot.press("O")
            await _until(pilot, lambda: "by Memory ↑" in str(app.query_one("#gpus").border_title))
            tops = [str(r.value) for r in gpus.rows if str(r.value).startswith("gpu:")]
            assert [used[k] for k in tops] == sorted(used.values())
            assert "by Memory ↑" in str(app.query_one("#gpus").border_title)
            await pilot.press("less_than_sign")
            await _until(pilot, lambda: gpus.sort_column == "device" and not gpus.sort_reverse)
            await pilot.press("greater_than_sign")
            await _until(pilot, lambda: gpus.sort_column == "memory")
            # the cut rows are counted on the side they are on: the view scrolled to the last row
            gpus.move_cursor(row=gpus.row_count - 1)
            await _until(
                pilot, lambda: "more ↑, scroll" in str(app.query_one("#gpus").border_title)
            )
            title = str(app.query_one("#gpus").border_title)
            above, below = gpus.hidden_rows()
            assert above > 0 and below == 0 and f"{above} more ↑, scroll" in title, title
            assert above == gpus.row_count - (gpus.scrollable_content_region.height - 1)
            # what an operator types is text, never markup: "[/b]" neither breaks nor styles
            await pilot.press("slash", *"[/b]x", "enter")
            await _until(pilot, lambda: "x': " in str(app.query_one("#engines").border_title))
            assert app.is_running and "draw" not in (app.last_poll_error or "")
            assert "x': " in str(app.query_one("#engines").border_title)
    finally:
        node.stop()


@pytest.mark.slow
async def test_alerts_cut_on_the_dashboard_read_in_full_with_a():
    """At 80 columns the alert pane cuts a long line; `a` opens every alert in full, with when it
    began and how long it has held, and goes back."""
    from screens.alerts import AlertsScreen

    frame = node_frame(lost_gpu=True)
    app = InferdeckApp(StaticSource(frame))
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: _marked(app))
        await pilot.press("a")
        await _until(pilot, lambda: isinstance(app.screen, AlertsScreen))
        text = app.screen.text
        alert = next(x for x in frame.alerts if x.key == "gpu-fault:3")
        assert f"GPU 3: {alert.message}" in text  # the whole message, not cut
        assert len(f"CRIT GPU 3: {alert.message}") > 80
        held = int((frame.taken_at - alert.since).total_seconds())
        assert f"{alert.since:%H:%M:%S} for " in text and held >= 0
        await pilot.press("c")  # for the ticket: on the clipboard, over SSH (OSC 52)
        assert app.clipboard == text
        await pilot.press("escape")
        assert not isinstance(app.screen, AlertsScreen)


async def test_cells_keep_their_count_and_say_when_a_mark_is_left_out():
    """At 80x24 a TTFT95 cell with every mark (~, *, ±, ·13) is wider than its column: it keeps
    the value, * and the count, leaves ± and ~ out and ends with '…'. No cell of any dashboard
    table is wider than its column (the table would cut it without a sign)."""
    from console.frame import Percentiles

    frame = node_frame()
    marked = Percentiles(
        p95=1.234,
        window="since_start",
        observations=13,
        approx=True,
        wide=["p95"],
        buckets={"p95": (1.0, 2.5)},
    )
    engines = [frame.engines[0].model_copy(update={"ttft_s": marked}), *frame.engines[1:]]
    app = InferdeckApp(StaticSource(frame.model_copy(update={"engines": engines})))
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: _marked(app))
        table = app.query_one("#engine-table", KeyedTable)
        cell = table.get_cell("eng:" + engines[0].url, "ttft")
        assert cell.plain == "1.23s*·13…", cell.plain
        for t in app.screen.query(KeyedTable):
            for row in t.rows:
                for col, column in t.columns.items():
                    value = t.get_cell(row, col)
                    if isinstance(value, Text):
                        assert value.cell_len <= column.width, (t.id, row.value, col.value, value)


@pytest.mark.slow
@pytest.mark.parametrize("view", ["dashboard", "engine", "gpu", "service", "findings", "mig"])
async def test_the_key_bar_hides_no_key_without_a_sign(tmp_path, view):
    """At 80x24 the bottom line lists the view's keys (those it shows first, then F, S, /, o,
    +/-...); each key of the view is on it, or the line ends with '? all keys'. At 160x48 the
    dashboard's keys are all there."""
    from console.mig.manager import MigManager
    from screens.widgets import KeyBar

    node, live = _planned_demo()
    mig = MigManager(node.nvml, audit_path=tmp_path / "audit.jsonl")
    app = InferdeckApp(live, interval_s=0.5, snapshot_dir=tmp_path, mig=mig)
    try:
        for size in [(80, 24)] + ([(160, 48)] if view == "dashboard" else []):
            async with app.run_test(size=size) as pilot:
                await _until(pilot, lambda app=app: _marked(app))
                if view != "dashboard":
                    await _open_view(view)(pilot)
                    await _until(pilot, lambda app=app: app.screen is not app.screen_stack[0])
                    await pilot.pause()
                bar, region = app.screen.get_widget_at(2, size[1] - 1)
                assert isinstance(bar, KeyBar) and region.width == size[0]
                drawn = bar.render().plain
                wanted = [(k, w) for k, w in bar.entries()]
                assert wanted, view
                missing = [(k, w) for k, w in wanted if f" {k} {w} " not in drawn + " "]
                assert not missing or drawn.endswith(KeyBar.MORE), (drawn, missing)
                if size == (160, 48):  # the keys that never showed: F, S, o, /, +, -
                    for key in ("F", "S", "a", "o", "/", "+", "-"):
                        assert f" {key} " in drawn, (key, drawn)
                if view == "dashboard" and size == (80, 24):
                    assert " m MIG " in drawn and drawn.endswith(KeyBar.MORE)
            app = InferdeckApp(live, interval_s=0.5, snapshot_dir=tmp_path, mig=mig)
    finally:
        node.stop()


@pytest.mark.slow
async def test_read_only_m_shows_the_menu_and_refuses_and_the_header_says_what_it_does(tmp_path):
    """--read-only: m opens the MIG menu (layouts and preview), which says no change is made and
    refuses to apply; the header gives the poll interval (and a change of it at once), a window
    asked for while paused, and a terminal too small first."""
    from console.mig.manager import MigManager
    from screens.mig import MigScreen

    node, live = _planned_demo()
    mig = MigManager(node.nvml, audit_path=tmp_path / "audit.jsonl")
    app = InferdeckApp(live, interval_s=1.0, mig=mig, read_only=True)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await _until(pilot, lambda: _marked(app))
            status = app.query_one("#status")
            assert ", poll 1s" in str(status.render())
            await pilot.press("minus")
            assert ", poll 2s" in str(status.render())
            await pilot.press("p", "w")
            assert "(→ 5m when drawing resumes)" in str(status.render())
            await pilot.press("p")
            await pilot.press("m")
            await _until(pilot, lambda: isinstance(app.screen, MigScreen))
            await pilot.pause()
            await pilot.press("down", "down", "enter")
            await pilot.pause()
            await pilot.press("down", "enter")
            preview = lambda: str(app.screen.query_one("#mig-preview").render())  # noqa: E731
            await _until(pilot, lambda: "Blocked:" in preview())
            assert "read-only" in preview()
            before = [gi.profile.name for gi in node.nvml.gpus[2].gis]
            await pilot.press("a")
            await pilot.pause()
            assert isinstance(app.screen, MigScreen)  # no confirmation: refused at once
            assert [gi.profile.name for gi in node.nvml.gpus[2].gis] == before
        small = InferdeckApp(live, interval_s=1.0)
        async with small.run_test(size=(40, 10)) as pilot:
            await _until(pilot, lambda: small.frame is not None)
            await pilot.pause()
            assert str(small.query_one("#status").render()).startswith("40×10 too small")
    finally:
        node.stop()


VIEW_KEYS_80x24 = ["dashboard", "engine", "gpu", "service", "findings", "alerts", "saved", "mig"]


@pytest.mark.slow
@pytest.mark.parametrize("view", VIEW_KEYS_80x24)
async def test_every_key_a_view_lists_changes_its_screen_at_80x24(tmp_path, view):
    """At 80x24, on a frame that holds still, every key the view's help lists is pressed: the
    screen drawn afterwards differs from before (a view opened or closed, a prompt, a toast, the
    header, a pane's title), and what it opened is closed again."""
    from console.mig.manager import MigManager
    from console.sim.nvml import SimNvml

    sim = SimNvml()
    sim.add_gpu("rtx-pro-6000-se", mig=[("1g.24gb", s) for s in (0, 3, 6, 9)])
    sim.nvmlInit()
    mig = MigManager(sim, audit_path=tmp_path / "audit.jsonl")
    app = InferdeckApp(StaticSource(node_frame()), snapshot_dir=tmp_path, mig=mig)
    opens = {
        "engine": lambda a: a.push_screen(EngineDetailScreen(a.frame.engines[0].url)),
        "gpu": lambda a: a.push_screen(GpuDetailScreen(1)),
        "service": lambda a: a.push_screen(ServiceDetailScreen(a.frame.services[0].name)),
        "findings": lambda a: a.action_findings(),
        "alerts": lambda a: a.action_alerts(),
        "saved": lambda a: a.action_snapshots(),
        "mig": lambda a: a.action_mig(),
    }

    async def pick_layout():  # the MIG menu with a GPU and a target picked: a preview to act on
        await pilot.press("down", "enter")
        await pilot.pause()
        await pilot.press("down", "enter")
        await pilot.pause()

    async def changed(before: str, deadline_s: float = 10.0) -> bool:
        """Whether the screen drawn comes to differ from ``before`` (waiting on the app)."""
        import time

        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            await pilot.pause()
            if app.export_screenshot() != before:
                return True
        return False

    unchanged = []
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: _marked(app))

        async def reopen():
            while len(app.screen_stack) > 1:
                app.pop_screen()
                await pilot.pause()
            if view != "dashboard":
                opens[view](app)
                await _until(pilot, lambda: len(app.screen_stack) > 1)
                await pilot.pause()
                if view == "mig":
                    await pick_layout()

        await reopen()
        await pilot.press("question_mark")
        listed = [
            (k, w)
            for k, w in re.findall(
                r"^  (\S+)\s+(.+)$", app.screen.text.split("Keys of this view")[1], re.M
            )
        ]
        await pilot.press("escape")
        assert listed, view
        for keys, what in listed:
            if what == "Quit":
                continue
            await reopen()
            if what == "Preview up":  # up from the top would be a no-op: from a page down
                await pilot.press("pagedown")
            await pilot.pause()
            before = app.export_screenshot()
            first = keys if keys == "/" else keys.split("/")[0]
            await pilot.press(KEY_NAMES.get(first, first))
            if not await changed(before):
                unchanged.append(what)
            while isinstance(app.screen, (HelpScreen,)) or app.screen.__class__.__name__ in (
                "PromptScreen",
                "ConfirmApply",
            ):
                await pilot.press("escape")
                await pilot.pause()
            if what == "Pause":
                await pilot.press("p")
    assert unchanged == [], unchanged


def test_cells_colour_by_the_plans_thresholds_carried_in_the_frame():
    """The KV cell turns at the plan's kv_usage_critical (the KV alert's), with its bar or (80
    columns) without, and the Done% cell at the completion target of the services on the
    engine, both read from the frame."""
    from types import SimpleNamespace

    from console.frame import Limits
    from screens.engines import _kv, _ok

    c = {"success": "green", "warning": "yellow", "error": "red", "dim": "grey50"}
    frame = node_frame()
    engine = frame.engines[0].model_copy(update={"kv_cache_usage": 0.85, "success_rate": 0.995})

    def styles(cell, frame, wide=True):
        text = cell(engine, "x", c, SimpleNamespace(frame=frame, wide=wide))
        return {str(span.style) for span in text.spans} | {str(text.style)}

    strict = frame.model_copy(update={"limits": Limits(kv_usage_critical=0.8)})
    for wide in (True, False):
        assert "yellow" not in styles(_kv, frame, wide)  # the default 90 %: 85 % is fine
        assert "yellow" in styles(_kv, strict, wide)
    served = [s for s in frame.services if s.engine == engine.name and s.slo is not None]
    assert served and all(s.slo.completion is not None for s in served)
    target = max(s.slo.completion.target for s in served)
    assert ("yellow" in styles(_ok, frame)) == (0.995 < target)
    tight = [
        s.model_copy(
            update={
                "slo": s.slo.model_copy(
                    update={"completion": s.slo.completion.model_copy(update={"target": 0.999})}
                )
            }
        )
        if s in served
        else s
        for s in frame.services
    ]
    assert "yellow" in styles(_ok, frame.model_copy(update={"services": tight}))


async def test_the_header_says_how_old_the_oldest_engine_sample_is():
    """Each engine's figures carry when they were read; the header names the oldest, in the
    warning colour once it is older than two polls (an engine on its own, longer interval)."""
    from datetime import timedelta

    frame = node_frame()
    fresh = [e.model_copy(update={"sampled_at": frame.taken_at}) for e in frame.engines]
    app = InferdeckApp(StaticSource(frame.model_copy(update={"engines": fresh})), interval_s=1.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await _until(pilot, lambda: "age" in str(app.query_one("#status").render()))
        assert "poll 1s, age ≤0s" in str(app.query_one("#status").render())
    late = fresh[0].model_copy(update={"sampled_at": frame.taken_at - timedelta(seconds=14)})
    slow = frame.model_copy(update={"engines": [late, *fresh[1:]]})
    app = InferdeckApp(StaticSource(slow), interval_s=1.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await _until(pilot, lambda: "ago" in str(app.query_one("#status").render()))
        assert f"{late.name} read 14s ago" in str(app.query_one("#status").render())


def test_budget_bars_fill_as_the_room_is_used_and_budgets_say_what_they_are():
    """Budget bars read as the GPU pane's (fuller is worse): empty with twice the margin left,
    half full at the margin, full with none left; each budget in its own words."""
    from console.frame import Headroom
    from screens.panes import headroom_cell
    from screens.services import _budget_words

    c = {"success": "green", "warning": "yellow", "error": "red", "dim": "grey50"}

    def filled(value, budget, unit="GiB"):
        h = Headroom(name="memory", value=value, budget=budget, unit=unit, state="ok")
        return headroom_cell(h, c, bars=True).plain[:4].count("█")

    assert [filled(v, 2.0) for v in (4.0, 2.0, 1.0, 0.0, -1.0)] == [0, 2, 3, 4, 4]
    assert filled(0.0, 0.0, "waiting") == 0 and filled(3.0, 0.0, "waiting") == 4
    words = {
        name: _budget_words(Headroom(name=name, value=1.0, budget=b, unit=u, state="ok"))
        for name, b, u in (("memory", 3.4, "GiB"), ("kv", 8.0, "seqs"), ("power", 30.0, "W"))
    }
    assert words == {
        "memory": "(warn under a 3.40 GiB margin)",
        "kv": "(plan: 8 seqs)",
        "power": "(warn within 30 W of the cap)",
    }


async def test_a_click_on_the_key_bar_does_what_the_key_does():
    from screens.widgets import KeyBar

    app = InferdeckApp(StaticSource(node_frame()), interval_s=1.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await _until(pilot, lambda: _marked(app))
        bar = app.screen.query_one(KeyBar)
        start, _, _ = next(s for s in bar._key_cells if s[2] == "Pause")
        assert not app.paused
        await pilot.click(KeyBar, offset=(start + 1, 0))
        await _until(pilot, lambda: app.paused)
        start, _, _ = next(s for s in bar._key_cells if s[2] == "Help")
        await pilot.click(KeyBar, offset=(start + 1, 0))
        await _until(pilot, lambda: isinstance(app.screen, HelpScreen))


@pytest.mark.slow
async def test_w_brings_figures_over_the_new_window_without_waiting_for_the_next_poll():
    """At a 10 s poll, `w` used to wait for the next poll (up to the whole interval); it asks
    for one at once."""
    node, live = _planned_demo()
    app = InferdeckApp(live, interval_s=10.0)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await _until(pilot, lambda: app.frame is not None)  # the first frame
            assert app.frame is not None and app.frame.window_s == 60.0
            await pilot.press("w")
            await _until(pilot, lambda: app.frame.window_s == 300.0, deadline_s=5.0)
            await pilot.pause()
            assert "→" not in str(app.query_one("#status").render())
    finally:
        node.stop()


async def test_quitting_during_a_mig_re_cut_waits_for_it(tmp_path):
    """q (and Ctrl-C, SIGTERM, a lost terminal: all through exit) while a re-cut runs: the console
    says so, keeps running until the GPU is in its new layout, then quits."""
    import threading

    from console.mig.layouts import parse_layout
    from console.mig.manager import MigManager

    node, live = _planned_demo()
    mig = MigManager(node.nvml, audit_path=tmp_path / "audit.jsonl", simulated=True)
    app = InferdeckApp(live, interval_s=0.5, snapshot_dir=tmp_path, mig=mig)
    release = threading.Event()
    reports = []
    try:
        async with app.run_test(size=(100, 40)) as pilot:
            await _until(pilot, lambda: app.frame is not None)  # the first poll started NVML
            target = parse_layout("2g.48gb@0,2g.48gb@6", mig.read(2).spec)
            worker = threading.Thread(
                target=lambda: reports.append(
                    mig.apply(2, target, progress=lambda _m: release.wait(10))
                )
            )
            worker.start()
            await _until(pilot, mig.applying.is_set)
            await pilot.press("q")
            await _until(pilot, lambda: app._quit_after_recut is not None)
            assert not app._exit and app._quit_after_recut is not None
            assert any("Finishing the MIG re-cut" in said for _, said in app.said)
            release.set()
            worker.join(10)
            await _until(pilot, lambda: app._exit)
            assert reports and reports[0].result == "applied"
            assert app._exit  # quit once the re-cut was done
    finally:
        node.stop()


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (160, 48)])
async def test_the_incident_shows_its_knob_and_says_messages_on_the_key_line(size):
    """At every size an SSH session opens at: the worst concern's knob is the Alerts pane's first
    line (it used to be cut off the end of each alert line, one undiscoverable key away), `a`
    and `F` are in the footer, and a message (here the refresh rate) is said on the key bar's
    line instead of a toast over the engine rows."""
    from console.figures.verdict import judged
    from console.frame import Concern

    frame = judged(node_frame())
    knob = "lower --max-num-seqs: smaller batches decode faster (or add a replica)"
    worst = Concern(severity="critical", source="finding", subject="llama-8b-a",
                    message="saturated: p90 TPOT at 1.40x its SLO — " + knob, rule="finding",
                    knob=knob)  # fmt: skip
    frame = frame.model_copy(update={"verdict": [worst, *frame.verdict], "status": "critical"})
    app = InferdeckApp(StaticSource(frame))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        lines = app.query_one("#alert-lines").render()
        first = lines.plain.splitlines()[0] if hasattr(lines, "plain") else str(lines)
        assert first.startswith("▸ llama-8b-a: lower --max-num-seqs"), first
        header = str(app.query_one("#status").render())
        assert Text(header).cell_len <= size[0] and "CRITICAL" in header, header  # never cut
        assert "window 1m" in header, header
        bar = app.screen.query_one("KeyBar")
        keys = bar.render().plain
        assert " a Alerts " in keys and " F Find " in keys, keys
        assert keys.count("?") == 1, keys
        await pilot.press("plus")
        await pilot.pause()
        assert bar.render().plain.strip() == "refreshing every 0.5 s"
        assert not app.screen.query("Toast")  # nothing drawn over the rows
        assert app.said[-1] == ("information", "refreshing every 0.5 s")
        # the engine's detail opens with its state as judged and its concerns with their knobs
        # (it said "up" while the engine was critical)
        url = next(e.url for e in frame.engines if e.name == "llama-8b-a")
        app.push_screen(EngineDetailScreen(url))
        await pilot.pause()
        head = app.screen.query_one("#detail-head").render().plain
        assert "up, CRITICAL" in head and knob in head, head


async def test_four_alerts_and_findings_never_give_the_page_a_scrollbar():
    """Four alerts, two findings and the knob line at 80x24, 100x30 and 160x48, and through
    resizes between them: the panes shrink (the GPU pane takes what is left and scrolls inside)
    and the page itself never scrolls. At 100x30 four alerts used to push it 2 lines past the
    terminal (the sizing counted alerts only, not the pane's other lines)."""
    from datetime import UTC, datetime

    from console.figures.verdict import judged
    from console.frame import Alert, Concern

    now = datetime(2026, 1, 1, tzinfo=UTC)
    alerts = [
        Alert(
            key=f"k{i}",
            severity="critical" if i % 2 else "warning",
            subject=f"llama-8b-{i}",
            message=f"condition {i} holds: a sentence long enough to be cut at 80 columns "
            "and then some",
            since=now,
        )  # fmt: skip
        for i in range(4)
    ]
    frame = judged(node_frame().model_copy(update={"alerts": alerts}))
    found = [
        Concern(
            severity="warning",
            source="finding",
            subject="llama-70b",
            message=f"finding {i}",
            rule="finding",
            knob="raise --gpu-memory-utilization",
        )  # fmt: skip
        for i in range(2)
    ]
    frame = frame.model_copy(update={"verdict": [*frame.verdict, *found]})
    app = InferdeckApp(StaticSource(frame))
    async with app.run_test(size=(160, 48)) as pilot:
        for size in ((160, 48), (80, 24), (100, 30), (80, 24), (160, 48), (100, 30)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            await pilot.pause()
            s = app.screen
            assert s.max_scroll_y == 0 and not s.show_vertical_scrollbar, size


async def test_a_selected_engine_says_why_room_and_sat_are_unknown():
    """Room ? and Sat n/a have no room for their reason in the cell: when the operator moves onto
    such an engine's row, the reason is said on the key bar's line (no pane line taken)."""
    from console.frame import CapacityReport

    frame = node_frame(engine_down=False)
    unsure = CapacityReport(
        cant_tell="3 of the 6 levels of load it needs seen so far",
        saturation_note="only 4 requests finished in the window (needs 20)",
    )
    known = CapacityReport(requests_per_s=3.0, current_per_s=1.0, room_per_s=2.0, saturation=0.5)
    engines = [
        frame.engines[0].model_copy(update={"capacity": unsure}),
        frame.engines[1].model_copy(update={"capacity": known}),
        *frame.engines[2:],
    ]
    app = InferdeckApp(StaticSource(frame.model_copy(update={"engines": engines})))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.query_one("#engine-table", KeyedTable)
        assert table.get_cell("eng:" + engines[0].url, "room").plain == "?"
        assert not getattr(app, "said", [])  # nothing selected: nothing said
        table.focus()
        table.move_cursor(row=table.get_row_index("eng:" + engines[1].url))
        await pilot.pause()
        assert not getattr(app, "said", [])  # both figures known: nothing to explain
        table.move_cursor(row=table.get_row_index("eng:" + engines[0].url))
        await pilot.pause()
        said = app.said[-1][1]
        assert f"{engines[0].name}: Room ?: 3 of the 6 levels of load" in said, said
        assert "Sat n/a: only 4 requests finished" in said, said
        assert said.startswith(" ".join(str(app.query_one(KeyBar).render()).split()))
        assert not app.query_one("#engine-errors").display


async def test_a_service_without_cost_figures_reads_n_a_in_every_cost_cell():
    """No stand-in record with a 0 $/h: a service the node has no cost for says n/a, and the one
    it has reads its figures."""
    from screens.widgets import KeyedTable

    frame = node_frame()
    app = InferdeckApp(StaticSource(frame), interval_s=0.05)
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.query_one("#cost-table", KeyedTable)
        await _until(pilot, lambda: len(table.rows) == len(frame.services))
        keys = ("hourly", "energy", "busy", "out", "good", "jtok")
        assert [str(table.get_cell("cost:llama-8b-a", k)) for k in keys] == ["n/a"] * 6
        priced = next(s for s in frame.services if s.cost is not None)
        assert str(table.get_cell(f"cost:{priced.name}", "hourly")).startswith("$")


async def test_the_collectors_full_pass_waits_for_the_operator_to_stop_typing():
    """A full pass walks everything the console keeps (300-450 ms of held screen beside two busy
    processes): it never comes at an allocation count once start-up is frozen, and the app runs
    it a minute apart once no key came for 3 s, or after 10 minutes whatever the keys."""
    import gc
    import time

    from screens.app import FULL_PASS_AT_LEAST_S, FULL_PASS_EVERY_S, GC_THRESHOLDS

    assert GC_THRESHOLDS[2] >= 10**8  # no full pass by count
    full: list[int] = []

    def count(phase, info):
        if phase == "stop" and info["generation"] == 2:
            full.append(1)

    def passes() -> int:  # full passes made by one call of the app's timer
        before = len(full)
        InferdeckApp._full_pass_when_idle(app)
        return len(full) - before

    app = InferdeckApp(StaticSource(node_frame()), interval_s=1.0)
    # the app's own timer does nothing here: the test calls it itself, between its keys (a tick
    # during a key press on a busy machine took the pass the test then asked for)
    app._full_pass_when_idle = lambda: None  # type: ignore[method-assign]
    gc.callbacks.append(count)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await _until(pilot, lambda: app.frame is not None)
            app._last_full_pass = time.monotonic() - FULL_PASS_EVERY_S - 1
            await pilot.press("p", "p")  # keys: the operator is at it
            assert passes() == 0
            app._last_input -= 3.1  # quiet for 3 s
            assert passes() == 1
            assert passes() == 0  # not again within the minute
            app._last_full_pass = time.monotonic() - FULL_PASS_AT_LEAST_S - 1
            await pilot.press("p", "p")
            assert passes() == 1  # ten minutes of keys: it runs anyway
    finally:
        gc.callbacks.remove(count)


async def test_a_message_said_just_before_exit_never_raises_as_the_app_tears_down():
    """A message's timer redraws the key bars when it is over; firing after the last screen is
    gone (the app exiting within its timeout) it does nothing, where it raised ScreenStackError
    (seen 1 run in 4 of the 80x24 view-key test beside a loaded machine)."""
    app = InferdeckApp(StaticSource(node_frame()))
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: app.frame is not None)
        app.notify("said just before quitting", timeout=30)
    assert not app.screen_stack
    app.refresh_key_bars()  # what the message's timer calls
