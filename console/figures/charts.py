"""Charts of the key-series history for incident bundles: small standalone SVG files (any browser
or markdown viewer shows them), each series a polyline over the last minutes, the SLO or limit as a
dashed line, every alert of that subject as a red mark at its time. Pure: history and Frame in,
SVG text out."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import Any

from console.frame import Frame, ServiceStatus

W, H = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 28, 30
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


@dataclass
class Chart:
    name: str  # file name without .svg
    title: str
    unit: str
    series: list[tuple[str, str, float]]  # (label, key-series name, factor)
    lines: list[tuple[str, float]] = field(default_factory=list)  # (label, value) in chart units
    subjects: set[str] = field(default_factory=set)  # alert subjects marked on it


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-")[:60] or "x"


def slo_lines(svc: ServiceStatus | None) -> list[tuple[str, float]]:
    """A service's TTFT and TPOT targets as chart lines, in ms."""
    lines = []
    if svc is not None and svc.slo is not None:
        for key, label in (("ttft_s", "TTFT SLO"), ("tpot_s", "TPOT SLO")):
            t = svc.slo.targets.get(key)
            if t is not None:
                lines.append((label, t.target_s * 1000))
    return lines


def plan_charts(frame: Frame, names: set[str]) -> list[Chart]:
    """The charts a bundle gets for this frame's engines and GPUs (those with history)."""
    out: list[Chart] = []
    slo_of = {s.engine: s for s in frame.services if s.slo is not None}  # an engine's service SLOs
    for e in frame.engines:
        n, svc = e.name, slo_of.get(e.name)
        subjects = {n} | ({svc.name} if svc else set())
        lines = slo_lines(svc)
        out += [
            Chart(
                f"engine-{_slug(n)}-latency",
                f"{n}: TTFT p50 / p95 and TPOT p95",
                "ms",
                [
                    ("TTFT p50", f"{n}.ttft_p50_s", 1000.0),
                    ("TTFT p95", f"{n}.ttft_p95_s", 1000.0),
                    ("TPOT p95", f"{n}.tpot_p95_s", 1000.0),
                ],
                lines,
                subjects,
            ),
            Chart(
                f"engine-{_slug(n)}-load",
                f"{n}: requests running and waiting",
                "requests",
                [
                    ("running", f"{n}.requests_running", 1.0),
                    ("waiting", f"{n}.requests_waiting", 1.0),
                ],
                [],
                subjects,
            ),
            Chart(
                f"engine-{_slug(n)}-kv",
                f"{n}: KV cache use",
                "%",
                [("KV use", f"{n}.kv_cache_usage", 100.0)],
                [("critical", 90.0)],
                subjects,
            ),
            Chart(
                f"engine-{_slug(n)}-tokens",
                f"{n}: output tokens per second",
                "tok/s",
                [("output", f"{n}.generation_tokens_per_s", 1.0)],
                [],
                subjects,
            ),
        ]
    for g in frame.gpus:
        subject = {f"GPU {g.index}"}
        out.append(
            Chart(
                f"gpu{g.index}-power",
                f"GPU {g.index}: power against its enforced limit",
                "W",
                [("power", f"gpu{g.index}.power_w", 1.0)],
                [("limit", g.power_limit_w)] if g.power_limit_w else [],
                subject,
            )
        )
        out.append(
            Chart(
                f"gpu{g.index}-temperature",
                f"GPU {g.index}: temperature against slowdown",
                "°C",
                [("temperature", f"gpu{g.index}.temperature_c", 1.0)],
                [("slowdown", g.temperature_slowdown_c)] if g.temperature_slowdown_c else [],
                subject,
            )
        )
    return [c for c in out if any(key in names for _, key, _ in c.series)]


def bundle_charts(history: dict[str, Any], frame: Frame) -> dict[str, str]:
    """File name -> SVG for every chart with data in ``history`` (KeySeries.export())."""
    times: list[float] = list(history.get("t") or [])
    series: dict[str, list[float | None]] = history.get("series") or {}
    if len(times) < 2:
        return {}
    marks = [
        (a.since.timestamp(), a.subject, f"{a.severity}: {a.message}")
        for a in frame.alerts
        if times[0] <= a.since.timestamp() <= times[-1]
    ]
    out = {}
    for chart in plan_charts(frame, set(series)):
        lines = [
            (label, [v * factor if v is not None else None for v in series.get(key, [])])
            for label, key, factor in chart.series
            if key in series
        ]
        chart_marks = [(t, text) for t, subject, text in marks if subject in chart.subjects]
        out[f"{chart.name}.svg"] = svg(chart, times, lines, chart_marks)
    return out


def svg(
    chart: Chart,
    times: Sequence[float],
    lines: list[tuple[str, list[float | None]]],
    marks: list[tuple[float, str]],
) -> str:
    values = [v for _, vs in lines for v in vs if v is not None and math.isfinite(v)]
    values += [v for _, v in chart.lines]
    lo = min([0.0, *values])
    hi = max(values) if values else 1.0
    hi = hi * 1.1 if hi > 0 else 1.0
    t0, t1 = times[0], times[-1]
    span = max(t1 - t0, 1e-9)

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * (W - LEFT - RIGHT)

    def y(v: float) -> float:
        return TOP + (1 - (v - lo) / (hi - lo)) * (H - TOP - BOTTOM)

    def stamp(t: float) -> str:
        return datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M:%SZ")

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(chart.title)}</title>",
        f'<rect width="{W}" height="{H}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{escape(chart.title)}</text>',
        f'<line x1="{LEFT}" y1="{y(lo):.1f}" x2="{W - RIGHT}" y2="{y(lo):.1f}" stroke="#888"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="#888"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{hi:,.4g}</text>',
        f'<text x="{LEFT - 4}" y="{y(lo):.1f}" text-anchor="end">{lo:,.4g}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + 16}" text-anchor="end" fill="#666">{escape(chart.unit)}</text>',
        f'<text x="{LEFT}" y="{H - 10}">{stamp(t0)}</text>',
        f'<text x="{W - RIGHT}" y="{H - 10}" text-anchor="end">{stamp(t1)}</text>',
    ]
    for label, value in chart.lines:
        parts.append(
            f'<line class="limit" x1="{LEFT}" y1="{y(value):.1f}" x2="{W - RIGHT}" '
            f'y2="{y(value):.1f}" stroke="#555" stroke-dasharray="5,4"><title>{escape(label)} '
            f"{value:,.4g} {escape(chart.unit)}</title></line>"
        )
        parts.append(
            f'<text x="{W - RIGHT - 2}" y="{y(value) - 3:.1f}" text-anchor="end" fill="#555">'
            f"{escape(label)}</text>"
        )
    for i, (label, vs) in enumerate(lines):
        color = COLORS[i % len(COLORS)]
        runs: list[list[str]] = [[]]
        for t, v in zip(times, vs, strict=False):
            if v is None or not math.isfinite(v):
                runs.append([])  # a gap where the figure could not be read
            else:
                runs[-1].append(f"{x(t):.1f},{y(v):.1f}")
        for run in runs:
            if run:
                parts.append(
                    f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.5" '
                    f'points="{" ".join(run)}"><title>{escape(label)}</title></polyline>'
                )
        parts.append(
            f'<text x="{LEFT + 8 + 110 * i}" y="{TOP + 12}" fill="{color}">{escape(label)}</text>'
        )
    for t, text in marks:
        parts.append(
            f'<line class="alert" data-t="{t:.3f}" x1="{x(t):.1f}" y1="{TOP}" x2="{x(t):.1f}" '
            f'y2="{H - BOTTOM}" stroke="#d00" stroke-width="1.5"><title>{escape(stamp(t))} '
            f"{escape(text)}</title></line>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
