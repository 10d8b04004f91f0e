"""A Frame as Markdown, for pasting into an incident note (JSON is Frame.to_json)."""

from __future__ import annotations

from datetime import datetime

from console.figures.columns import (
    BUDGET_COLUMNS,
    BUDGET_DOC,
    COST_COLUMNS,
    ENGINE_COLUMNS,
    ENGINE_DOC,
    GPU_COLUMNS,
    GPU_DOC,
    SLO_COLUMNS,
    SLO_DOC,
    gpu_rows,
    pick,
)
from console.figures.findings import findings
from console.figures.timeline import lines as timeline_lines
from console.frame import Engine, Frame, Percentiles
from console.safetext import printable
from console.units import (
    NA,
    PARTIAL,
    capacity_text,
    eta_text,
    money,
    num,
    pct,
    quantile_text,
    saturation_text,
    seconds,
    when_text,
)


def _p(p: Percentiles | None, name: str) -> str:
    return quantile_text(p, name, ranges=True)


def _cell(v: str) -> str:
    """One line of markdown text from a figure's words (no line breaks, no table pipes)."""
    return " ".join(v.split()).replace("|", "\\|")


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    def cell(v: str) -> str:
        return v.replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return out


def to_markdown(frame: Frame, note: str = "", charts: list[str] | None = None) -> str:
    """The snapshot as Markdown for an incident note: each section in the order an operator
    reads it, the figures as the screens show them."""
    note = " ".join(note.split())  # one line: a note never adds headings or rows
    lines = _header(frame, note)
    lines += _timeline(frame) + _verdict(frame) + _alerts(frame) + _findings(frame)
    if charts:
        lines += ["", "## Charts (last 15 minutes; alerts marked in red)", ""]
        lines += [f"![{name.removesuffix('.svg')}](charts/{name})" for name in charts]
    lines += _gpus(frame) + _engines(frame) + _capacity(frame)
    if frame.services:
        lines += _slo(frame) + _cost(frame) + _plan(frame)
    lines += _recent(frame)
    # nothing from an engine or a note controls a terminal
    return printable("\n".join(lines) + "\n")


def _when(t: datetime, frame: Frame) -> str:
    """ "18:17:05Z (55 s ago)": a moment and how long before the snapshot was taken."""
    return when_text(t.timestamp(), frame.taken_at.timestamp())


def _header(frame: Frame, note: str) -> list[str]:
    """The title, the note, when, which driver and the window."""
    lines: list[str] = []
    src = frame.gpu_source
    lines += [f"# inferdeck snapshot — {frame.host}" + (f" — {note}" if note else ""), ""]
    if note:
        lines += [f"- note: {note}"]
    lines += [
        f"- taken at: {frame.taken_at:%Y-%m-%d %H:%M:%S}Z",
        f"- inferdeck {frame.inferdeck_version}; NVIDIA driver {src.driver_version or NA}"
        f" (CUDA {src.cuda_driver_version or NA}, NVML {src.nvml_version or NA}, {src.kind});"
        f" window {frame.window_s:g} s"
        + (
            f" (partial: {frame.window_covered_s:.0f} s watched; figures marked {PARTIAL} cover"
            " that span)"
            if frame.window_covered_s is not None and frame.window_covered_s < frame.window_s
            else ""
        ),
        "",
    ]
    return lines


TIMELINE_LINES = 40  # page one: longer timelines are folded there (frame.json has them whole)


def _timeline(frame: Frame) -> list[str]:
    """What happened, in order, the first sign marked ▶ (page one of every bundle)."""
    tl = frame.timeline
    if tl is None:
        return []
    head = f"## Timeline since {tl.since:%H:%M:%S}Z"
    said = timeline_lines(tl, frame.taken_at, TIMELINE_LINES)
    return [head, "", *(f"- {line}" for line in said), ""]


def _verdict(frame: Frame) -> list[str]:
    """The one verdict every surface reads."""
    lines: list[str] = []
    lines += [f"## Verdict: {frame.status.upper()}", ""]
    if frame.verdict:
        lines += _table(
            ["severity", "source", "subject", "what"],
            [[v.severity.upper(), v.source, v.subject, v.message] for v in frame.verdict],
        ) + [""]
    else:
        lines += ["Nothing to report: no alert, no pending condition, no finding.", ""]
    return lines


def _alerts(frame: Frame) -> list[str]:
    """Alerts active now."""
    lines: list[str] = []
    active = [a for a in frame.alerts if a.state == "active"]
    lines += [f"## Active alerts ({len(active)})", ""]
    if active:
        lines += _table(
            ["severity", "subject", "message", "since"],
            [[a.severity, a.subject, a.message, _when(a.since, frame)] for a in active],
        )
    else:
        lines.append("none")
    return lines


def _findings(frame: Frame) -> list[str]:
    """What the console found, with its evidence and the knob to turn."""
    lines: list[str] = []
    found = findings(frame)
    lines += ["", f"## Findings ({len(found)})", ""]
    for f in found:
        lines.append(f"- **{f.severity}** {_cell(f.subject)}: {_cell(f.title)}")
        lines += [f"  - {_cell(ev)}" for ev in f.evidence]
        lines.append(f"  - consider: {_cell(f.knob)}")
    if not found:
        lines.append("none")
    return lines


def _gpus(frame: Frame) -> list[str]:
    """Each GPU and its MIG devices and processes."""
    lines: list[str] = []
    src = frame.gpu_source
    lines += ["", "## GPUs", ""]
    if src.error:
        lines.append(src.error)
    if src.note:
        lines.append(src.note)
    columns = pick(GPU_COLUMNS, GPU_DOC)
    rows = [
        [col.text(r) for col in columns]
        if not r.gpu.fault
        else [col.text(r) for col in columns[:2]]
        + ["FAULT: " + r.gpu.fault]
        + [""] * (len(columns) - 3)
        for r in gpu_rows(frame.gpus)
        if not (r.gpu.fault and r.mig)  # a GPU lost: its row only
    ]
    if rows:
        lines += _table([col.doc for col in columns], rows)
    return lines


def _engines(frame: Frame) -> list[str]:
    """Each engine's queue, KV use, throughput and latency."""
    lines: list[str] = []
    lines += ["", "## Engines", ""]
    columns = pick(ENGINE_COLUMNS, ENGINE_DOC)
    names = columns[:3]  # an engine down: its name, kind and device, then what took it down
    rows = [
        [col.text(e) for col in columns]
        if e.up
        else [col.text(e) for col in names]
        + ["DOWN: " + (e.error or "")]
        + [""] * (len(columns) - len(names) - 1)
        for e in frame.engines
    ]
    if rows:
        lines += _table([col.doc for col in columns], rows)
    else:
        lines.append("no engines configured")
    return lines


def _kv_full_in(e: Engine) -> str:
    """An engine's time to a full KV pool; withheld while it is just back (not judged), as the
    exporter and the service's headroom withhold it."""
    if e.not_judged is not None:
        return f"not judged: {e.not_judged}"
    eta = e.capacity.kv_full_in_s if e.capacity is not None else None
    return "no rising trend" if eta is None else eta_text(eta, "")


def _capacity(frame: Frame) -> list[str]:
    """Each engine's room to its first SLO breach, KV trend and saturation, then each service's
    room over its replicas and the headrooms its trends use up (docs/capacity.md)."""
    lines: list[str] = []
    rows = [
        [
            e.name,
            capacity_text(e.capacity),
            _kv_full_in(e),
            saturation_text(e.capacity),
        ]
        for e in frame.engines
        if e.up and e.capacity is not None
    ]
    services = [
        [
            s.name,
            capacity_text(s.capacity),
            ", ".join(
                f"{h.name} {eta_text(h.exhausted_in_s, '')}"
                for h in s.headroom
                if h.exhausted_in_s is not None
            )
            or "no rising trend",
        ]
        for s in frame.services
        if s.capacity is not None
    ]
    if rows:
        lines += ["", "## Capacity to SLO breach", ""]
        lines += _table(
            ["engine", "room (over the last 5 minutes of load)", "KV full in", "saturation"], rows
        )
    if services:
        lines += [""]
        lines += _table(["service", "room (its replicas summed)", "used up in"], services)
    return lines


def _slo(frame: Frame) -> list[str]:
    """Each service's SLO figures over its window."""
    lines: list[str] = []
    lines += ["", "## SLO compliance", ""]
    columns = pick(SLO_COLUMNS, SLO_DOC)
    rows = [[col.text(s) for col in columns] for s in frame.services]
    lines += _table([col.doc for col in columns], rows)
    between = [
        f"- {s.name} {key[:-2].upper()}: {pct(e.attainment, 1)} within {seconds(e.target_s)} "
        f"interpolated inside its bucket, {pct(e.attainment_at_edge, 1)} at the "
        f"{seconds(e.edge_s)} edge the Prometheus rules read"
        for s in frame.services
        if s.slo
        for key, e in s.slo.targets.items()
        if e.attainment_at_edge is not None
    ]
    if between:
        lines += ["", "Bounds between bucket edges:", *between]
    lines += [
        "",
        "Marks: `*` since the engine started (one scrape), `≥` the rank fell in +Inf (a lower bound), "
        "`~` approximate, `≈` attainment interpolated between bucket bounds, `(a–b)` the bucket the figure "
        "lies in when it is wide, `·N` only N requests behind the figure.",
    ]
    return lines


def _cost(frame: Frame) -> list[str]:
    """The node's and each service's cost meters."""
    lines: list[str] = []
    lines += ["", "## Cost", ""]
    if frame.cost:
        node_energy = frame.cost.energy
        lines.append(
            f"node {money(frame.cost.usd_per_h, 3)}/h; energy {money(node_energy.usd_per_h, 3)}/h "
            f"({num(node_energy.power_w)} W, {node_energy.basis or NA})"
        )
        lines.append("")
        rows = [[col.text(s) for col in COST_COLUMNS] for s in frame.services]
        lines += _table([col.doc for col in COST_COLUMNS], rows)
    else:
        lines.append("no cost inputs in the config")
    return lines


def _plan(frame: Frame) -> list[str]:
    """Each service's fit on paper and its live headroom."""
    lines: list[str] = []
    lines += ["", "## Plan fit and headroom", ""]
    columns = pick(BUDGET_COLUMNS, BUDGET_DOC)
    rows = [[col.text(s) for col in columns] for s in frame.services]
    lines += _table([col.doc for col in columns], rows)
    return lines


def _recent(frame: Frame) -> list[str]:
    """Cleared alerts and info events."""
    lines: list[str] = []
    recent = [a for a in frame.alerts if a.state == "cleared" or a.severity == "info"]
    lines += ["", "## Recent events", ""]
    if recent:
        rows = []
        for ev in recent:
            when = _when(ev.since, frame) + (
                f" → cleared {_when(ev.cleared_at, frame)}" if ev.cleared_at else ""
            )
            rows.append([when, ev.severity, ev.subject, ev.message])
        lines += _table(["when", "severity", "subject", "event"], rows)
    else:
        lines.append("none in the last 10 minutes")
    return lines
