"""Grafana dashboards written from what the console itself reads: each engine panel's PromQL from
the engine profiles (``config/engines.yaml``: every kind, both the ``vllm:`` and the ``vllm_``
forms of a name, each kind's scale), the fleet's from the same queries the fleet view runs
(``fleet.promql``, DCGM's 4.8 and 4.9 names with their units reconciled), the node's from the
families ``inferdeck export`` serves, the SLO's from those and from the records ``inferdeck rules
--slo`` keeps. A renamed series in a profile renames it in
every dashboard: they cannot go blank on a rename the console already reads.

``inferdeck dashboards --out DIR`` writes one file per dashboard (Grafana's provisioning reads a
folder of them); without ``--out`` a JSON list of all of them. ``--format perses`` writes the same
panels and queries as Perses dashboards, through the ``perses`` package's own records (an optional
extra: ``inferdeck[perses]``). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from console.engines import profiles
from console.fleet.promql import BY, signal_query, success_query, window_queries
from console.out.exporter import PREFIX
from console.out.slorules import BAD, RECORD, REMAINING, TOTAL, WATCHED

Panels = list[tuple[str, list[tuple[str, str]], str]]  # title, [(expr, legend)], Grafana unit
WINDOW = "$__rate_interval"  # Grafana's and Perses'; Grafana's: at least four scrape intervals
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# an engine dashboard's panels: title, signal, how, unit, legend suffix
ENGINE_PANELS: tuple[tuple[str, str, str, str], ...] = (
    ("Requests running", "requests_running", "gauge", "short"),
    ("Requests waiting", "requests_waiting", "gauge", "short"),
    ("KV cache use", "kv_cache_usage", "gauge", "percentunit"),
    ("Generated tokens/s", "generation_tokens", "rate", "short"),
    ("Prompt tokens/s", "prompt_tokens", "rate", "short"),
    ("TTFT p50", "ttft", "q0.5", "s"),
    ("TTFT p95", "ttft", "q0.95", "s"),
    ("TPOT p95", "tpot", "q0.95", "s"),
    ("End-to-end latency p95", "e2e", "q0.95", "s"),
    ("Queue time p95", "queue_time", "q0.95", "s"),
    ("Preemptions/s", "preemptions", "rate", "short"),
)
# the fleet's windowed figures: title, query name in fleet.promql.window_queries, unit
FLEET_PANELS = (
    ("Requests running", "requests_running", "short"),
    ("Requests waiting", "requests_waiting", "short"),
    ("KV cache use", "kv_cache_usage", "percentunit"),
    ("Generated tokens/s", "generation_tokens_per_s", "short"),
    ("TTFT p95", "ttft:0.95", "s"),
    ("TPOT p95", "tpot:0.95", "s"),
    ("Completed OK", "success_rate", "percentunit"),
    ("TTFT within 1 s", "ttft:within", "percentunit"),
)
# DCGM fields in the fleet view's unit: title, 4.8 name, 4.9 name, factor 4.9 -> 4.8, unit
DCGM_PANELS = (
    ("GPU utilisation", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", 100.0, "percent"),
    ("GPU memory used", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", 2.0**-20, "decmbytes"),
    ("GPU power", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", 1.0, "watt"),
    ("GPU temperature", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", 1.0, "celsius"),
)
GPU_BY = f"{BY}, gpu, GPU_I_ID"
# the node dashboard (inferdeck export): title, [(expr, legend)], unit
NODE_PANELS: tuple[tuple[str, list[tuple[str, str]], str], ...] = (
    ("Verdict (0 ok, 1 warning, 2 critical, 3 unknown)", [("status", "{{instance}}")], "short"),
    ("Engines up", [("engine_up", "{{engine}} ({{kind}})")], "short"),
    ("Headroom state (0 ok, 1 warning, 2 critical)",
     [("headroom_severity", "{{service}} {{rule}}")], "short"),
    ("Memory headroom", [("headroom_bytes", "{{service}} {{rule}}"),
                         ("headroom_budget_bytes", "{{service}} {{rule}} budget")], "bytes"),
    ("KV headroom", [("headroom_sequences", "{{service}} {{rule}}"),
                     ("headroom_budget_sequences", "{{service}} {{rule}} budget")], "short"),
    ("Queue headroom", [("headroom_requests", "{{service}} {{rule}}"),
                        ("headroom_budget_requests", "{{service}} {{rule}} budget")], "short"),
    ("Power headroom", [("headroom_watts", "{{service}} {{rule}}"),
                        ("headroom_budget_watts", "{{service}} {{rule}} budget")], "watt"),
    ("Temperature headroom", [("headroom_celsius", "{{service}} {{rule}}"),
                              ("headroom_budget_celsius", "{{service}} {{rule}} budget")],
     "celsius"),
    ("Saturation (1 = at the SLO's limit)", [("saturation_ratio", "{{engine}} {{slo}}")], "short"),
    ("Queue at the TTFT limit", [("capacity_queue_limit_requests", "{{engine}}")], "short"),
    ("Hourly cost", [("service_total_hourly_cost", "{{service}}")], "currencyUSD"),
    ("$ per million compliant tokens",
     [("cost_usd_per_million_compliant_tokens", "{{service}} {{bound}}")], "currencyUSD"),
    ("GPU activity", [("gpu_activity_ratio", "GPU {{gpu}} {{gpu_instance}}")], "percentunit"),
)  # fmt: skip
SLO_PANELS: tuple[tuple[str, list[tuple[str, str]], str], ...] = (
    ("Attainment (share within the SLO)",
     [("slo_attainment_ratio", "{{service}} {{slo}}")], "percentunit"),
    ("Observed against target", [("slo_observed_seconds", "{{service}} {{slo}}"),
                                 ("slo_target_seconds", "{{service}} {{slo}} target")], "s"),
    ("Good share (bounds)", [("slo_good_share_ratio", "{{service}} {{bound}}")], "percentunit"),
    ("Completed OK", [("slo_completion_ratio", "{{service}}")], "percentunit"),
    ("Burn windows watched", [("slo_burn_window_covered_seconds", "{{service}} {{window}}")], "s"),
)  # fmt: skip


# the SLO records `inferdeck rules --slo` keeps in Prometheus (they outlive any inferdeck process)
SLO_RECORD_PANELS: tuple[tuple[str, list[tuple[str, str]], str], ...] = (
    ("Error ratio (rules --slo)",
     [(f"{RECORD}{w}", f"{{{{service}}}} {{{{slo}}}} {w}") for w in ("5m", "1h", "6h")],
     "percentunit"),
    ("Error budget left (rules --slo)",
     [(REMAINING, "{{service}} {{slo}} of {{period}}")], "percentunit"),
    ("Requests judged, bad of all (rules --slo)",
     [(f"{TOTAL}5m", "{{service}} {{slo}} all"), (f"{BAD}5m", "{{service}} {{slo}} bad")],
     "reqps"),
    ("Budget period watched (rules --slo)", [(WATCHED, "{{service}} {{slo}}")], "s"),
)  # fmt: skip


def _panel(n: int, title: str, targets: list[tuple[str, str]], unit: str) -> dict[str, Any]:
    return {
        "id": n + 1,
        "type": "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": (n % 2) * 12, "y": (n // 2) * 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "expr": expr,
                "legendFormat": legend,
                "datasource": DATASOURCE,
            }
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _dashboard(uid: str, title: str, panels: Panels) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "tags": ["inferdeck"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                }
            ]
        },
        "panels": [_panel(n, *p) for n, p in enumerate(panels)],
    }


def _exported(rows: tuple[tuple[str, list[tuple[str, str]], str], ...]) -> Panels:
    return [(t, [(PREFIX + fam, legend) for fam, legend in targets], u) for t, targets, u in rows]


def engine_panels(kind: str) -> Panels:
    """One engine kind's panels, each only where its profile has the signal."""
    prof = profiles()[kind]
    panels = []
    for title, signal, how, unit in ENGINE_PANELS:
        spec = prof.signals.get(signal)
        if spec is not None and all("older build" in prof.hints.get(n, "") for n in spec.series):
            continue  # current builds serve it no longer (llama.cpp's KV: the node reads /slots)
        expr = signal_query(signal, how, WINDOW, kind)
        if expr is not None:
            panels.append((title, [(expr, "{{node}} {{instance}}")], unit))
    ok = success_query(WINDOW, kind)
    if ok is not None:
        panels.append(("Completed OK", [(ok, "{{node}} {{instance}}")], "percentunit"))
    return panels


def fleet_panels() -> Panels:
    queries = window_queries(WINDOW)
    panels = []
    for title, name, unit in FLEET_PANELS:
        expr = queries.get(name)
        if expr is not None:
            panels.append((title, [(expr, "{{node}} {{instance}}")], unit))
    for title, old, new, factor, unit in DCGM_PANELS:
        scaled = f" * {factor:g}" if factor != 1 else ""
        expr = f"max by ({GPU_BY}) ({old}) or max by ({GPU_BY}) ({new}){scaled}"
        panels.append((title, [(expr, "{{node}} GPU {{gpu}} {{GPU_I_ID}}")], unit))
    return panels


def specs() -> dict[str, tuple[str, str, Panels]]:
    """Every dashboard by its uid: (uid, title, panels)."""
    out = {
        "inferdeck-node": ("inferdeck: node", _exported(NODE_PANELS)),
        "inferdeck-slo": ("inferdeck: SLOs", _exported(SLO_PANELS) + list(SLO_RECORD_PANELS)),
        "inferdeck-fleet": ("inferdeck: fleet", fleet_panels()),
    }
    for kind in profiles():
        out[f"inferdeck-engine-{kind}"] = (f"inferdeck: {kind} engines", engine_panels(kind))
    return {uid: (uid, title, panels) for uid, (title, panels) in out.items()}


PERSES_MISSING = (
    "--format perses needs the perses package (Perses' dashboard records): pip install "
    "'inferdeck[perses]' (with pipx: pipx inject inferdeck perses; it installs on Python 3.10-3.12)."
)
# Grafana's unit -> Perses' (None: Perses has no such unit; the axis is labelled with it instead)
PERSES_UNITS: dict[str, tuple[str, str | None]] = {
    "short": ("decimal", None),
    "percentunit": ("percent-decimal", None),
    "percent": ("percent", None),
    "s": ("seconds", None),
    "reqps": ("requests/sec", None),
    "bytes": ("bytes", None),
    "decmbytes": ("decimal", "MiB"),
    "watt": ("decimal", "W"),
    "celsius": ("decimal", "°C"),
    "currencyUSD": ("decimal", "USD"),
}


def perses_dashboard(uid: str, title: str, panels: Panels) -> dict[str, Any]:
    """One dashboard as Perses takes it (``percli apply -f``, project ``inferdeck``): each panel a
    TimeSeriesChart of PrometheusTimeSeriesQuery on the project's default Prometheus datasource,
    laid out on the same 24-column grid as the Grafana one. Raises RuntimeError (one sentence)
    without the perses package."""
    try:
        from perses.model.common import Display, JSONRef, ObjectMetadata, Unit
        from perses.model.dashboard import (
            Dashboard,
            DashboardSpec,
            GridItem,
            GridLayout,
            GridLayoutDisplay,
            GridLayoutSpec,
        )
        from perses.model.panel import (
            Format,
            Legend,
            LegendPosition,
            Panel,
            PanelSpec,
            TimeSeriesChart,
            TimeSeriesChartSpec,
            YAxis,
        )
        from perses.model.query import (
            PrometheusTimeSeriesQuery,
            PrometheusTimeSeriesQuerySpec,
            TimeSeriesQuery,
            TimeSeriesQuerySpec,
        )
    except ImportError:
        raise RuntimeError(PERSES_MISSING) from None
    charts: dict[str, Panel] = {}
    items = []
    for n, (name, targets, unit) in enumerate(panels):
        key = f"panel{n + 1}"
        perses_unit, label = PERSES_UNITS[unit]
        chart = TimeSeriesChartSpec(
            legend=Legend(position=LegendPosition.bottom),
            y_axis=YAxis(format=Format(unit=Unit(perses_unit)), label=label),
        )
        queries = [
            TimeSeriesQuery(
                spec=TimeSeriesQuerySpec(
                    plugin=PrometheusTimeSeriesQuery(
                        spec=PrometheusTimeSeriesQuerySpec(query=expr, series_name_format=legend)
                    )
                )
            )
            for expr, legend in targets
        ]
        charts[key] = Panel(
            spec=PanelSpec(
                display=Display(name=name),
                plugin=TimeSeriesChart(spec=chart),
                queries=queries,  # type: ignore[arg-type]
            )
        )
        items.append(
            GridItem(
                x=(n % 2) * 12,
                y=(n // 2) * 8,
                width=12,
                height=8,
                content=JSONRef(ref=f"#/spec/panels/{key}"),
            )
        )
    doc = Dashboard(
        metadata=ObjectMetadata(name=uid, project="inferdeck"),
        spec=DashboardSpec(
            display=Display(name=title),
            panels=charts,
            layouts=[GridLayout(spec=GridLayoutSpec(display=GridLayoutDisplay(), items=items))],
            duration="1h",
            refresh_interval="30s",
        ),
    )
    return doc.model_dump(mode="json", by_alias=True, exclude_none=True)


def dashboards(fmt: str = "grafana") -> dict[str, dict[str, Any]]:
    """Every dashboard by file name, as Grafana (or Perses) takes it."""
    render = perses_dashboard if fmt == "perses" else _dashboard
    return {f"{uid}.json": render(*spec) for uid, spec in specs().items()}
