"""Windowed figures of kept scrapes: a counter's increase and rate, a histogram's buckets, the
requests' outcomes, for one engine or summed over a service's replicas (each replica its own
history: its own restarts, its own first scrape). The engine figures (enginestats) and the SLO
and cost meters (slo, meters) ask here, so a figure means the same on every surface."""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from console.engines import EngineProfile, Extract, as_list
from console.figures.window import (
    Delta,
    Run,
    range_start,
    rate,
    window_delta,
    window_start,
)
from console.promtext import Labels, Vector, label

WINDOWS_S = (60.0, 300.0, 900.0)  # the windows an operator picks (1m, 5m, 15m)


def window_label(window_s: float) -> str:
    if window_s >= 3600 and window_s % 3600 == 0:
        return f"{int(window_s // 3600)}h"
    if window_s >= 60 and window_s % 60 == 0:
        return f"{int(window_s // 60)}m"
    return f"{window_s:g}s"


def parse_window(text: str) -> float:
    """'1m', '5m', '15m', '1h', '90s' or plain seconds -> seconds (ValueError if not one)."""
    t = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600}
    value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return value


class Scrapes(deque[Extract]):
    """A history's scrapes, with the times at which the engine's process start moved (kept as they
    arrive, so no window walks the whole history to find them), each scrape's time (to bisect),
    and per counter or histogram signal the newest scrape in which it did not only grow."""

    restarts: set[float]
    resets: set[float]  # where the token or finished-request count went down (a restart unsaid)
    times: list[float]
    breaks: dict[tuple[str, str], float]
    first_t: float | None  # the console's first scrape of the engine (windows start no earlier)
    # where its pool had filled from its start, as capacity last read it: (reader, time, found);
    # not found yet, the time of the newest scrape looked at
    filled: tuple[object, float, bool] | None


class EngineHistory:
    """Scrapes of one engine, kept for the longest window plus one baseline scrape."""

    def __init__(self, keep_s: float = max(WINDOWS_S) + 30) -> None:
        self.keep_s = keep_s
        self.points: Scrapes = Scrapes()
        self.clear()

    def add(self, ex: Extract) -> None:
        ex.grew = set()
        points = self.points
        if points:
            before = points[-1]
            if restarted(before, ex):
                points.restarts.add(ex.t)
            else:
                grew = _grew(before, ex)
                ex.grew = before.grew if grew == before.grew else grew
                if any(k not in grew and went_down(before, ex, k[1]) for k in COUNTS_RESET):
                    points.resets.add(ex.t)
            _share(before, ex)
        breaks = points.breaks
        for key in {
            *breaks,
            *((k, sig) for k in ("counters", "histograms") for sig in getattr(ex, k)),
        }:
            if key not in ex.grew:  # absent, new, reset or reshaped here
                breaks[key] = ex.t
        if points.first_t is None:
            points.first_t = ex.t
        points.append(ex)
        points.times.append(ex.t)
        cut = ex.t - self.keep_s
        while len(points) > 2 and points[1].t <= cut:
            points.popleft()
            del points.times[0]
        if points.restarts:
            points.restarts = {t for t in points.restarts if t >= points[0].t}
        if points.resets:
            points.resets = {t for t in points.resets if t >= points[0].t}

    def clear(self) -> None:
        self.points.clear()
        self.points.restarts = set()
        self.points.resets = set()
        self.points.times = []
        self.points.breaks = {}
        self.points.first_t = None
        self.points.filled = None


# the counts whose going down says the engine restarted where it exports no start time
COUNTS_RESET = (("counters", "generation_tokens"), ("counters", "requests_finished"))


def went_down(before: Extract, ex: Extract, signal: str) -> bool:
    """The counter's sum over its series is lower than the scrape before's."""
    old, new = before.counters.get(signal), ex.counters.get(signal)
    if not old or not new:
        return False
    return sum(v[0] for v in new.values()) < sum(v[0] for v in old.values())


def _share(before: Extract, ex: Extract) -> None:
    """Series that did not change since the previous scrape keep its objects, so 15 minutes of
    history hold one copy of what stands still (info, idle histograms, steady gauges, which series
    were read). Extracts are never changed once kept."""
    for kind in ("gauges", "counters", "histograms", "bounds"):
        old: dict[str, dict[Labels, Any]] = getattr(before, kind)
        new: dict[str, dict[Labels, Any]] = getattr(ex, kind)
        same = len(old) == len(new)
        for signal, values in new.items():
            prev = old.get(signal)
            if prev is None:
                same = False
                continue
            if prev == values:
                new[signal] = prev
                continue
            same = False
            for lab, v in values.items():
                p = prev.get(lab)
                if p is not None and p == v:
                    values[lab] = p
        if same:
            setattr(ex, kind, old)
    for kind in ("series", "info", "hints", "problems"):
        if getattr(ex, kind) == getattr(before, kind):
            setattr(ex, kind, getattr(before, kind))


def _grew(before: Extract, ex: Extract) -> set[tuple[str, str]]:
    """The counter and histogram signals whose every series only grew (or held) since ``before``:
    over a run of such scrapes a window's increase is simply newest - oldest."""
    out: set[tuple[str, str]] = set()
    for kind in ("counters", "histograms"):
        old: dict[str, dict[Labels, Vector]] = getattr(before, kind)
        for signal, values in getattr(ex, kind).items():
            prev = old.get(signal)
            if prev is None or prev.keys() != values.keys():
                continue
            if all(
                v is p or (len(v) == len(p) and all(map(operator.ge, v, p)))
                for (v, p) in ((v, prev[k]) for k, v in values.items())
            ):
                out.add((kind, signal))
    return out


def _grown_delta(
    points: Sequence[tuple[float, Mapping[Labels, Vector]]],
    window_s: float,
    n: int,
    covered_from: float | None = None,
) -> Delta:
    """``window_delta`` over ``n`` scrapes in which every series only grew: one segment per
    series, so its increase is newest - oldest (the same arithmetic, without walking each step)."""
    t_old, old = points[0]
    t_new, new = points[-1]
    return Delta(
        {k: tuple(map(operator.sub, v, old[k])) for k, v in new.items()},
        t_new - t_old,
        False,
        None,
        {k: Run(t_old, t_new, n, old[k][0]) for k in new},
        range_start(t_new, t_old, window_s, covered_from),
        t_new,
    )


def restart_times(history: Sequence[Extract]) -> frozenset[float]:
    """Scrape times at which the engine's process start time moved forward: a restart, even when
    no counter has gone down yet (the new process may have counted past the old values)."""
    known = getattr(history, "restarts", None)
    if known is not None:
        return frozenset(known)
    return frozenset(
        b.t for a, b in zip(history, list(history)[1:], strict=False) if restarted(a, b)
    )


def process_start(ex: Extract) -> float | None:
    values = ex.gauges.get("process_start")
    return max(values.values()) if values else None


def restarted(before: Extract, after: Extract) -> bool:
    """The process start time moved forward between two scrapes (by more than clock jitter)."""
    a, b = process_start(before), process_start(after)
    return a is not None and b is not None and b > a + 1.0


def _points(
    history: Sequence[Extract], kind: str, signal: str, window_s: float
) -> tuple[list[tuple[float, Mapping[Labels, Vector]]], bool]:
    """The scrapes of one signal that a window over them uses: those in (t - W, t] and at least
    the newest two (``window_start``), oldest first. Read from the newest back, so a poll costs
    the window, not the whole kept history. Also whether every series only grew across them."""
    out: list[tuple[float, Mapping[Labels, Vector]]] = []
    start: float | None = None
    grew = True
    key = (kind, signal)
    later: Extract | None = None
    for ex in reversed(history):
        values = getattr(ex, kind).get(signal)
        if values is None:
            grew = False  # a scrape without it: the steps around it are not known to be growth
            continue
        if start is None:
            start = ex.t - window_s
        elif len(out) >= 2 and ex.t <= start:
            break
        if later is not None and key not in later.grew:
            grew = False
        out.append((ex.t, values))
        later = ex
    out.reverse()
    return out, grew


def window_points(
    history: Sequence[Extract], kind: str, signal: str, window_s: float
) -> tuple[list[tuple[float, Mapping[Labels, Vector]]], bool, int]:
    """``_points``, and how many scrapes the window spans. In a kept history: nothing at once for
    a signal none of its scrapes holds, and where the signal only grew through the window, found
    by bisecting the scrape times, the oldest and newest scrape alone (all a window of growth
    needs)."""
    if isinstance(history, Scrapes) and history:
        broke = history.breaks.get((kind, signal))
        if broke is None:  # never in the kept scrapes (a series this engine does not export)
            return [], False, 0
        times = history.times
        i = window_start(times, window_s)
        if len(history) >= 2 and broke <= times[i]:
            old, new = history[i], history[-1]
            return (
                [(old.t, getattr(old, kind)[signal]), (new.t, getattr(new, kind)[signal])],
                True,
                len(history) - i,
            )
    points, grew = _points(history, kind, signal, window_s)
    return points, grew, len(points)


def covered_from(history: Sequence[Extract]) -> float | None:
    """The console's first scrape of the engine (a kept history knows it; a plain list of
    scrapes is taken as the whole story, as Prometheus takes its samples)."""
    return getattr(history, "first_t", None)


def covered(history: Sequence[Extract], window_s: float) -> float | None:
    """Seconds of the window the console has watched the engine: the window itself once full."""
    first = covered_from(history)
    if first is None or not history:
        return None
    return min(window_s, history[-1].t - first)


def partial(covered_s: float | None, window_s: float) -> bool:
    return covered_s is not None and covered_s < window_s - 1e-6


def kept_delta(
    points: Sequence[tuple[float, Mapping[Labels, Vector]]],
    grew: bool,
    window_s: float,
    restarts: Collection[float],
    scrapes: int | None = None,
    first_t: float | None = None,
) -> Delta | None:
    if grew and len(points) >= 2:
        return _grown_delta(points, window_s, scrapes or len(points), first_t)
    return window_delta(points, window_s, restarts, first_t)


def signal_delta(
    history: Sequence[Extract],
    kind: str,
    signal: str,
    window_s: float,
    restarts: frozenset[float] | None = None,
) -> Delta | None:
    """The windowed per-series increase of one signal of one engine (None if it never showed)."""
    points, grew, n = window_points(history, kind, signal, window_s)
    if not points:
        return None
    restarts = restart_times(history) if restarts is None else restarts
    return kept_delta(points, grew, window_s, restarts, n, covered_from(history))


def summed_buckets(
    delta: Delta, bounds: dict[Labels, tuple[float, ...]]
) -> list[tuple[float, float]]:
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
class Outcomes:
    """Requests that finished in the window, by the profile's one classification."""

    good: float  # completed requests (the engine's notion: not aborted, not failed)
    failed: float
    aborted: float
    span_s: float = 0.0  # the longest replica's watched span of the window
    reasons: dict[str, float] = field(default_factory=dict)  # finish reason (or outcome): count

    @property
    def completion(self) -> float | None:
        done = self.good + self.failed
        return self.good / done if done > 0 else None


class Windowed:
    """Windowed figures over ``window_s`` of one engine (one history) or of replicas (several).
    ``on_delta`` sees each delta taken (the engine figures note a restart from them)."""

    def __init__(
        self,
        histories: Sequence[Sequence[Extract]],
        window_s: float,
        on_delta: Callable[[Delta], None] | None = None,
    ) -> None:
        self.histories = [h for h in histories if h]
        self.w = window_s
        self.on_delta = on_delta
        self._restarts: list[frozenset[float]] | None = None

    def deltas(self, kind: str, signal: str) -> Iterator[tuple[Sequence[Extract], Delta]]:
        """(history, its windowed delta) for every replica that exposes the signal."""
        if self._restarts is None:
            self._restarts = [restart_times(h) for h in self.histories]
        for hist, restarts in zip(self.histories, self._restarts, strict=True):
            delta = signal_delta(hist, kind, signal, self.w, restarts)
            if delta is not None:
                if self.on_delta is not None:
                    self.on_delta(delta)
                yield hist, delta

    def increase(
        self, signal: str, by: str | None = None
    ) -> tuple[dict[str, float] | None, list[Delta]]:
        """A counter's increase over the window, summed (key "") or per value of label ``by``,
        across replicas; with the deltas it came from (None: no replica exposes it)."""
        out: dict[str, float] | None = None
        deltas = []
        for _, delta in self.deltas("counters", signal):
            deltas.append(delta)
            out = out if out is not None else {}
            for lab, vec in delta.values.items():
                if not math.isnan(vec[0]):
                    key = (label(lab, by) or "") if by else ""
                    out[key] = out.get(key, 0.0) + vec[0]
        return out, deltas

    def rate(self, signal: str) -> float | None:
        """``sum(rate(signal[W]))`` across replicas (None: no replica with a rate yet)."""
        rates = [
            r
            for _, d in self.deltas("counters", signal)
            if not d.since_start and (r := rate(d)) is not None
        ]
        return sum(rates) if rates else None

    def buckets(self, signal: str) -> tuple[list[tuple[float, float]], bool]:
        """Bucket increases over the window summed by ``le`` across replicas; (buckets, whether
        a replica's counts are since its start)."""
        per_le: dict[float, float] = {}
        since_start = False
        for hist, delta in self.deltas("histograms", signal):
            since_start |= delta.since_start
            for le, c in summed_buckets(delta, hist[-1].bounds.get(signal, {})):
                per_le[le] = per_le.get(le, 0.0) + c
        return sorted(per_le.items()), since_start

    def span(self) -> float:
        """The longest replica's span of scrapes inside the window."""
        return max(
            (
                h[-1].t - h[window_start([x.t for x in h], self.w)].t
                for h in self.histories
                if len(h) > 1
            ),
            default=0.0,
        )

    def outcomes(self, profile: EngineProfile) -> Outcomes | None:
        """Good, failed and aborted requests in the window (and each finish reason's count) by
        the profile's one classification (``SuccessSpec.rules``); None when the engine exports
        no outcomes or not its first counter."""
        spec = profile.success
        if spec is None:
            return None
        totals = [0.0, 0.0, 0.0]
        reasons: dict[str, float] = {}
        for i, (signal, weigh) in enumerate(spec.rules()):
            sums, _ = self.increase(signal, by=spec.label)
            if sums is None:
                if i == 0:
                    return None
                continue
            for key, v in sums.items():
                for j, w in enumerate(weigh(key)):
                    totals[j] += w * v
                name = (
                    key
                    if spec.finished
                    else "success"
                    if signal == spec.ok
                    else (key or "failed")
                    if signal in as_list(spec.failed)
                    else None
                )
                if name is not None:
                    reasons[name] = reasons.get(name, 0.0) + v
        return Outcomes(max(0.0, totals[0]), totals[1], totals[2], reasons=reasons)
