"""Windowed arithmetic over scraped counters and histograms, with Prometheus semantics.

* A counter that goes down was reset (the engine restarted): the value after the reset is the
  increase since the restart, and the window restarts there, so no negative rate can appear and
  percentiles after a restart use only post-restart observations.
* Histogram bucket bounds are read from the scrape (``le``), never hard-coded. Series are summed
  by ``le`` *before* the quantile, as ``histogram_quantile(q, sum by (le) (...))`` does.
* The quantile estimate is Prometheus' ``histogram_quantile``: linear interpolation inside the
  bucket, lower bound 0 for the first bucket, the highest finite bound when the rank falls in
  ``+Inf`` (reported as a lower bound only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from console.promtext import Labels

# One series' value at one scrape: (v,) for a counter; bucket counts..., count for a histogram.
Vector = Sequence[float]  # a tuple, or an array("d") as scrapes keep them
Point = tuple[float, Mapping[Labels, Vector]]


@dataclass(frozen=True, slots=True)
class Delta:
    """Increase of every series over a window."""

    values: dict[Labels, Vector]
    span_s: float  # seconds between the baseline and the newest scrape (0 with one scrape)
    since_start: bool  # True when no baseline existed: values are cumulative since engine start
    reset_at: float | None  # time of the newest scrape that showed a counter reset, if any


def window_delta(points: Sequence[Point], window_s: float) -> Delta | None:
    """Increase per series between the newest point and the one at least ``window_s`` older.

    ``points`` are in time order. Returns None when there are no points.
    """
    if not points:
        return None
    t_new, newest = points[-1]
    if len(points) == 1:
        return Delta({k: tuple(v) for k, v in newest.items()}, 0.0, True, None)
    start_t = t_new - window_s
    base = 0
    for i in range(len(points) - 1, -1, -1):
        if points[i][0] <= start_t:
            base = i
            break
    out: dict[Labels, Vector] = {}
    reset_at: float | None = None
    span_start = points[base][0]
    for key, vec in newest.items():
        baseline: Vector | None = None
        prev: Vector | None = None
        for i in range(base, len(points)):
            cur = points[i][1].get(key)
            if cur is None:
                prev = None
                continue
            if prev is None:
                if baseline is None:
                    baseline = cur
            elif cur[-1] < prev[-1]:  # the counter (a histogram's _count, last) went down: a reset
                baseline = tuple(0.0 for _ in cur)
                t_reset = points[i][0]
                reset_at = t_reset if reset_at is None else max(reset_at, t_reset)
                span_start = max(span_start, points[i - 1][0])
            prev = cur
        if baseline is None or len(baseline) != len(vec):
            baseline = tuple(vec)
        out[key] = tuple(max(0.0, c - b) for c, b in zip(vec, baseline, strict=True))  # a racing bucket never < 0
    return Delta(out, t_new - span_start, False, reset_at)


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> tuple[float | None, bool]:
    """Prometheus' histogram_quantile on cumulative (upper bound, count) pairs.

    Returns (value, lower_bound_only). value is None where Prometheus returns NaN (no
    observations, no +Inf bucket, fewer than two buckets). lower_bound_only is True when the
    rank fell in the +Inf bucket: the true quantile is at least the returned bound.
    """
    return histogram_quantiles((q,), buckets)[0]


def histogram_quantiles(qs: Sequence[float], buckets: Sequence[tuple[float, float]]
                        ) -> list[tuple[float | None, bool]]:
    """Several quantiles of one histogram, preparing its buckets once."""
    prepared = _prepare(buckets)
    return [_quantile(q, prepared) for q in qs]


def _prepare(buckets: Sequence[tuple[float, float]]) -> list[list[float]] | None:
    """Sorted, coalesced, monotonic buckets; None where Prometheus returns NaN for any q."""
    pairs = sorted((float(le), float(c)) for le, c in buckets if not math.isnan(c))
    # coalesce equal bounds (e.g. "1" and "1.0" from two exporters)
    merged: list[list[float]] = []
    for le, c in pairs:
        if merged and merged[-1][0] == le:
            merged[-1][1] += c
        else:
            merged.append([le, c])
    if len(merged) < 2 or not math.isinf(merged[-1][0]):
        return None
    # force monotonic counts, as Prometheus does for scrapes that raced the engine
    running = 0.0
    for item in merged:
        running = max(running, item[1])
        item[1] = running
    if merged[-1][1] <= 0:
        return None
    return merged


def _quantile(q: float, merged: list[list[float]] | None) -> tuple[float | None, bool]:
    if math.isnan(q):
        return None, False
    if q < 0:
        return -math.inf, False
    if q > 1:
        return math.inf, False
    if merged is None:
        return None, False
    total = merged[-1][1]
    rank = q * total
    b = len(merged) - 1
    for i in range(len(merged) - 1):
        if merged[i][1] >= rank:
            b = i
            break
    if b == len(merged) - 1:
        return merged[-2][0], True
    if b == 0 and merged[0][0] <= 0:
        return merged[0][0], False
    start, end, count = 0.0, merged[b][0], merged[b][1]
    if b > 0:
        start = merged[b - 1][0]
        count -= merged[b - 1][1]
        rank -= merged[b - 1][1]
    if count <= 0:
        return start, False
    return start + (end - start) * (rank / count), False


def fraction_at_or_below(limit: float, buckets: Sequence[tuple[float, float]]) -> tuple[float | None, bool]:
    """Share of observations <= limit from cumulative buckets: (share, exact).

    Exact when ``limit`` is a bucket bound; otherwise linearly interpolated inside its bucket.
    """
    pairs = sorted((float(le), float(c)) for le, c in buckets)
    if not pairs or not math.isinf(pairs[-1][0]) or pairs[-1][1] <= 0:
        return None, False
    total = pairs[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in pairs:
        if le == limit:
            return c / total, True
        if le > limit:
            if math.isinf(le):
                return prev_c / total, False
            lo = prev_le if prev_le < limit else 0.0
            share = prev_c + (c - prev_c) * (limit - lo) / (le - lo) if le > lo else c
            return share / total, False
        prev_le, prev_c = le, c
    return 1.0, False
