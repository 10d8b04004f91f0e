"""The GPU pane (a row per GPU and per MIG device, fixed-scale bars, trends) and the GPU detail
screen (every NVML field, the MIG layout, and a sortable, filterable process table)."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Input, Static

from console.figures.columns import GPU_COLUMNS, GPU_PANE, GpuRow, gpu_rows, pick
from console.frame import Frame, GpmActivity, Gpu, GpuProcess
from console.units import NA, gib, num, watts, workload_text
from screens.charts import ChartRow, SeriesChart
from screens.widgets import (
    DeckScreen,
    KeyBar,
    KeyedTable,
    Quiet,
    TablePane,
    bar,
    bar_cell,
    cell,
    spark,
    theme_colors,
)

SHOWN = pick(GPU_COLUMNS, GPU_PANE)
TREND = ("Trend power", "trend", 16)  # the pane's own: the GPU's power over its history
HOT = {"power cap", "thermal (SW)", "thermal (HW)", "HW slowdown", "power brake (HW)"}


def activity_text(a: GpmActivity) -> str:
    parts = [
        f"{label} {v:.0f}%"
        for label, v in (
            ("graphics", a.graphics_pct),
            ("SM", a.sm_pct),
            ("occupancy", a.sm_occupancy_pct),
            ("tensor", a.tensor_pct),
            ("DRAM bw", a.dram_bw_pct),
            ("NVDEC", a.nvdec_pct),
        )
        if v is not None
    ]
    if a.pcie_tx_mib_s is not None or a.pcie_rx_mib_s is not None:
        parts.append(f"PCIe out/in {num(a.pcie_tx_mib_s)}/{num(a.pcie_rx_mib_s)} MiB/s")
    return ", ".join(parts) + f" (over {a.interval_s:.1f} s)"


def _frac(used: float | None, total: float | None) -> float | None:
    return used / total if used is not None and total else None


def _mem(r: GpuRow, text: str, c: dict[str, str]) -> Text:
    of = r.mig or r.gpu
    used, total = of.memory_used_bytes, of.memory_total_bytes
    if used is None or total is None:
        return cell(text, c["dim"])
    return bar_cell(_frac(used, total), 6, c, 0.9, 0.98, f" {text}")


def _util(r: GpuRow, text: str, c: dict[str, str]) -> Text:
    """The GPU's utilisation, or a MIG device's GPM graphics activity, with its bar."""
    if r.mig is not None:
        a = r.mig.activity
        v = a.graphics_pct if a is not None else None
    else:
        v = r.gpu.utilization_gpu_pct
    if v is None:
        return cell(text, c["dim"])
    return bar_cell(min(v, 100.0) / 100 if r.mig else v / 100, 4, c, 0.9, 0.99, text)


def _power(r: GpuRow, text: str, c: dict[str, str]) -> Text:
    g = r.gpu
    if r.mig is not None:
        return cell("")
    if g.power_w is None:
        return cell(text, c["dim"])
    if not g.power_limit_w:  # a draw without its limit (DCGM in the fleet): no bar to fill
        return cell(text)
    capped = bool(g.clock_events and "power cap" in g.clock_events)
    return bar_cell(
        g.power_w / g.power_limit_w, 4, c, 0.95, 0.99, text, c["warning"] if capped else ""
    )


def _temp(r: GpuRow, text: str, c: dict[str, str]) -> Text:
    g = r.gpu
    if r.mig is not None:
        return cell("")
    if g.temperature_c is None:
        return cell(text, c["dim"])
    frac = g.temperature_c / g.temperature_slowdown_c if g.temperature_slowdown_c else None
    hot = bool(g.clock_events and {"thermal (SW)", "thermal (HW)"} & set(g.clock_events))
    return Text.assemble(
        bar(frac, 3, c, 0.9, 0.97) if frac is not None else "", (text, c["error"] if hot else "")
    )


def _events(r: GpuRow, text: str, c: dict[str, str]) -> Text:
    g = r.gpu
    if r.mig is not None:
        return cell("")
    if not g.clock_events:  # unread, or none
        return cell(text, c["dim"])
    return Text(", ").join(
        Text(e, style=f"bold {c['warning']}" if e in HOT else c["dim"]) for e in g.clock_events
    )


def _device(r: GpuRow, text: str, c: dict[str, str], wide: bool) -> Text:
    name = Text(text, overflow="ellipsis", no_wrap=True)
    g = r.gpu
    if r.mig is None and g.mig and g.mig.current != g.mig.pending:  # a re-cut pending: ⟳
        name.truncate(13 if not wide else 21, overflow="ellipsis")
        name.append(" ⟳", style=f"bold {c['warning']}")
    return name


STYLES = {"memory": _mem, "util": _util, "power": _power, "temp": _temp, "events": _events}


class GpuPane(TablePane):
    def __init__(self) -> None:
        super().__init__("GPUs", id="gpus")

    def compose(self) -> ComposeResult:
        yield Quiet("", id="gpu-note")
        table = KeyedTable(id="gpu-table", cursor_type="row", zebra_stripes=False)
        table.parent_of = lambda key: f"gpu:{key.split(':')[1]}" if key.startswith("mig:") else None
        yield table

    def columns(self, wide: bool) -> list[tuple[str, str, int]]:
        shown = [
            (col.label, col.key, col.width_at(wide)) for col in SHOWN if wide or not col.wide_only
        ]
        return shown + [TREND] if wide else shown

    def fill(self, frame: Frame) -> None:
        self.frame = frame
        c = self.palette()
        note = self.query_one("#gpu-note", Static)
        text = frame.gpu_source.error or frame.gpu_source.note or ""
        note.update(text)
        note.display = bool(text)
        rows = [
            (
                f"gpu:{r.gpu.index}" if r.mig is None else f"mig:{r.gpu.index}:{r.mig.index}",
                self._row(r, c),
            )
            for r in gpu_rows(frame.gpus)
        ]
        table = self.query_one(KeyedTable)
        table.sync(rows)
        table.display = bool(rows)

    def _row(self, r: GpuRow, c: dict[str, str]) -> list[Text]:
        shown = [col for col in SHOWN if self.wide or not col.wide_only]
        g = r.gpu
        if r.mig is None and (g.fault or "gpu" in g.unavailable):
            reason = g.fault or g.unavailable["gpu"]
            cells = [
                Text(str(g.index), style=f"bold {c['error']}"),
                Text("LOST" if g.fault else "ERROR", style=f"bold {c['error']}"),
                Text(reason, style=c["error"], overflow="ellipsis", no_wrap=True),
            ]
            return cells + [cell("")] * (len(shown) + bool(self.wide) - len(cells))
        cells = []
        for col in shown:
            text = col.short(r)
            if col.key == "gpu":
                cells.append(cell(text, "bold" if r.mig is None else ""))
            elif col.key == "device":
                cells.append(_device(r, text, c, bool(self.wide)))
            else:
                cells.append(STYLES.get(col.key, lambda r, t, c: cell(t))(r, text, c))
        if self.wide and r.mig is None:
            cells.append(cell(spark(self.trend(f"gpu{g.index}.power_w", 16), 16), c["success"]))
        elif self.wide:
            cells.append(cell(""))
        return cells

    def selected_gpu(self) -> int | None:
        table = self.query_one(KeyedTable)
        if not table.row_count:
            return None
        key = str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        return int(key.split(":")[1])


SORTS = {
    "memory": lambda r: -(r[1].used_memory_bytes or 0),
    "pid": lambda r: r[1].pid,
    "user": lambda r: (r[1].user or "~", r[1].pid),
}


class GpuDetailScreen(DeckScreen):
    """Every field of one GPU, its MIG layout and its processes; redrawn on every frame."""

    AUTO_FOCUS = "#detail"  # PageDown, End and the arrows scroll the view at once

    BINDINGS = [
        Binding("escape,q", "back", "Back"),
        Binding("M", "sort('memory')", "Sort mem"),
        Binding("P", "sort('pid')", "Sort pid"),
        Binding("U", "sort('user')", "Sort user"),
        Binding("slash", "filter", "Filter", key_display="/"),
    ]

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index
        self.sort = "memory"
        self.reverse = False  # the same sort key again turns the order round, as in k9s
        self.filter = ""

    def compose(self) -> ComposeResult:
        yield Quiet(id="status")  # the header, as on the dashboard
        with VerticalScroll(id="detail"):
            yield Quiet(id="gpu-head")
            with ChartRow():
                yield SeriesChart(id="chart-power")
                yield SeriesChart(id="chart-temp")
            yield Quiet(id="gpu-fields")
            yield SeriesChart(id="chart-mig")
            yield Quiet(id="gpu-mig")
            yield Quiet("Processes", id="proc-title")
            yield Input(
                placeholder="filter processes (pid, user, command, engine, pod); enter to apply, esc to clear",
                id="proc-filter",
            )
            yield KeyedTable(id="proc-table", cursor_type="row")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#proc-filter", Input).display = False
        t = self.query_one("#proc-table", KeyedTable)
        for label, key, width in (
            ("Device", "dev", 7),
            ("PID", "pid", 8),
            ("User", "user", 10),
            ("Memory", "mem", 9),
            ("GI/CI", "gici", 6),
            ("Engine", "engine", 14),
            ("Pod / container", "pod", 24),
            ("Command", "cmd", 60),
        ):
            t.add_column(label, key=key, width=width)
        if self.deck.frame is not None:
            self.show(self.deck.frame)

    def action_back(self) -> None:
        box = self.query_one("#proc-filter", Input)
        if box.display:
            box.display = False
            self.filter = box.value = ""
            self._redraw()
        else:
            self.app.pop_screen()

    def action_sort(self, key: str) -> None:
        self.reverse = not self.reverse if key == self.sort else False
        self.sort = key
        self._redraw()
        self.query_one("#proc-title").scroll_visible(animate=False)  # what the key changed

    def action_filter(self) -> None:
        box = self.query_one("#proc-filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter = event.value.strip().lower()
        self._redraw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#proc-table", KeyedTable).focus()

    def _redraw(self) -> None:
        if self.deck.frame is not None:
            self.show(self.deck.frame)

    def show(self, frame: Frame) -> None:
        g = next((x for x in frame.gpus if x.index == self.index), None)
        if g is None:
            return
        c = theme_colors(self.app.theme_variables)
        self.query_one("#gpu-head", Static).update(_head(frame, g, c))
        self._charts(g)
        self.query_one("#gpu-fields", Static).update(self._fields(g, c))
        self.query_one("#gpu-mig", Static).update(self._mig(g, c))
        self._process_table(g, c)

    def _charts(self, g: Gpu) -> None:
        keys, i = self.deck.keys, g.index
        self.query_one("#chart-power", SeriesChart).draw(
            keys,
            "power (W)",
            [("power", f"gpu{i}.power_w", 1.0)],
            [("limit", g.power_limit_w)] if g.power_limit_w else [],
        )
        self.query_one("#chart-temp", SeriesChart).draw(
            keys,
            "temperature (°C)",
            [("temp", f"gpu{i}.temperature_c", 1.0)],
            [("slowdown", g.temperature_slowdown_c)] if g.temperature_slowdown_c else [],
        )
        mig = self.query_one("#chart-mig", SeriesChart)
        devices = g.mig.devices if g.mig and g.mig.current else []
        mig.display = bool(devices)
        if devices:
            mig.draw(
                keys,
                "MIG instances: GPM graphics activity (%)",
                [
                    (f"{i}/{d.index} {d.profile or ''}", f"gpu{i}.mig{d.index}.activity_pct", 1.0)
                    for d in devices
                ],
            )

    def _process_table(self, g: Gpu, c: dict[str, str]) -> None:
        """Its processes (MIG devices' too), filtered and sorted as asked."""
        rows = []
        for dev, p in self._processes(g):
            pod = workload_text(p.workload)
            hay = f"{p.pid} {p.user or ''} {p.command or ''} {p.engine or ''} {pod} {dev}".lower()
            if self.filter and self.filter not in hay:
                continue
            rows.append((dev, p))
        rows.sort(key=SORTS[self.sort], reverse=self.reverse)
        gi_ci = {}
        for d in g.mig.devices if g.mig else []:
            gi_ci[f"{g.index}/{d.index}"] = f"{d.gpu_instance_id}/{d.compute_instance_id}"
        self.query_one("#proc-title", Static).update(
            Text.assemble(
                (f"Processes ({len(rows)})", "bold"),
                (
                    f"  sorted by {self.sort}{' (reversed)' if self.reverse else ''}; M/P/U "
                    "sort (again: reverse), / filter",
                    c["dim"],
                ),
            )
        )
        self.query_one("#proc-table", KeyedTable).sync(
            [(f"{dev}:{p.pid}", _process_cells(dev, p, gi_ci.get(dev, "-"), c)) for dev, p in rows]
        )

    @staticmethod
    def _processes(g: Gpu) -> list[tuple[str, GpuProcess]]:
        out = [(str(g.index), p) for p in g.processes]
        for d in g.mig.devices if g.mig else []:
            out += [(f"{g.index}/{d.index}", p) for p in d.processes]
        return out

    @staticmethod
    def _fields(g: Gpu, c: dict[str, str]) -> Text:
        t = Text()

        def line(label: str, value: str, fld: str | None = None, style: str = "") -> None:
            if fld and fld in g.unavailable and NA in value:
                value = f"n/a — {g.unavailable[fld]}"
            t.append(f"{label:<22}", style="bold")
            t.append(value + "\n", style=style)

        _usage(g, line)
        _clocks_power(g, line)
        _health(g, c, line)
        return t

    @staticmethod
    def _mig(g: Gpu, c: dict[str, str]) -> Text:
        t = Text()
        if g.mig is None:
            t.append("MIG: not supported on this GPU\n", style=c["dim"])
            return t
        m = g.mig
        t.append("MIG mode  ", style="bold")
        t.append(f"current {'on' if m.current else 'off'}, pending {'on' if m.pending else 'off'}")
        if m.note:
            t.append(f"  [{m.note}]", style=f"bold {c['warning']}")
        t.append("\n")
        for reason in m.unavailable.values():
            t.append(f"  {reason}\n", style=c["warning"])
        for gi in m.instances:
            cis = (
                ", ".join(f"CI {ci.id} {ci.profile}" for ci in gi.compute_instances)
                or "no compute instance"
            )
            t.append(
                f"  GI {gi.id:<2} {gi.profile or NA:<12} placement {gi.placement_start}:{gi.placement_size}"
                f"   {cis}\n"
            )
        shown: set[int | None] = set()
        for d in m.devices:
            if d.gpu_instance_id in shown:
                continue
            shown.add(d.gpu_instance_id)
            what = (
                activity_text(d.activity)
                if d.activity is not None
                else f"n/a — {d.unavailable.get('activity', 'not read')}"
            )
            t.append(f"  GI {d.gpu_instance_id} activity: ", style="bold")
            t.append(what + "\n")
        return t


def _head(frame: Frame, g: Gpu, c: dict[str, str]) -> Text:
    head = Text.assemble(
        (f"GPU {g.index}  {g.name or NA}", "bold"),
        f"\n{g.uuid or NA}  bus {g.pci_bus_id or NA}"
        f"  {g.architecture or ''}  driver {frame.gpu_source.driver_version or NA}"
        f"  CUDA {frame.gpu_source.cuda_driver_version or NA}"
        f"  NVML {frame.gpu_source.nvml_version or NA}",
    )
    if g.fault:
        head.append(f"\n{g.fault}", style=f"bold {c['error']}")
    return head


def _process_cells(dev: str, p: GpuProcess, gi_ci: str, c: dict[str, str]) -> list[Text]:
    return [
        Text(dev),
        Text(str(p.pid)),
        Text(p.user or "?"),
        Text(gib(p.used_memory_bytes) + "G" if p.used_memory_bytes is not None else NA),
        Text(gi_ci),
        Text(p.engine or "-"),
        Text(workload_text(p.workload), no_wrap=True, overflow="ellipsis"),
        Text(
            p.command or "not visible from here",
            style="" if p.command else c["dim"],
            no_wrap=True,
            overflow="ellipsis",
        ),
    ]


Line = Callable[..., None]  # a detail line: label, value, the field it reads, a style


def _usage(g: Gpu, line: Line) -> None:
    line(
        "memory used/total",
        f"{gib(g.memory_used_bytes)} / {gib(g.memory_total_bytes)} GiB",
        "memory_used_bytes",
    )
    line("memory reserved", f"{gib(g.memory_reserved_bytes)} GiB", "memory_reserved_bytes")
    line(
        "BAR1 used/total",
        f"{gib(g.bar1_used_bytes)} / {gib(g.bar1_total_bytes)} GiB",
        "bar1_used_bytes",
    )
    line(
        "utilisation gpu/mem",
        f"{num(g.utilization_gpu_pct)}% / {num(g.utilization_memory_pct)}%",
        "utilization_gpu_pct",
    )
    if g.activity is not None:
        line("activity (GPM)", activity_text(g.activity))
    elif "activity" in g.unavailable and not (g.mig and g.mig.current):
        line("activity (GPM)", NA, "activity")
    line("persistence mode", {True: "on", False: "off", None: NA}[g.persistence_mode])


def _mhz(v: int | None) -> str:
    return f"{v} MHz" if v is not None else NA


def _clocks_power(g: Gpu, line: Line) -> None:
    line("SM clock", f"{_mhz(g.clock_sm_mhz)} of {_mhz(g.clock_sm_max_mhz)}", "clock_sm_mhz")
    line("memory clock", f"{_mhz(g.clock_mem_mhz)} of {_mhz(g.clock_mem_max_mhz)}", "clock_mem_mhz")
    line("performance state", f"P{g.pstate}" if g.pstate is not None else NA, "pstate")
    line(
        "power (1 s avg)",
        f"{watts(g.power_w)} of {watts(g.power_limit_w)} enforced, "
        f"{watts(g.power_default_limit_w)} default",
        "power_w",
    )
    line(
        "energy since load",
        f"{g.energy_j / 3.6e6:.3f} kWh" if g.energy_j is not None else NA,
        "energy_j",
    )
    line(
        "temperature",
        f"{num(g.temperature_c)} °C (slowdown {num(g.temperature_slowdown_c)}, "
        f"shutdown {num(g.temperature_shutdown_c)})",
        "temperature_c",
    )
    line("fan", f"{num(g.fan_pct)}%" if g.fan_pct is not None else NA, "fan_pct")


def _health(g: Gpu, c: dict[str, str], line: Line) -> None:
    active = g.clock_events or []
    line(
        "clock events",
        ", ".join(active) if active else ("none" if g.clock_events is not None else NA),
        "clock_events",
        style=f"bold {c['warning']}" if HOT & set(active) else "",
    )
    ecc = NA if g.ecc_enabled is None else ("on" if g.ecc_enabled else "off")
    if g.ecc_pending is not None and g.ecc_pending != g.ecc_enabled:
        ecc += " (change pending)"
    line("ECC", ecc, "ecc_enabled")
    line(
        "ECC volatile corr/unc",
        f"{num(g.ecc_corrected_volatile)} / {num(g.ecc_uncorrected_volatile)}",
        "ecc_corrected_volatile",
        style=c["error"] if (g.ecc_uncorrected_volatile or 0) > 0 else "",
    )
    if g.remapped_rows is not None:
        r = g.remapped_rows
        line(
            "remapped rows",
            f"{r.correctable} correctable, {r.uncorrectable} uncorrectable"
            + (", remap pending (reset the GPU)" if r.pending else "")
            + (", REMAP FAILED" if r.failure else ""),
            style=c["error"] if r.failure or r.pending else "",
        )
    else:
        line("retired pages", num(g.retired_pages), "retired_pages")
