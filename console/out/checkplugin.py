"""``inferdeck check`` as a Nagios plugin: the first line is the verdict
(``INFERDECK CRITICAL - llama-8b: KV cache 100% full ... | perfdata``), the details follow.
Performance data per engine: TTFT p95 (seconds; critical at its service's SLO), KV use (%;
critical at the plan's ``kv_usage_critical``), the queue (warning above 0) and tokens/s — the
thresholds come from the plan (its SLOs and alert rules), so no -w/-c is needed."""

from __future__ import annotations

import math
import re
from typing import Any

from console.figures.plan import Plan
from console.figures.slo import default_slo
from console.figures.verdict import EXIT
from console.figures.windowed import window_label
from console.frame import Engine, Frame
from console.out.jsondocs import CheckDoc, Perf

PLUGIN = "INFERDECK"


def _label(text: str) -> str:
    """A perfdata label: quoted, no quote or '=' inside."""
    return "'" + re.sub(r"['=]", "_", text) + "'"


def _num(v: float | None, digits: int = 4) -> str:
    """A perfdata value by the plugin guidelines ([-0-9.]+): fixed point, never an exponent
    (12,345 waiting printed as 1.234e+04 was read as 1.234 or dropped), an integer whole, a
    fraction to ``digits`` significant digits; U when unknown."""
    if v is None or not math.isfinite(v):
        return "U"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    size = abs(v)
    ints = len(str(int(size))) if size >= 1 else 0
    decimals = max(0, digits - ints) if size >= 1 else digits - 1 - math.floor(math.log10(size))
    text = f"{v:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def perf_items(frame: Frame, plan: Plan) -> list[Perf]:
    """Each engine's figures with their thresholds from the plan."""
    ttft_limit: dict[str, float] = {}
    for svc in plan.services:
        limit = default_slo(svc).ttft_s
        for name in svc.engine_names:
            if limit is not None:
                ttft_limit[name] = min(limit, ttft_limit.get(name, limit))
    kv_crit = plan.alerts.kv_usage_critical * 100
    out = []
    for e in frame.engines:
        out += _engine_perf(e, ttft_limit.get(e.name), kv_crit)
    return out


def perfdata(frame: Frame, plan: Plan) -> str:
    """'label'=value[UOM];warn;crit;min;max per engine figure, thresholds from the plan."""
    return " ".join(perf_text(p) for p in perf_items(frame, plan))


_DIGITS = {"tok/s": 6}


def perf_text(p: Perf) -> str:
    digits = _DIGITS.get(p.figure, 4)
    value = _num(p.value, digits) + (p.unit if p.value is not None else "")
    rest = ["" if t is None else _num(t) for t in (p.warn, p.crit, p.min, p.max)]
    while rest and not rest[-1]:
        rest.pop()
    return ";".join([f"{_label(p.label)}={value}", *rest])


def _engine_perf(e: Engine, ttft_limit: float | None, kv_crit: float) -> list[Perf]:
    up = e.up
    p95 = e.ttft_s.p95 if e.ttft_s is not None and up else None
    kv = e.kv_cache_usage * 100 if e.kv_cache_usage is not None and up else None
    sat = e.capacity.saturation if up and e.capacity else None

    def perf(figure: str, value: float | None, **limits: Any) -> Perf:
        return Perf(label=f"{e.name} {figure}", engine=e.name, figure=figure, value=value, **limits)

    return [
        perf("ttft_p95", p95, unit="s", crit=ttft_limit),
        perf("kv", kv, unit="%", crit=kv_crit, min=0, max=100),
        perf("waiting", e.requests_waiting if up else None, warn=0),
        perf("tok/s", e.generation_tokens_per_s if up else None),
        perf("room_rps", _room(e)),
        perf("saturation", sat, warn=1),
    ]


def _room(e: Engine) -> float | None:
    """Requests a second the engine can take before its first SLO breaks (none when it cannot
    tell, or only a lower bound is known)."""
    cap = e.capacity if e.up else None
    if cap is None or cap.requests_per_s is None or cap.at_least:
        return None
    return cap.room_per_s


def check_doc(
    frame: Frame, plan: Plan, source: str | None = None, notes: list[str] | None = None
) -> CheckDoc:
    """The check as a record (``check --format json``): what its lines say, in fields."""
    status = frame.status
    lines = check_lines(frame, plan, source)
    return CheckDoc(
        host=frame.host,
        taken_at=frame.taken_at.isoformat(),
        status=status,
        exit_code=EXIT[status],
        first_line=lines[0].split(" | ", 1)[0],
        source=source,
        window_s=frame.window_s,
        window_covered_s=frame.window_covered_s,
        verdict=list(frame.verdict),
        perfdata=perf_items(frame, plan) if status != "unknown" else [],
        notes=lines[1 + len(frame.verdict) :] + (notes or []),
    )


def check_lines(frame: Frame, plan: Plan, source: str | None = None) -> list[str]:
    """The plugin's lines. ``source``: where the frame came from when this check did not sample
    it (a running `inferdeck export`), said on the first line."""
    status = frame.status.upper()
    if frame.status == "unknown":
        reason = frame.gpu_source.error or "no GPU reading"
        return [
            f"{PLUGIN} UNKNOWN - {frame.host}: nothing to check — no engine found or configured, "
            f"and {reason}"
        ]
    if frame.verdict:
        top = frame.verdict[0]
        head = f"{top.subject}: {top.message}"
        if len(frame.verdict) > 1:
            head += f" (+{len(frame.verdict) - 1} more)"
    else:
        head = (
            f"{frame.host}: nothing to report ({len(frame.engines)} engines, "
            f"{len(frame.gpus)} GPUs)"
        )
    covered = frame.window_covered_s
    short = covered is not None and covered < frame.window_s
    if source is not None:
        watched = f", {covered:.0f} s of its {window_label(frame.window_s)} window watched"
        head += f" [{source}{watched if short else ''}]"
    elif short:
        # a short sample: its rates and percentiles are over what it watched, and said so
        head += f" [over {covered:.0f} s sampled of a {window_label(frame.window_s)} window]"
    head = head.replace("|", "/")  # '|' starts the performance data
    lines = [f"{PLUGIN} {status} - {head} | {perfdata(frame, plan)}"]
    for c in frame.verdict:
        kind = {"alert": "", "pending": " (pending)", "finding": " (finding)"}[c.source]
        lines.append(f"{c.severity.upper()}{kind} {c.subject}: {c.message}")
    for e in frame.engines:
        cap = e.capacity
        if e.up and cap is not None and cap.saturation is None and cap.saturation_note:
            lines.append(f"{e.name} saturation: U — {cap.saturation_note} (sample longer: --wait)")
    lines.append(
        "thresholds from the plan: TTFT p95 against each service's SLO, KV use critical at "
        f"{plan.alerts.kv_usage_critical * 100:g}%, any waiting request a warning"
    )
    return lines
