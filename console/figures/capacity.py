"""How much more an engine can take before an SLO breaks, from its own metrics, live.

The model (docs/capacity.md says it in full):

* Decode step time grows with the batch: ``ITL(n) ≈ W + H·n``, fitted by least squares on the
  window's load points — each a stretch of scrapes giving the mean running sequences ``n`` and
  the mean time between a sequence's tokens, ``n × span ÷ tokens generated`` (the gauge and the
  counter: the histograms keep no sums, and their buckets are too coarse for a mean).
* A request takes ``T(n) = T0 + (L − 1)·ITL(n)``: ``T0`` its time to first token unqueued, ``L``
  its output tokens (Δgeneration tokens / Δfinished). By Little's law the finished rate at ``n``
  running is ``λ(n) = n / T(n)``.
* Bounds on ``n``, each turned into a rate by ``λ(n)``: TPOT's p95 (the fit scaled by the
  window's p95 / mean) reaching the SLO; the KV pool full (capacity ÷ the tokens a running
  sequence holds, measured); a batch limit when one is known. Past the KV or batch bound
  arrivals queue, so TTFT breaks there (or now, if unqueued TTFT already misses its SLO).
* Capacity is the lowest bound, and the binding one is named. Honesty: a range from the fit's
  standard errors widened by the model's own biases (ALLOW_LOW/HIGH); past 1.5× the highest
  load seen only a floor, the rate at the load seen ("can't tell beyond"); "can't tell" when the
  load never varied enough to separate W from H.
* A load that jumps (most stretches hold a step) is fitted on scrape pairs that held one count
  (``decode_points``), and the running count's chance swing is read only from stretches
  without a step.

Time to exhaustion (``time_to``): the latest reading first ("now"), then a robust trend that may
bend, to the limit less one swing; no figure for a flat, waving or drifting series.

Pure: scrapes in, a report out; no I/O. Nothing here knows the simulator's constants.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from console.engines import EngineProfile, Extract, gauge_value, kv_usage
from console.figures.window import histogram_quantile, quantile_bucket, wide
from console.figures.windowed import COUNTS_RESET, Scrapes, restart_times, went_down
from console.frame import CapacityReport

MIN_TREND_S = 60.0  # a KV trend needs at least a minute of readings
CAPACITY_WINDOW_S = 300.0  # the load the estimate learns from: the last five minutes
RENEW_S = 5.0  # estimated again once this much newer history holds
STEP_S = 10.0  # a load point spans at least this much of the window
MIN_POINTS = 6
EXTRAPOLATE = 1.5  # never predict past this multiple of the highest load seen
Z = 1.645  # the swing of the running count a bound must hold: its 95th percentile
MAX_SHOWN = 30  # load points kept in the report, for the detail's chart of the fit
MIN_SPREAD = 0.25  # running sequences must vary (standard deviation) by this share of their mean
# the range widened by the model's own biases beyond the fit's standard errors (ITL read with
# prefill inside, the swing taken as Poisson, p95 scaled from the window's tail): on the
# simulator's three engine models under smooth, stepped and ramped load the bare fit's range
# held the swept truth in 3 of 27 runs, the estimate lying 1 % under to 17 % over it
ALLOW_LOW, ALLOW_HIGH = 0.15, 0.10


@dataclass(frozen=True)
class LoadPoint:
    t: float
    running: float  # mean running sequences over the stretch
    itl_s: float | None  # mean time between a sequence's tokens: running x span / tokens made
    finished: float  # requests finished in it
    output_tokens: float
    waiting: float  # the most waiting in it
    kv_tokens: float | None  # mean KV tokens held per running sequence
    span_s: float
    ttft: tuple[tuple[float, float], ...] = ()  # TTFT bucket increases (bound, cumulative)
    running_var: float = 0.0  # variance of the running gauge within the stretch
    queued_share: float = 0.0  # share of the stretch's scrapes with requests waiting
    # its load held one level (its halves' means within twice their own spread, no jump between
    # scrapes beyond chance): only such stretches say how the running count swings by chance; a
    # stretch across a step in the load would count the step as swing
    steady: bool = True


_READERS: dict[int, Callable[[Extract, str], float | None]] = {}


def gauge_reader(profile: EngineProfile | None) -> Callable[[Extract, str], float | None]:
    """One scrape's gauge as the dashboard reads it: combined by the engine profile's aggregate,
    its repeating ranks counted once and its parts added (``engines.gauge_value``), so the load
    the model learns from is the load the Run and Wait columns show (TP ranks that repeat the
    running count read 10, not 20). Without a profile: summed, and the fullest KV pool."""

    def read(ex: Extract, signal: str) -> float | None:
        values = ex.gauges.get(signal)
        if not values:
            return None
        spec = profile.signals.get(signal) if profile is not None else None
        if spec is None:
            return max(values.values()) if signal == "kv_cache_usage" else sum(values.values())
        if signal == "kv_cache_usage":
            return kv_usage(ex, spec.aggregate, profile.replica_labels if profile else ())
        return gauge_value(values, spec.aggregate, profile.replica_labels if profile else (),
                           spec.sum_by)  # fmt: skip

    # one reader per profile (the profiles are loaded once), so a scrape's kept reading is
    # known to be this reader's
    return _READERS.setdefault(id(profile), read)


_PLAIN = gauge_reader(None)


def _load(
    ex: Extract, read: Callable[[Extract, str], float | None] = _PLAIN
) -> tuple[float | None, float | None, float | None]:
    """The scrape's requests running and waiting and its KV use, as ``read`` combines them:
    read once and kept on the scrape, which the estimate walks again every few seconds while it
    stays in the window (an engine's history is cleared when its kind changes)."""
    kept = ex.load_read
    if kept is None or kept[0] is not read:
        kept = ex.load_read = (
            read,
            read(ex, "requests_running"),
            read(ex, "requests_waiting"),
            read(ex, "kv_cache_usage"),
        )
    return kept[1], kept[2], kept[3]


def _counter(ex: Extract, signal: str) -> float | None:
    rows = ex.counters.get(signal)
    return sum(v[0] for v in rows.values()) if rows else None


def _count(ex: Extract, signal: str) -> float | None:
    """A histogram's observation count summed over its series (its vectors end in the count)."""
    rows = ex.histograms.get(signal)
    return sum(v[-1] for v in rows.values()) if rows else None


def _finished(ex: Extract) -> float | None:
    """Requests finished since the engine started: its count of them, else its TPOT
    histogram's observations (an engine that counts none, SGLang's or TGI's)."""
    done = _counter(ex, "requests_finished")
    return done if done is not None else _count(ex, "tpot")


def _first_within(history: Sequence[Extract], window_s: float) -> Extract:
    """The oldest scrape of the last ``window_s`` (the start of a windowed increase)."""
    return next((ex for ex in history if ex.t >= history[-1].t - window_s), history[0])


def _buckets(a: Extract, b: Extract, signal: str) -> tuple[tuple[float, float], ...] | None:
    """The histogram's cumulative bucket increases from ``a`` to ``b``, summed by bound."""
    new, old = b.histograms.get(signal) or {}, a.histograms.get(signal) or {}
    bounds = b.bounds.get(signal) or {}
    per: dict[float, float] = {}
    for key, vec in new.items():
        prev, les = old.get(key), bounds.get(key)
        if prev is None or les is None or len(prev) != len(vec):
            continue
        for le, c, p in zip(les, vec, prev, strict=False):
            if c < p:
                return None  # a reset
            per[le] = per.get(le, 0.0) + (c - p)
    return tuple(sorted(per.items()))


def load_points(
    history: Sequence[Extract],
    window_s: float,
    kv_capacity: float | None,
    read: Callable[[Extract, str], float | None] = _PLAIN,
) -> list[LoadPoint]:
    """The window's stretches of at least STEP_S, oldest first (a stretch across a counter reset
    is left out)."""
    if not history:
        return []
    t_end = history[-1].t
    scrapes = [ex for ex in history if ex.t >= t_end - window_s]
    out: list[LoadPoint] = []
    start = 0
    for i in range(1, len(scrapes)):
        a, b = scrapes[start], scrapes[i]
        if b.t - a.t < STEP_S:
            continue
        inside = scrapes[start + 1 : i + 1]
        start = i
        run, wait, kv = [], [], []
        for ex in inside:
            r, w, fullest = _load(ex, read)
            if r is not None:
                run.append(r)
            if w is not None:
                wait.append(w)
            if kv_capacity and r and fullest is not None:
                kv.append(fullest * kv_capacity / r)
        point = _point(a, b, run, wait, kv)
        if point is not None:
            out.append(point)
    return out


def _point(
    a: Extract, b: Extract, run: list[float], wait: list[float], kv: list[float]
) -> LoadPoint | None:
    def delta(x: float | None, y: float | None) -> float | None:
        return y - x if x is not None and y is not None else None

    gen = delta(_counter(a, "generation_tokens"), _counter(b, "generation_tokens"))
    done = delta(_finished(a), _finished(b))
    if not run or done is None or gen is None or min(done, gen) < 0:
        return None  # nothing to read, or a counter reset inside: the stretch says nothing
    span = b.t - a.t
    running = sum(run) / len(run)
    half = len(run) // 2
    steady = True
    if half >= 2:
        first, second = run[:half], run[half:]
        m1, m2 = sum(first) / len(first), sum(second) / len(second)
        spread = math.sqrt(
            (sum((r - m1) ** 2 for r in first) + sum((r - m2) ** 2 for r in second)) / len(run)
        )
        steady = abs(m1 - m2) <= max(2 * spread, 1.0)
    # a jump between two scrapes far beyond what chance arrivals and departures move a count of
    # this size by (a few times its square root) is a step in the load
    jump = max(3.0, 3.0 * math.sqrt(running))
    steady = steady and all(abs(y - x) <= jump for x, y in zip(run, run[1:], strict=False))
    return LoadPoint(
        t=b.t,
        running=running,
        itl_s=running * span / gen if gen > 0 and running > 0 else None,
        finished=done,
        output_tokens=gen,
        waiting=max(wait) if wait else 0.0,
        kv_tokens=sum(kv) / len(kv) if kv else None,
        span_s=span,
        ttft=_buckets(a, b, "ttft") or (),
        running_var=sum((r - running) ** 2 for r in run) / len(run),
        queued_share=sum(1 for w in wait if w > 0) / len(wait) if wait else 0.0,
        steady=steady,
    )


@dataclass(frozen=True)
class Fit:
    w: float
    h: float
    se_w: float
    se_h: float
    n_lo: float
    n_hi: float


@dataclass(frozen=True)
class DecodePoint:
    """One scrape pair whose running count held (within 1 sequence or 10 %): the decode time
    per token at that count, read from what the engine did in those seconds — not from a
    stretch's mean count against its mean ITL, which mixes levels when the load jumps."""

    running: float
    itl_s: float  # running x span / tokens generated in the pair
    tokens: float


def decode_points(
    history: Sequence[Extract],
    window_s: float,
    read: Callable[[Extract, str], float | None] = _PLAIN,
) -> list[DecodePoint]:
    """The window's scrape pairs with a steady running count and tokens generated."""
    if not history:
        return []
    t_end = history[-1].t
    scrapes = [ex for ex in history if ex.t >= t_end - window_s]
    out: list[DecodePoint] = []
    for a, b in zip(scrapes, scrapes[1:], strict=False):
        ra, rb = _load(a, read)[0], _load(b, read)[0]
        ga, gb = _counter(a, "generation_tokens"), _counter(b, "generation_tokens")
        if ra is None or rb is None or ga is None or gb is None or b.t <= a.t:
            continue
        gen = gb - ga
        n = (ra + rb) / 2
        if gen <= 0 or n <= 0 or abs(ra - rb) > max(1.0, 0.1 * max(ra, rb)):
            continue  # nothing made, a reset, or the load moved inside the pair
        out.append(DecodePoint(n, n * (b.t - a.t) / gen, gen))
    return out


def fit_itl(
    points: Sequence[LoadPoint] | Sequence[DecodePoint], min_spread: float = MIN_SPREAD
) -> Fit | str:
    """``ITL ≈ W + H·n`` by least squares, or why it cannot be fitted (a load whose running
    count varied by less than ``min_spread`` of its mean: chance swings alone flatten the fit)."""
    xy = [(p.running, p.itl_s) for p in points if p.itl_s is not None and p.running > 0]
    if len(xy) < MIN_POINTS:
        return f"{len(xy)} of the {MIN_POINTS} levels of load it needs seen so far"
    xs = [x for x, _ in xy]
    lo, hi = min(xs), max(xs)
    mean = sum(xs) / len(xs)
    spread = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
    if hi - lo < 2.0 or spread < min_spread * mean:
        return f"load never varied enough (running {lo:.0f}–{hi:.0f}, ±{spread / mean * 100:.0f} %)"
    ys = [y for _, y in xy]
    ym = sum(ys) / len(ys)
    sxx = sum((x - mean) ** 2 for x in xs)
    h = sum((x - mean) * (y - ym) for x, y in xy) / sxx
    w = ym - h * mean
    resid = [y - (w + h * x) for x, y in xy]
    s2 = sum(r * r for r in resid) / max(1, len(xy) - 2)
    se_h = math.sqrt(s2 / sxx)
    se_w = math.sqrt(s2 * (1 / len(xy) + mean * mean / sxx))
    return Fit(w, h, se_w, se_h, lo, hi)


def theil_sen(ts: Sequence[float], ys: Sequence[float]) -> float | None:
    """The median of pairwise slopes (robust to outliers); None with fewer than 3 points."""
    n = len(ts)
    if n < 3:
        return None
    stride = max(1, n // 40)  # at most ~40 points: ~800 pairs
    t, y = ts[::stride], ys[::stride]
    slopes = sorted(
        (y[j] - y[i]) / (t[j] - t[i])
        for i in range(len(t))
        for j in range(i + 1, len(t))
        if t[j] > t[i]
    )
    return slopes[len(slopes) // 2] if slopes else None


Line = tuple[float, float, list[float], float]  # a rising robust line: ``_line``'s answer


def _trend(
    pts: Sequence[tuple[float, float]],
    min_points: int = 10,
    line: Line | None = None,
) -> tuple[float, float, float] | None:
    """(slope per second, the trend's level now, the readings' swing about it: a standard
    deviation from their median distance) of a series that rises by more than its noise over
    at least MIN_TREND_S (Theil-Sen, robust to outliers): three times its median residual, and
    three standard errors of the rise (``_rise_error``); None on a flat, falling, noisy or
    short one: no trend to extrapolate. (``line``: its ``_line``, where already drawn.)"""
    if len(pts) < min_points or pts[-1][0] - pts[0][0] < MIN_TREND_S:
        return None
    line = line or _line(pts)
    if line is None:
        return None
    slope, base, signed, noise = line
    rise = slope * (pts[-1][0] - pts[0][0])
    if rise <= 3 * noise or rise <= 3 * _rise_error(signed, noise):
        return None  # the rise is within the noise
    # the trend's level now (not the last noisy reading), and the swing about it
    return slope, base + slope * pts[-1][0], 1.4826 * noise


def _risen(pts: Sequence[tuple[float, float]], line: Line | None, errors: float) -> bool:
    """Whether a series' robust line (its ``_line``) rose across it by more than ``errors``
    standard errors of that rise (``_rise_error``)."""
    if line is None:
        return False
    slope, _, signed, noise = line
    return slope * (pts[-1][0] - pts[0][0]) > errors * _rise_error(signed, noise)


def _line(pts: Sequence[tuple[float, float]]) -> Line | None:
    """A series' rising robust line: (Theil-Sen's slope and intercept, the residuals, their
    median size), or None where it does not rise."""
    slope = theil_sen([p[0] for p in pts], [p[1] for p in pts])
    if slope is None or slope <= 0:
        return None
    base = sorted(y - slope * t for t, y in pts)[len(pts) // 2]  # Theil-Sen's intercept
    signed = [y - (base + slope * t) for t, y in pts]
    return slope, base, signed, sorted(abs(r) for r in signed)[len(signed) // 2]


def _widen(resid: Sequence[float]) -> float:
    """How many readings count as one, (1 + rho)/(1 - rho) by the residuals' lag-1 correlation
    rho (1 where they do not swing together): a sample's effective size is its size over this."""
    ss = sum(r * r for r in resid)
    rho = sum(a * b for a, b in zip(resid, resid[1:], strict=False)) / ss if ss > 0 else 0.0
    return (1 + rho) / (1 - rho) if 0 < rho < 1 else 1.0


def _rise_error(resid: Sequence[float], noise: float) -> float:
    """The standard error of a fitted line's rise across readings whose residuals swing by 1.48
    times their median ``noise``: sigma x sqrt(12 / n) for n independent readings, n taken down
    to its effective size n(1 - rho)/(1 + rho) by the residuals' lag-1 correlation rho. A pool's
    readings a second apart swing together (its sequences hold their blocks for seconds): a
    minute of them at 73 % rose by chance past three times their median residual, and said
    "full in 28 s" of a steady engine."""
    return 1.4826 * noise * math.sqrt(12 / max(len(resid) / _widen(resid), 1.0))


BEND_SHRINK = 4.0  # the curvature used is c·c²/(c² + BEND_SHRINK·se²): as much as it stands out
REACH = 4.0  # never extrapolate a trend past this multiple of the rise it showed


def _bend(pts: Sequence[tuple[float, float]]) -> tuple[float, float, float, float] | None:
    """(level now, slope now, curvature, the readings' swing about it) of the readings' upward
    bend, else None: a ramp of arrivals fills a pool faster than a line through the window says
    (the running count grows with the arrivals and with each sequence's time, which grows with
    the count). The least-squares parabola's curvature is used in the share it stands out of its
    noise, c²/(c² + BEND_SHRINK·se²) — not all or nothing at a threshold: a bend fitted from
    noise counts little, a clear one almost whole — and the level and slope are fitted again
    under it."""
    n = len(pts)
    if n < 10:
        return None
    mid = sum(t for t, _ in pts) / n
    xs = [t - mid for t, _ in pts]
    s = [float(n), 0.0, 0.0, 0.0, 0.0]
    for x in xs:
        x2 = x * x
        s[1] += x
        s[2] += x2
        s[3] += x2 * x
        s[4] += x2 * x2
    r = [0.0, 0.0, 0.0]
    for x, (_, y) in zip(xs, pts, strict=True):
        r[0] += y
        r[1] += y * x
        r[2] += y * x * x
    m = [[s[0], s[1], s[2]], [s[1], s[2], s[3]], [s[2], s[3], s[4]]]
    d = _det3(m)
    if d <= 0:
        return None
    a, b, c = (
        _det3([[r[i] if j == k else m[i][j] for j in range(3)] for i in range(3)]) / d
        for k in range(3)
    )
    res = [y - (a + b * x + c * x * x) for x, (_, y) in zip(xs, pts, strict=True)]
    s2 = sum(e * e for e in res)
    # readings a second apart swing together (a sequence holds its blocks for many seconds):
    # the standard error is widened to the sample's effective size by the lag-1 correlation
    se_c = math.sqrt(s2 / max(1, n - 3) * (m[0][0] * m[1][1] - m[0][1] ** 2) / d * _widen(res))
    if c <= 0:
        return None
    c *= c * c / (c * c + BEND_SHRINK * se_c * se_c)
    # the line under the kept curvature: y - c·x² on (1, x), x centred (s[1] = 0)
    a = (r[0] - c * s[2]) / n
    b = (r[1] - c * s[3]) / s[2]
    x = xs[-1]
    swing = 1.4826 * sorted(abs(e) for e in res)[n // 2]
    return a + b * x + c * x * x, b + 2 * c * x, c, swing


def _det3(m: Sequence[Sequence[float]]) -> float:
    return (
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    )


def time_to(
    pts: Sequence[tuple[float, float]],
    limit: float,
    *,
    readings: bool = True,
    line: Line | None = None,
) -> float | None:
    """Seconds until a series reaches ``limit``: 0 when the latest reading is already there
    (a queue past its limit is exhausted now, whatever its trend); else when its trend — along
    its upward bend when it has one, else its robust straight line — comes within one swing of
    the limit (the readings swing about the trend: the pool is full when a swing reaches it,
    not only when the trend does); None when it does not rise beyond its noise, or when the
    limit lies further than REACH times the rise the window showed (a drift of a few points is
    no forecast of a full pool). A series of rates (``readings`` false: arrivals counted over
    stretches) is judged on its trend alone, to a limit that already holds its swing: a
    stretch's count over the limit is chance, not the pool full. (``line``: the series'
    ``_line``, where already drawn.)"""
    if readings and pts and pts[-1][1] >= limit:
        return 0.0
    trend = _trend(pts, line=line)
    if trend is None:
        return None
    slope, now, swing = trend
    swing = swing if readings else 0.0
    if limit - now > REACH * slope * (pts[-1][0] - pts[0][0]):
        return None
    half = len(pts) // 2  # a swell that ebbs (a wave of load) is no trend: both halves rise
    for part in (pts[:half], pts[half:]):
        rise = theil_sen([t for t, _ in part], [y for _, y in part])
        if rise is None or rise <= 0:
            return None
    bend = _bend(pts)
    if bend is None:
        target = limit - swing if now < limit - swing else limit
        return max(0.0, (target - now) / slope)
    level, rate, c, swing = bend
    swing = swing if readings else 0.0
    target = limit - swing if level < limit - swing else limit
    if level >= target:
        return 0.0
    # the root of level + rate·x + c·x² = target, in the form that keeps its digits when c is small
    return (
        2 * (target - level) / (rate + math.sqrt(max(0.0, rate * rate + 4 * c * (target - level))))
    )


def _readings(
    history: Sequence[Extract],
    window_s: float,
    gauge: str,
    read: Callable[[Extract, str], float | None] = _PLAIN,
    settled: float | None = None,
) -> list[tuple[float, float]]:
    """The window's readings of a gauge from when the engine's pool and queue last settled
    (``settled``, else ``settled_from``) on; at least the latest (one at its limit is there
    now, settled or not)."""
    t_end = history[-1].t if history else 0.0
    slot = {"requests_running": 0, "requests_waiting": 1, "kv_cache_usage": 2}[gauge]
    if settled is None:
        settled = settled_from(history, read)
    t_from = max(t_end - window_s, settled)
    got = [
        (ex.t, v)
        for ex in history
        if ex.t >= t_end - window_s and (v := _load(ex, read)[slot]) is not None
    ]
    return [p for p in got if p[0] >= t_from] or got[-1:]


# a pool emptied by a restart refills within this many request lifetimes: its KV, each sequence
# holding more the longer it has run, is 98 % back after six (1 - 7·e^-6, lengths exponential)
SETTLE_LIVES = 6.0
RESTART_LOOKBACK_S = 2 * CAPACITY_WINDOW_S  # a restart older than this has settled


def last_restart(history: Sequence[Extract]) -> float | None:
    """When the engine last restarted within RESTART_LOOKBACK_S: its process start moved, or its
    token or finished-request count went down (engines that export no start time; an
    ``EngineHistory`` notes both as scrapes arrive, a plain sequence is walked)."""
    t_from = history[-1].t - RESTART_LOOKBACK_S
    times = set(restart_times(history))
    resets = getattr(history, "resets", None)
    if resets is not None:
        times |= resets
    else:
        recent = [ex for ex in history if ex.t >= t_from]
        times |= {
            b.t
            for a, b in zip(recent, recent[1:], strict=False)
            if any(went_down(a, b, signal) for _, signal in COUNTS_RESET)
        }
    return max((t for t in times if t > t_from), default=None)


def settled_from(
    history: Sequence[Extract], read: Callable[[Extract, str], float | None] = _PLAIN
) -> float:
    """When the engine's pool and queue last settled: after a restart, once SETTLE_LIVES request
    lifetimes have passed (a lifetime by Little's law: the running count over the finished rate,
    read since the restart); never before a lifetime can be read; without one, once its count of
    finished requests says as much (``_filled_from``). A restart empties the pool and
    the queue, which refill as fast as requests arrive: the readings before are another
    process's and the rise after is the refill, neither a trend of the load."""
    if not history:
        return 0.0
    t0 = last_restart(history)
    if t0 is None:
        return _filled_from(history, read)
    since = [ex for ex in history if ex.t >= t0]
    done = [(ex.t, c) for ex in since if (c := _finished(ex)) is not None]
    running = [r for ex in since if (r := _load(ex, read)[0]) is not None]
    if len(done) < 2 or not running or done[-1][1] <= done[0][1]:
        return history[-1].t + 1.0  # no lifetime read yet: nothing has settled
    rate = (done[-1][1] - done[0][1]) / (done[-1][0] - done[0][0])
    return t0 + SETTLE_LIVES * (sum(running) / len(running)) / rate


def _filled_from(history: Sequence[Extract], read: Callable[[Extract, str], float | None]) -> float:
    """Where no restart is in sight: the first scrape by which the engine had finished
    SETTLE_LIVES times the requests it runs (an engine that started shortly before the console
    was still filling its pool from empty: the rise is no trend of the load, as after a restart).
    An engine long up has at its oldest scrape (one look); one that exports no count, too. An
    engine's kept scrapes (``Scrapes``) keep the answer: found, it stands (scrapes only come
    later); not yet, only the scrapes since those looked at are looked at next time."""
    scrapes = history if isinstance(history, Scrapes) else None
    start = 0
    if scrapes is not None and scrapes.filled is not None and scrapes.filled[0] is read:
        _, t, found = scrapes.filled
        if found:
            return t
        start = bisect.bisect_right(scrapes.times, t)
    for ex in itertools.islice(history, start, None):
        done, running = _finished(ex), _load(ex, read)[0]
        if done is None or running is None or done >= SETTLE_LIVES * running:
            if scrapes is not None:
                scrapes.filled = (read, ex.t, True)
            return ex.t
    if scrapes is not None:
        scrapes.filled = (read, history[-1].t, False)
    return history[-1].t + 1.0  # not filled yet: nothing has settled


def kv_full_in(
    history: Sequence[Extract],
    window_s: float,
    read: Callable[[Extract, str], float | None] = _PLAIN,
    settled: float | None = None,
) -> float | None:
    """Seconds until the KV cache is full (``time_to``), or None."""
    return time_to(_readings(history, window_s, "kv_cache_usage", read, settled), 1.0)


# where the KV readings rise within their noise (a small pool's swing hides a slow ramp), the
# arrivals counted carry a forecast only when they rise by this many standard errors of their
# rise: a true ramp's stand at 7 or more by the time a forecast matters, while steady arrivals
# pass 3 by chance somewhere in half an hour of estimates every 5 s
ALONE_ERRORS = 5.0
LAW_SPREAD = 0.05  # the law a KV forecast reads through: a load that varied this much will do
# (a flattened fit only says a full pool's rate in proportion to its sequences: a later figure)


def _kv_full_in_by_law(
    history: Sequence[Extract],
    points: Sequence[LoadPoint],
    readings: Sequence[tuple[float, float]],
    line: Line | None,
    kv_capacity_tokens: float | None,
    read: Callable[[Extract, str], float | None],
) -> float | None:
    """Seconds until the KV cache is full, read through the fitted load law: the pool is full
    when the arrivals reach the rate that keeps it full — the law's rate(n) at the sequences
    it holds (Little's law: n over a request's time at n), less the readings' swing. The
    arrivals are counted (``_arrivals``), and their trend is extrapolated to that rate: a ramp
    of arrivals is a line, where the pool's use bends up harder and harder as each sequence's
    step slows with the count. The law's level is set by the arrivals it saw: the rate it
    says at each KV reading, over the same stretches, is scaled to the rate counted. None
    where the law or the arrivals cannot be read (the readings' own trend stands), or the
    readings do not rise at all. Where they rise within their noise, only a ramp the arrivals
    show beyond theirs is forecast. (``line``: the readings' ``_line``.)"""
    if line is None or len(readings) < 10 or readings[-1][0] - readings[0][0] < MIN_TREND_S:
        return None
    trend = _trend(readings, line=line)
    alone = trend is None  # the readings rise within their noise: the arrivals must show it
    swing = 1.4826 * line[3] if trend is None else trend[2]
    stretches = _arrivals(history, readings[0][0], read)
    if len(stretches) < 2:
        return None
    rates = [((a + b) / 2, n / (b - a)) for a, b, n in stretches]
    arrived = _line(rates)  # (drawn once: the test below, the count's lag, the forecast)
    if alone and not _risen(rates, arrived, ALONE_ERRORS):
        return None
    kv = [p.kv_tokens for p in points if p.kv_tokens]
    fit = fit_itl(points, LAW_SPREAD)
    done = sum(p.finished for p in points)
    if not kv or not kv_capacity_tokens or isinstance(fit, str) or done <= 0:
        return None
    if fit.w <= 0 or fit.h <= 0:  # a step that shrinks with the count is no law to read through
        return None
    t0, _ = unqueued_ttft(points)
    if t0 is None:
        return None
    law = _Law(fit, t0, _prefill_fit(points), sum(p.output_tokens for p in points) / done, 0.0)
    held = sum(kv) / len(kv)  # KV tokens a running sequence holds
    n_full = kv_capacity_tokens / held
    n_at = n_full * (1 - swing)
    if n_at <= 0:
        return None
    lag = pool_lag(n_at / law.rate(n_at), held, law.out_tokens)
    t_from, t_to = stretches[0][0], stretches[-1][1]
    said = [law.rate(u * n_full) for t, u in readings if t_from <= t <= t_to]
    counted = sum(n for *_, n in stretches) / sum(b - a for a, b, _ in stretches)
    counted -= (arrived[0] if arrived else 0.0) * lag  # as of the readings
    if not said or sum(said) <= 0 or counted <= 0:
        return None
    scale = counted / (sum(said) / len(said))
    eta = time_to(rates, scale * law.rate(n_at), readings=False, line=arrived)
    # a stretch's rate is its middle's: the time left is from now, and the pool a lag behind
    return None if eta is None else max(0.0, eta + lag - (history[-1].t - rates[-1][0]))


def pool_lag(request_s: float, held: float, out_tokens: float) -> float:
    """Seconds by which a KV pool's use follows its arrivals on a ramp: a request holds its
    prompt P at once and its L output tokens as they come, over its time T, so the pool holds
    ∫ λ(t − s)·(P + L·s/T) ds over its life — on a ramp λ(t − T·(P/2 + L/3)/(P + L/2)) times the
    tokens a sequence holds on average, ``held`` = P + L/2 (half to two thirds of its time)."""
    prompt = max(0.0, held - out_tokens / 2)
    return request_s * (prompt / 2 + out_tokens / 3) / held if held > 0 else 0.0


def _arrivals(
    history: Sequence[Extract], t_from: float, read: Callable[[Extract, str], float | None]
) -> list[tuple[float, float, float]]:
    """(start, end, requests arrived) over successive stretches of at least STEP_S from
    ``t_from``: what the engine finished plus what it holds, running and waiting, rose by what
    arrived (a request is counted once it is finished, and held until then). A stretch across a
    finished count that went down (a restart) is left out."""
    out: list[tuple[float, float, float]] = []
    last: tuple[float, float, float] | None = None  # (time, finished, finished + held)
    for ex in history:
        if ex.t < t_from or (last is not None and ex.t - last[0] < STEP_S):
            continue
        done = _finished(ex)
        running, waiting, _ = _load(ex, read)
        if done is None or running is None:
            continue
        now = (ex.t, done, done + running + (waiting or 0.0))
        if last is not None and done >= last[1]:
            out.append((last[0], ex.t, max(0.0, now[2] - last[2])))
        last = now
    return out


def queue_full_in(
    history: Sequence[Extract],
    window_s: float,
    limit: float,
    read: Callable[[Extract, str], float | None] = _PLAIN,
    settled: float | None = None,
) -> float | None:
    """Seconds until the requests waiting reach ``limit`` (``time_to``), or None."""
    return time_to(_readings(history, window_s, "requests_waiting", read, settled), limit)


SATURATION_Q = 0.90  # llm-d's saturation index: the worst of p90 latency / its SLO
SATURATION_MIN = 20  # observations behind a p90 that may raise a saturation alert or finding
SATURATION_SHOWN = 5  # fewer than SATURATION_MIN: shown, marked with its count, never alerted on
RISING_S = 120.0  # the over-saturation slope test looks at the last two minutes of load points


def saturation(
    history: Sequence[Extract],
    recent_s: float,
    points: Sequence[LoadPoint],
    limits: Mapping[str, float | None],
) -> dict[str, object]:
    """The saturation index (the worst of p90 latency / its SLO over the recent window, and the
    SLO it is), and GuideLLM's over-saturation test: concurrency (running + waiting) and TTFT
    both rising over the last two minutes by more than their noise."""
    out: dict[str, object] = {}
    if len(history) >= 2:
        old = _first_within(history, recent_s)
        worst: tuple[float, str, float, tuple[float, float] | None] | None = None
        seen = 0.0
        for slo, limit in limits.items():
            buckets = _buckets(old, history[-1], slo) if limit else None
            seen = max(seen, buckets[-1][1] if buckets else 0.0)
            if not buckets or not limit or buckets[-1][1] < SATURATION_SHOWN:
                continue  # too few requests in the window to read a p90 from
            q, ge = histogram_quantile(SATURATION_Q, buckets)
            if q is not None and (worst is None or q / limit > worst[0]):
                bucket = None if ge else quantile_bucket(q, buckets)
                within = (
                    (bucket[0] / limit, bucket[1] / limit) if bucket and wide(bucket, q) else None
                )
                worst = (q / limit, slo, buckets[-1][1], within)
        if worst is not None:
            (
                out["saturation"], out["saturation_slo"], out["saturation_requests"],
                out["saturation_bucket"],
            ) = worst  # fmt: skip
        elif any(limits.values()):
            span = history[-1].t - old.t
            out["saturation_note"] = (
                f"{seen:.0f} requests finished in the {span:.0f} s watched; a p90 needs "
                f"{SATURATION_SHOWN}"
            )
    t_end = points[-1].t if points else 0.0
    recent = [p for p in points if p.t > t_end - RISING_S]
    load = [(p.t, p.running + p.waiting) for p in recent]
    ttft = [
        (p.t, q) for p in recent if p.ttft and (q := histogram_quantile(0.5, p.ttft)[0]) is not None
    ]
    if len(load) >= 6:
        out["saturating"] = (
            _trend(load, min_points=6) is not None
            and len(ttft) >= 6
            and _trend(ttft, min_points=6) is not None
        )
    return out


def estimate(
    history: Sequence[Extract],
    window_s: float,
    *,
    ttft_limit_s: float | None,
    tpot_limit_s: float | None,
    kv_capacity_tokens: float | None,
    batch_limit: float | None = None,
    recent_s: float = 60.0,
    profile: EngineProfile | None = None,
    batch_from: str | None = None,
) -> CapacityReport:
    """Capacity to the first SLO breach (requests per second), its binding limit and range, the
    room above the current rate; the times to a full KV cache and to a queue long enough to
    break the TTFT SLO; the saturation index over the recent window."""
    read = gauge_reader(profile)
    points = load_points(history, window_s, kv_capacity_tokens, read)
    now = recent_rate(points)
    settled = settled_from(history, read)  # (one reading for every trend below)
    kv_readings = _readings(history, window_s, "kv_cache_usage", read, settled)
    kv_line = _line(kv_readings) if len(kv_readings) >= 3 else None  # (drawn once, read twice)
    report = _estimate(
        history, points, window_s, ttft_limit_s, tpot_limit_s, kv_capacity_tokens, batch_limit,
        now or 0.0, read, time_to(kv_readings, 1.0, line=kv_line),
    )  # fmt: skip
    extra = saturation(history, recent_s, points, {"ttft": ttft_limit_s, "tpot": tpot_limit_s})
    if report.kv_full_in_s != 0.0:  # (a pool full now is full now)
        # the arrivals' trend, run through the load's law: where the readings rise within
        # their noise, a ramp the arrivals show beyond theirs is forecast too (a small pool's
        # one-second swing hides a slow ramp that its counted arrivals do not); where the
        # readings' line reaches too far (REACH), the arrivals' own reach is the test
        by_law = _kv_full_in_by_law(history, points, kv_readings, kv_line, kv_capacity_tokens, read)
        if by_law is not None:
            extra["kv_full_in_s"] = by_law
    if batch_limit:
        extra.update(batch_limit=batch_limit, batch_from=batch_from or "given")
    if ttft_limit_s and now:
        # queued wait ~ waiting / the finished rate (Little's law): TTFT breaks from queueing alone
        # once this many wait — the wait the SLO leaves after the first token's own time (the
        # unqueued p95), not the whole SLO
        _, unqueued = unqueued_ttft(points)
        left = ttft_limit_s - (unqueued or 0.0)
        extra["queue_limit"] = limit = max(1.0, left * now)
        extra["ttft_unqueued_p95_s"] = unqueued
        extra["queue_full_in_s"] = queue_full_in(history, window_s, limit, read, settled)
    return report.model_copy(update=extra)


def _prefill_fit(points: Sequence[LoadPoint]) -> tuple[float, float, float] | None:
    """``TTFT median ≈ a + b·n`` over the stretches where nothing waited (each with 3 requests
    at least), when it rises beyond three standard errors over a load that varied, with the
    p95's ratio to the median within a stretch (the median of the stretches' ratios: pooled
    stretches would mix levels); else None (the first token's time does not depend on the load
    seen)."""
    xy = []
    ratios = []
    for p in points:
        if p.waiting > 0 or not p.ttft or p.ttft[-1][1] < 3:
            continue
        med, _ = histogram_quantile(0.5, p.ttft)
        if med is not None:
            xy.append((p.running, med))
            p95, ge = histogram_quantile(0.95, p.ttft)
            if p95 is not None and not ge and med > 0:
                ratios.append(p95 / med)
    if len(xy) < MIN_POINTS:
        return None
    xs = [x for x, _ in xy]
    mean = sum(xs) / len(xs)
    sxx = sum((x - mean) ** 2 for x in xs)
    if max(xs) - min(xs) < 2.0 or sxx <= 0:
        return None
    ym = sum(y for _, y in xy) / len(xy)
    b = sum((x - mean) * (y - ym) for x, y in xy) / sxx
    a = ym - b * mean
    s2 = sum((y - a - b * x) ** 2 for x, y in xy) / max(1, len(xy) - 2)
    if b <= 0 or b < 3 * math.sqrt(s2 / sxx):
        return None
    ratios.sort()
    return a, b, max(1.0, ratios[len(ratios) // 2]) if ratios else 1.0


def unqueued_ttft(points: Sequence[LoadPoint]) -> tuple[float | None, float | None]:
    """TTFT's median and p95 over the stretches where nothing waited: the first token's own
    time, without a queue (None, None when no such stretch finished a request)."""
    calm: dict[float, float] = {}
    for p in points:
        if p.waiting == 0:
            for le, c in p.ttft:
                calm[le] = calm.get(le, 0.0) + c
    buckets = sorted(calm.items())
    if not buckets:
        return None, None
    return histogram_quantile(0.5, buckets)[0], histogram_quantile(0.95, buckets)[0]


def recent_rate(points: Sequence[LoadPoint]) -> float | None:
    """Requests finished per second over the last minute or so of load points."""
    recent = points[-min(len(points), 6) :]
    span = sum(p.span_s for p in recent)
    return sum(p.finished for p in recent) / span if span > 0 else None


def _estimate(
    history: Sequence[Extract],
    points: Sequence[LoadPoint],
    window_s: float,
    ttft_limit_s: float | None,
    tpot_limit_s: float | None,
    kv_capacity_tokens: float | None,
    batch_limit: float | None,
    now: float,
    read: Callable[[Extract, str], float | None] = _PLAIN,
    full_in: float | None = None,
) -> CapacityReport:
    fit, mix = _decode_law(history, points, window_s, read)
    if isinstance(fit, str):
        return CapacityReport(cant_tell=fit, kv_full_in_s=full_in)
    done = sum(p.finished for p in points)
    if done <= 0:
        return CapacityReport(cant_tell="no request finished in the window", kv_full_in_s=full_in)
    t0, t0_p95 = unqueued_ttft(points)
    if t0 is None or t0_p95 is None:
        return CapacityReport(
            cant_tell="no stretch without a queue to read unqueued TTFT from", kv_full_in_s=full_in
        )
    # prefill contention: the first token's own time growing with the sequences running (their
    # decode steps share the GPU with each new prompt's prefill)
    prefill = _prefill_fit(points)
    if not prefill and ttft_limit_s is not None and t0_p95 > ttft_limit_s:
        return CapacityReport(
            requests_per_s=now,
            room_per_s=0.0,
            binding="ttft",
            note=f"unqueued TTFT p95 {t0_p95:.2f} s already misses its SLO {ttft_limit_s:g} s",
            kv_full_in_s=full_in,
            seen_max_running=fit.n_hi,
        )
    law = _Law(fit, t0, prefill, sum(p.output_tokens for p in points) / done, _swing(points))
    tail = _tpot_tail(history, window_s, mix, fit)
    bounds: dict[str, float] = {}  # name -> mean running sequences at which it binds
    if tpot_limit_s is not None and fit.h > 0:
        bounds["tpot"] = law.below((tpot_limit_s / tail - fit.w) / fit.h)
    kv = [p.kv_tokens for p in points if p.kv_tokens]
    if kv and kv_capacity_tokens:
        bounds["kv"] = law.below(kv_capacity_tokens / (sum(kv) / len(kv)))
    seen = None if batch_limit else _batch_seen(points, kv_capacity_tokens)
    batch_limit = batch_limit or seen
    if batch_limit:
        bounds["batch"] = law.below(batch_limit)
    if prefill and ttft_limit_s is not None:
        # the SLO breaks where the fitted median, scaled to its p95, reaches it
        bounds["prefill"] = law.below((ttft_limit_s / prefill[2] - prefill[0]) / prefill[1])
    if not bounds:
        return CapacityReport(
            cant_tell="no SLO or pool bound to reach (no TPOT SLO, no KV capacity)",
            kv_full_in_s=full_in,
        )
    queued = {k: v for k, v in bounds.items() if k in ("kv", "batch")}
    return _at_bound(
        law,
        bounds,
        (tpot_limit_s or 0) / tail,
        now,
        kv_full_in_s=full_in,
        observed=[(p.running, p.itl_s) for p in points if p.itl_s is not None][-MAX_SHOWN:],
        queue_from=min(queued, key=lambda k: queued[k]) if queued else None,
        batch_limit=batch_limit,
        batch_from="the load (stretches that queued with KV room)" if seen else None,
    )


def _decode_law(
    history: Sequence[Extract],
    points: Sequence[LoadPoint],
    window_s: float,
    read: Callable[[Extract, str], float | None],
) -> tuple[Fit | str, list[tuple[float, float]]]:
    """The decode step's law over the running count, and the load it was read at (each level
    weighted by what it served)."""
    fit = fit_itl(points)
    mix = [(p.running, p.finished) for p in points if p.finished > 0]
    if len(points) >= MIN_POINTS and sum(not p.steady for p in points) >= len(points) / 2:
        # a load that jumps (every 5-10 s): stretches mix its levels, so the decode law is read
        # from the scrape pairs that held one count, at each level. Not on smoother load: there
        # a pair's count is one reading of a swinging count, and chance swings alone flatten a
        # fit on them (the fitted slope shrinks with the noise in the count)
        pairs = decode_points(history, window_s, read)
        fine = fit_itl(pairs)
        if not isinstance(fine, str):
            return fine, [(p.running, p.tokens) for p in pairs]
    return fit, mix


def _swing(points: Sequence[LoadPoint]) -> float:
    """How far the running count swings around its mean as arrivals come and go: about a
    Poisson count's, variance ~ c x mean, c read from the stretches of steady load (a step in
    the load is no chance swing)."""
    calm = [p for p in points if p.steady]
    weight = sum(p.running for p in calm)
    return sum(p.running_var for p in calm) / weight if weight > 0 else 0.0


@dataclass(frozen=True)
class _Law:
    """What a request costs at a mean of n running sequences: its first token (unqueued, or
    contended by prefill), then its decode steps by the fitted law; and the swing a bound must
    hold."""

    fit: Fit
    t0: float
    prefill: tuple[float, float, float] | None
    out_tokens: float
    c: float

    def first(self, n: float) -> float:
        pf = self.prefill
        return max(self.t0, pf[0] + pf[1] * n) if pf else self.t0

    def rate(self, n: float, w: float | None = None, h: float | None = None) -> float:
        """Requests a second served at n running sequences (the fit's w and h unless given)."""
        w = self.fit.w if w is None else w
        h = self.fit.h if h is None else h
        itl = max(1e-6, w + h * n)
        return n / (self.first(n) + max(0.0, self.out_tokens - 1) * itl)

    def below(self, bound: float) -> float:
        """The mean running count whose swing's 95th percentile reaches ``bound``: Z x sigma
        below it."""
        c = self.c
        root = (-Z * math.sqrt(c) + math.sqrt(Z * Z * c + 4 * max(bound, 0.0))) / 2
        return root * root


def _at_bound(
    law: _Law,
    bounds: dict[str, float],
    tpot_step: float,
    now: float,
    kv_full_in_s: float | None,
    **found: Any,
) -> CapacityReport:
    """The rate at the bound that binds first, with its range and what else was ``found`` (the
    points, the queue's bound, the batch limit); or a floor at the load seen when that bound
    lies past what the evidence reaches. ``tpot_step``: the TPOT SLO over the tail's factor, the
    decode step the TPOT bound holds."""
    fit = law.fit
    name, n_star = min(bounds.items(), key=lambda kv_: law.rate(max(kv_[1], 0.0)))
    if n_star > EXTRAPOLATE * fit.n_hi:
        # a floor from the evidence: the rate at the load seen (the SLO held there), never a
        # rate the fit extrapolates to (that floor stood above the truth)
        floor = law.rate(fit.n_hi)
        return CapacityReport(
            requests_per_s=floor,
            at_least=True,
            room_per_s=max(0.0, floor - now),
            note=f"load seen up to {fit.n_hi:.0f} sequences: can't tell beyond",
            kv_full_in_s=kv_full_in_s,
            seen_max_running=fit.n_hi,
            current_per_s=now,
        )
    cap = law.rate(max(n_star, 0.0))
    # the range: the fit's coefficients two standard errors either way
    spread = [
        law.rate(max(n_star, 0.0), fit.w + dw * 2 * fit.se_w, fit.h + dh * 2 * fit.se_h)
        for dw in (-1, 1)
        for dh in (-1, 1)
    ]
    if name == "tpot":  # the bound itself moves with the fit
        spread = [
            law.rate(law.below(max(tpot_step - w, 0.0) / h), w, h)
            for w in (fit.w - 2 * fit.se_w, fit.w + 2 * fit.se_w)
            for h in (max(1e-9, fit.h - 2 * fit.se_h), fit.h + 2 * fit.se_h)
        ]
    nxt = sorted(
        ((k, law.rate(max(v, 0.0))) for k, v in bounds.items() if k != name), key=lambda x: x[1]
    )
    return CapacityReport(
        requests_per_s=cap,
        low=min(spread + [cap]) * (1 - ALLOW_LOW),
        high=max(spread + [cap]) * (1 + ALLOW_HIGH),
        room_per_s=max(0.0, cap - now),
        current_per_s=now,
        binding=name if name == "tpot" else "ttft",
        limit=name,
        next_limit=nxt[0][0] if nxt else None,
        next_per_s=nxt[0][1] if nxt else None,
        running_at_limit=n_star,
        seen_max_running=fit.n_hi,
        itl_base_s=fit.w,
        itl_per_seq_s=fit.h,
        kv_full_in_s=kv_full_in_s,
        **found,
    )


QUEUED = 0.8  # a stretch queued this much of the time, with KV room, ran at the batch limit
KV_ROOM = 0.9


def _batch_seen(points: Sequence[LoadPoint], kv_capacity: float | None) -> float | None:
    """The batch limit the engine showed: the most sequences running in a stretch that queued
    throughout while its KV pool had room (the engine schedules no more at once, whatever the
    arrivals); None when no stretch did."""
    if not kv_capacity:
        return None
    capped = [
        p.running
        for p in points
        if p.queued_share >= QUEUED
        and p.kv_tokens is not None
        and p.kv_tokens * p.running / kv_capacity < KV_ROOM
    ]
    return max(capped) if capped else None


def _tpot_tail(
    history: Sequence[Extract], window_s: float, load: Sequence[tuple[float, float]], fit: Fit
) -> float:
    """How far the window's TPOT p95 lies above what the fit predicts for the same load: the
    p95 of the fitted ITL over the window's load levels (running, weighted by what each served:
    the scrape pairs' tokens, or the stretches' finished requests) against the TPOT histogram's
    p95, so the load's own variation is not counted as spread."""
    if len(history) < 2:
        return 1.0
    buckets = _buckets(_first_within(history, window_s), history[-1], "tpot") or ()
    observed, ge = histogram_quantile(0.95, buckets) if buckets else (None, False)
    mix = sorted((fit.w + fit.h * n, weight) for n, weight in load if weight > 0)
    total = sum(n for _, n in mix)
    if observed is None or ge or total <= 0 or wide(quantile_bucket(observed, buckets), observed):
        return 1.0  # a wide bucket holds the p95: its interpolated figure says nothing of spread
    seen = 0.0
    for value, n in mix:
        seen += n
        if seen >= 0.95 * total:
            return max(1.0, observed / value)
    return 1.0


def _read(value: float | None) -> float:
    """A figure the caller has checked was read (never a 0 standing in for one that was not)."""
    if value is None:
        raise ValueError("a capacity figure used before it was read")
    return value


def service_capacity(
    reports: Mapping[str, CapacityReport], routing: str = "round-robin"
) -> CapacityReport | None:
    """A service's capacity over its replicas (engine name -> its report), under the plan's
    routing: round-robin (the default) gives every replica the same share of arrivals, so the
    service breaks when its weakest does, at replicas × the weakest's rate, and the weakest
    names the binding SLO; least-loaded routing sends each replica what it can take, so rates
    add up and the replica with the least room names it. KV and queue exhaust at the soonest;
    saturation is the worst."""
    if len(reports) <= 1:
        return next(iter(reports.values()), None)
    every = list(reports.values())
    extra: dict[str, Any] = {}
    for key in ("kv_full_in_s", "queue_full_in_s"):
        times = [t for r in every if (t := getattr(r, key)) is not None]
        extra[key] = min(times) if times else None
    sats = [r for r in every if r.saturation is not None]
    if sats:
        worst = max(sats, key=lambda r: r.saturation or 0.0)
        extra.update(
            saturation=worst.saturation,
            saturation_slo=worst.saturation_slo,
            saturation_bucket=worst.saturation_bucket,
            saturating=any(r.saturating for r in every),
        )
    unknown = [
        f"{n}: {r.cant_tell or r.note}"
        for n, r in reports.items()
        if r.room_per_s is None or r.requests_per_s is None
    ]
    if unknown:
        return CapacityReport(cant_tell="; ".join(unknown), **extra)

    def total(key: str) -> float | None:
        vals = [getattr(r, key) for r in every]
        return None if any(v is None for v in vals) else sum(vals)

    # every replica's rate and room are read here (an unread one returned above)
    if routing == "round-robin":
        weakest = min(every, key=lambda r: _read(r.requests_per_s))
        n = len(every)
        current = total("current_per_s")
        cap = n * _read(weakest.requests_per_s)
        return CapacityReport(
            requests_per_s=cap,
            low=n * weakest.low if weakest.low is not None else None,
            high=n * weakest.high if weakest.high is not None else None,
            at_least=weakest.at_least,
            current_per_s=current,
            room_per_s=max(0.0, cap - current) if current is not None else None,
            binding=weakest.binding,
            limit=weakest.limit,
            note=f"round-robin over {n} replicas: {n} × the weakest's rate",
            **extra,
        )
    tight = min(every, key=lambda r: _read(r.room_per_s))
    spans = [r for r in every if r.at_least]
    return CapacityReport(
        requests_per_s=total("requests_per_s"),
        low=None if spans else total("low"),
        high=None if spans else total("high"),
        at_least=bool(spans),
        current_per_s=total("current_per_s"),
        room_per_s=total("room_per_s"),
        binding=tight.binding,
        limit=tight.limit,
        note=f"{len(spans)} of {len(every)} replicas past the load seen" if spans else None,
        **extra,
    )


SCORE_AFTER_S = 60.0  # an estimate is scored on the load of the minute after it
BACKTEST_KEPT = 12  # the scores shown: the last dozen estimates


@dataclass
class _Bet:
    t: float
    low: float
    high: float
    floor: bool  # only a lower bound: it holds unless the SLO breaks below it


class Backtest:
    """The estimates an engine was given, each scored on the load that followed it (the
    backtest the model is held to, live): a range *missed* when the SLO broke at a finished
    rate below its low end, or held at a rate above its high end; a floor when the SLO broke
    below it; otherwise it *held*, and was *tested* when the load reached its range. One bet
    per minute, the last BACKTEST_KEPT scores kept."""

    def __init__(self) -> None:
        self.bets: list[_Bet] = []
        self.scores: list[tuple[bool, bool]] = []  # (held, tested), oldest first

    def update(
        self,
        history: Sequence[Extract],
        window_s: float,
        report: CapacityReport,
        limits: Mapping[str, float | None],
    ) -> CapacityReport:
        """Score the bets a minute old on the window's finished rate and SLO state, take the
        new estimate as a bet, and give the report its scores."""
        if not history:
            return report
        now = history[-1].t
        rate = report.current_per_s
        broken = _broken(history, window_s, limits)
        due = [b for b in self.bets if now - b.t >= SCORE_AFTER_S]
        if rate is not None and broken is not None:
            for b in due:
                missed = (
                    broken and rate < b.low
                    if b.floor
                    else (broken and rate < b.low or not broken and rate > b.high)
                )
                self.scores.append((not missed, rate >= b.low))
            self.bets = [b for b in self.bets if b not in due]
            del self.scores[:-BACKTEST_KEPT]
        else:
            self.bets = [b for b in self.bets if now - b.t < 3 * SCORE_AFTER_S]
        cap = report.requests_per_s
        if cap is not None and (not self.bets or now - self.bets[-1].t >= SCORE_AFTER_S):
            low = cap if report.at_least else (report.low if report.low is not None else cap)
            high = report.high if report.high is not None else cap
            self.bets.append(_Bet(now, low, high, bool(report.at_least)))
        if not self.scores:
            return report
        return report.model_copy(
            update={
                "backtest_scored": len(self.scores),
                "backtest_held": sum(1 for held, _ in self.scores if held),
                "backtest_tested": sum(1 for _, tested in self.scores if tested),
            }
        )


def _broken(
    history: Sequence[Extract], window_s: float, limits: Mapping[str, float | None]
) -> bool | None:
    """Whether an SLO's p95 misses its limit over the window (None: no requests to say)."""
    seen = False
    for slo, limit in limits.items():
        if not limit:
            continue
        buckets = _buckets(_first_within(history, window_s), history[-1], slo)
        if not buckets or buckets[-1][1] <= 0:
            continue
        q, _ = histogram_quantile(0.95, buckets)
        if q is None:
            continue
        seen = True
        if q > limit:
            return True
    return False if seen else None
