"""Dashboard panes for GPUs and alerts. Each draws from a Frame only."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from console.frame import Frame, Gpu
from console.units import NA
from screens.widgets import KeyedTable, Pane, bar, level, mem_cell, short_gpu_name


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
                    mem_cell(d.memory_used_bytes, d.memory_total_bytes, frac, c),
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
            power = Text.assemble((f"{g.power_w:.0f}", level(g.power_w / g.power_limit_w, c, 0.95, 0.99)),
                                  f"/{g.power_limit_w:.0f}W")
        else:
            power = Text(g.unavailable.get("power_w", NA), style=c["dim"])
        temp = Text(f"{g.temperature_c:.0f}°C" if g.temperature_c is not None else NA)
        return [Text(str(g.index), style="bold"), Text(name, overflow="ellipsis", no_wrap=True),
                mem_cell(g.memory_used_bytes, g.memory_total_bytes, mem_frac, c), util, power, temp]


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
