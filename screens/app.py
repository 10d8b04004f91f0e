"""The inferdeck Textual app: one long-lived poll loop that never overlaps itself; the UI only
draws Frames."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.scrollbar import ScrollBar
from textual.widget import Widget
from textual.widgets import DataTable, Static

from console.figures.keyseries import KeySeries
from console.figures.windowed import WINDOWS_S, window_label
from console.frame import Frame
from console.paths import snapshots_dir
from console.units import window_text, workload_text
from screens.charts import ChartStrip
from screens.deck import Deck, FrameSource, FrameView
from screens.engines import EngineDetailScreen, EnginePane
from screens.gpus import GpuDetailScreen, GpuPane
from screens.help import HelpScreen
from screens.panes import AlertPane, ServicesPane, alert_lines
from screens.replaybar import ReplayBar
from screens.services import CostPane, ServiceDetailScreen, SloPane
from screens.snapshots import PromptScreen, SnapshotBrowser
from screens.widgets import (
    CellScrollBar,
    Flashing,
    KeyBar,
    KeyedTable,
    Pane,
    Quiet,
    theme_colors,
)

if TYPE_CHECKING:  # loaded on first use: a console that never changes MIG or replays stays small
    from console.mig.manager import MigManager
    from console.read.replay import ReplaySource


_W = TypeVar("_W", bound=Widget)


class InferdeckApp(Flashing, App[None]):
    CSS_PATH = "inferdeck.tcss"
    TITLE = "inferdeck"
    AUTO_FOCUS = None  # nothing selected until the operator tabs into a table
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),  # as in htop and k9s
        Binding("question_mark", "help", "Help", key_display="?"),
        # what is wrong and what to turn come first in the footer, before the view's own keys
        Binding("a", "alerts", "Alerts in full"),
        Binding("F", "findings", "Findings"),
        Binding("t", "timeline", "Timeline", show=False),
        Binding("p", "pause", "Pause"),
        Binding("w", "window", "Window"),
        Binding("v", "view", "Budget/SLO/Cost"),
        Binding("s", "snapshot", "Snapshot"),
        Binding("m", "mig", "MIG"),
        Binding("S", "snapshots", "Saved", show=False),
        Binding("slash", "filter", "Filter rows", show=False, key_display="/"),
        Binding("o", "sort(1)", "Sort by next column", show=False),
        Binding("greater_than_sign", "sort(1)", "Sort by next column", show=False, key_display=">"),
        Binding(
            "less_than_sign", "sort(-1)", "Sort by previous column", show=False, key_display="<"
        ),
        Binding("O", "sort_reverse", "Reverse the sort", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("plus", "interval(-1)", "Faster", show=False, key_display="+"),
        Binding("minus", "interval(1)", "Slower", show=False, key_display="-"),
        Binding("left_square_bracket", "step(-1)", "Step back", show=False, key_display="["),
        Binding("right_square_bracket", "step(1)", "Step", show=False, key_display="]"),
        Binding("comma", "jump(-60)", "-1 min", show=False, key_display=","),
        Binding("full_stop", "jump(60)", "+1 min", show=False, key_display="."),
        Binding("1", "speed(1)", "1x", show=False),
        Binding("2", "speed(10)", "10x", show=False),
        Binding("3", "speed(60)", "60x", show=False),
        Binding("g", "seek", "Go to time", show=False),
    ]
    VIEWS = ("budget", "slo", "cost")
    TALL = 40  # from this height the budget, SLO and cost panes are all shown
    FIRST_WAIT_S = 0.3  # the longest the first paint waits for the first poll

    def __init__(
        self,
        source: FrameSource,
        interval_s: float = 1.0,
        title: str = "inferdeck",
        read_only: bool = False,
        snapshot_dir: Path | None = None,
        secrets: list[str] | None = None,
        replay: ReplaySource | None = None,
        mig: MigManager | None = None,
        freeze_startup: bool = False,
    ) -> None:
        super().__init__()
        # the console's own process: once the first frame is drawn, what start-up built (modules,
        # classes, widgets) leaves the collector's full passes (tests' apps come and go: off)
        self.freeze_startup = freeze_startup
        ScrollBar.renderer = CellScrollBar  # whole-cell scrollbars (Textual's documented hook)
        self._poll_now = asyncio.Event()
        self.mig = mig
        self._quit_after_recut: tuple[Any, int, Any] | None = None  # a quit asked during a re-cut
        self._seen_recuts: set[str] = set()  # interrupted re-cuts already announced
        self.source = source
        self.read_only = read_only
        self.snapshot_dir = snapshot_dir or snapshots_dir()
        self.secrets = secrets or []
        self.replay = replay
        # the last minutes of key series (trends, bundles): a replay keeps every frame it derives
        self.keys = replay.history if replay is not None else KeySeries()
        self.interval_s = interval_s
        self._focused = False  # the first table gets focus once, when its rows arrive
        self._last_input = self._last_full_pass = time.monotonic()
        self.title = title
        self.paused = False
        self.frame: Frame | None = None
        self.poll_errors = 0
        self._seen_alerts: set[str] | None = None
        self.view = "budget"
        self.last_poll_error: str | None = None
        self._dash_widgets: dict[tuple[type[Widget], str | None], Widget] = {}
        self._pane_tables: list[tuple[Pane, KeyedTable]] = []
        self._first: Frame | None = None  # the poll made before the first paint
        self._first_polled: float | None = None  # and when it started

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        replay_only = {"step", "jump", "speed", "seek"}
        if action in replay_only:
            return self.replay is not None
        if action == "mig":  # read-only: the menu shows layouts, says why no apply
            return self.mig is not None and self.screen.__class__.__name__ != "MigScreen"
        dashboard = self.screen is self.screen_stack[0]
        if action in ("filter", "sort", "sort_reverse", "view"):
            return dashboard  # the dashboard's tables and panes
        if action == "clear_filter":  # esc with no filter set would do nothing
            return dashboard and any(t.filter_text for t in self._tables())
        if action == "snapshots":
            return not isinstance(self.screen, SnapshotBrowser)
        return True

    def _dash(self, kind: type[_W], id: str | None = None) -> _W:  # noqa: A002 - Textual's name
        """A dashboard widget, looked up once (the dashboard keeps its widgets; a query walks
        the whole screen, and a poll asks for a dozen)."""
        widget = self._dash_widgets.get((kind, id))
        if widget is None:
            dash = self.screen_stack[0]
            widget = dash.query_one(f"#{id}", kind) if id else dash.query_one(kind)
            self._dash_widgets[kind, id] = widget
        return cast("_W", widget)

    def compose(self) -> ComposeResult:
        yield Quiet(self.title, id="status")
        yield ReplayBar(self.replay)
        yield AlertPane()
        yield GpuPane()
        yield EnginePane()
        yield ServicesPane()
        yield SloPane()
        yield CostPane()
        yield ChartStrip()
        yield KeyBar()

    async def on_load(self) -> None:
        """The first poll before the first paint, so the dashboard opens with its figures rather
        than drawing an empty layout first; a source slower than FIRST_WAIT_S is left to the poll
        loop (the empty dashboard is drawn meanwhile, and its answer lands in a later poll)."""
        if self.replay is not None:
            return
        started = time.monotonic()
        try:
            self._first = await asyncio.wait_for(self.source.poll(), self.FIRST_WAIT_S)
        except TimeoutError:
            return
        except Exception as exc:  # noqa: BLE001 - counted and shown as the loop does
            self.poll_errors += 1
            self.last_poll_error = f"{type(exc).__name__}: {exc}"
            return
        self._first_polled = started

    def on_mount(self) -> None:
        for pane in (self.query_one(GpuPane), self.query_one(EnginePane)):
            pane.history = self.keys
        self.query_one(ChartStrip).keys = self.keys
        if self._first is not None:
            self._draw(self._first)
            self._first = None
        if self.freeze_startup:
            self.call_after_refresh(_freeze_startup)
        self.poll_loop()
        self.set_interval(1.0, self._full_pass_when_idle)
        # a dropped SSH session: exit on SIGHUP, and when the terminal stops being one (no spin)
        self._had_tty = _stdin_is_tty()
        if self._had_tty:
            self.set_interval(2.0, self._check_terminal)
        # SIGTERM, SIGHUP and SIGINT leave through Textual's own shutdown, which restores the terminal
        # (alternate screen off, mouse tracking off)
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().add_signal_handler(sig, self.exit)

    def exit(self, result: Any = None, return_code: int = 0, message: Any | None = None) -> None:
        """Quit, or, while a MIG re-cut runs, quit once it is done or undone (q, Ctrl-C, SIGTERM,
        SIGHUP and a lost terminal alike): a GPU is never left half cut by a quit."""
        if self.mig is not None and self.mig.applying.is_set():
            if self._quit_after_recut is None:
                self._quit_after_recut = (result, return_code, message)
                self.notify(
                    "Finishing the MIG re-cut, then quitting.",
                    severity="warning",
                    timeout=30,
                    markup=False,
                )
                self.set_interval(0.2, self._quit_when_recut_done)
            return
        super().exit(result, return_code, message)

    def _quit_when_recut_done(self) -> None:
        if self.mig is not None and not self.mig.applying.is_set() and self._quit_after_recut:
            result, return_code, message = self._quit_after_recut
            super().exit(result, return_code, message)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent):
            self._last_input = time.monotonic()
        await super().on_event(event)

    def _full_pass_when_idle(self) -> None:
        """The collector's full pass, which walks every object the console keeps (a 15-minute
        history and the widgets: 30 ms alone, 300-450 ms beside two busy processes, the screen
        held all the while), runs here rather than at an allocation count that may fall on a
        key: a minute at least after the last one, once no key or click came for 3 s, or after
        10 minutes whatever the keys. Start-up turns the automatic one off (GC_THRESHOLDS); the
        young passes go on, and reference counting frees all but cycles meanwhile."""
        now = time.monotonic()
        since = now - self._last_full_pass
        idle = now - self._last_input >= FULL_PASS_IDLE_S
        if since >= FULL_PASS_EVERY_S and (idle or since >= FULL_PASS_AT_LEAST_S):
            gc.collect()
            self._last_full_pass = time.monotonic()

    def _check_terminal(self) -> None:
        if not _stdin_is_tty():
            self.exit(return_code=0)

    async def on_unmount(self) -> None:
        await self.source.aclose()

    @work(exclusive=True, group="poll", exit_on_error=False)
    async def poll_loop(self) -> None:
        started = self._first_polled  # the poll before the first paint, when it came in time
        while True:
            if started is None:
                started = time.monotonic()
                try:
                    frame = await self.source.poll()
                except Exception as exc:  # noqa: BLE001 - counted and shown; the loop goes on
                    self.poll_errors += 1
                    self.last_poll_error = f"{type(exc).__name__}: {exc}"
                    self.draw_status()
                else:
                    self._draw(frame)
            wait = max(0.05, self.interval_s - (time.monotonic() - started))
            try:  # until the next poll is due, or a key asks for one now (w: a new window)
                await asyncio.wait_for(self._poll_now.wait(), wait)
            except TimeoutError:
                pass
            self._poll_now.clear()
            started = None

    def _draw(self, frame: Frame) -> None:
        self.frame = frame
        if not self.paused:
            try:
                self.show(frame)
            except Exception as exc:  # noqa: BLE001 - a drawing bug must not stop polling
                self.poll_errors += 1
                self.last_poll_error = f"draw: {type(exc).__name__}: {exc}"

    def show(self, frame: Frame) -> None:
        if self.replay is None:
            self.keys.add(frame)
        with self.batch_update():
            dashboard = self.screen_stack[0]
            self._dash(GpuPane).show(frame)
            self._dash(EnginePane).show(frame)
            self._dash(ServicesPane).show(frame)
            self._dash(SloPane).show(frame)
            self._dash(CostPane).show(frame)
            self._views(frame)
            self._dash(AlertPane).show(frame)
            self._fit_gpu_pane(frame)
            engines = self._dash(KeyedTable, "engine-table")
            self._dash(ChartStrip).show(frame, {str(r.value) for r in engines.rows})
            self.call_after_refresh(self._mark_panes)
            self._announce(frame)
            self.draw_status()
            # a screen pushed but not yet mounted draws the frame itself when it mounts
            if isinstance(self.screen, FrameView) and self.screen is not dashboard:
                try:
                    self.screen.show(frame)
                except NoMatches:
                    pass
            if not self._focused and self.screen is dashboard:
                self._focus_first(dashboard)

    def _focus_first(self, dashboard: Screen[Any]) -> None:
        """At start, the first table with rows has focus and its first row selected, so enter
        opens a detail at once (as in k9s and htop)."""
        for table in dashboard.query(KeyedTable):
            if table.display and table.row_count:
                table.focus()
                table.move_cursor(row=0)
                self._focused = True
                return

    INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0)

    def action_interval(self, step: int) -> None:
        """+ refreshes more often, - less often (0.5 / 1 / 2 / 5 / 10 s)."""
        if self.replay is not None:
            return
        now = min(self.INTERVALS, key=lambda v: abs(v - self.interval_s))
        i = max(0, min(len(self.INTERVALS) - 1, self.INTERVALS.index(now) + step))
        self.interval_s = self.INTERVALS[i]
        self.notify(f"refreshing every {self.interval_s:g} s", markup=False)
        self.draw_status()  # the header says the interval too

    def on_resize(self) -> None:
        self._refit()
        # again once the new size has reached the screen (the event can come before it): the
        # panes are sized for this terminal at once, never for the one before until a frame
        self.call_after_refresh(self._refit)

    def _refit(self) -> None:
        self.draw_status()
        if self.frame is not None:
            self._views(self.frame)
            self._fit_gpu_pane(self.frame)
        self.call_after_refresh(self._mark_panes)

    def _views(self, frame: Frame) -> None:
        """Short terminals show one of budget / SLO / cost (``v`` cycles); tall ones show all."""
        tall = self.size.height >= self.TALL
        for view, pane in (("budget", ServicesPane), ("slo", SloPane), ("cost", CostPane)):
            widget = self._dash(pane)
            has_data = view == "budget" or (
                bool(frame.services) and (view != "cost" or frame.cost is not None)
            )
            widget.display = has_data and (
                tall or self.view == view or (view == "budget" and not frame.services)
            )

    def action_view(self) -> None:
        self.view = self.VIEWS[(self.VIEWS.index(self.view) + 1) % len(self.VIEWS)]
        if self.frame is not None:
            self.show(self.frame)

    def _fit_gpu_pane(self, frame: Frame) -> None:
        """The GPU pane takes what the other panes leave (it scrolls); the rest keep their rows."""
        height = self.size.height
        # the pane's lines, up to its max-height (a quarter of the terminal) with its title
        alerts = 1 + min(alert_lines(frame), max(1, height // 4 - 1))
        down = sum(1 for e in frame.engines if not e.up)
        most = int(height * 0.3)  # the engine, budget, SLO and cost panes' max-height
        engines = min(most, 2 + max(1, len(frame.engines)) + down) if frame.engines else 2
        services = min(most, 2 + len(frame.services)) if frame.services else 3  # the no-plan note
        if height >= self.TALL and frame.services:
            services *= 3 if frame.cost is not None else 2
        room = height - 3 - alerts - engines - services  # status line, footer, one line of slack
        room -= 1 if self.replay is not None else 0  # the time bar
        self._dash(GpuPane).styles.max_height = max(4, room)

    def _mark_panes(self) -> None:
        """Each table's title says how its rows are sorted, how many the filter hides and how many
        the terminal cuts off (measured after layout)."""
        if not self._pane_tables:  # the dashboard keeps its panes: found once
            panes = self.screen_stack[0].query(Pane)
            self._pane_tables = [
                (p, p.query(KeyedTable).first()) for p in panes if p.query(KeyedTable)
            ]
        for pane, table in self._pane_tables:
            marks = [f"by {label}" for label in [table.sort_label()] if label]
            if table.filter_text:
                marks.append(f"'{table.filter_text}': {table.filtered_out} hidden")
            above, below = table.hidden_rows()
            cut = [f"{n} more {arrow}" for n, arrow in ((above, "↑"), (below, "↓")) if n]
            if cut:
                marks.append(", ".join(cut) + ", scroll")
            pane.set_marks(marks)

    def _tables(self) -> list[KeyedTable]:
        return list(self.screen_stack[0].query(KeyedTable))

    def action_filter(self) -> None:
        """/ shows only the rows with a text (in any cell of every table); empty shows all."""
        current = self._tables()[0].filter_text if self._tables() else ""

        def apply(text: str | None) -> None:
            if text is None:
                return
            for table in self._tables():
                table.set_filter(text)
            self.call_after_refresh(self._mark_panes)
            self.refresh_bindings()  # esc clears it now

        self.push_screen(
            PromptScreen(
                "Filter rows: text in any cell (enter applies, empty shows all)",
                "e.g. llama or 1/0",
                current,
            ),
            apply,
        )

    def action_clear_filter(self) -> None:
        if any(t.filter_text for t in self._tables()):
            for table in self._tables():
                table.set_filter("")
            self.call_after_refresh(self._mark_panes)
            self.refresh_bindings()

    def _sorted_table(self) -> KeyedTable | None:
        """The table a sort key acts on: the focused one, else the first with rows."""
        if isinstance(self.focused, KeyedTable):
            return self.focused
        return next((t for t in self._tables() if t.display and t.row_count), None)

    def action_sort(self, step: int = 1) -> None:
        """o / > sort the table by its next column, < by the previous (biggest first)."""
        table = self._sorted_table()
        if table is not None:
            table.cycle_sort(step)
            self.call_after_refresh(self._mark_panes)

    def action_sort_reverse(self) -> None:
        """O turns the sort round (smallest first: the Budget pane's least headroom on top)."""
        table = self._sorted_table()
        if table is not None:
            table.reverse_sort()
            self.call_after_refresh(self._mark_panes)

    def _announce(self, frame: Frame) -> None:
        """A toast for every alert newly raised (and the terminal bell when the plan asks)."""
        active = {a.key: a for a in frame.alerts if a.state == "active"}
        if self._seen_alerts is not None:
            new = [
                a for k, a in active.items() if k not in self._seen_alerts and a.severity != "info"
            ]
            for a in new:
                self.notify(
                    f"{a.subject}: {a.message}",
                    title=a.severity.upper(),
                    severity="error" if a.severity == "critical" else "warning",
                    timeout=8,
                    markup=False,
                )
            if new and self.source.plan.bell:
                self.bell()
        self._seen_alerts = set(active)
        for g in frame.gpus:  # an interrupted MIG re-cut: said once, at the first frame that has it
            r = g.mig.recut if g.mig else None
            if r is not None and r.apply_id not in self._seen_recuts:
                self._seen_recuts.add(r.apply_id)
                self.notify(
                    f"{r.message} To close it: {r.action} (or m: preselected there).",
                    title="MIG RE-CUT INTERRUPTED",
                    severity="error" if r.state == "neither" else "warning",
                    timeout=20,
                    markup=False,
                )

    def draw_status(self) -> None:
        f = self.frame
        w, h = self.size.width, self.size.height
        text = Text()
        if w < 80 or h < 24:  # first, where even a 40-column line shows it
            text.append(f"{w}×{h} too small, 80×24 needed │ ", style="bold reverse")
        text.append(self.title, style="bold")
        if self.read_only:
            text.append(" 🔒 read-only", style="bold")
        if f is not None:
            if f.status in ("critical", "warning"):  # the verdict first: it is what matters
                c = theme_colors(self.theme_variables)
                text.append(
                    f" {f.status.upper()} ",
                    style=f"bold reverse {c['error' if f.status == 'critical' else 'warning']}",
                )
            text.append(
                f" │ {f.host} │ {f.taken_at:%H:%M:%S}Z │ window {window_text(f.window_s, f.window_covered_s)}"
            )
            asked = getattr(self.source, "window_s", f.window_s)
            if asked != f.window_s:  # w pressed: said at once, not at the next frame drawn
                later = "when drawing resumes" if self.paused else "at the next frame"
                text.append(f" (→ {window_label(asked)} {later})")
            ages = [
                ((f.taken_at - e.sampled_at).total_seconds(), e.name)
                for e in f.engines
                if e.sampled_at is not None
            ]
            age_part: tuple[str, str] | None = None
            stale = False
            if ages:  # the oldest engine figures on screen (own intervals, slow engines)
                age, name = max(ages)
                stale = age > max(2.0, 2 * self.interval_s)
                age_part = (
                    f", {name} read {age:.0f}s ago" if stale else f", age ≤{age:.0f}s",
                    f"bold {theme_colors(self.theme_variables)['warning']}" if stale else "",
                )
            poll = f", poll {self.interval_s:g}s" if self.replay is None else ""
            # what a narrow terminal leaves out first, so the line is never cut mid-word: the
            # poll interval (the help and w say it), then a fresh age (a stale one stays)
            room = w - text.cell_len
            need = len(poll) + (len(age_part[0]) if age_part else 0)
            if need > room and poll:
                poll = ""
                need = len(age_part[0]) if age_part else 0
            if need > room and age_part and not stale:
                age_part = None
            text.append(poll)
            if age_part:
                text.append(age_part[0], style=age_part[1])
            src = f.gpu_source
            facts = [
                f"{name} {v}"
                for name, v in (
                    ("driver", src.driver_version),
                    ("CUDA", src.cuda_driver_version),
                    ("NVML", src.nvml_version),
                )
                if v
            ]
            if self.size.width < 80 or self.size.height < 24:
                facts = []  # the line says the terminal is too small instead
            while facts and len(text) + len(" │ " + " · ".join(facts)) > self.size.width - 12:
                facts.pop()  # the driver's facts as far as the line has room
            if facts:
                text.append(" │ " + " · ".join(facts), style="dim")
        if self.paused:
            text.append(" │ ")
            text.append("PAUSED", style="bold reverse")
        if self.poll_errors:
            text.append(f" │ poll errors: {self.poll_errors} ({self.last_poll_error})")
        self._dash(Static, "status").update(text, layout=False)  # 1 line
        if self.screen is not self.screen_stack[0]:  # a view on top has the same header
            for line in self.screen.query("#status"):
                if isinstance(line, Static):
                    line.update(text, layout=False)
        self._dash(ReplayBar).draw()

    def action_window(self) -> None:
        """Cycle the window for rates and percentiles: 1m -> 5m -> 15m."""
        later = [w for w in WINDOWS_S if w > self.source.window_s]
        self.source.window_s = later[0] if later else WINDOWS_S[0]
        if self.replay is None and not self.paused:
            self._poll_now.set()  # figures over the new window at once, not at the next poll
        self.notify(
            f"Window {window_label(self.source.window_s)}: rates and percentiles recompute "
            "from the kept history.",
            timeout=3,
            markup=False,
        )
        self.draw_status()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "engine-table":
            url = str(event.row_key.value).removeprefix("eng:")
            self.push_screen(EngineDetailScreen(url))
        elif event.data_table.id in ("service-table", "slo-table", "cost-table"):
            self.push_screen(ServiceDetailScreen(str(event.row_key.value).split(":", 1)[1]))
        elif event.data_table.id == "gpu-table":
            self.push_screen(GpuDetailScreen(int(str(event.row_key.value).split(":")[1])))

    def view_keys(self) -> list[tuple[str, str, bool]]:
        """The keys of the view on top (its bindings and the app's that act there): (keys, what
        they do, whether the binding asks to be shown), in binding order, one entry per action
        described (its keys joined by '/')."""
        replay_only = ("step", "jump", "speed", "seek")
        seen: dict[str, tuple[str, bool]] = {}
        for active in self.screen.active_bindings.values():
            b = active.binding
            if active.node not in (self, self.screen) or not b.description:
                continue  # a focused table's cursor keys are not this view's keys
            if b.action.startswith("screen.copy_text") or b.action.startswith("app.focus_"):
                continue  # Textual's copy of selected text, and tab: the help's Keys say those
            if self.replay is None and b.action.startswith(replay_only):
                continue
            if active.node is self and not self.check_action(b.action.split("(")[0], ()):
                continue  # not a key of this view
            key = b.key_display or self.get_key_display(b)
            if b.description in seen:
                keys, shown = seen[b.description]
                seen[b.description] = (f"{keys}/{key}", shown or b.show)
            else:
                seen[b.description] = (key, b.show)
        return [(keys, what, shown) for what, (keys, shown) in seen.items()]

    def action_help(self) -> None:
        """Help, with the keys of the view it is opened from (its bindings and the app's)."""
        keys = [(k, what) for k, what, _ in self.view_keys() if what != "Help"]
        self.push_screen(HelpScreen(keys))

    def action_snapshot(self) -> None:
        """Save an incident bundle: ask for an optional note, then write md + json + svg."""
        if self.frame is None:
            self.notify(
                "Nothing to save yet: no frame has arrived.", severity="warning", markup=False
            )
            return
        frame, svg, history = (
            self.frame,
            self.export_screenshot(title=f"inferdeck {self.frame.host}"),
            self.keys.export(),
        )

        def save(note: str | None) -> None:
            if note is None:
                return

            from console.out.bundle import write_bundle

            if self.replay is not None:  # a bundle from a replay says so, and of what
                origin = f"replay of {self.replay.origin}, frame recorded {frame.taken_at:%Y-%m-%d %H:%M:%S}Z"
                note = f"{origin}: {note}" if note else origin
            try:
                path = write_bundle(self.snapshot_dir, frame, note, history, svg, self.secrets)
            except OSError as exc:
                self.notify(
                    f"Could not save the snapshot in {self.snapshot_dir}: {exc.strerror}.",
                    severity="error",
                    markup=False,
                )
                return
            self.notify(f"Snapshot saved: {path}", title="Snapshot", timeout=10, markup=False)

        self.push_screen(
            PromptScreen(
                "Snapshot note (optional, e.g. the incident id); enter saves, esc cancels",
                "INC-1234 high TTFT on llama-70b",
            ),
            save,
        )

    def action_mig(self) -> None:
        if self.mig is None:
            return
        commands: dict[int, str] = {}
        for g in self.frame.gpus if self.frame else []:
            for p in g.processes + [
                p for d in (g.mig.devices if g.mig else []) for p in d.processes
            ]:
                commands[p.pid] = (
                    (p.command or "command not visible")
                    + (f"; engine {p.engine}" if p.engine else "")
                    + (f"; pod {workload_text(p.workload)}" if p.workload else "")
                )

        from screens.mig import MigScreen  # loaded when the menu opens

        self.push_screen(MigScreen(self.mig, self.source.plan, commands))

    def forget_mig(self, index: int) -> None:
        """After a re-layout the GPU pane re-reads that GPU's MIG state at the next poll."""
        self.source.forget_mig(index)

    def action_alerts(self) -> None:
        from screens.alerts import AlertsScreen

        if not isinstance(self.screen, AlertsScreen):
            self.push_screen(AlertsScreen())

    def action_timeline(self) -> None:
        from screens.timeline import TimelineScreen

        if not isinstance(self.screen, TimelineScreen):
            self.push_screen(TimelineScreen())

    def action_findings(self) -> None:
        from screens.findings import FindingsScreen

        self.push_screen(FindingsScreen())

    def action_snapshots(self) -> None:
        self.push_screen(SnapshotBrowser(self.snapshot_dir))

    # the replay's controls live in its bar; these keys reach it from anywhere
    def action_step(self, n: int) -> None:
        self._dash(ReplayBar).step(n)

    def action_jump(self, seconds: float) -> None:
        self._dash(ReplayBar).jump(seconds)

    def action_speed(self, speed: float) -> None:
        self._dash(ReplayBar).speed(speed)

    def action_seek(self) -> None:
        self._dash(ReplayBar).seek()

    def on_replay_bar_moved(self, _: ReplayBar.Moved) -> None:
        self._refresh_replay()

    @work(exclusive=True, group="replay", exit_on_error=False)
    async def _refresh_replay(self) -> None:
        frame = await self.source.poll()
        self.frame = frame
        self.show(frame)

    def action_pause(self) -> None:
        if self.replay is not None:
            self._dash(ReplayBar).toggle()
            return
        self.paused = not self.paused
        if not self.paused and self.frame is not None:
            self.show(self.frame)
        else:
            self.draw_status()


# a young collection every 10,000 allocations, not 700, the middle one every third (every tenth
# walked up to ~100,000 survivors: 95 ms on a busy CPU, 45 ms at three); the full pass never by
# count: the app runs it while the operator is not typing (InferdeckApp._full_pass_when_idle)
GC_THRESHOLDS = (10_000, 3, 1_000_000_000)
FULL_PASS_EVERY_S, FULL_PASS_IDLE_S, FULL_PASS_AT_LEAST_S = 60.0, 3.0, 600.0
# the code of the views a key opens, loaded once the first frame is drawn rather than at the
# operator's first press of that key (50-100 ms of imports in the way of the screen)
VIEW_MODULES = (
    "screens.mig",
    "screens.alerts",
    "screens.findings",
    "screens.timeline",
    "console.out.bundle",
)


def _freeze_startup() -> None:
    """The views' code loaded, start-up's objects out of the garbage collector's passes, and the
    collector on (the command held it off while starting): a full pass walks every tracked
    object, and what start-up built lives as long as the console does. Garbage is collected
    first, so none is kept for good. Full passes from then on come while the operator is idle
    (``InferdeckApp._full_pass_when_idle``), never at an allocation count. Young collections
    come every 10,000 allocations rather than every 700: a poll allocates tens of thousands of
    short-lived objects, nearly all freed by their reference counts, and each collection walks
    what is still young (a tenth of a poll's time on 32 engines)."""
    for name in VIEW_MODULES:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.enable()


def _stdin_is_tty() -> bool:
    try:
        return os.isatty(sys.__stdin__.fileno()) if sys.__stdin__ is not None else False
    except (OSError, ValueError):
        return False


def _a_deck(app: InferdeckApp) -> Deck:
    """(For the type checker: the app is what its screens read it as.)"""
    return app
