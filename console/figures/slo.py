"""SLO compliance per service (DESIGN §1 "SLOs"; reference/engine-metrics.md §8).

Attainment of a latency SLO = share of requests within its limit, read from the windowed bucket
deltas summed over the service's replicas: exact when the limit is a bucket bound, linearly
interpolated (and marked approximate) between bounds. Separate histograms lose the joint
distribution, so the share of *good* requests (every SLO met and completed) is only bounded:

    c x max(0, a_1 + ... + a_n - (n - 1))  <=  good share  <=  c x min(a_1, ..., a_n)

(Fréchet bounds; c = completion rate, a_i = attainments over completed requests).
Error budget = 1 - completion target over the SLO's period (``budget_period_days``, 28 by default,
the same period `inferdeck rules --slo` writes); burn rate = bad share / budget share.

Latency misses spend budget too. Each latency SLO is its own objective: a p95 TTFT of 1 s lets 5 %
of requests take longer, so its budget is 1 - 0.95 and its burn is the share of requests over the
limit / 5 % (counted from the histogram at the limit: exact at a bucket bound, interpolated inside
a bucket otherwise). The service's burn is the worst objective's (errors against the completion
target, each latency SLO against its percentile); its bad share is failed + (1 - failed) x the
largest miss share — the least the union of failures and misses can be.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Collection, Sequence
from typing import Any

from console.engines import EngineProfile, Extract, per_token_series
from console.figures.plan import Service, SloSpec, shape
from console.figures.thresholds import at_least
from console.figures.window import (
    JITTER,
    fraction_at_edge_below,
    fraction_at_or_below,
    histogram_quantile,
    quantile_bucket,
    wide,
    window_start,
)
from console.figures.windowed import (
    Windowed,
    covered,
    parse_window,
    partial,
    window_label,
)
from console.frame import (
    BurnReport,
    BurnWindow,
    CompletionReport,
    RangeReport,
    Severity,
    SloReport,
    TargetReport,
)
from console.promtext import label

FAST_BURN = 14.4  # 5 m and 1 h both at or above: a 28-day budget goes in ~2 days -> critical
# ... unless that takes a total outage more than PAGE_WITHIN_S to reach: a budget of 5 % (a p95
# latency objective) at 14.4x needs 72 % of an hour's requests bad, so a total outage after a
# normal hour would page only after 43 minutes. Such budgets page at the burn a total outage
# reaches in 5 minutes (see page_burn).
PAGE_WITHIN_S = 300.0
SLOW_BURN = 6.0  # 1 h and 6 h both at or above: the budget goes in ~5 days -> warning
BURN_WINDOWS_S = (300.0, 3600.0, 21600.0)
# A burn window counts (alerts, is exported) only once the console has watched at least the short
# window of its pair: the 5 m window whole, the 1 h window for 5 m (fast burn: 5m and 1h), the 6 h
# window for 1 h (slow burn: 1h and 6h, so the 1 h window is whole) — and with at least
# MIN_BURN_REQUESTS requests in it. Until then it reads "partial: 20 s of 1h".
BURN_READY_S = {300.0: 300.0, 3600.0: 300.0, 21600.0: 3600.0}
MIN_BURN_REQUESTS = 20
SIGNALS = (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2e", "e2e_s"))


def page_burn(budget: float) -> float:
    """The fast-burn (page) factor for a budget share: 14.4, or less where 14.4x would leave a
    total outage after a normal hour unpaged past PAGE_WITHIN_S (the 1 h window's bad share then
    grows by 1/60 a minute, so it reaches a share s after s x 60 minutes)."""
    if budget <= 0:
        return FAST_BURN
    return min(FAST_BURN, (PAGE_WITHIN_S / 3600.0) / budget)


def time_to_page_s(budget: float, factor: float | None = None) -> float | None:
    """How long a total outage after a normal hour takes to reach the page threshold over 1 h
    (None: it never does, the threshold being above 100 % bad)."""
    share = (factor if factor is not None else page_burn(budget)) * budget
    return share * 3600.0 if share <= 1 else None


OBJECTIVES = {
    "completion": "failed requests",
    "ttft_s": "TTFT over its SLO",
    "tpot_s": "TPOT over its SLO",
    "e2e_s": "latency over its SLO",
}


def default_slo(svc: Service) -> SloSpec:
    """DESIGN's typical plan: 8B-class vs 70B-class limits, when the plan gives none."""
    big = shape(svc).params_b >= 30
    base = svc.slo or SloSpec()
    return base.model_copy(
        update={
            "ttft_s": base.ttft_s if base.ttft_s is not None else (2.0 if big else 1.0),
            "tpot_s": base.tpot_s if base.tpot_s is not None else (0.080 if big else 0.050),
        }
    )


def compliance(
    svc: Service,
    histories: Sequence[Sequence[Extract]],
    profile: EngineProfile,
    window_s: float | None = None,
) -> SloReport:
    """SLO figures for one service over its evaluation window (the plan's, or ``window_s``): each
    target from its histogram, the completion rate from the outcomes, and the good-request share
    they bound."""
    slo = default_slo(svc)
    w = window_s or parse_window(slo.window)
    q = slo.percentile
    win = Windowed(histories, w)
    watched = max((c for h in histories if (c := covered(h, w)) is not None), default=None)
    part = watched if partial(watched, w) else None
    targets: dict[str, TargetReport] = {}
    unavailable: dict[str, str] = {}
    attain: list[float] = []
    unknown: list[str] = []
    approx_any = False
    for signal, key in SIGNALS:
        limit = getattr(slo, key)
        if limit is None:
            continue
        spec = profile.signals.get(signal)
        if spec is not None and spec.parts:
            targets[key] = _approx_target(win, histories, signal, limit, q, unavailable, key)
            unknown.append(key)
            continue
        t, why = _target(win, histories, signal, limit, q, w, part)
        targets[key] = t
        if why is not None:
            unavailable[key] = why
        approx_any |= t.attainment_exact is False
        if t.attainment is not None:
            attain.append(t.attainment)
        else:
            unknown.append(key)
    completion = _completion(win, profile, slo.completion, w, unavailable)
    good = _good_share(attain, unknown, approx_any, completion.observed, targets)
    if good is None:
        unavailable["good_share"] = "needs an attainment and a completion rate"
    tokens = win.rate("generation_tokens")
    report = SloReport(
        window=window_label(w),
        percentile=f"p{q * 100:g}",
        targets=targets,
        unavailable=unavailable,
        completion=completion,
        good_share=good,
        goodput_tokens_per_s=(
            RangeReport(
                low=tokens * good.low,
                high=tokens * good.high,
                note="tokens/s scaled by the good-request share bounds",
            )
            if tokens is not None and good is not None
            else None
        ),
    )
    extra: dict[str, float] = {}
    if part is not None:
        extra["covered_s"] = part
    if tokens is not None:
        extra["output_tokens_per_s"] = tokens
    return report.model_copy(update=extra) if extra else report


def _target(
    win: Windowed,
    histories: Sequence[Sequence[Extract]],
    signal: str,
    limit: float,
    q: float,
    w: float,
    part: float | None,
) -> tuple[TargetReport, str | None]:
    """One latency target from its windowed histogram: the observed percentile, the share of
    requests at or under the limit (exact on a bucket edge, else interpolated with the edge's
    share beside it), and the bucket the percentile lies in; with why it is unread, if it is."""
    entry: dict[str, Any] = {"target_s": limit}
    if signal == "tpot" and any(
        h[-1].series.get("tpot") in per_token_series() for h in histories if h
    ):
        entry["counts"] = "tokens"
        entry["note"] = (
            "this engine's TPOT histogram counts every output token, not requests: the "
            "attainment is a share of tokens"
        )
    buckets, since_start = win.buckets(signal)
    total = buckets[-1][1] if buckets else 0.0
    entry["requests"] = total
    if not buckets or total <= 0:
        entry.update(observed_s=None, headroom_s=None, attainment=None)
        why = (
            "engine exports no such histogram"
            if not buckets
            else f"no requests in the last {window_label(w)}"
        )
        return TargetReport.model_validate(entry), why
    observed, ge = histogram_quantile(q, buckets)
    share, exact = fraction_at_or_below(limit, buckets)
    bucket = quantile_bucket(observed, buckets) if observed is not None and not ge else None
    entry.update(
        observed_s=observed,
        observed_lower_bound_only=ge,
        headroom_s=(limit - observed) if observed is not None else None,
        met=observed is not None and observed <= limit and not ge,
        attainment=share,
        attainment_exact=exact,
        since_start=since_start,
    )
    if not exact:
        at_edge, edge = fraction_at_edge_below(limit, buckets)
        if at_edge is not None and share is not None and abs(at_edge - share) > 5e-4:
            entry.update(attainment_at_edge=at_edge, edge_s=edge)
    if part is not None and not since_start:
        entry["covered_s"] = part
    if bucket is not None:
        entry["observed_bucket_s"] = bucket
        entry["observed_wide"] = wide(bucket, observed)
    return TargetReport.model_validate(entry), None


def _completion(
    win: Windowed, profile: EngineProfile, target: float, w: float, unavailable: dict[str, str]
) -> CompletionReport:
    """The share of finished requests that succeeded, from the engine's request outcomes."""
    out_ok = win.outcomes(profile)
    c = out_ok.completion if out_ok else None
    if c is not None and not math.isfinite(c):
        c = None  # counts past what a float holds (a hostile or broken page): not a share
    if c is None:
        unavailable["completion"] = (
            "engine exports no request outcomes"
            if out_ok is None
            else f"no requests finished in the last {window_label(w)}"
        )
    return CompletionReport(
        target=target,
        observed=c,
        requests=(out_ok.good + out_ok.failed) if out_ok else 0.0,
        aborted=out_ok.aborted if out_ok else None,
        met=c is not None and c >= target,
    )


def _good_share(
    attain: list[float],
    unknown: list[str],
    approx: bool,
    c: float | None,
    targets: dict[str, TargetReport],
) -> RangeReport | None:
    """The share of requests that finished and met every target, as bounds: at most the
    completion rate times the worst attainment, at least what the attainments' misses leave if
    they never overlap (0 while an attainment is unknown: it could be met by none)."""
    if not (attain or unknown) or c is None or not math.isfinite(c):
        return None  # (a hostile page's counters can make the completion share infinite)
    lo = c * max(0.0, sum(attain) - (len(attain) - 1)) if not unknown else 0.0
    hi = c * min(attain) if attain else c
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi, unknown = 0.0, c, [*unknown, *(k for k in targets if k not in unknown)]
    good = RangeReport(low=lo, high=hi, approx=approx)
    return good.model_copy(update={"unknown": unknown}) if unknown else good


def _approx_target(
    win: Windowed,
    histories: Sequence[Sequence[Extract]],
    signal: str,
    limit: float,
    q: float,
    unavailable: dict[str, str],
    key: str,
) -> TargetReport:
    """An SLO on a figure the engine has no histogram of (TGI's TTFT = queue + validation + prefill
    quantiles): the observed figure is approximate and its attainment unknown."""
    summed: float | None = 0.0
    parts = 0
    while any(f"{signal}#{parts}" in h[-1].histograms for h in histories if h):
        buckets, _ = win.buckets(f"{signal}#{parts}")
        value, ge = histogram_quantile(q, buckets) if buckets else (None, False)
        summed = None if value is None or summed is None or ge else summed + value
        parts += 1
    if parts == 0 or summed is None:
        unavailable[key] = "no observations of its parts in the window"
        return TargetReport(
            target_s=limit, observed_s=None, headroom_s=None, attainment=None, approx=True
        )
    unavailable[key + "_attainment"] = (
        "no histogram of this figure: attainment unknown (observed is a sum of quantiles)"
    )
    return TargetReport(
        target_s=limit,
        observed_s=summed,
        headroom_s=limit - summed,
        met=summed <= limit,
        approx=True,
        attainment=None,
        note="approx.: sum of its parts' quantiles",
    )


# --- error budget and burn rate --------------------------------------------------------------


def outcome_series(
    ex: Extract, profile: EngineProfile
) -> dict[tuple[Any, ...], tuple[float, float, float]]:
    """Every request-outcome counter series of one scrape: key -> (value, weight in good, weight in
    failed), by the profile's one classification (``SuccessSpec.rules``)."""
    spec = profile.success
    out: dict[tuple[Any, ...], tuple[float, float, float]] = {}
    if spec is None:
        return out
    for signal, weigh in spec.rules():
        for lab, vec in ex.counters.get(signal, {}).items():
            good, failed, _ = weigh((label(lab, spec.label) if spec.label else None) or "")
            out[(signal, lab)] = (vec[0], good, failed)
    return out


def latency_series(
    ex: Extract, slo: SloSpec
) -> dict[str, dict[tuple[Any, ...], tuple[float, float]]]:
    """Per latency SLO (``ttft_s``, ``tpot_s``, ``e2e_s``) every histogram series of one scrape:
    key -> (requests observed, requests within the limit). TGI's TTFT (no histogram) and a TPOT
    histogram that counts tokens are left out: they cannot count requests."""
    out: dict[str, dict[tuple[Any, ...], tuple[float, float]]] = {}
    for signal, key in SIGNALS:
        limit = getattr(slo, key)
        hist = ex.histograms.get(signal)
        if limit is None or hist is None or ex.series.get(signal) in per_token_series():
            continue
        bounds = ex.bounds.get(signal, {})
        rows: dict[tuple[Any, ...], tuple[float, float]] = {}
        for lab, vec in hist.items():
            les = bounds.get(lab)
            if les is None or len(les) + 1 != len(vec):
                continue
            count = vec[-1]
            share, _ = fraction_at_or_below(limit, list(zip(les, vec[:-1], strict=True)))
            rows[(signal, lab)] = (count, count * share if share is not None else count)
        if rows:
            out[key] = rows
    return out


class LatencyHistory:
    """Requests observed and requests within one latency SLO's limit, kept at every poll for the
    burn windows: each histogram series is its own counter pair (reset as one)."""

    def __init__(self, keep_s: float = max(BURN_WINDOWS_S) + 60) -> None:
        self.keep_s = keep_s
        self.t, self.seen, self.missed = array("d"), array("d"), array("d")
        self._last: dict[tuple[Any, ...], tuple[float, float]] = {}
        self._totals = [0.0, 0.0]

    def add(
        self,
        t: float,
        series: dict[tuple[Any, ...], tuple[float, float]],
        restarted: Collection[Any] = (),
    ) -> None:
        for key, (count, within) in series.items():
            if math.isnan(count) or math.isnan(within):
                continue
            prev = self._last.get(key)
            self._last[key] = (count, within)
            if prev is None:
                continue
            reset = count < prev[0] - JITTER * abs(prev[0]) or key[0] in restarted
            seen = count if reset else count - prev[0]
            kept = within if reset else within - prev[1]
            self._totals[0] += seen
            self._totals[1] += max(0.0, seen - kept)
        self.t.append(t)
        self.seen.append(self._totals[0])
        self.missed.append(self._totals[1])
        old = bisect.bisect_right(self.t, t - self.keep_s) - 1
        if old > 512:
            for arr in (self.t, self.seen, self.missed):
                del arr[:old]

    def miss_share(self, window_s: float) -> tuple[float | None, float]:
        """(share of requests over the limit, requests observed) over the window."""
        if len(self.t) < 2:
            return None, 0.0
        i = window_start(self.t, window_s)
        seen = self.seen[-1] - self.seen[i]
        missed = self.missed[-1] - self.missed[i]
        return (min(1.0, max(0.0, missed / seen)) if seen > 0 else None), seen


class OutcomeHistory:
    """Good and failed requests of one service, kept at every poll for the 6 h burn windows.

    Each outcome series is its own counter (a series that goes down, or whose engine restarted,
    was reset: the step counts its new value), summed into two running totals; a point per poll
    is three doubles, so 6 h at 1 s is about 0.5 MB.
    """

    def __init__(self, keep_s: float = max(BURN_WINDOWS_S) + 60) -> None:
        self.keep_s = keep_s
        self.t, self.good, self.failed = array("d"), array("d"), array("d")
        self._last: dict[tuple[Any, ...], float] = {}
        self._totals = [0.0, 0.0]
        self.first_t: float | None = None  # the first poll: windows hold no more than since then
        self.latency: dict[str, LatencyHistory] = {}  # per latency SLO: requests over its limit

    def add(
        self,
        t: float,
        series: dict[tuple[Any, ...], tuple[float, float, float]],
        restarted: Collection[Any] = (),
    ) -> None:
        """``series``: key -> (value, good weight, failed weight); a key's first element names its
        engine, and ``restarted`` the engines known to have restarted at this scrape."""
        for key, (value, g, f) in series.items():
            prev = self._last.get(key)
            if math.isnan(value):
                continue
            self._last[key] = value
            if prev is None:
                continue
            reset = value < prev - JITTER * abs(prev) or key[0] in restarted
            step = value if reset else value - prev
            self._totals[0] += g * step
            self._totals[1] += f * step
        if self.first_t is None:
            self.first_t = t
        self.t.append(t)
        self.good.append(self._totals[0])
        self.failed.append(self._totals[1])
        old = bisect.bisect_right(self.t, t - self.keep_s) - 1
        if old > 512:  # drop in chunks: deleting from the front of an array copies it
            for arr in (self.t, self.good, self.failed):
                del arr[:old]

    def covered(self, window_s: float) -> float:
        """Seconds of the window the console has watched."""
        if self.first_t is None or not self.t:
            return 0.0
        return min(window_s, self.t[-1] - self.first_t)

    def bad_share(self, window_s: float) -> tuple[float | None, float]:
        """(bad share, requests) over the window."""
        if len(self.t) < 2:
            return None, 0.0
        i = window_start(self.t, window_s)
        good = self.good[-1] - self.good[i]
        bad = self.failed[-1] - self.failed[i]
        total = good + bad
        return (bad / total if total > 0 else None), total


def _burn_entry(
    share: float | None, n: float, budget: float, watched: float, enough: bool
) -> BurnWindow:
    return BurnWindow(
        bad_share=share,
        requests=n,
        burn=(share / budget) if share is not None and budget > 0 else None,
        covered_s=watched,
        ready=enough and n >= MIN_BURN_REQUESTS,
    )


def burn_rates(
    history: OutcomeHistory,
    completion_target: float,
    percentile: float = 0.95,
    period_days: float = 28,
) -> BurnReport:
    """Burn per window: overall (the worst objective's) and per objective (``completion`` and each
    latency SLO the history keeps, whose budget is ``1 - percentile``)."""
    budget = 1.0 - completion_target
    late_budget = 1.0 - percentile
    windows: dict[str, BurnWindow] = {}
    objectives: dict[str, dict[str, BurnWindow]] = {}
    for w in BURN_WINDOWS_S:
        label = window_label(w)
        watched = history.covered(w)
        enough = watched >= BURN_READY_S[w] - 1e-6

        failed, n = history.bad_share(w)
        each = {"completion": _burn_entry(failed, n, budget, watched, enough)}
        for key, lat in history.latency.items():
            share, seen = lat.miss_share(w)
            each[key] = _burn_entry(share, seen, late_budget, watched, enough)
        for key, e in each.items():
            objectives.setdefault(key, {})[label] = e
        burns = [(k, e) for k, e in each.items() if e.burn is not None]
        worst_key, worst = max(
            burns,
            key=lambda ke: (bool(ke[1].ready), ke[1].burn or 0.0),
            default=("completion", each["completion"]),
        )
        misses = [e.bad_share for k, e in each.items() if k != "completion"]
        missed = [m for m in misses if m is not None]
        f = failed if failed is not None else 0.0
        combined = f + (1 - f) * max(missed) if missed else failed
        windows[label] = worst.model_copy(
            update={
                "bad_share": combined,
                "requests": n if n > 0 else worst.requests,
                "objective": worst_key,
            }
        )
    report = BurnReport(
        error_budget=budget,
        period_days=period_days,
        windows=windows,
        objectives=objectives,
        budgets={k: (budget if k == "completion" else late_budget) for k in objectives},
    )
    # the longest window ready to alert on says how long a whole period's budget lasts
    for label, e in reversed(windows.items()):
        if e.ready and e.burn:
            return report.model_copy(
                update={"budget_spent_in_s": period_days * 86400 / e.burn, "budget_window": label}
            )
    return report


def burn_alert(burn: BurnReport) -> tuple[Severity, str] | None:
    """(severity, message) for the multi-window burn-rate rules, or None."""
    w = burn.windows

    def rate(k: str, windows: dict[str, BurnWindow] = w) -> float:
        e = windows.get(k)  # a window without enough coverage or requests never alerts
        if e is None or e.burn is None or e.ready is False:
            return 0.0
        return e.burn

    def what(k: str) -> str:
        e = w.get(k)
        name = (e.objective if e is not None else None) or "completion"
        return OBJECTIVES.get(name, name)

    # the page: each objective against its own factor (a large budget pages at a lower burn)
    for key, each in (burn.objectives or {"": burn.windows}).items():
        factor = page_burn(burn.budgets.get(key, burn.error_budget)) if key else FAST_BURN
        fast, hour = rate("5m", each), rate("1h", each)
        if at_least(fast, factor) and at_least(hour, factor):
            return "critical", (
                f"error budget burning fast: {fast:.1f}x over 5m and {hour:.1f}x over 1h "
                f"(>= {factor:.3g}, {OBJECTIVES.get(key) or what('5m')}): the "
                f"{burn.period_days:g}-day budget is gone in about "
                f"{burn.period_days / max(hour, 1e-9):.1f} days; look at the failing or slow "
                "requests now"
            )
    if at_least(rate("1h"), SLOW_BURN) and at_least(rate("6h"), SLOW_BURN):
        return "warning", (
            f"error budget burning: {rate('1h'):.1f}x over 1h and {rate('6h'):.1f}x over 6h "
            f"(>= {SLOW_BURN}, {what('1h')}): check the engine's errors and latency"
        )
    return None
