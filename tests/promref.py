"""An independent reference for Prometheus' range functions, written from the Prometheus
documentation (querying/functions: increase, rate, histogram_quantile; the native-histogram
counter-reset rule) — not from console/. Tests compare every windowed figure with it.

Samples are (t, value) or (t, tuple of values) lists of one series, in time order.
"""

from __future__ import annotations

import math


def in_range(samples, start, end):
    """A range selector [W] at time ``end``: samples with start < t <= end."""
    return [s for s in samples if start < s[0] <= end]


def watched(samples, start, end, first_seen=None):
    """What a watcher that took its first sample at ``first_seen`` knows of the range (start, end]:
    Prometheus may take a series' first sample as its beginning because it scraped since then; a
    console opened beside an engine that ran for hours may not. When ``first_seen`` falls inside
    the range, the range is narrowed to [first_seen, end] (that first sample is the baseline) and
    its start moves there. Returns (samples, range start)."""
    if first_seen is None or first_seen <= start:
        return in_range(samples, start, end), start
    return [s for s in samples if first_seen <= s[0] <= end], first_seen


def raw_increase(samples):
    """Sum of the increases between consecutive samples; a decrease is a counter reset, after
    which the new value is the increase ("breaks in monotonicity ... are automatically adjusted").
    Vectors (a classic histogram's buckets + count, as one exporter writes them) reset together
    when any component decreases, as the documentation states for native histograms."""
    total = None
    for (_, prev), (_, cur) in zip(samples, samples[1:], strict=False):
        p = prev if isinstance(prev, tuple) else (prev,)
        c = cur if isinstance(cur, tuple) else (cur,)
        reset = any(b < a for a, b in zip(p, c, strict=True))
        step = [b if reset else b - a for a, b in zip(p, c, strict=True)]
        total = step if total is None else [x + y for x, y in zip(total, step, strict=True)]
    if total is None:
        first = samples[0][1] if samples else 0.0
        return [0.0] * (len(first) if isinstance(first, tuple) else 1)
    return total


def extrapolated_increase(samples, start, end):
    """increase(v[W]) of a float counter: the raw increase extrapolated toward the range edges —
    all the way when the gap is under 1.1 average sample intervals, else half an interval — and
    never past the point where the counter would have been zero."""
    if len(samples) < 2:
        return None
    inc = raw_increase(samples)[0]
    first_t, first_v = samples[0]
    last_t = samples[-1][0]
    sampled = last_t - first_t
    avg = sampled / (len(samples) - 1)
    to_start = first_t - start
    to_end = end - last_t
    if inc > 0 and first_v >= 0:
        to_start = min(to_start, sampled * first_v / inc)
    width = sampled
    width += to_start if to_start < 1.1 * avg else avg / 2
    width += to_end if to_end < 1.1 * avg else avg / 2
    return inc * width / sampled


def rate(samples, start, end):
    inc = extrapolated_increase(samples, start, end)
    return None if inc is None else inc / (end - start)


def histogram_quantile(q, buckets):
    """buckets: (upper bound, cumulative count) with a +Inf bucket. NaN -> None."""
    b = sorted(buckets)
    if len(b) < 2 or not math.isinf(b[-1][0]) or b[-1][1] == 0:
        return None
    total = b[-1][1]
    rank = q * total
    i = next(k for k, (_, c) in enumerate(b) if c >= rank)
    if i == len(b) - 1:
        return b[-2][0]
    lower = 0.0 if i == 0 else b[i - 1][0]
    below = 0.0 if i == 0 else b[i - 1][1]
    if b[i][1] - below == 0:
        return lower
    return lower + (b[i][0] - lower) * (rank - below) / (b[i][1] - below)


def share_at_or_below(limit, buckets):
    """bucket(le=limit) / count, with limit an upper bound of the histogram."""
    b = dict(buckets)
    return b[limit] / b[math.inf]
