"""SLO and cost panes (compact rows per planned service) and the service detail screen, with the
what-if crossover calculator. They draw from Frames only."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Input, Static

from console.figures.columns import COST_COLUMNS, SLO_COLUMNS, SLO_PANE, pick
from console.figures.cost import crossover, serving_goodput
from console.figures.findings import strays
from console.figures.slo import BURN_READY_S, OBJECTIVES, SLOW_BURN, time_to_page_s
from console.figures.thresholds import at_least
from console.figures.windowed import parse_window
from console.frame import Frame, Headroom, ServiceStatus, SloReport, TargetReport
from console.units import (
    FEW,
    NA,
    capacity_text,
    duration_text,
    eta_text,
    money,
    num,
    pct,
    price_range,
    saturation_text,
    seconds,
    share_range,
    target_text,
)
from screens.charts import ChartRow, SeriesChart
from screens.widgets import DeckScreen, KeyBar, KeyedTable, Pane, Quiet, theme_colors


def _target(entry: TargetReport | None, text: str, c: dict[str, str]) -> Text:
    """The observed figure coloured met / missed (dim over few requests), its target dim."""
    if entry is None or entry.observed_s is None:
        return Text(text, style=c["dim"])
    style = c["success"] if entry.met else c["error"]
    if entry.requests is not None and entry.requests < FEW:  # few requests: with their count
        style = c["dim"]
    observed, _, target = text.rpartition("/")
    return Text.assemble((observed, style), (f"/{target}", c["dim"]))


def _pct(v: float | None) -> str:
    return NA if v is None else f"{v * 100:.1f}"


def _burn(slo: SloReport | None, text: str, c: dict[str, str]) -> Text:
    """Red from the slow-burn alert's threshold, on windows that hold enough to alert on."""
    w = slo.burn.windows if slo and slo.burn else {}
    got = [(b.burn, b.ready) for b in (w.get("5m"), w.get("1h")) if b is not None]
    burns = [(v, ready) for v, ready in got if v is not None]
    if not burns:
        return Text(text, style=c["dim"])
    hot = any(ready is not False and at_least(v, SLOW_BURN) for v, ready in burns)
    return Text(text, style=c["error"] if hot else "")


def _slo_cell(s: ServiceStatus, key: str, text: str, c: dict[str, str]) -> Text:
    slo = s.slo
    targets = slo.targets if slo else {}
    if key in ("ttft", "tpot"):
        return _target(targets.get(f"{key}_s"), text, c)
    if key == "done":
        comp = slo.completion if slo else None
        if comp is None or comp.observed is None:
            return Text(text, style=c["dim"])
        return Text(text, style=c["success"] if comp.met else c["error"])
    if key == "good":
        return Text(text, style="" if slo and slo.good_share else c["dim"])
    if key == "burn":
        return _burn(slo, text, c)
    return Text(text)


# each headroom's figure at the precision it is known to, and what its budget is
_DIGITS = {"GiB": 2, "seqs": 1, "W": 0, "°C": 0, "waiting": 0, "s down": 0}
_BUDGET = {
    "memory": "warn under a {v} {u} margin",
    "kv": "plan: {v} seqs",
    "queue": "plan: none waiting",
    "power": "warn within {v} {u} of the cap",
    "thermal": "warn within {v} {u} of slowdown",
}


def _headroom_value(h: Headroom) -> str:
    return f"{h.value:,.{_DIGITS.get(h.unit, 2)}f} {h.unit}" if h.value is not None else NA


def _budget_words(h: Headroom) -> str:
    """What a headroom's budget is, in its own words ("budget" meant a margin for memory, the
    planned sequences for KV and a warning distance for power and thermal)."""
    if h.budget is None:
        return ""
    v = f"{h.budget:,.{0 if h.name == 'kv' else _DIGITS.get(h.unit, 2)}f}"  # whole sequences
    return "(" + _BUDGET.get(h.name, "budget {v} {u}").format(v=v, u=h.unit) + ")"


SLO_SHOWN = pick(SLO_COLUMNS, SLO_PANE)


class SloPane(Pane):
    def __init__(self) -> None:
        super().__init__("SLO", id="slo")

    def compose(self) -> ComposeResult:
        t = KeyedTable(id="slo-table", cursor_type="row")
        for col in SLO_SHOWN:
            t.add_column(col.label, key=col.key, width=col.width_at(False))
        yield t

    def show(self, frame: Frame) -> None:
        c = self.palette()
        rows = [
            (f"slo:{s.name}", [_slo_cell(s, col.key, col.short(s), c) for col in SLO_SHOWN])
            for s in frame.services
        ]
        win = next((s.slo.window for s in frame.services if s.slo and s.slo.window), None)
        self.set_title(
            f"SLO ({win or 'per service window'}): observed/target, completion, good share, burn"
        )
        self.query_one(KeyedTable).sync(rows)
        self.display = bool(frame.services)


class CostPane(Pane):
    def __init__(self) -> None:
        super().__init__("Cost", id="cost")

    def compose(self) -> ComposeResult:
        t = KeyedTable(id="cost-table", cursor_type="row")
        for col in COST_COLUMNS:
            t.add_column(col.label, key=col.key, width=col.width_at(False))
        yield t

    def show(self, frame: Frame) -> None:
        c = self.palette()
        node = frame.cost
        if node:
            self.set_title(
                f"Cost: node {money(node.usd_per_h)}/h + energy {money(node.energy.usd_per_h)}/h "
                f"({node.energy.basis or 'no power reading'})"
            )
        rows = []
        for s in frame.services:
            cells = []
            for col in COST_COLUMNS:
                text = col.text(s)
                if col.key == "service":
                    text = text[: col.width_at(False)]
                dim = col.key == "jtok" and text == NA  # no energy reading behind it
                cells.append(Text(text, style=c["dim"] if dim else ""))
            rows.append((f"cost:{s.name}", cells))
        self.query_one(KeyedTable).sync(rows)
        self.display = bool(frame.services) and frame.cost is not None


class ServiceDetailScreen(DeckScreen):
    """One service: plan fit, headroom, SLO figures with their basis, cost meters and the what-if."""

    AUTO_FOCUS = "#detail"  # PageDown, End and the arrows scroll the view at once

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.service = name

    def compose(self) -> ComposeResult:
        yield Quiet(id="status")  # the header, as on the dashboard
        with VerticalScroll(id="detail"):
            with ChartRow():
                yield SeriesChart(id="chart-slo")
                yield SeriesChart(id="chart-queue")
            yield Quiet(id="svc-body")
            yield Static(
                "What-if: a candidate system's three-year cost (USD), its expected busy share "
                "(0..1, default this node's) and its goodput (tok/s):",
                id="whatif-title",
            )
            yield Input(placeholder="e.g. 30000 0.4 250", id="whatif")
            yield Static(id="whatif-result", markup=False)
        yield KeyBar()

    def on_mount(self) -> None:
        if self.deck.frame is not None:
            self.show(self.deck.frame)

    def _status(self, frame: Frame) -> ServiceStatus | None:
        return next((s for s in frame.services if s.name == self.service), None)

    def show(self, frame: Frame) -> None:
        s = self._status(frame)
        if s is None:
            return
        c = theme_colors(self.app.theme_variables)
        keys, n = self.deck.keys, s.engine
        lines = []
        if s.slo is not None:
            lines = [
                (f"{key.removesuffix('_s').upper()} SLO", t.target_s * 1000)
                for key, t in s.slo.targets.items()
                if key in ("ttft_s", "tpot_s")
            ]
        self.query_one("#chart-slo", SeriesChart).draw(
            keys,
            "TTFT / TPOT p95 against the SLO (ms)",
            [("TTFT p95", f"{n}.ttft_p95_s", 1000.0), ("TPOT p95", f"{n}.tpot_p95_s", 1000.0)],
            lines,
        )
        self.query_one("#chart-queue", SeriesChart).draw(
            keys,
            "waiting / running",
            [("waiting", f"{n}.requests_waiting", 1.0), ("running", f"{n}.requests_running", 1.0)],
        )
        t = Text()
        for section in (_plan_fit, _headroom, _capacity, _memory):
            section(t, s, c)
        if s.slo is not None:
            self._slo_lines(t, s.slo, c)
        _cost(t, s, c)
        self.query_one("#svc-body", Static).update(t)
        self._whatif(frame)

    @staticmethod
    def _slo_lines(t: Text, slo: SloReport, c: dict[str, str]) -> None:
        t.append(f"\nSLO over {slo.window} at {slo.percentile}\n", style="bold")
        for key, entry in slo.targets.items():
            mark = "" if entry.attainment_exact is not False else "≈"
            t.append(
                f"  {key[:-2].upper():<6} observed {target_text(entry, ranges=True)} vs target "
                f"{seconds(entry.target_s)}, headroom {seconds(entry.headroom_s)}, "
                f"within limit "
                f"{NA if entry.attainment is None else f'{mark}{_pct(entry.attainment)}%'} of "
                f"{num(entry.requests)} requests"
                + (
                    f" ({_pct(entry.attainment_at_edge)}% at the {seconds(entry.edge_s)} edge "
                    "the Prometheus rules read)"
                    if entry.attainment_at_edge is not None
                    else ""
                )
                + "\n"
            )
        comp = slo.completion
        if comp is not None:
            t.append(
                f"  completion {pct(comp.observed, 1)} (target {pct(comp.target, 1)}) of "
                f"{comp.requests:,.0f}; aborted by clients {num(comp.aborted)}\n"
            )
        if slo.good_share:
            t.append(
                f"  good requests (all SLOs and completed): {share_range(slo.good_share, 2)}"
                " (separate histograms only bound the joint share)\n"
            )
        gp = slo.goodput_tokens_per_s
        if gp:
            t.append(
                f"  goodput {gp.low:,.0f}–{gp.high:,.0f} tok/s of {num(slo.output_tokens_per_s)}\n"
            )
        if slo.burn:
            ws = ", ".join(
                f"{k} "
                + ("-" if v.burn is None else f"{v.burn:.1f}x")
                + (
                    f" {OBJECTIVES.get(v.objective, v.objective)}"
                    if v.objective and v.objective != "completion" and v.burn
                    else ""
                )
                + (
                    f" (partial: {num(v.covered_s)} s of {k})"
                    if v.ready is False and (v.covered_s or 0) < BURN_READY_S[parse_window(k)]
                    else f" (only {v.requests:.0f} requests)"
                    if v.ready is False
                    else ""
                )
                for k, v in slo.burn.windows.items()
            )
            t.append(
                f"  error budget {slo.burn.error_budget * 100:.2f}% over {slo.burn.period_days:.0f} days; "
                f"burn {ws}\n"
            )
            pages = [
                f"{k if k == 'completion' else k[:-2].upper()} in {duration_text(s)}"
                for k, b in slo.burn.budgets.items()
                if (s := time_to_page_s(b)) is not None
            ]
            if pages:
                t.append(
                    f"  a total outage after a normal hour pages: {', '.join(pages)}\n",
                    style=c["dim"],
                )
        for reason_key, reason in slo.unavailable.items():
            t.append(f"  {reason_key}: n/a — {reason}\n", style=c["dim"])

    def on_input_changed(self, event: Input.Changed) -> None:
        if self.deck.frame is not None:
            self._whatif(self.deck.frame)

    def _whatif(self, frame: Frame) -> None:
        box = self.query_one("#whatif-result", Static)
        s = self._status(frame)
        parts = self.query_one("#whatif", Input).value.split()
        if s is None or not parts:
            box.update("")
            return
        try:
            cost_r = float(parts[0])
            u_r = float(parts[1]) if len(parts) > 1 else None
            g_r = float(parts[2]) if len(parts) > 2 else None
        except ValueError:
            box.update(Text("Type numbers: cost [busy share] [goodput tok/s].", style="bold"))
            return
        plan_cost = self.deck.source.plan.cost
        cost_l = (
            plan_cost.system_cost_usd
            if plan_cost is not None and plan_cost.system_cost_usd
            else None
        )
        occupancy = s.cost.occupancy if s.cost else None
        u_l = occupancy or 1.0
        if cost_l is None or cost_r <= 0:
            box.update("This node's three-year cost is not in the config (cost.system_cost_usd).")
            return
        # the service's own share of the node, as its goodput is its own: like against like
        share = s.cost.device_share if s.cost else 1.0
        cost_l *= share
        need = crossover(cost_r, cost_l, u_l, u_r or u_l)
        line = (
            f"Against this service's {share * 100:.1f}% of the node ({money(cost_l, 0)}), the "
            f"candidate is cheaper per good token when G_R / G_L > {need:.3f}"
        )
        gp = s.slo.goodput_tokens_per_s if s.slo else None
        g_l = serving_goodput((gp.low + gp.high) / 2, occupancy) if gp else None
        if g_r is not None and g_l is not None:
            ratio = g_r / g_l if g_l > 0 else float("inf")
            verdict = "cheaper" if ratio > need else "not cheaper"
            line += (
                f"; measured here G_L ≈ {g_l:,.0f} tok/s while serving, so G_R / G_L = {ratio:.3f}: "
                f"{verdict}"
            )
        box.update(line + ".")


def _plan_fit(t: Text, s: ServiceStatus, c: dict[str, str]) -> None:
    t.append(f"{s.name}", style="bold")
    t.append(
        f"  engine {s.engine}  model {s.model}  device {s.device} -> {s.device_id or 'NOT FOUND'}\n"
    )
    cap = f"{s.capacity_bytes / 2**30:.2f}" if s.capacity_bytes else "?"
    t.append(
        f"plan: {s.required_bytes / 2**30:.2f} GiB required of {cap} GiB"
        f" ({'fits' if s.fits else 'DOES NOT FIT' if s.fits is False else 'capacity unknown'})\n\n"
    )


def _headroom(t: Text, s: ServiceStatus, c: dict[str, str]) -> None:
    t.append("headroom against the plan\n", style="bold")
    for h in s.headroom:
        value = "" if h.value is None else _headroom_value(h)
        budget = "" if h.budget is None else _budget_words(h)
        t.append(
            f"  {h.name:<9}{h.state:<9}{value:<13}{budget:<33}{h.detail}\n",
            style={"warning": c["warning"], "critical": c["error"]}.get(h.state, ""),
        )
    for h in s.headroom:
        if h.exhausted_in_s is not None:
            t.append(
                f"  {h.name} used up {eta_text(h.exhausted_in_s)} at this rate\n",
                style=c["warning"],
            )


def _capacity(t: Text, s: ServiceStatus, c: dict[str, str]) -> None:
    if s.capacity is None:
        return
    t.append("\ncapacity to SLO breach\n", style="bold")
    t.append(f"  {capacity_text(s.capacity)}\n")
    if s.capacity.saturation is not None:
        t.append(f"  saturation: {saturation_text(s.capacity)}\n")


def _memory(t: Text, s: ServiceStatus, c: dict[str, str]) -> None:
    if not s.memory:
        return
    t.append("\nmemory: plan against what the engine holds (GiB)\n", style="bold")
    t.append(f"  {'':<9}{'planned':>9}{'engine':>9}{'drift':>9}  basis\n", style=c["dim"])
    for m in s.memory:
        engine = "n/a" if m.engine_bytes is None else f"{m.engine_bytes / 2**30:.2f}"
        drift = "" if m.drift_bytes is None else f"{m.drift_bytes / 2**30:+.2f}"
        planned = "" if m.planned_bytes is None else f"{m.planned_bytes / 2**30:.2f}"
        t.append(
            f"  {m.name:<9}{planned:>9}{engine:>9}{drift:>9}  {m.source}\n",
            style=c["warning"] if strays(m) else "",
        )


def _cost(t: Text, s: ServiceStatus, c: dict[str, str]) -> None:
    k = s.cost
    if k is None:
        return
    t.append("\ncost\n", style="bold")
    t.append(f"  {money(k.usd_per_h, 3)}/h for its {k.device_share * 100:.1f}% of the node\n")
    e = k.energy
    if e is not None and e.power_w is not None:
        basis = f" ({e.basis})" if e.basis else ""
        t.append(f"  energy {e.power_w:.0f} W{basis} = {money(e.usd_per_h, 3)}/h\n")
    t.append(
        f"  per million output tokens {money(k.usd_per_m_output_tokens)}; good "
        f"{price_range(k.usd_per_m_compliant_tokens)}; busy {pct(k.occupancy)} of the window\n"
    )
    if k.joules_per_output_token:
        t.append(
            f"  {k.joules_per_output_token:.2f} J per output token; "
            f"{num(k.wh_per_1000_requests, 1)} Wh per 1,000 requests\n"
        )
