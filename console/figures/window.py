"""Windowed arithmetic over scraped counters and histograms, with Prometheus semantics.

* The window is a Prometheus range: the scrapes in ``(t - W, t]`` (at least the newest two).
* Each series is its own counter: its increase is the sum of its steps between consecutive
  scrapes inside the window, and a step that goes down is a reset (the engine restarted), so the
  step counts the value after the reset — Prometheus' ``increase()`` before extrapolation. A
  series vector (a histogram's buckets and count) resets as a whole when any element goes down,
  as Prometheus does for native histograms; a known engine restart (its process start time
  changed) resets every series at that scrape, even one that grew past its old value. A drop of
  less than ``JITTER`` of the value is float noise, not a reset.
* Rates are Prometheus' ``rate()``: each series' increase extrapolated to the window's edges
  (at most 1.1 average intervals, never below zero), divided by the window, then summed.
* A window the console has not filled yet is rated over what it watched: Prometheus may treat
  its first sample of a series as where the series began, because it scraped since then; the
  console starts beside an engine that ran for hours. With ``covered_from`` (the console's first
  scrape of the engine) inside the window, the range starts there: a series already there is not
  extrapolated back, one that appears later keeps Prometheus' semantics, and the divisor is the
  span covered (``Delta.covered_s``), not the whole window.
* Histogram bucket bounds are read from the scrape (``le``), never hard-coded. Series are summed
  by ``le`` *before* the quantile, as ``histogram_quantile(q, sum by (le) (...))`` does.
* The quantile estimate is Prometheus' ``histogram_quantile``: linear interpolation inside the
  bucket, lower bound 0 for the first bucket, the highest finite bound when the rank falls in
  ``+Inf`` (reported as a lower bound only).
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from console.promtext import Labels, Vector

# One series' value at one scrape: (v,) for a counter; bucket counts..., count for a histogram.
Point = tuple[float, Mapping[Labels, Vector]]


@dataclass(frozen=True, slots=True)
class Run:
    """One series inside the window: where it was first and last seen, and its first value."""

    first_t: float
    last_t: float
    samples: int
    first: float  # the first element's value at first_t (for extrapolation toward zero)


@dataclass(frozen=True, slots=True)
class Delta:
    """Increase of every series over a window."""

    values: dict[Labels, Vector]
    span_s: float  # seconds between the oldest and newest scrape used (0 with one scrape)
    since_start: bool  # True when no baseline existed: values are cumulative since engine start
    reset_at: float | None  # time of the newest scrape that showed a reset, if any
    runs: dict[Labels, Run]
    range_start: float  # t - W (earlier when the window holds fewer than two scrapes; later
    # when the console's first scrape of the engine is inside the window)
    range_end: float

    @property
    def covered_s(self) -> float:
        """Seconds of the window the figures stand for (the window, or less when partial)."""
        return self.range_end - self.range_start


def range_start(t_new: float, t_old: float, window_s: float, covered_from: float | None) -> float:
    """Where a window's range begins: ``t - W`` (or the oldest scrape used, when the window holds
    fewer than two), but never before the console's first scrape of the engine."""
    start = min(t_new - window_s, t_old)
    return start if covered_from is None else max(start, min(covered_from, t_old))


def window_start(times: Sequence[float], window_s: float) -> int:
    """Index of the oldest scrape inside ``(t - W, t]``, keeping at least the newest two."""
    i = bisect.bisect_right(times, times[-1] - window_s)
    return max(0, min(i, len(times) - 2))


def window_delta(
    points: Sequence[Point],
    window_s: float,
    restarts: Collection[float] = (),
    covered_from: float | None = None,
) -> Delta | None:
    """Per-series increase over the window ending at the newest point (``points`` in time order).

    ``restarts`` are scrape times at which the engine is known to have restarted;
    ``covered_from`` is the console's first scrape of the engine (None: the series began at the
    first point, as Prometheus assumes). Returns None when there are no points.
    """
    if not points:
        return None
    t_new, newest = points[-1]
    if len(points) == 1:
        return Delta(
            {k: tuple(v) for k, v in newest.items()}, 0.0, True, None, {}, t_new - window_s, t_new
        )
    base = window_start([p[0] for p in points], window_s)
    # Per series: the increase banked so far, and the current reset-free segment (its first and
    # last vectors). Between resets a counter's steps telescope to last - first, so a step costs a
    # comparison (C-level) and the arithmetic is done once per segment.
    out: dict[Labels, list[float]] = {}
    seg: dict[Labels, list[Vector]] = {}  # [segment's first vector, last vector]
    runs: dict[Labels, list[float]] = {}  # first_t, last_t, samples, first
    reset_at: float | None = None
    for i in range(base, len(points)):
        t, values = points[i]
        restarted = i > base and t in restarts
        for key, cur in values.items():
            s = seg.get(key)
            if s is None or len(s[1]) != len(cur):
                if s is not None:  # the vector changed shape: bank the segment, start anew
                    _bank(out, key, s)
                seg[key] = [cur, cur]
                if key not in runs:
                    runs[key] = [t, t, 1, cur[0]]
                    out[key] = [0.0] * len(cur)
                continue
            if len(out[key]) != len(cur):
                out[key] = [0.0] * len(cur)
            before = s[1]
            if restarted or (
                cur != before and not all(map(operator.ge, cur, before)) and not jitter(cur, before)
            ):
                reset_at = t
                _bank(out, key, s)
                out[key] = list(map(operator.add, out[key], cur))  # counted from zero
                s[0] = cur
            s[1] = cur
            r = runs[key]
            r[1] = t
            r[2] += 1
    for key, s in seg.items():
        _bank(out, key, s)
    t_old = points[base][0]
    return Delta(
        {k: tuple(v) for k, v in out.items()},
        t_new - t_old,
        False,
        reset_at,
        {k: Run(r[0], r[1], int(r[2]), r[3]) for k, r in runs.items()},
        range_start(t_new, t_old, window_s, covered_from),
        t_new,
    )


JITTER = 1e-6  # a counter going down by less than this share of its value did not reset


def jitter(cur: Vector, before: Vector) -> bool:
    """Every element that went down did so by less than ``JITTER`` of its value: float noise in
    how the engine sums or prints (1e6 - 1e-6), not a reset — counted as a step of about zero.
    A reset goes back to what the new process counted, far below."""
    return all(c >= b - JITTER * abs(b) for c, b in zip(cur, before, strict=True))


def _bank(out: dict[Labels, list[float]], key: Labels, segment: list[Vector]) -> None:
    """Add a reset-free segment's increase (last - first) to the series' total."""
    first, last = segment
    acc = out[key]
    if len(acc) == len(last) == len(first):
        out[key] = list(map(operator.add, acc, map(operator.sub, last, first)))
    segment[0] = last


def extrapolated(increase: float, run: Run, range_start: float, range_end: float) -> float | None:
    """Prometheus' extrapolation of one counter's increase to the window (``increase()``);
    None when the series has fewer than two scrapes in the window."""
    if run.samples < 2 or run.last_t <= run.first_t:
        return None
    sampled = run.last_t - run.first_t
    average = sampled / (run.samples - 1)
    to_start = run.first_t - range_start
    to_end = range_end - run.last_t
    if increase > 0 and run.first >= 0:
        to_start = min(
            to_start, sampled * (run.first / increase)
        )  # a counter never extrapolates below 0
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    return increase * interval / sampled


def rate(delta: Delta) -> float | None:
    """``sum(rate(counter[W]))``: each series' extrapolated increase over the window, summed, per
    second of window. None when no series has two scrapes in the window."""
    total, any_run = 0.0, False
    for key, vec in delta.values.items():
        run = delta.runs.get(key)
        if run is None or math.isnan(vec[0]):
            continue
        inc = extrapolated(vec[0], run, delta.range_start, delta.range_end)
        if inc is not None:
            total += inc
            any_run = True
    if not any_run:
        return None
    return total / (delta.range_end - delta.range_start)


def histogram_quantile(
    q: float, buckets: Sequence[tuple[float, float]]
) -> tuple[float | None, bool]:
    """Prometheus' histogram_quantile on cumulative (upper bound, count) pairs.

    Returns (value, lower_bound_only). value is None where Prometheus returns NaN (no
    observations, no +Inf bucket, fewer than two buckets). lower_bound_only is True when the
    rank fell in the +Inf bucket: the true quantile is at least the returned bound.
    """
    return histogram_quantiles((q,), buckets)[0]


def histogram_quantiles(
    qs: Sequence[float], buckets: Sequence[tuple[float, float]]
) -> list[tuple[float | None, bool]]:
    """Several quantiles of one histogram, preparing its buckets once."""
    prepared = _prepare(buckets)
    return [_quantile(q, prepared) for q in qs]


def _prepare(buckets: Sequence[tuple[float, float]]) -> list[list[float]] | None:
    """Sorted, coalesced, monotonic buckets; None where Prometheus returns NaN for any q."""
    pairs = sorted([(float(le), float(c)) for le, c in buckets if c == c])  # NaN counts left out
    # coalesce equal bounds (e.g. "1" and "1.0" from two exporters)
    merged: list[list[float]] = []
    prev = None
    for le, c in pairs:
        if le == prev:
            merged[-1][1] += c
        else:
            merged.append([le, c])
            prev = le
    if len(merged) < 2 or not math.isinf(merged[-1][0]):
        return None
    # force monotonic counts, as Prometheus does for scrapes that raced the engine
    running = 0.0
    for item in merged:
        if item[1] > running:
            running = item[1]
        else:
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


def fraction_at_or_below(
    limit: float, buckets: Sequence[tuple[float, float]]
) -> tuple[float | None, bool]:
    """Share of observations <= limit from cumulative buckets: (share, exact).

    Exact when ``limit`` is a bucket bound; otherwise linearly interpolated inside its bucket.
    """
    pairs = sorted((float(le), float(c)) for le, c in buckets)
    if not pairs or not math.isinf(pairs[-1][0]) or pairs[-1][1] <= 0:
        return None, False
    total = pairs[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in pairs:
        if math.isclose(le, limit, rel_tol=1e-9):  # 700 ms scaled to seconds is 0.7000000000000001
            return c / total, True
        if le > limit:
            if math.isinf(le):
                return prev_c / total, False
            lo = prev_le if prev_le < limit else 0.0
            share = prev_c + (c - prev_c) * (limit - lo) / (le - lo) if le > lo else c
            return share / total, False
        prev_le, prev_c = le, c
    return 1.0, False


def fraction_at_edge_below(
    limit: float, buckets: Sequence[tuple[float, float]]
) -> tuple[float | None, float | None]:
    """Share of observations at or below the highest bucket edge at or below ``limit``, and that
    edge: what a Prometheus rule reading one ``le`` bucket gets for a bound between edges (late
    requests overstated). (None, None) without observations or an edge at or below the limit."""
    pairs = sorted((float(le), float(c)) for le, c in buckets)
    if not pairs or not math.isinf(pairs[-1][0]) or pairs[-1][1] <= 0:
        return None, None
    below = [(le, c) for le, c in pairs if le <= limit * (1 + 1e-9)]
    if not below:
        return None, None
    return below[-1][1] / pairs[-1][1], below[-1][0]


def quantile_bucket(
    value: float, buckets: Sequence[tuple[float, float]]
) -> tuple[float, float] | None:
    """The bucket ``(lower, upper]`` a quantile estimate lies in: where the true quantile may be."""
    return bucket_of(value, sorted(buckets))


def bucket_of(value: float, ordered: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """``quantile_bucket`` of buckets already in order of their bounds."""
    lower = 0.0
    for le, _ in ordered:
        if value <= le and not math.isinf(le):
            return lower, le
        lower = le
    return None


WIDE_RATIO = 1.5  # vLLM's 2x buckets (2.5-5 s, 20-40 s) carried +32 % and +55 % errors at p95


def wide(bucket: tuple[float, float] | None, value: float | None) -> bool:
    """A bucket whose upper bound is more than 1.5x its lower (2.5-5 s, or the first bucket from
    0): the interpolated figure could be far from the truth."""
    return (
        bucket is not None
        and value is not None
        and value > 0
        and bucket[1] > WIDE_RATIO * bucket[0] * (1 + 1e-9)
    )
