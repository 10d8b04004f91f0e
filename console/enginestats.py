"""Derived engine figures from a history of scrapes: gauges, windowed rates and percentiles."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from console.engines import EngineProfile, Extract, gauge_value
from console.frame import Percentiles
from console.promtext import Labels
from console.window import Delta, histogram_quantile, window_delta

QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))


def window_label(window_s: float) -> str:
    if window_s >= 60 and window_s % 60 == 0:
        return f"{int(window_s // 60)}m"
    return f"{window_s:g}s"


class EngineHistory:
    """Scrapes of one engine, kept for the longest window plus one baseline scrape."""

    def __init__(self, keep_s: float = 15 * 60 + 30) -> None:
        self.keep_s = keep_s
        self.points: deque[Extract] = deque()

    def add(self, ex: Extract) -> None:
        self.points.append(ex)
        # keep one point at or before the cut so a full window always has its baseline
        cut = ex.t - self.keep_s
        while len(self.points) > 2 and self.points[1].t <= cut:
            self.points.popleft()

    def clear(self) -> None:
        self.points.clear()


def _points(history: Sequence[Extract], kind: str, signal: str) -> list[tuple[float, dict]]:
    out = []
    for ex in history:
        values = getattr(ex, kind).get(signal)
        if values is not None:
            out.append((ex.t, values))
    return out


def summed_buckets(delta: Delta, bounds: dict[Labels, tuple[float, ...]]) -> list[tuple[float, float]]:
    """``sum by (le)`` of per-series bucket increases (cumulative counts per bound)."""
    per_le: dict[float, float] = {}
    for lab, vec in delta.values.items():
        les = bounds.get(lab)
        if les is None or len(les) + 1 != len(vec):
            continue
        for le, c in zip(les, vec[:-1], strict=True):
            per_le[le] = per_le.get(le, 0.0) + c
    return sorted(per_le.items())


@dataclass
class Derived:
    fields: dict[str, object] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    reset_at: float | None = None


def derive(history: Sequence[Extract], profile: EngineProfile, window_s: float) -> Derived:
    out = Derived()
    if not history:
        return out
    newest = history[-1]
    specs = profile.signals

    def missing(signal: str) -> str:
        spec = specs.get(signal)
        if spec is None:
            return f"{profile.title} exports no such signal"
        return f"not exposed by this engine (looked for {', '.join(spec.series)})"

    for fld, signal in (
        ("requests_running", "requests_running"),
        ("requests_waiting", "requests_waiting"),
        ("kv_cache_usage", "kv_cache_usage"),
    ):
        values = newest.gauges.get(signal)
        if values is None:
            out.unavailable[fld] = missing(signal)
            continue
        value = gauge_value(values, specs[signal].aggregate)
        if value is None:
            out.unavailable[fld] = "engine reported NaN"
        out.fields[fld] = value

    for fld, signal in (
        ("prompt_tokens_per_s", "prompt_tokens"),
        ("generation_tokens_per_s", "generation_tokens"),
    ):
        points = _points(history, "counters", signal)
        if not points:
            out.unavailable[fld] = missing(signal)
            continue
        delta = window_delta(points, window_s)
        assert delta is not None
        if delta.reset_at is not None:
            out.reset_at = max(out.reset_at or 0.0, delta.reset_at)
        if delta.since_start or delta.span_s <= 0:
            out.unavailable[fld] = "a rate needs two scrapes"
            continue
        total = sum(v[0] for v in delta.values.values() if not math.isnan(v[0]))
        out.fields[fld] = total / delta.span_s

    for fld, signal in (("ttft_s", "ttft"), ("itl_s", "itl"), ("tpot_s", "tpot"), ("e2e_s", "e2e")):
        points = _points(history, "histograms", signal)
        if not points:
            out.unavailable[fld] = missing(signal)
            continue
        delta = window_delta(points, window_s)
        assert delta is not None
        if delta.reset_at is not None:
            out.reset_at = max(out.reset_at or 0.0, delta.reset_at)
        bounds = newest.bounds.get(signal, {})
        buckets = summed_buckets(delta, bounds)
        since_start = delta.since_start
        if not since_start and (not buckets or buckets[-1][1] <= 0) and delta.span_s < window_s \
                and delta.reset_at is None:
            # watched for less than one window and nothing finished yet: the engine's own
            # since-start buckets say more than nothing, and are labelled as such
            since_start = True
            buckets = summed_buckets(window_delta(points[-1:], window_s), bounds)  # type: ignore[arg-type]
        pct = percentiles(buckets, "since_start" if since_start else window_label(window_s))
        out.fields[fld] = pct
        if pct.observations <= 0:
            out.unavailable[fld] = f"no observations in the last {window_label(window_s)}"
    return out


def percentiles(buckets: list[tuple[float, float]], window: str) -> Percentiles:
    values: dict[str, float | None] = {}
    lower: list[str] = []
    for name, q in QUANTILES:
        value, ge = histogram_quantile(q, buckets)
        values[name] = value
        if ge:
            lower.append(name)
    observations = buckets[-1][1] if buckets else 0.0
    return Percentiles(window=window, observations=observations, lower_bound_only=lower, **values)
