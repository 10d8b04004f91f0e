"""A Frame as Markdown, for pasting into an incident note (JSON is Frame.to_json)."""

from __future__ import annotations

from console.frame import Frame, Percentiles
from console.units import NA, gib, num, pct, seconds, watts


def _p(p: Percentiles | None, name: str) -> str:
    if p is None:
        return NA
    return seconds(getattr(p, name), name in p.lower_bound_only)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def to_markdown(frame: Frame) -> str:
    lines = [
        f"# inferdeck snapshot — {frame.host}",
        "",
        f"- taken at: {frame.taken_at.isoformat()}",
        f"- inferdeck {frame.inferdeck_version}; driver {frame.gpu_source.driver_version or NA}"
        f" ({frame.gpu_source.kind}); window {frame.window_s:g} s",
        "",
        f"## Alerts ({len(frame.alerts)})",
        "",
    ]
    if frame.alerts:
        lines += _table(["severity", "subject", "message", "since"],
                        [[a.severity, a.subject, a.message, a.since.isoformat()] for a in frame.alerts])
    else:
        lines.append("none")
    lines += ["", "## GPUs", ""]
    if frame.gpu_source.error:
        lines.append(frame.gpu_source.error)
    rows = []
    for g in frame.gpus:
        if g.fault:
            rows.append([str(g.index), g.name or NA, "FAULT: " + g.fault, "", "", "", ""])
            continue
        mig = "on" if g.mig and g.mig.current else ("off" if g.mig else "n/a")
        if g.mig and g.mig.pending != g.mig.current:
            mig += " (pending change)"
        rows.append([str(g.index), g.name or NA, f"{gib(g.memory_used_bytes)}/{gib(g.memory_total_bytes)} GiB",
                     pct(g.utilization_gpu_pct / 100 if g.utilization_gpu_pct is not None else None),
                     f"{watts(g.power_w)}/{watts(g.power_limit_w)}",
                     f"{num(g.temperature_c)}°C" if g.temperature_c is not None else NA, mig])
        for d in (g.mig.devices if g.mig else []):
            rows.append([f"{g.index}/{d.index}", f"MIG {d.profile or NA} @{d.placement_start}",
                         f"{gib(d.memory_used_bytes)}/{gib(d.memory_total_bytes)} GiB", "n/a under MIG", "", "", ""])
    if rows:
        lines += _table(["gpu", "name", "memory", "util", "power", "temp", "MIG"], rows)
    lines += ["", "## Engines", ""]
    rows = []
    for e in frame.engines:
        if not e.up:
            rows.append([e.name, e.kind or NA, "DOWN: " + (e.error or ""), "", "", "", "", "", ""])
            continue
        rows.append([e.name, e.kind or NA, e.model or NA, num(e.requests_running), num(e.requests_waiting),
                     pct(e.kv_cache_usage, 1), num(e.generation_tokens_per_s, 1),
                     f"{_p(e.ttft_s, 'p50')} / {_p(e.ttft_s, 'p95')} / {_p(e.ttft_s, 'p99')}",
                     _p(e.itl_s, "p95")])
    if rows:
        lines += _table(["engine", "kind", "model", "running", "waiting", "KV", "gen tok/s",
                         "TTFT p50/p95/p99", "ITL p95"], rows)
    else:
        lines.append("no engines configured")
    return "\n".join(lines) + "\n"
