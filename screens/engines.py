"""The engine pane (a row per engine, responsive columns, trend) and the engine detail screen."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from console.figures.charts import slo_lines
from console.figures.columns import ENGINE_COLUMNS, ENGINE_PANE, pick
from console.figures.plan import SloSpec
from console.figures.textchart import fit_chart
from console.figures.thresholds import at_least
from console.figures.verdict import worst_for
from console.frame import Engine, Frame, Limits, Percentiles
from console.units import (
    FEW,
    NA,
    basis,
    capacity_text,
    eta_text,
    num,
    pct,
    quantile_text,
    saturation_text,
    seconds,
    unknown_reasons,
)
from screens.charts import ChartRow, SeriesChart
from screens.widgets import (
    DeckScreen,
    KeyBar,
    KeyedTable,
    Quiet,
    TablePane,
    bar_cell,
    cell,
    spark,
    theme_colors,
)

# an engine no planned service names is held to the default SLO's completion target
COMPLETION_TARGET = SloSpec().completion

# the pane's style for a column's text, where it has one (plain otherwise): the text comes from
# the columns' one spec (console/figures/columns.py), which snapshot.md draws too
Style = Callable[[Engine, str, dict[str, str], "EnginePane"], Text]


def _name(e: Engine, text: str, c: dict[str, str], pane: EnginePane) -> Text:
    """The engine's dot: the worst of the verdict about it and its services (red when down)."""
    frame = getattr(pane, "frame", None)
    worst = None
    if frame is not None:
        subjects = {e.name} | {s.name for s in frame.services if s.engine == e.name}
        worst = worst_for(frame.verdict, subjects)
    style = (
        c["error"]
        if not e.up or worst == "critical"
        else c["warning"]
        if worst == "warning"
        else c["success"]
    )
    t = Text.assemble(("● ", style), ("↪" if e.moved_to else "", c["warning"]), text)
    t.truncate(pane.name_width, overflow="ellipsis")
    return t


def _limits(pane: EnginePane) -> Limits:
    """The plan's thresholds, from the frame the pane shows (the defaults before one arrives)."""
    frame = getattr(pane, "frame", None)
    return frame.limits if frame is not None else Limits()


def _completion_target(e: Engine, pane: EnginePane) -> float:
    """The strictest completion target of the services the engine serves (their SLO reports,
    in the frame), or the default one."""
    frame = getattr(pane, "frame", None)
    targets = [
        s.slo.completion.target
        for s in (frame.services if frame is not None else [])
        if s.engine == e.name and s.slo is not None and s.slo.completion is not None
    ]
    return max(targets, default=COMPLETION_TARGET)


def _kv(e: Engine, text: str, c: dict[str, str], pane: EnginePane) -> Text:
    if e.kv_cache_usage is None:
        return cell(text, c["dim"])
    use = e.kv_cache_usage
    if not pane.wide:  # 80 columns: the figure without its bar (coloured as it), so Room fits
        style = (
            c["error"]
            if at_least(use, 0.97)
            else c["warning"]
            if at_least(use, _limits(pane).kv_usage_critical)
            else ""
        )
        return cell(text, style)
    return bar_cell(use, 3, c, _limits(pane).kv_usage_critical, 0.97, f"{text:>5}")


def _ok(e: Engine, text: str, c: dict[str, str], pane: EnginePane) -> Text:
    if e.success_rate is None:
        return cell(text, c["dim"])
    style = (
        c["error"]
        if e.success_rate < 0.99
        else c["warning"]
        if e.success_rate < _completion_target(e, pane)
        else ""
    )
    return cell(text, style if (e.requests_finished or 0) >= 20 else c["dim"])


def _saturation(e: Engine, text: str, c: dict[str, str], pane: EnginePane) -> Text:
    cap = e.capacity
    if cap is None or cap.saturation is None:
        return cell(text, c["dim"])
    return cell(
        text, c["error"] if cap.saturation >= 2 else c["warning"] if cap.saturation >= 1 else ""
    )


def _percentile(p: Callable[[Engine], Percentiles | None]) -> Style:
    """Dim when fewer than FEW requests stand behind the p95."""

    def style(e: Engine, text: str, c: dict[str, str], pane: EnginePane) -> Text:
        q = p(e)
        return cell(text, c["dim"] if q is None or q.p95 is None or q.observations < FEW else "")

    return style


def _plain(e: Engine, text: str, c: dict[str, str], pane: EnginePane) -> Text:
    return cell(text)


STYLES: dict[str, Style] = {
    "engine": _name,
    "kind": lambda e, t, c, p: cell(t, "" if e.kind else c["dim"]),
    "model": lambda e, t, c, p: (
        Text(t, overflow="ellipsis", no_wrap=True) if e.model else cell(t, c["dim"])
    ),
    "dev": lambda e, t, c, p: cell(t, "" if e.device else c["dim"]),
    "wait": lambda e, t, c, p: cell(t, c["warning"] if (e.requests_waiting or 0) > 0 else ""),
    "kv": _kv,
    "ttft": _percentile(lambda e: e.ttft_s),
    "tpot": _percentile(lambda e: e.tpot_s),
    "ok": _ok,
    "rps": lambda e, t, c, p: cell(t, "" if e.requests_per_s else c["dim"]),
    "room": lambda e, t, c, p: cell(  # at 80 columns its rate only
        t if p.wide else t.split(" ")[0],
        "" if e.capacity and e.capacity.requests_per_s is not None else c["dim"],
    ),
    "sat": _saturation,
}
TREND = ("Trend tok/s", "trend", 13)  # the pane's own: the engine's tok/s over its history
PANE_COLUMNS = pick(ENGINE_COLUMNS, ENGINE_PANE)
NAMED = {"engine", "kind", "model", "dev"}  # what a down engine still draws


class EnginePane(TablePane):
    def __init__(self) -> None:
        super().__init__("Engines", id="engines")
        self.name_width = 12
        self.explained: str | None = None  # the row whose unknown Room/Sat was last explained

    def compose(self) -> ComposeResult:
        yield KeyedTable(id="engine-table", cursor_type="row")
        yield Quiet("", id="engine-errors")

    def columns(self, wide: bool) -> list[tuple[str, str, int]]:
        self.name_width = 18 if wide else 12
        shown = [
            (col.label, col.key, col.width_at(wide) + (6 if col.key == "engine" and wide else 0))
            for col in PANE_COLUMNS
            if wide or not col.wide_only
        ]
        return shown + [TREND] if wide else shown

    def fill(self, frame: Frame) -> None:
        self.frame = frame
        c = self.palette()
        shown = [col for col in PANE_COLUMNS if self.wide or not col.wide_only]
        rows = []
        for e in frame.engines:
            cells = [
                STYLES.get(col.key, _plain)(e, col.short(e), c, self)
                if e.up or col.key in NAMED
                else Text("down", style=f"bold {c['error']}")
                if col.key == "run"
                else Text("")
                for col in shown
            ]
            if self.wide:
                trend = spark(self.trend(f"{e.name}.generation_tokens_per_s", 13), 13)
                cells.append(cell(trend, c["success"]) if e.up else Text(""))
            rows.append((f"eng:{e.url}", cells))
        self.query_one(KeyedTable).sync(rows)
        errors = [
            Text.assemble(
                (f"{e.name}: ", f"bold {c['error']}"),
                e.error or "down",
                no_wrap=True,
                overflow="ellipsis",
            )
            for e in frame.engines
            if not e.up
        ]
        if not frame.engines:
            errors = [
                Text(
                    "No engines found: pass --engine URL, list them in the config, or run `inferdeck demo`.",
                    style=c["dim"],
                )
            ]
        box = self.query_one("#engine-errors", Static)
        box.update(Text("\n").join(errors))
        box.display = bool(errors)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The operator moved onto an engine whose Room or Sat reads ? or n/a: why, said on the
        key bar's line (the cell has no room for it; no line of the pane is taken)."""
        table = self.query_one(KeyedTable)
        url = self.selected_url() if table.has_focus and self.frame is not None else None
        e = next((e for e in self.frame.engines if e.url == url), None) if self.frame else None
        if e is None or not e.up or url == self.explained:
            return
        self.explained = url
        why = unknown_reasons(e)
        if why:
            self.app.notify(f"{e.name}: " + "; ".join(why), timeout=8, markup=False)

    def on_descendant_blur(self) -> None:
        self.explained = None

    def selected_url(self) -> str | None:
        table = self.query_one(KeyedTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return key.removeprefix("eng:") if key else None


def _fit(e: Engine, body: Text, c: dict[str, str], width: int) -> None:
    """The capacity estimate's decode-step fit over the load points it was made on."""
    cap = e.capacity
    if cap is None or not cap.observed or cap.itl_base_s is None or cap.itl_per_seq_s is None:
        return
    rows = fit_chart(
        cap.observed,
        cap.itl_base_s,
        cap.itl_per_seq_s,
        cap.running_at_limit,
        width=max(12, min(60, width - 12)),
    )
    body.append(
        "\ndecode step time (ms) against running sequences: ● seen, · fit"
        + (", ┆ where the first SLO binds" if cap.running_at_limit is not None else "")
        + "\n",
        style="bold",
    )
    for row in rows:
        body.append(row + "\n", style=c["dim"])


def _split(values: dict[str, float]) -> str:
    return ", ".join(f"{k or '-'} {v:,.0f}" for k, v in sorted(values.items()))


SHORT_DRAFT = 0.3  # a last draft position accepted less often than this is mostly wasted work


def _features(e: Engine, line: Callable[[str, str], None]) -> None:
    """The figures an engine shows only when it runs the feature (by-reason splits, speculative
    decoding, LoRA, MFU, P/D queues, its own memory figures)."""
    for section in FEATURE_SECTIONS:
        section(e, line)


def _capacity_lines(e: Engine, line: Callable[[str, str], None]) -> None:
    """Its capacity to SLO breach, decode step fit, backtest, caps, forecasts, saturation."""
    if e.capacity is not None:
        cap = e.capacity
        line("capacity to SLO breach", capacity_text(cap))
        if cap.itl_base_s is not None and cap.itl_per_seq_s is not None:
            line(
                "decode step fit",
                f"ITL ≈ {cap.itl_base_s * 1000:.1f} ms + {cap.itl_per_seq_s * 1000:.2f} ms × "
                f"running (load seen up to {num(cap.seen_max_running)} sequences)",
            )
        if cap.backtest_scored:
            line(
                "backtest",
                f"last {cap.backtest_scored} estimates: {cap.backtest_held} held on the minute "
                f"after each ({cap.backtest_tested} reached by the load)",
            )
        if cap.batch_limit is not None:
            line("batch cap", f"{num(cap.batch_limit)} sequences (from {cap.batch_from})")
        if e.not_judged is not None:  # just back: its forecasts wait, as on every surface
            line("forecasts", f"not judged: {e.not_judged}")
        elif cap.kv_full_in_s is not None:
            line("KV cache", f"full {eta_text(cap.kv_full_in_s)} at this rate")
        if e.not_judged is None and cap.queue_full_in_s is not None and cap.queue_limit is not None:
            line(
                "queue",
                f"{num(cap.queue_limit)} waiting (TTFT's SLO from queueing alone"
                + (
                    f", after its unqueued p95 {cap.ttft_unqueued_p95_s:.2f} s"
                    if cap.ttft_unqueued_p95_s is not None
                    else ""
                )
                + ") "
                f"{eta_text(cap.queue_full_in_s)} at this rate",
            )
        if cap.saturation is not None:
            line("saturation", saturation_text(cap))


def _request_lines(e: Engine, line: Callable[[str, str], None]) -> None:
    """Waiting and rejected by reason, prompt tokens by source, preemptions per request, KV evictable, the largest batch, tokens per request."""
    if e.waiting_by_reason:
        line("waiting by reason", _split(e.waiting_by_reason))
    if e.admission_rejections is not None:
        line("rejected at admission", _split(e.admission_rejections) or "0")
    if e.prompt_tokens_by_source:
        line("prompt tokens by source", _split(e.prompt_tokens_by_source))
    if e.preemptions_per_request is not None:
        line("preemptions / request", f"{e.preemptions_per_request:.3f}")
    if e.kv_evictable_tokens is not None:
        line("KV evictable", f"{num(e.kv_evictable_tokens)} tokens")
    if e.context_tokens_max is not None:
        line("largest batch", f"{num(e.context_tokens_max)} tokens")
    rt = e.request_tokens
    if rt is not None:
        when = basis(rt.window)
        most = f"; none above {num(rt.most)}" if rt.most is not None else ""
        line(
            "tokens per request",
            f"prompt p50 {num(rt.prompt_p50)} p99 {num(rt.prompt_p99)}, output p50 "
            f"{num(rt.output_p50)} p99 {num(rt.output_p99)}{most} ({num(rt.requests)} requests, "
            f"{when})",
        )


def _speculative_lines(e: Engine, line: Callable[[str, str], None]) -> None:
    """Speculative decoding's acceptance, overall and by draft position."""
    sp = e.speculative
    if sp is not None:
        text = f"acceptance {pct(sp.acceptance_rate, 1)}, mean accepted length " + (
            f"{sp.mean_accepted_length:.2f}" if sp.mean_accepted_length is not None else NA
        )
        when = basis(sp.window)
        if sp.draft_tokens == 0:
            text = f"n/a — no draft tokens in the {when}"
        elif sp.draft_tokens is not None:
            text += f" ({num(sp.accepted_tokens)} of {num(sp.draft_tokens)} drafted, {when})"
        else:
            text += " (engine's gauges)"
        line("speculative decoding", text)
    if sp is not None and sp.by_position:
        shown = ", ".join(f"{i + 1}: {pct(v, 0)}" for i, v in enumerate(sp.by_position))
        last = sp.by_position[-1]
        hint = (
            "; the last position rarely lands: a shorter draft would waste less"
            if last is not None and last < SHORT_DRAFT and len(sp.by_position) > 1
            else ""
        )
        line("draft acceptance by pos", shown + hint)


def _offload_lines(e: Engine, line: Callable[[str, str], None]) -> None:
    """The KV cache's CPU tier and LMCache."""
    off = e.kv_offload
    if off is not None:
        when = basis(off.window)

        def gb(v: float | None) -> str:
            return f"{v / 1e9:,.2f} GB" if v is not None else NA

        def each(moved: float | None, per_s: float | None, speed: float | None) -> str:
            rate = f", {per_s / 1e9:,.3f} GB/s" if per_s is not None else ""
            fast = f", {speed / 1e9:,.1f} GB/s while moving" if speed is not None else ""
            return f"{gb(moved)}{rate}{fast}"

        line(
            "KV offload (CPU tier)",
            f"stored {each(off.store_bytes, off.store_bytes_per_s, off.store_transfer_bytes_per_s)}"
            f"; loaded {each(off.load_bytes, off.load_bytes_per_s, off.load_transfer_bytes_per_s)}"
            f" ({when})",
        )
    if e.lmcache_hit_rate is not None or "lmcache_hit_rate" in e.unavailable:
        line(
            "LMCache hit rate",
            pct(e.lmcache_hit_rate, 1)
            if e.lmcache_hit_rate is not None
            else f"n/a — {e.unavailable['lmcache_hit_rate']}",
        )


def _other_lines(e: Engine, line: Callable[[str, str], None]) -> None:
    """Compute, LoRA adapters, P/D queues and the engine's own memory figures."""
    if e.flops_per_gpu_per_s is not None:
        line("estimated compute", f"{e.flops_per_gpu_per_s / 1e12:,.1f} TFLOP/s per GPU")
    if e.lora is not None:
        running = ", ".join(e.lora.running) or "none"
        waiting = f"; waiting {', '.join(e.lora.waiting)}" if e.lora.waiting else ""
        line("LoRA adapters", f"{running}{waiting} (max {e.lora.max_lora or '?'})")
    if e.pd_queues:
        line("P/D queues", _split(e.pd_queues))
    m = e.memory
    if m is not None:
        parts = [
            f"{name} {v / 2**30:.2f}"
            for name, v in (
                ("weights", m.weights_bytes),
                ("KV", m.kv_bytes),
                ("graphs", m.graphs_bytes),
                ("total", m.total_bytes),
            )
            if v is not None
        ]
        line("engine memory (GiB)", ", ".join(parts))


FEATURE_SECTIONS = (
    _capacity_lines,
    _request_lines,
    _speculative_lines,
    _offload_lines,
    _other_lines,
)


def _ranks(e: Engine, body: Text, c: dict[str, str], screen_width: int) -> None:
    if not e.ranks:
        return
    body.append(
        "\nper rank" + (" / worker" if any(r.role for r in e.ranks) else "") + "\n", style="bold"
    )
    cols = [
        (f, label)
        for f, label in (
            ("requests_waiting", "waiting"),
            ("requests_running", "running"),
            ("kv_cache_usage", "KV"),
            ("kv_blocks_active", "KV blk"),
            ("prefill_tokens_active", "prefill"),
            ("last_ttft_s", "lastTTFT"),
            ("last_itl_s", "last ITL"),
        )
        if any(getattr(r, f) is not None for r in e.ranks)
    ]
    role = 8 if any(r.role for r in e.ranks) else 0
    room = screen_width - 4 - role - 9 * len(cols)  # what the key may take on this terminal
    width = max(12, min(44, room, max(len(r.key) for r in e.ranks) + 1))
    body.append(
        f"  {'rank':<{width}}{'role' if role else '':<{role}}"
        + "".join(f"{label:>9}" for _, label in cols)
        + "\n",
        style=c["dim"],
    )
    for r in e.ranks:
        key = r.key if len(r.key) < width else "…" + r.key[-(width - 2) :]
        cells = []
        for f, _ in cols:
            v = getattr(r, f)
            cells.append(
                NA
                if v is None
                else pct(v, 0)
                if f == "kv_cache_usage"
                else seconds(v)
                if f.endswith("_s")
                else num(v)
            )
        flagged = e.imbalance is not None and r.key in e.imbalance
        body.append(
            f"  {key:<{width}}{r.role or '':<{role}}" + "".join(f"{v:>9}" for v in cells) + "\n",
            style=c["warning"] if flagged else "",
        )
    if e.imbalance:
        body.append(f"  imbalance: {e.imbalance}\n", style=f"bold {c['warning']}")


def _slots(e: Engine, body: Text) -> None:
    if not e.slots:
        return
    body.append("\nslots (GET /slots)\n", style="bold")
    for slot in e.slots:
        used = slot.prompt_tokens + slot.decoded_tokens
        state = "busy" if slot.processing else "idle"
        share = f"{used / slot.n_ctx * 100:.0f}%" if slot.n_ctx else NA
        body.append(
            f"  slot {slot.id:<3} {state:<5} {used:>7,} of {slot.n_ctx:,} tokens ({share}); "
            f"prompt {slot.prompt_tokens:,}, decoded {slot.decoded_tokens:,}\n"
        )


def _pct_row(name: str, p: Percentiles | None, reason: str | None) -> list[str]:
    if p is None:
        return [name, NA, NA, NA, "", reason or ""]
    vals = [quantile_text(p, q, ranges=True, count=False) for q in ("p50", "p95", "p99")]
    note = p.note or ("since engine start" if p.window == "since_start" else f"window {p.window}")
    if p.observations < FEW:
        note += " · few requests"
    return [name, *vals, f"{p.observations:,.0f}", note]


class EngineDetailScreen(DeckScreen):
    """Everything inferdeck knows about one engine, redrawn on every frame."""

    AUTO_FOCUS = "#detail"  # PageDown, End and the arrows scroll the view at once

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def compose(self) -> ComposeResult:
        yield Quiet(id="status")  # the header, as on the dashboard
        with VerticalScroll(id="detail"):
            yield Quiet(id="detail-head")
            yield DataTable(id="detail-latency", cursor_type="none", zebra_stripes=True)
            with ChartRow():
                yield SeriesChart(id="chart-latency")
                yield SeriesChart(id="chart-load")
            with ChartRow():
                yield SeriesChart(id="chart-kv")
                yield SeriesChart(id="chart-tokens")
            yield Quiet(id="detail-body")
        yield KeyBar()

    def _charts(self, frame: Frame, e: Engine) -> None:
        keys, n = self.deck.keys, e.name
        svc = next((s for s in frame.services if s.engine == n and s.slo is not None), None)
        lines = slo_lines(svc)
        self.query_one("#chart-latency", SeriesChart).draw(
            keys,
            "TTFT p50 / p95, TPOT / ITL p95 (ms)",
            [
                ("TTFT p50", f"{n}.ttft_p50_s", 1000.0),
                ("TTFT p95", f"{n}.ttft_p95_s", 1000.0),
                ("TPOT p95", f"{n}.tpot_p95_s", 1000.0),
                ("ITL p95", f"{n}.itl_p95_s", 1000.0),
            ],
            lines,
        )
        self.query_one("#chart-load", SeriesChart).draw(
            keys,
            "running / waiting",
            [("running", f"{n}.requests_running", 1.0), ("waiting", f"{n}.requests_waiting", 1.0)],
        )
        self.query_one("#chart-kv", SeriesChart).draw(
            keys, "KV cache use (%)", [("KV", f"{n}.kv_cache_usage", 100.0)], [("90%", 90.0)]
        )
        self.query_one("#chart-tokens", SeriesChart).draw(
            keys, "output tokens/s", [("tok/s", f"{n}.generation_tokens_per_s", 1.0)]
        )

    def on_mount(self) -> None:
        t = self.query_one("#detail-latency", DataTable)
        for label in ("latency", "p50", "p95", "p99", "requests", "basis"):
            t.add_column(label, key=label)
        if self.deck.frame is not None:
            self.show(self.deck.frame)

    def show(self, frame: Frame) -> None:
        engine = next((e for e in frame.engines if e.url == self.url), None)
        if engine is None:
            return
        c = theme_colors(self.app.theme_variables)
        e = engine
        self.query_one("#detail-head", Static).update(_head(frame, e, c))
        self._charts(frame, e)
        t = self.query_one("#detail-latency", DataTable)
        for row in _latency_rows(e):
            if row[0] in t.rows:
                for key, value in zip(
                    ("p50", "p95", "p99", "requests", "basis"), row[1:], strict=True
                ):
                    t.update_cell(row[0], key, value)
            else:
                t.add_row(*row, key=row[0])
        body = Text()

        def line(label: str, value: str, fld: str | None = None) -> None:
            if fld and value == NA and fld in e.unavailable:
                value = f"n/a — {e.unavailable[fld]}"
            body.append(f"{label:<23} ", style="bold")
            body.append(value + "\n")

        _load(e, line)
        _features(e, line)
        _fit(e, body, c, self.size.width or 80)
        _ranks(e, body, c, self.size.width or 80)
        _slots(e, body)
        line("scrape took", seconds(e.scrape_s))
        body.append("\nseries used\n", style="bold")
        for signal, name in sorted(e.series.items()):
            line(f"  {signal}", name)
        self.query_one("#detail-body", Static).update(body)


def _head(frame: Frame, e: Engine, c: dict[str, str]) -> Text:
    """Its name, kind, model, device and state; what is wrong with it (the Alerts view has every
    line); where it was redirected, its version hints, its last restart."""
    subjects = {e.name} | {s.name for s in frame.services if s.engine == e.name}
    worst = worst_for(frame.verdict, subjects)
    state = (
        Text(f"DOWN: {e.error}", style=f"bold {c['error']}")
        if not e.up
        else Text(
            f"up, {worst.upper()}",
            style=f"bold {c['error' if worst == 'critical' else 'warning']}",
        )
        if worst
        else Text("up", style=f"bold {c['success']}")
    )
    head = Text.assemble(
        (f"{e.name}", "bold"),
        f"  {e.kind or '?'}  {e.model or NA}  device {e.device or '?'}  ",
        state,
        f"\n{e.url}",
    )
    for v in frame.verdict:
        if v.subject not in subjects or v.severity == "info":
            continue
        mark = "CRIT" if v.severity == "critical" else "WARN"
        head.append(f"\n{mark} ", style=f"bold {c['error' if mark == 'CRIT' else 'warning']}")
        head.append(f"{v.subject}: {v.message}" if v.subject != e.name else v.message)
    if e.moved_to:
        head.append(
            f"\n↪ redirected to {e.moved_to}: the page shown is that host's (its "
            "credentials are not sent there); give that URL if it is the engine",
            style=c["warning"],
        )
    if e.version_hints:
        head.append("\nversion hints: " + "; ".join(e.version_hints), style=c["dim"])
    if e.restarted_at:
        head.append(
            f"\nrestarted at {e.restarted_at:%H:%M:%S}Z (counters reset; windows restart there)",
            style=c["warning"],
        )
    return head


def _latency_rows(e: Engine) -> list[list[str]]:
    return [
        _pct_row(label, getattr(e, fld), e.unavailable.get(fld))
        for label, fld in (
            ("TTFT", "ttft_s"),
            ("TPOT", "tpot_s"),
            ("ITL", "itl_s"),
            ("e2e", "e2e_s"),
            ("queue", "queue_time_s"),
        )
    ]


def _load(e: Engine, line: Callable[..., None]) -> None:
    """Load, KV and throughput, outcomes, prefix cache and preemptions over the window."""
    line("running / waiting", f"{num(e.requests_running)} / {num(e.requests_waiting)}")
    kv = pct(e.kv_cache_usage, 1)
    if e.kv_cache_usage_by_rank:
        ranks = ", ".join(
            f"{k}: {v * 100:.0f}%" for k, v in sorted(e.kv_cache_usage_by_rank.items())
        )
        kv += f"  ({ranks})"
    line("KV cache", kv, "kv_cache_usage")
    if e.kv_pools:
        pools = ", ".join(
            f"{name} {v * 100:.0f}%"
            for name, v in e.kv_pools.items()
            if v or name == "full"  # engines write the pools a model lacks at 0
        )
        binding = (
            f" (binding: {e.kv_binding_pool})"
            if e.kv_binding_pool
            else f" — {e.unavailable['kv_binding_pool']}"
            if "kv_binding_pool" in e.unavailable
            else ""
        )
        line("KV pools", pools + binding)
    line(
        "KV capacity",
        f"{num(e.kv_capacity_tokens)} tokens" if e.kv_capacity_tokens else NA,
        "kv_capacity_tokens",
    )
    line(
        "tokens/s out / in",
        f"{num(e.generation_tokens_per_s, 1)} / {num(e.prompt_tokens_per_s, 1)}"
        + (" (in: every prompt token, cache hits too)" if e.prompt_tokens_per_s else ""),
    )
    if e.prefill_tokens_per_s is not None or "prefill_tokens_per_s" in e.unavailable:
        line("prefill computed tok/s", num(e.prefill_tokens_per_s, 1), "prefill_tokens_per_s")
    line("completion rate", pct(e.success_rate, 2), "success_rate")
    if e.finish_reasons:
        line(
            "finished in window",
            ", ".join(f"{k} {v:,.0f}" for k, v in sorted(e.finish_reasons.items())),
        )
    failed = f" (aborted {num(e.requests_aborted)}, failed {num(e.requests_failed)} in the window)"
    line(
        "requests finished/s",
        num(e.requests_per_s, 2) + (failed if e.requests_per_s is not None else ""),
    )
    line("aborted / failed", f"{num(e.requests_aborted)} / {num(e.requests_failed)}")
    line("prefix-cache hit rate", pct(e.prefix_cache_hit_rate, 1), "prefix_cache_hit_rate")
    line(
        "preemptions in window",
        num(e.preemptions)
        + (f" ({e.preemptions_per_min:.1f}/min)" if e.preemptions_per_min is not None else ""),
        "preemptions",
    )
    if e.e2e_mean_s is not None or e.queue_mean_s is not None:
        line("mean e2e / queue", f"{seconds(e.e2e_mean_s)} / {seconds(e.queue_mean_s)}")
