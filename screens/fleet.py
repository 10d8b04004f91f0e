"""The fleet screen: one row per node from Prometheus; enter drills into the node's dashboard
(GPU, engine and alert panes built from Prometheus data). MIG re-layout stays node-local."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from rich.cells import cell_len
from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.scrollbar import ScrollBar
from textual.widgets import DataTable, Footer, Input, Static

from console.figures.columns import clock_events_text
from console.figures.keyseries import KeySeries
from console.figures.windowed import window_label
from console.fleet.state import (
    FleetState,
    NodeSummary,
    budget_text,
    fleet_timeline,
    node_row,
    other_down_line,
    partial,
    warnings_line,
)
from console.frame import Frame, Gpu
from console.units import NA, duration_text, gib, num, pct, seconds, window_text
from screens.engines import EnginePane
from screens.gpus import GpuPane
from screens.panes import AlertPane
from screens.timeline import timeline_body
from screens.widgets import CellScrollBar, KeyedTable, spark, theme_colors

if TYPE_CHECKING:  # the source queries Prometheus: screens only hold it
    from console.fleet.source import FleetSource

COLUMNS = (
    ("Node", "node", 16),
    ("GPUs", "gpus", 5),
    ("MIG", "mig", 4),
    ("Engines", "engines", 8),
    ("Worst", "worst", 9),
    ("TTFT p95", "ttft", 9),
    ("TTFT≤1s", "slo", 8),
    ("tok/s", "tps", 7),
    ("$/M good", "cost", 9),
    ("Alerts", "alerts", 7),
    ("Trend tok/s", "trend", 16),
)
SORTS = ("node", "alerts", "ttft", "tps")
# at a narrow terminal these go first, in this order (the status line says how many are hidden)
OPTIONAL = ("trend", "cost", "slo")
FLEET_KEYS = [
    ("enter", "open the node: its GPUs, engines and alerts from Prometheus"),
    ("o", "sort by node, alerts, TTFT p95, tokens/s"),
    ("/", "show only nodes with a text; esc shows all"),
    ("[ ]", "every query 5 minutes back / forward in history; 0 live again"),
    ("t", "the fleet's timeline: each node's events and Prometheus not answering, in order"),
    ("q", "quit; in a node, back"),
]
FLEET_NOTES = [
    "TTFT p95 and tok/s are over the window in the header (Prometheus' rate() and "
    "histogram_quantile over it); TTFT≤1s is the share of requests within the node's TTFT target; "
    "Trend tok/s, the node's output tokens a second over the last hour.",
    "GPUs n/a: Prometheus holds no DCGM exporter series for the node. $/M good: the least it "
    'costs per million tokens meeting the SLO (~ when the fleet estimates it; "no good" when '
    "no request met the TTFT target, so there is no such token to price).",
    "° on a figure: the node's targets have been scraped for less than the window, so it covers "
    "less of it (the node's title says how much: window 1m (20s watched)).",
]


def _errors(errors: dict[str, str]) -> str:
    """One sentence per distinct answer: six queries that could not reach Prometheus say it
    once, with how many asked."""
    by_why: dict[str, list[str]] = {}
    for name, why in sorted(errors.items()):
        by_why.setdefault(why, []).append(name)
    lines = []
    for why, names in by_why.items():
        lines.append(why if len(names) == 1 else f"{why} ({len(names)} queries)")
    return "\n".join(lines[:4])


def slo_text(st: FleetState, c: dict[str, str]) -> Text:
    """Each service objective's budget left and burn alert, from Prometheus' SLO rules."""
    t = Text()
    t.append("SLO error budget left (Prometheus' rules: inferdeck rules --slo)\n", style="bold")
    width = max((len(r.service) for r in st.slo), default=0)
    for r in st.slo:
        line = f"  {r.service:<{width}}  {r.slo:<10} {budget_text(r)}"
        line += f"  on {r.node}" if r.node else ""
        style = c["error"] if r.remaining is not None and r.remaining < 0 else ""
        if r.alert:
            since = time.strftime("%H:%M:%S", time.gmtime(r.since)) + "Z" if r.since else "?"
            line += f"   {r.alert.upper()} {r.state} since {since}"
            style = c["error"] if r.alert == "page" else c["warning"]
        t.append(line + "\n", style=style)
    return t


def _share(summary: NodeSummary | None, style: str) -> Text:
    v = summary.ttft_within_target if summary else None
    return Text("n/a" if v is None else f"{v * 100:.1f}%", style=style)


def _cost(summary: NodeSummary | None, style: str) -> Text:
    v = summary.usd_per_m_compliant_tokens_at_least if summary else None
    if summary is not None and summary.no_good:
        return Text("no good", style=style)  # no request within the target: no price per one
    if v is None:
        return Text("n/a", style=style)
    # the node's own figure (its export) plain; the fleet's estimate from the TTFT share with ~
    return Text(f"≥${v:,.2f}" + ("" if summary and summary.cost_from_node else "~"), style=style)


class NodeScreen(Screen[None]):
    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node
        self.keys = KeySeries()  # this node's trends, one point per fleet refresh

    def compose(self) -> ComposeResult:
        yield Static(id="node-title", markup=False)
        yield AlertPane()
        yield GpuPane()
        yield EnginePane()
        yield Static(id="node-note", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#node-note", Static).update(
            Text(
                f"MIG re-layout needs NVML on the node itself: on {self.node} run `inferdeck mig show`, then "
                "`inferdeck mig apply GPU LAYOUT` (or the console's m menu).",
                style="dim",
            )
        )
        for pane in (self.query_one(GpuPane), self.query_one(EnginePane)):
            pane.history = self.keys
        self.show_state(cast("FleetApp", self.app).state)

    def show_state(self, state: FleetState) -> None:
        frame = state.nodes.get(self.node)
        if frame is None:
            return
        age = time.time() - (state.last_ok or time.time())
        self.query_one("#node-title", Static).update(
            Text.assemble(
                (f"{self.node}", "bold"),
                f" from Prometheus, window {window_text(frame.window_s, frame.window_covered_s)}",
                (f"  DOWN, {state.down[self.node]}" if self.node in state.down else "", "bold"),
                (
                    f"  (figures {age:.0f} s old: Prometheus is not answering)"
                    if state.errors
                    else "",
                    "bold",
                ),
            )
        )
        if not self.keys.points or self.keys.points[-1][0] < frame.taken_at.timestamp():
            self.keys.add(frame)
        self.query_one(AlertPane).show(frame)
        self.query_one(GpuPane).show(frame)
        self.query_one(EnginePane).show(frame)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        key = str(event.row_key.value)
        if event.data_table.id == "engine-table" and key.startswith("eng:"):
            self.app.push_screen(FleetEngineScreen(self.node, key.removeprefix("eng:")))
        elif event.data_table.id == "gpu-table" and key.startswith(("gpu:", "mig:")):
            self.app.push_screen(FleetGpuScreen(self.node, int(key.split(":")[1])))


class FleetView(Screen[None]):
    """A view drawn from the fleet's state (``show_state``) at each refresh: one scrolling
    body (``BOX`` its id) over the key bar."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]
    BOX = "fleet-view"

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail"):
            yield Static(id=self.BOX, markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.show_state(cast("FleetApp", self.app).state)

    def show_state(self, state: FleetState) -> None:
        raise NotImplementedError


class FleetDetailScreen(FleetView):
    """One thing of a node as Prometheus holds it (``lines`` draws it from the node's frame),
    said gone when Prometheus' answer no longer has it."""

    def __init__(self, node: str, what: str) -> None:
        super().__init__()
        self.node, self.what = node, what

    def lines(self, frame: Frame) -> list[Text] | None:
        raise NotImplementedError

    def show_state(self, state: FleetState) -> None:
        frame = state.nodes.get(self.node)
        said = self.lines(frame) if frame is not None else None
        self.query_one(f"#{self.BOX}", Static).update(
            Text("\n").join(said)
            if said
            else Text(f"{self.what} is no longer in Prometheus' answer for {self.node}.")
        )


class FleetGpuScreen(FleetDetailScreen):
    """One GPU of a node as its DCGM exporter's series in Prometheus hold it: every field the
    fleet reads, and why the others are missing (the node's own console reads NVML)."""

    BOX = "fleet-gpu"

    def __init__(self, node: str, index: int) -> None:
        super().__init__(node, f"GPU {index}")
        self.index = index

    def lines(self, frame: Frame) -> list[Text] | None:
        g = next((g for g in frame.gpus if g.index == self.index), None)
        return gpu_lines(self.node, g) if g is not None else None


def _field(key: str) -> str:
    """A figure's field as words: 'utilization_gpu_pct' -> 'utilization gpu'."""
    words = key.split("_")
    return " ".join(w for w in words if w not in ("pct", "s", "bytes", "w", "c"))


def gpu_lines(node: str, g: Gpu) -> list[Text]:
    """The fleet's GPU detail: one line per figure, in the node console's words and units."""

    def of(v: float | None, top: float | None, unit: str) -> str:
        if v is None:
            return NA
        return f"{v:,.0f} {unit}" + (f" of {top:,.0f} {unit}" if top else "")

    mem = (
        f"{gib(g.memory_used_bytes)} of {gib(g.memory_total_bytes)} GiB used"
        if g.memory_used_bytes is not None and g.memory_total_bytes
        else f"{gib(g.memory_used_bytes)} GiB used"
        if g.memory_used_bytes is not None
        else NA
    )
    lines = [
        Text.assemble((f"GPU {g.index}  {g.name or NA}", "bold"), f" on {node}"),
        Text(f"uuid {g.uuid or NA}  bus {g.pci_bus_id or NA}"),
        Text(f"memory {mem}"),
        Text(
            f"utilization {NA if g.utilization_gpu_pct is None else f'{g.utilization_gpu_pct:.0f}%'}"
        ),
        Text(f"power {of(g.power_w, g.power_limit_w, 'W')}"),
        Text(f"temperature {NA if g.temperature_c is None else f'{g.temperature_c:.0f}°C'}"),
        Text(f"SM clock {of(g.clock_sm_mhz, g.clock_sm_max_mhz, 'MHz')}"),
        Text(f"memory clock {of(g.clock_mem_mhz, g.clock_mem_max_mhz, 'MHz')}"),
        Text(f"clock events {clock_events_text(g)}"),
    ]
    if g.mig is not None:
        lines.append(Text(f"MIG {'on' if g.mig.current else 'off'}", style="bold"))
        for d in g.mig.devices:
            lines.append(
                Text(
                    f"  {g.index}/{d.index} {d.profile or NA}: "
                    f"{gib(d.memory_used_bytes)} of {gib(d.memory_total_bytes)} GiB used"
                )
            )
    lines += [Text(f"{_field(k)}: {why}", style="dim") for k, why in sorted(g.unavailable.items())]
    lines.append(
        Text(
            f"Prometheus holds these figures (DCGM exporter); limits, ECC, processes and the MIG "
            f"menu are in the console on {node} (inferdeck there).",
            style="dim",
        )
    )
    return lines


class FleetEngineScreen(FleetDetailScreen):
    """One engine of a node as Prometheus holds it: every figure the fleet reads, and why the
    others are missing (the node's own console shows the rest)."""

    BOX = "fleet-engine"

    def __init__(self, node: str, url: str) -> None:
        super().__init__(node, url)
        self.url = url

    def lines(self, frame: Frame) -> list[Text] | None:
        e = next((e for e in frame.engines if e.url == self.url), None)
        if e is None:
            return None
        window = window_label(frame.window_s)
        lines = [
            Text.assemble((f"{e.name}", "bold"), f" on {self.node} ({e.kind or 'kind n/a'})"),
            Text(f"model {e.model or NA}; " + ("up" if e.up else f"DOWN: {e.error}")),
            Text(f"running {num(e.requests_running)}, waiting {num(e.requests_waiting)}"),
            Text(f"KV cache {pct(e.kv_cache_usage, 1)}"),
            Text(f"output {num(e.generation_tokens_per_s, 1)} tok/s over {window}"),
        ]
        for label, p in (("TTFT", e.ttft_s), ("TPOT", e.tpot_s)):
            if p is not None:
                lines.append(
                    Text(
                        f"{label} p50 {seconds(p.p50)}, p95 {seconds(p.p95)}, p99 "
                        f"{seconds(p.p99)} over {window} ({num(p.observations)} requests)"
                    )
                )
        lines.append(Text(f"completion {pct(e.success_rate, 2)}"))
        lines += [Text(f"{_field(k)}: {why}", style="dim") for k, why in e.unavailable.items()]
        lines.append(
            Text(
                f"Prometheus holds these figures; per-rank, speculative, LoRA and memory detail "
                f"are in the console on {self.node} (inferdeck there).",
                style="dim",
            )
        )
        return lines


class FleetTimelineScreen(FleetView):
    """The fleet's timeline (`t`): every node's events, named with their node, and the backend
    not answering, in order."""

    BINDINGS = [Binding("escape,q,t", "app.pop_screen", "Back")]
    BOX = "timeline-body"

    def show_state(self, state: FleetState) -> None:
        until = datetime.fromtimestamp(state.taken_at or time.time(), tz=UTC)
        self.query_one("#timeline-body", Static).update(
            timeline_body(fleet_timeline(state), until, self.app.theme_variables)
        )


class FleetApp(App[None]):
    CSS_PATH = "inferdeck.tcss"
    AUTO_FOCUS = "#fleet-table"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("o", "sort", "Sort"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("escape", "clear", "Clear", show=False),
        Binding("left_square_bracket", "scrub(-300)", "-5m", key_display="["),
        Binding("right_square_bracket", "scrub(300)", "+5m", key_display="]"),
        Binding("0", "live", "Live"),
        Binding("t", "timeline", "Timeline"),
    ]

    def __init__(self, source: FleetSource, interval_s: float = 5.0) -> None:
        super().__init__()
        ScrollBar.renderer = CellScrollBar  # whole-cell scrollbars (Textual's documented hook)
        self.source = source
        self.interval_s = interval_s
        self.state = FleetState()
        self.sort = "node"
        self.filter = ""
        self.columns: tuple[str, ...] = ()  # the column keys shown (fewer at a narrow terminal)

    def compose(self) -> ComposeResult:
        yield Static("inferdeck fleet", id="status", markup=False)
        yield Input(placeholder="filter nodes", id="fleet-filter")
        yield KeyedTable(id="fleet-table", cursor_type="row")
        yield Static(id="fleet-slo", markup=False)
        yield Static(id="fleet-errors", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#fleet-filter", Input).display = False
        self._fit_columns()
        self.poll_loop()

    def _fit_columns(self) -> bool:
        """The columns the width holds, the optional ones dropped first; True if they changed."""
        keys = [k for _, k, _ in COLUMNS]
        need = {k: w + 2 for _, k, w in COLUMNS}  # the cell's padding
        for drop in OPTIONAL:
            if sum(need[k] for k in keys) <= self.size.width:
                break
            keys.remove(drop)
        if tuple(keys) == self.columns:
            return False
        self.columns = tuple(keys)
        t = self.query_one("#fleet-table", KeyedTable)
        t.clear(columns=True)
        for label, key, width in COLUMNS:
            if key in keys:
                t.add_column(label, key=key, width=width)
        return True

    def action_timeline(self) -> None:
        self.push_screen(FleetTimelineScreen())

    def action_help(self) -> None:
        from screens.help import HelpScreen

        self.push_screen(HelpScreen(FLEET_KEYS, general=False, notes=FLEET_NOTES))

    async def on_unmount(self) -> None:
        await self.source.aclose()

    @work(exclusive=True, group="poll", exit_on_error=False)
    async def poll_loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.state = await self.source.poll()
            except Exception as exc:  # noqa: BLE001 - shown, the loop goes on
                self.state.errors["poll"] = f"{type(exc).__name__}: {exc}"
            self.redraw()
            await asyncio.sleep(max(0.2, self.interval_s - (time.monotonic() - started)))

    def redraw(self) -> None:
        self._fit_columns()  # the terminal may have changed size since
        c = theme_colors(self.theme_variables)
        st = self.state
        age = time.time() - st.last_ok if st.last_ok else None
        stale = bool(st.errors) and age is not None
        self.query_one("#status", Static).update(self._header(c, st, age, stale))
        self._table(c, st, stale)
        self._messages(c, st)
        if isinstance(self.screen, (NodeScreen, FleetView)):
            self.screen.show_state(st)

    def _header(self, c: dict[str, str], st: FleetState, age: float | None, stale: bool) -> Text:
        """The status line: where and when the fleet was read, fitted to the width (the least
        needed parts dropped first)."""
        past = self.source.at is not None
        when = time.strftime("%H:%M:%S", time.gmtime(st.taken_at)) + "Z" if st.taken_at else "-"
        hidden = len(COLUMNS) - len(self.columns)
        vm = (st.backend or "").startswith("VictoriaMetrics")
        window = f"window {window_label(self.source.window_s)}"
        note = (
            f" (asked {window_label(self.source.asked_s)}: 4× the {self.source.scrape_s:g} s "
            "scrape)"
            if self.source.window_note()
            else ""
        )
        # (drop order: what goes first when the width is short, 0 never; text; style), in the
        # order drawn. In history the time shown goes first, whole at any width: a fleet read
        # 5 minutes back must never look like the fleet now
        parts: list[tuple[int, str, str]] = [
            (
                0,
                f"AT {when}, {duration_text(time.time() - st.taken_at)} ago (] forward, 0 live)"
                if past and st.taken_at
                else "",
                "bold reverse",
            ),
            (0, "inferdeck fleet", "bold"),
            (9, self.source.client.url, ""),
            (1, f"{len(st.nodes)} nodes", ""),
            (2, window, ""),
            (6, note, ""),
            (7, "rate not extrapolated (VictoriaMetrics)" if vm else "", ""),
            (8, f"sort {self.sort}", ""),
            (5, "" if past else f"live {when}", ""),
            (0, f"last good answer {age:.0f} s ago" if stale else "", f"bold {c['warning']}"),
            (
                3,
                f"{hidden} column{'s' if hidden > 1 else ''} hidden: widen the terminal"
                if hidden
                else "",
                "bold",
            ),
        ]
        parts = [p for p in parts if p[1]]
        width = self.size.width - 2
        while sum(cell_len(t) + 3 for _, t, _ in parts) - 3 > width and any(d for d, _, _ in parts):
            worst = max(d for d, _, _ in parts)
            parts = [p for p in parts if p[0] != worst]
        header = Text()
        for i, (_, text, style) in enumerate(parts):
            if i:
                header.append(" │ " if text != note else "")
            header.append(text, style=style)
        return header

    def _table(self, c: dict[str, str], st: FleetState, stale: bool) -> None:
        """A row per node, filtered and sorted as asked."""
        rows = [
            node_row(n, f, down=st.down.get(n))
            for n, f in st.nodes.items()
            if self.filter in n.lower()
        ]
        key = {
            "node": lambda r: r["node"],
            "alerts": lambda r: -r["alerts"],
            "ttft": lambda r: -(r["ttft"] or 0),
            "tps": lambda r: -(r["tps"] or 0),
        }[self.sort]
        rows.sort(key=key)
        worst_style = {
            "critical": c["error"],
            "warning": c["warning"],
            "ok": c["success"],
            "down": f"bold {c['error']}",
        }

        def cells(r: dict[str, Any]) -> list[Text]:
            dcgm = not st.nodes[r["node"]].gpu_source.error  # else: no DCGM series for the node
            style = c["dim"] if stale or r["down"] else ""  # a node down: its row dimmed
            by_key = {
                "node": Text(r["node"], style=style),
                "gpus": Text(str(r["gpus"]), style=style) if dcgm else Text("n/a", c["dim"]),
                "mig": Text(str(r["mig"]), style=style) if dcgm else Text("n/a", c["dim"]),
                "engines": Text(r["engines"], style=style),
                "worst": Text(r["worst"], style=worst_style[r["worst"]])
                if r["down"]
                else Text(r["worst"], style=style or worst_style[r["worst"]]),
                "ttft": Text(seconds(r["ttft"]) + partial(r, r["ttft"]), style=style),
                "slo": _share(st.summary.get(r["node"]), style),
                "tps": Text(
                    NA if r["tps"] is None else f"{r['tps']:,.0f}{partial(r, r['tps'])}",
                    style=style,
                ),
                "cost": _cost(st.summary.get(r["node"]), style),
                "alerts": Text(str(r["alerts"]), style=style),
                "trend": Text(spark(st.trends.get(r["node"], []), 16), style=c["success"]),
            }
            return [by_key[k] for k in self.columns]

        self.query_one(KeyedTable).sync([(f"node:{r['node']}", cells(r)) for r in rows])

    def _messages(self, c: dict[str, str], st: FleetState) -> None:
        """Warnings, query errors and nodes down under the table; the SLO summary."""
        errors = "\n".join(
            line
            for line in (
                warnings_line(st),
                _errors(st.errors),
                *(f"{n}: down, {why}" for n, why in sorted(st.down.items())[:3]),
                other_down_line(st),
            )
            if line
        )
        if not errors and not st.nodes:
            errors = (
                "No node yet: waiting for Prometheus' first answer."
                if not st.taken_at
                else "Prometheus answered with no node: no DCGM exporter or engine series in "
                "it yet (are they scrape targets?)."
            )
        box = self.query_one("#fleet-errors", Static)
        box.update(Text(errors, style=c["warning"]))
        box.display = bool(errors)
        slo = self.query_one("#fleet-slo", Static)
        slo.update(slo_text(st, c))
        slo.display = bool(st.slo)

    def on_resize(self) -> None:
        self.redraw()  # the columns and the header fit the new width now, not at the next refresh

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "fleet-table":
            self.push_screen(NodeScreen(str(event.row_key.value).split(":", 1)[1]))

    def action_scrub(self, seconds: float) -> None:
        """Replay-like scrubbing of the last hours: every query evaluated at an earlier time."""
        base = self.source.at if self.source.at is not None else time.time()
        target = min(time.time(), base + seconds)
        self.source.at = None if target >= time.time() - 1 else target
        self.poll_loop()

    def action_live(self) -> None:
        self.source.at = None
        self.poll_loop()

    def action_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self.redraw()

    def action_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.display = True
        box.focus()

    def action_clear(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.value, box.display, self.filter = "", False, ""
        self.redraw()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter = event.value.strip().lower()
        self.redraw()
