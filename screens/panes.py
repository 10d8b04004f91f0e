"""Dashboard panes. Each draws from a Frame only; keyed DataTable updates, never clear-and-refill."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.color import Color
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from console.frame import Engine, Frame, Gpu, Percentiles
from console.units import GIB, NA, num, seconds

BAR_FULL = "█"
BAR_EMPTY = "░"


def bar(frac: float | None, width: int, colors: dict[str, str], warn: float = 0.8, crit: float = 0.95) -> Text:
    """A fixed-scale bar (0..1 always spans the same width), coloured by level."""
    if frac is None:
        return Text(" " * width)
    frac = min(max(frac, 0.0), 1.0)
    filled = round(frac * width)
    level = "error" if frac >= crit else "warning" if frac >= warn else "success"
    return Text.assemble((BAR_FULL * filled, colors[level]), (BAR_EMPTY * (width - filled), colors["dim"]))


def short_gpu_name(name: str | None) -> str:
    if not name:
        return NA
    name = name.removeprefix("NVIDIA ")
    return name.replace("Blackwell Server Edition", "BSE").replace(" Blackwell", "")


class KeyedTable(DataTable):
    """A DataTable updated by row key: changed cells only; order changes rebuild once."""

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

    def __init__(self, title: str, **kw: object) -> None:
        super().__init__(**kw)
        self.border_title = title

    def colors(self) -> dict[str, str]:
        return theme_colors(self.app.theme_variables)


def theme_colors(v: dict[str, str]) -> dict[str, str]:
    """Theme variables as opaque colours Rich can draw (some carry alpha, e.g. muted text)."""
    background = Color.parse(v.get("background", "black"))

    def solid(name: str, fallback: str) -> str:
        try:
            return (background + Color.parse(v.get(name, fallback))).hex6
        except Exception:  # noqa: BLE001 - a theme without the variable falls back
            return (background + Color.parse(fallback)).hex6

    return {"success": solid("success", "green"), "warning": solid("warning", "yellow"),
            "error": solid("error", "red"), "dim": solid("foreground-muted", "grey")}


class GpuPane(Pane):
    def __init__(self) -> None:
        super().__init__("GPUs", id="gpus")

    def compose(self) -> ComposeResult:
        yield Static("", id="gpu-note")
        t = KeyedTable(id="gpu-table", cursor_type="row", zebra_stripes=False)
        for label, width in (("GPU", 4), ("Device", 16), ("Memory", 21), ("Util", 9), ("Power", 9), ("Temp", 5)):
            t.add_column(label, key=label.lower(), width=width)
        yield t

    def show(self, frame: Frame) -> None:
        c = self.colors()
        note = self.query_one("#gpu-note", Static)
        note.update(frame.gpu_source.error or "")
        note.display = bool(frame.gpu_source.error)
        rows: list[tuple[str, list[object]]] = []
        for g in frame.gpus:
            rows.append((f"gpu:{g.index}", self._gpu_row(g, c)))
            for d in g.mig.devices if g.mig else []:
                frac = (d.memory_used_bytes / d.memory_total_bytes
                        if d.memory_used_bytes is not None and d.memory_total_bytes else None)
                where = f"@{d.placement_start}" if d.placement_start is not None else ""
                rows.append((f"mig:{g.index}:{d.index}", [
                    Text(f" {g.index}/{d.index}"),
                    Text(f"└ {d.profile or d.unavailable.get('profile', NA)}{where}", overflow="ellipsis", no_wrap=True),
                    _mem(d.memory_used_bytes, d.memory_total_bytes, frac, c),
                    Text("n/a MIG", style=c["dim"]), Text(""), Text(""),
                ]))
        table = self.query_one(KeyedTable)
        table.sync(rows)
        table.display = bool(rows)

    @staticmethod
    def _gpu_row(g: Gpu, c: dict[str, str]) -> list[object]:
        if g.fault or "gpu" in g.unavailable:
            reason = g.fault or g.unavailable["gpu"]
            return [Text(str(g.index), style=f"bold {c['error']}"), Text("LOST" if g.fault else "ERROR", style=f"bold {c['error']}"),
                    Text(reason, style=c["error"], overflow="ellipsis", no_wrap=True), Text(""), Text(""), Text("")]
        mem_frac = (g.memory_used_bytes / g.memory_total_bytes
                    if g.memory_used_bytes is not None and g.memory_total_bytes else None)
        name = short_gpu_name(g.name)
        if g.mig and g.mig.current != g.mig.pending:
            name += " ⟳"
        if g.utilization_gpu_pct is None:
            util = Text(g.unavailable.get("utilization_gpu_pct", NA).replace("n/a under MIG", "n/a MIG"),
                        style=c["dim"])
        else:
            util = Text.assemble(bar(g.utilization_gpu_pct / 100, 4, c, 0.9, 0.99), f"{g.utilization_gpu_pct:4.0f}%")
        if g.power_w is not None and g.power_limit_w:
            power = Text.assemble((f"{g.power_w:.0f}", _level(g.power_w / g.power_limit_w, c, 0.95, 0.99)),
                                  f"/{g.power_limit_w:.0f}W")
        else:
            power = Text(g.unavailable.get("power_w", NA), style=c["dim"])
        temp = Text(f"{g.temperature_c:.0f}°C" if g.temperature_c is not None else NA)
        return [Text(str(g.index), style="bold"), Text(name, overflow="ellipsis", no_wrap=True),
                _mem(g.memory_used_bytes, g.memory_total_bytes, mem_frac, c), util, power, temp]


def _level(frac: float, c: dict[str, str], warn: float, crit: float) -> str:
    return c["error"] if frac >= crit else c["warning"] if frac >= warn else ""


def _mem(used: int | None, total: int | None, frac: float | None, c: dict[str, str]) -> Text:
    if used is None or total is None:
        return Text(NA, style=c["dim"])
    return Text.assemble(bar(frac, 8, c, 0.9, 0.98), f" {used / GIB:4.1f}/{total / GIB:.0f}G")


def _pct(p: Percentiles | None, name: str) -> Text:
    if p is None:
        return Text(NA)
    value = getattr(p, name)
    text = seconds(value, name in p.lower_bound_only)
    if p.window == "since_start":
        return Text(text + "*")
    return Text(text)


class EnginePane(Pane):
    def __init__(self) -> None:
        super().__init__("Engines", id="engines")

    def compose(self) -> ComposeResult:
        t = KeyedTable(id="engine-table", cursor_type="row")
        for label, key, width in (("Engine", "engine", 14), ("Kind", "kind", 5), ("Run", "run", 4), ("Wait", "wait", 4),
                                  ("KV", "kv", 10), ("tok/s", "tps", 6), ("TTFT95", "ttft", 7), ("ITL95", "itl", 6)):
            t.add_column(label, key=key, width=width)
        yield t
        yield Static("", id="engine-errors")

    def show(self, frame: Frame) -> None:
        c = self.colors()
        rows = [(f"eng:{e.url}", self._row(e, c)) for e in frame.engines]
        self.query_one(KeyedTable).sync(rows)
        errors = [Text.assemble((f"{e.name}: ", f"bold {c['error']}"), e.error or "down") for e in frame.engines if not e.up]
        if not frame.engines:
            errors = [Text("No engines: pass --engine URL, or run `inferdeck demo`.", style=c["dim"])]
        box = self.query_one("#engine-errors", Static)
        box.update(Text("\n").join(errors))
        box.display = bool(errors)

    @staticmethod
    def _row(e: Engine, c: dict[str, str]) -> list[object]:
        dot = Text("● ", style=c["success"] if e.up else c["error"])
        name = Text.assemble(dot, e.name)
        name.truncate(14, overflow="ellipsis")
        if not e.up:
            down = Text("down", style=f"bold {c['error']}")
            return [name, Text(e.kind or "?"), down, Text(""), Text(""), Text(""), Text(""), Text("")]
        kv = (Text.assemble(bar(e.kv_cache_usage, 5, c, 0.9, 0.97), f"{e.kv_cache_usage * 100:4.0f}%")
              if e.kv_cache_usage is not None else Text(NA))
        return [name, Text(e.kind or "?"), Text(num(e.requests_running)), Text(num(e.requests_waiting)), kv,
                Text(num(e.generation_tokens_per_s)), _pct(e.ttft_s, "p95"), _pct(e.itl_s, "p95")]


class AlertPane(Pane):
    def __init__(self) -> None:
        super().__init__("Alerts", id="alerts")

    def compose(self) -> ComposeResult:
        yield Static("", id="alert-lines")

    def show(self, frame: Frame) -> None:
        c = self.colors()
        self.border_title = f"Alerts ({len(frame.alerts)})"
        if not frame.alerts:
            text = Text("No active alerts.", style=c["success"])
        else:
            lines = []
            for a in frame.alerts:
                sev = {"critical": ("CRIT", c["error"]), "warning": ("WARN", c["warning"])}.get(a.severity, ("INFO", ""))
                line = Text.assemble((f"{sev[0]} ", f"bold {sev[1]}"), (f"{a.since:%H:%M:%S} ", c["dim"]),
                                     (f"{a.subject}: ", "bold"), a.message, no_wrap=True, overflow="ellipsis")
                lines.append(line)
            text = Text("\n").join(lines)
        self.query_one("#alert-lines", Static).update(text)
