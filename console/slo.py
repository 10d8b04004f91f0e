"""SLO compliance per service (DESIGN §1 "SLOs"; reference/engine-metrics.md §8).

Attainment of a latency SLO = share of requests within its limit, read from the windowed bucket
deltas summed over the service's replicas: exact when the limit is a bucket bound, linearly
interpolated (and marked approximate) between bounds. Separate histograms lose the joint
distribution, so the share of *good* requests (every SLO met and completed) is only bounded:

    c x max(0, a_1 + ... + a_n - (n - 1))  <=  good share  <=  c x min(a_1, ..., a_n)

(Fréchet bounds; c = completion rate, a_i = attainments over completed requests).
Error budget = 1 - completion target over 30 days; burn rate = bad share / budget share.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from console.engines import EngineProfile, Extract
from console.enginestats import _points, parse_window, summed_buckets, window_label
from console.plan import Service, SloSpec, shape
from console.promtext import label
from console.window import fraction_at_or_below, histogram_quantile, window_delta

BUDGET_PERIOD_S = 30 * 24 * 3600.0
FAST_BURN = 14.4  # 5 m and 1 h both at or above: the month's budget goes in ~2 days -> critical
SLOW_BURN = 6.0  # 1 h and 6 h both at or above: the budget goes in ~5 days -> warning
BURN_WINDOWS_S = (300.0, 3600.0, 21600.0)
SIGNALS = (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2e", "e2e_s"))


def default_slo(svc: Service) -> SloSpec:
    """DESIGN's typical plan: 8B-class vs 70B-class limits, when the plan gives none."""
    big = shape(svc).params_b >= 30
    base = svc.slo or SloSpec()
    return base.model_copy(update={
        "ttft_s": base.ttft_s if base.ttft_s is not None else (2.0 if big else 1.0),
        "tpot_s": base.tpot_s if base.tpot_s is not None else (0.080 if big else 0.050),
    })


def _window_deltas(histories: Sequence[Sequence[Extract]], kind: str, signal: str, window_s: float):
    """(history, its windowed delta) for every replica that exposes the signal."""
    for hist in histories:
        points = _points(hist, kind, signal)
        if points:
            delta = window_delta(points, window_s)
            assert delta is not None
            yield hist, delta


def merged_buckets(histories: Sequence[Sequence[Extract]], signal: str, window_s: float
                   ) -> tuple[list[tuple[float, float]], bool]:
    """Bucket increases over the window, summed by ``le`` across replicas; (buckets, since_start)."""
    per_le: dict[float, float] = {}
    since_start = False
    for hist, delta in _window_deltas(histories, "histograms", signal, window_s):
        since_start |= delta.since_start
        for le, c in summed_buckets(delta, hist[-1].bounds.get(signal, {})):
            per_le[le] = per_le.get(le, 0.0) + c
    return sorted(per_le.items()), since_start


def counter_increase(histories: Sequence[Sequence[Extract]], signal: str, window_s: float,
                     by: str | None = None) -> dict[str, float] | None:
    out: dict[str, float] | None = None
    for _, delta in _window_deltas(histories, "counters", signal, window_s):
        out = out if out is not None else {}
        for lab, vec in delta.values.items():
            if not math.isnan(vec[0]):
                key = (label(lab, by) or "") if by else ""
                out[key] = out.get(key, 0.0) + vec[0]
    return out


@dataclass
class Outcomes:
    good: float  # completed requests (engine's notion: not aborted, not failed)
    failed: float
    aborted: float
    span_s: float

    @property
    def completion(self) -> float | None:
        done = self.good + self.failed
        return self.good / done if done > 0 else None


def outcomes(histories: Sequence[Sequence[Extract]], profile: EngineProfile, window_s: float) -> Outcomes | None:
    spec = profile.success
    if spec is None:
        return None
    good = failed = aborted = 0.0
    if spec.finished:
        sums = counter_increase(histories, spec.finished, window_s, by=spec.label)
        if sums is None:
            return None
        ab = [spec.aborted] if isinstance(spec.aborted, str) else list(spec.aborted or [])
        good = sum(v for k, v in sums.items() if k in spec.good)
        aborted = sum(v for k, v in sums.items() if k in ab)
        failed = sum(v for k, v in sums.items() if k not in spec.good and k not in ab)
    elif spec.total:
        total = counter_increase(histories, spec.total, window_s)
        ab = counter_increase(histories, str(spec.aborted), window_s) if spec.aborted else None
        if total is None:
            return None
        aborted = sum(ab.values()) if ab else 0.0
        good = max(0.0, sum(total.values()) - aborted)
    elif spec.ok:
        ok = counter_increase(histories, spec.ok, window_s)
        bad = counter_increase(histories, str(spec.failed), window_s) if spec.failed else None
        if ok is None:
            return None
        good, failed = sum(ok.values()), sum(bad.values()) if bad else 0.0
    span = max((h[-1].t - h[0].t for h in histories if h), default=0.0)
    return Outcomes(good, failed, aborted, min(span, window_s))


def compliance(svc: Service, histories: Sequence[Sequence[Extract]], profile: EngineProfile,
               window_s: float | None = None) -> dict:
    """SLO figures for one service over its evaluation window (JSON-ready)."""
    slo = default_slo(svc)
    w = window_s or parse_window(slo.window)
    q = slo.percentile
    qname = f"p{q * 100:g}"
    out: dict = {"window": window_label(w), "percentile": qname, "targets": {}, "unavailable": {}}
    attain: list[float] = []
    approx_any = False
    for signal, key in SIGNALS:
        limit = getattr(slo, key)
        if limit is None:
            continue
        buckets, since_start = merged_buckets(histories, signal, w)
        entry: dict = {"target_s": limit}
        total = buckets[-1][1] if buckets else 0.0
        entry["requests"] = total
        if not buckets or total <= 0:
            out["unavailable"][key] = ("engine exports no such histogram" if not buckets
                                       else f"no requests in the last {window_label(w)}")
            entry.update(observed_s=None, headroom_s=None, attainment=None)
        else:
            observed, ge = histogram_quantile(q, buckets)
            share, exact = fraction_at_or_below(limit, buckets)
            entry.update(observed_s=observed, observed_lower_bound_only=ge,
                         headroom_s=(limit - observed) if observed is not None else None,
                         met=observed is not None and observed <= limit and not ge,
                         attainment=share, attainment_exact=exact, since_start=since_start)
            approx_any |= not exact
            if share is not None:
                attain.append(share)
        out["targets"][key] = entry
    out_ok = outcomes(histories, profile, w)
    c = out_ok.completion if out_ok else None
    out["completion"] = {"target": slo.completion, "observed": c,
                         "requests": (out_ok.good + out_ok.failed) if out_ok else 0.0,
                         "aborted": out_ok.aborted if out_ok else None, "met": c is not None and c >= slo.completion}
    if c is None:
        out["unavailable"]["completion"] = ("engine exports no request outcomes" if out_ok is None
                                            else f"no requests finished in the last {window_label(w)}")
    if attain and c is not None:
        lo = c * max(0.0, sum(attain) - (len(attain) - 1))
        hi = c * min(attain)
        out["good_share"] = {"low": lo, "high": hi, "approx": approx_any}
    else:
        out["good_share"] = None
        out["unavailable"]["good_share"] = "needs an attainment and a completion rate"
    gen = counter_increase(histories, "generation_tokens", w)
    span = out_ok.span_s if out_ok else 0.0
    if gen is not None and span > 0 and out["good_share"] is not None:
        rate = sum(gen.values()) / span
        out["output_tokens_per_s"] = rate
        out["goodput_tokens_per_s"] = {"low": rate * out["good_share"]["low"], "high": rate * out["good_share"]["high"],
                                       "note": "tokens/s scaled by the good-request share bounds"}
    else:
        out["goodput_tokens_per_s"] = None
    return out


# --- error budget and burn rate --------------------------------------------------------------

class OutcomeHistory:
    """Cumulative good/failed request counts of one service, sampled sparsely for 6 h of burn
    windows (restarts handled like any counter: a decrease starts a new run)."""

    def __init__(self, every_s: float = 15.0, keep_s: float = max(BURN_WINDOWS_S) + 60) -> None:
        self.every_s, self.keep_s = every_s, keep_s
        self.points: deque[tuple[float, dict[tuple, tuple[float, ...]]]] = deque()

    def add(self, t: float, per_engine: dict[str, tuple[float, float]]) -> None:
        if self.points and t - self.points[-1][0] < self.every_s:
            self.points[-1] = (t, {(k,): v for k, v in per_engine.items()})
        else:
            self.points.append((t, {(k,): v for k, v in per_engine.items()}))
        while len(self.points) > 2 and self.points[1][0] <= t - self.keep_s:
            self.points.popleft()

    def bad_share(self, window_s: float) -> tuple[float | None, float]:
        """(bad share, requests) over the window."""
        delta = window_delta(list(self.points), window_s)
        if delta is None or delta.since_start:
            return None, 0.0
        good = sum(v[0] for v in delta.values.values())
        bad = sum(v[1] for v in delta.values.values())
        total = good + bad
        return (bad / total if total > 0 else None), total


def burn_rates(history: OutcomeHistory, completion_target: float) -> dict:
    budget = 1.0 - completion_target
    out: dict = {"error_budget": budget, "period_days": BUDGET_PERIOD_S / 86400, "windows": {}}
    for w in BURN_WINDOWS_S:
        share, n = history.bad_share(w)
        out["windows"][window_label(w)] = {"bad_share": share, "requests": n,
                                           "burn": (share / budget) if share is not None and budget > 0 else None}
    return out


def burn_alert(burn: dict) -> tuple[str, str] | None:
    """(severity, message) for the multi-window burn-rate rules, or None."""
    w = burn["windows"]

    def rate(k: str) -> float:
        v = w.get(k, {}).get("burn")
        return v if v is not None else 0.0

    if rate("5m") >= FAST_BURN and rate("1h") >= FAST_BURN:
        return "critical", (f"error budget burning fast: {rate('5m'):.1f}x over 5m and {rate('1h'):.1f}x over 1h "
                            f"(>= {FAST_BURN}): the month's budget is gone in about "
                            f"{30 / max(rate('1h'), 1e-9):.1f} days; look at the failing requests now")
    if rate("1h") >= SLOW_BURN and rate("6h") >= SLOW_BURN:
        return "warning", (f"error budget burning: {rate('1h'):.1f}x over 1h and {rate('6h'):.1f}x over 6h "
                           f"(>= {SLOW_BURN}): check the engine's errors")
    return None
