"""Humanised numbers for people (screens, Markdown). SI stays inside the Frame."""

from __future__ import annotations

import math
import time

from console.frame import CapacityReport, Engine, Percentiles, RangeReport, TargetReport

GIB = 1024**3

NA = "n/a"
FEW = 20  # fewer requests than this behind a figure: shown with their count, dimmed


def gib(n: float | None, digits: int = 1) -> str:
    return NA if n is None else f"{n / GIB:.{digits}f}"


def pct(frac: float | None, digits: int = 0) -> str:
    return NA if frac is None else f"{frac * 100:.{digits}f}%"


def num(v: float | None, digits: int = 0) -> str:
    return NA if v is None else f"{v:,.{digits}f}"


def count_text(v: float | None) -> str:
    """A count in at most 4 characters: "74", "1834" → "1.8k", "25k", "1.2M"."""
    if v is None:
        return NA
    if v < 999.5:
        return f"{v:.0f}"
    for unit, scale in (("k", 1e3), ("M", 1e6), ("G", 1e9)):
        x = v / scale
        if x < 999.5 or unit == "G":
            return f"{x:.1f}{unit}" if x < 9.95 else f"{x:.0f}{unit}"
    return f"{v:.0f}"


def money(v: float | None, digits: int = 2) -> str:
    return NA if v is None else f"${v:,.{digits}f}"


def price_range(r: object) -> str:
    """A price between two bounds ("$0.41–$0.44"), one bound ("≥$0.41") or n/a, once. Takes a
    frame.PriceRange (typed loosely: units stays free of the frame)."""
    low, high = getattr(r, "low", None), getattr(r, "high", None)
    if low is not None and high is not None:
        return f"{money(low)}–{money(high)}"
    if low is not None:
        return f"≥{money(low)}"
    return NA if high is None else f"≤{money(high)}"


def seconds(v: float | None, lower_bound: bool = False) -> str:
    """Latency: ms below 1 s, seconds above; '≥' when only a lower bound is known."""
    if v is None:
        return NA
    prefix = "≥" if lower_bound else ""
    if v < 1:
        return f"{prefix}{v * 1000:.0f}ms"
    if v < 10:
        return f"{prefix}{v:.2f}s"
    return f"{prefix}{v:.1f}s"


def watts(v: float | None) -> str:
    return NA if v is None else f"{v:.0f}W"


def span(bucket: tuple[float, float] | list[float]) -> str:
    lo, hi = bucket
    return f"{seconds(lo)}–{seconds(hi)}"


def basis(window: str | None) -> str:
    """A figure's window in words: 'last 1m', or 'since start' (one scrape: the engine's
    lifetime counts)."""
    return "since start" if window == "since_start" else f"last {window or NA}"


def counted(n: float | None, word: str) -> str:
    """'1 preemption', '3 preemptions' (``word`` is the plural)."""
    if n is None or not math.isfinite(n):  # a count no page can mean (a hostile +Inf): unread
        return f"{NA} {word}"
    one = round(n) == 1 and word.endswith("s")
    return f"{n:,.0f} {word[:-1] if one else word}"


PARTIAL = "°"  # the window is not full yet: the figure covers what the console has watched


def window_text(window_s: float, covered_s: float | None) -> str:
    """'1m', or '1m (12s watched)' while the console has watched less than the window."""
    from console.figures.windowed import window_label

    label = window_label(window_s)
    if covered_s is not None and covered_s < window_s - 1e-6:
        return f"{label} ({covered_s:.0f}s watched)"
    return label


CUT = "…"  # a cell left a mark out for room (the detail shows every mark)


def quantile_text(
    p: Percentiles | None,
    name: str,
    ranges: bool = False,
    count: bool = True,
    fit: int | None = None,
) -> str:
    """A percentile with every mark it needs: '~' approximate, '≥' rank in +Inf, '*' since the
    engine started, '°' over the part of the window watched so far, '±' (or its bucket with
    ``ranges``) when its bucket spans more than 1.5x, and '·N' when fewer than FEW requests stand
    behind it (unless ``count`` is off). With ``fit`` (a table cell's width), '±' then '~' are left
    out when all does not fit, and the cell ends with '…' to say so: the value, '≥', '*' or '°'
    and the count are never the part cut."""
    value = getattr(p, name) if p is not None else None
    if p is None or value is None:
        return NA
    approx = "~" if p.approx else ""
    core = seconds(value, name in p.lower_bound_only)
    when = "*" if p.window == "since_start" else PARTIAL if p.covered_s is not None else ""
    wide = (f" ({span(p.buckets[name])})" if ranges else "±") if name in p.wide else ""
    few = f"·{p.observations:.0f}" if count and p.observations < FEW else ""
    text = approx + core + when + wide + few
    if fit is not None and len(text) > fit:
        for shorter in (approx + core + when + few, core + when + few):
            if len(shorter) < len(text) and len(shorter) + len(CUT) <= fit:
                return shorter + CUT
    return text  # still too long: the table ends it with '…


def target_text(entry: TargetReport | None, ranges: bool = False, compact: bool = False) -> str:
    """An SLO target's observed figure with its marks ('≈' interpolated attainment) and count;
    ``compact`` (a table cell) leaves out the bucket and '≈', which the good share carries."""
    if entry is None or entry.observed_s is None:
        return NA
    text = ("~" if entry.approx else "") + seconds(
        entry.observed_s, entry.observed_lower_bound_only
    )
    if entry.since_start:
        text += "*"
    elif entry.covered_s is not None:
        text += PARTIAL
    if entry.observed_bucket_s and entry.observed_wide and not compact:
        text += f" ({span(entry.observed_bucket_s)})" if ranges else "±"
    if entry.attainment_exact is False and not compact:
        text += "≈"
    if entry.requests is not None and entry.requests < FEW:
        text += f"·{entry.requests:.0f}"
    return text


def share_range(g: RangeReport | None, digits: int = 1) -> str:
    """A good-share range, both ends rounded down: never above the completion it is bounded by."""
    if g is None or not (math.isfinite(g.low) and math.isfinite(g.high)):
        return NA
    scale = 10**digits

    def down(v: float) -> str:
        return f"{math.floor(v * 100 * scale + 1e-9) / scale:.{digits}f}"

    return f"{'≈' if g.approx else ''}{down(g.low)}–{down(g.high)}%"


def workload_text(w: object) -> str:
    """A process's pod ("namespace/pod"), else its container ("containerd 3f9c2a1b7d04"), else "-".
    Takes a frame.Workload (typed loosely: units stays free of the frame)."""
    pod, ns = getattr(w, "pod", None), getattr(w, "namespace", None)
    uid, cid = getattr(w, "pod_uid", None), getattr(w, "container_id", None)
    if pod:
        return f"{ns}/{pod}" if ns else pod
    if uid:
        return f"pod {uid[:8]}"
    if cid:
        runtime = getattr(w, "runtime", None)
        return f"{runtime + ' ' if runtime else ''}{cid[:12]}"
    return "-"


_BREAKS = {"tpot": "TPOT p95 crosses its SLO", "ttft": "TTFT p95 crosses its SLO"}
_LIMITS = {
    "kv": "the KV pool fills and arrivals queue",
    "batch": "the batch limit is reached",
    "prefill": "prefill slows as more sequences run",
}


def capacity_text(c: CapacityReport | None) -> str:
    """The engine's room to its first SLO breach, in a sentence (the engine detail, snapshot.md,
    check): "+1.4 req/s before TPOT p95 crosses its SLO (5.4 req/s, 4.9–6.0; now 4.0); KV next
    at +3.1"."""
    if c is None:
        return NA
    if c.cant_tell is not None:
        return f"can't tell: {c.cant_tell}"
    if c.requests_per_s is None:
        return NA
    now = c.current_per_s  # (unread: the rate alone, no room said; never "+0.0")
    if c.at_least:
        if now is None:
            return f"at least {c.requests_per_s:.1f} req/s, now {NA} ({c.note})"
        return f"at least +{max(0.0, c.requests_per_s - now):.1f} req/s ({c.note})"
    why = _BREAKS.get(c.binding or "", "an SLO breaks")
    if c.binding == "ttft" and c.limit in _LIMITS:
        why += f" ({_LIMITS[c.limit]})"
    if c.note:
        return f"no room: {c.note}"
    room = f"+{c.room_per_s:.1f} req/s" if c.room_per_s is not None else "room n/a"
    out = f"{room} before {why} ({c.requests_per_s:.1f} req/s"
    if c.low is not None and c.high is not None:
        out += f", {c.low:.1f}–{c.high:.1f}"
    out += f"; now {num(now, 1)})"
    if c.next_limit and c.next_per_s is not None:
        out += (
            f"; {c.next_limit.upper() if c.next_limit in ('kv', 'tpot') else c.next_limit} next at "
        )
        # with the load unread, the rate itself (no room to say), its unit beside it
        out += (
            f"+{max(0.0, c.next_per_s - now):.1f}"
            if now is not None
            else f"{c.next_per_s:.1f} req/s"
        )
    return out


def room_cell(c: CapacityReport | None) -> str:
    """The dashboard's short form: "+1.4/s TPOT", "≥+3/s", "?" when it cannot tell."""
    if c is None or c.requests_per_s is None:
        return "?" if c is not None and c.cant_tell else NA
    if c.at_least:
        if c.current_per_s is None:
            return f"≥{c.requests_per_s:.0f}/s"  # (the load unread: the rate, not a room)
        return f"≥+{max(0.0, c.requests_per_s - c.current_per_s):.0f}/s"
    if c.room_per_s is None:
        return NA
    return f"+{c.room_per_s:.1f}/s {(c.binding or '').upper()}"


def unknown_reasons(e: Engine) -> list[str]:
    """Why an up engine's Room or Sat cell reads ? or n/a, in the cells' own names: the reason the
    cell has no room for ("Room ?: 3 of the 6 levels of load it needs seen so far")."""
    c = e.capacity
    out = []
    if c is None:
        out.append("Room and Sat n/a: its page matched no engine profile, so no capacity estimate")
        return out
    if c.requests_per_s is None:
        out.append(f"Room {room_cell(c)}: {c.cant_tell or 'no estimate'}")
    if c.saturation is None:
        out.append(f"Sat n/a: {c.saturation_note or 'no p90 TTFT or TPOT to set against an SLO'}")
    return out


def saturation_cell(c: CapacityReport | None) -> str:
    """The saturation index (worst p90 / SLO) in short, a multiple of the SLO ("0.59×", "76×"),
    "↑" while load and TTFT rise, else "±" where its p90 lies in a bucket wider than 1.5x (the
    detail names the bucket)."""
    if c is None or c.saturation is None:
        return NA
    s = c.saturation
    mark = "↑" if c.saturating else "±" if c.saturation_bucket else ""
    return (f"{s:.2f}×" if s < 10 else f"{s:.0f}×") + mark


def saturation_text(c: CapacityReport | None) -> str:
    """ "p90 TTFT at 0.82x its SLO, load and TTFT rising"."""
    if c is None or c.saturation is None:
        return NA
    out = f"p90 {(c.saturation_slo or '').upper()} at {c.saturation:.2f}x its SLO"
    if c.saturation_bucket:  # interpolated inside a wide bucket: the bucket is what is known
        low, high = c.saturation_bucket
        out += f" (in its bucket, {low:.2f}–{high:.2f}x)"
    if c.saturation_requests is not None and c.saturation_requests < 20:
        out += f" ·{c.saturation_requests:.0f}"  # only this many requests behind it
    if c.saturating:
        out += ", load and TTFT rising (over-saturation)"
    elif c.saturating is False:
        out += ", not rising"
    return out


def eta_text(seconds: float, lead: str = "in ") -> str:
    """When a limit is reached: "now" (already there), else "in ~4 min" (``lead`` "": "~4 min",
    under a heading that says "in")."""
    return "now" if seconds <= 0 else f"{lead}~{duration_text(seconds)}"


def when_text(t: float, now: float) -> str:
    """ "18:17:05Z (55 s ago)": a moment in UTC and how long before ``now`` (both Unix times)."""
    stamp = time.strftime("%H:%M:%S", time.gmtime(t)) + "Z"
    return f"{stamp} ({duration_text(max(0.0, now - t))} ago)"


def duration_text(seconds: float) -> str:
    """ "45 s", "4 min", "3.2 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
